/**
 * Issue 19, prefix caching keyed by adapter, on the real engine: a shared system prompt across tenants (three
 * LoRA adapters and the base model). With the cache on, later requests attach the system prompt's KV pages of
 * their own adapter and prefill only the rest; their greedy tokens are identical to the cache-off run and to each
 * request run alone. The hit rate is reported by the scheduler's stats.
 */
import { KV_PAGE_SIZE } from '@tessera/core';
import { afterAll, describe, expect, it } from 'vitest';
import type { BatcherRequest, FinishedRequest } from '@tessera/batcher';
import { makeFixture } from './support/fixtures.js';
import { makeLoop } from './support/loop.js';

const fx = makeFixture(3);
afterAll(() => fx.dispose());
const tenants = [...fx.adapterDirs.keys(), null];
const system = fx.prompt(3 * KV_PAGE_SIZE + 7, 5);

/** Two waves of requests (the second finds the first's pages cached): each tenant, varied user suffixes. */
function waves(): BatcherRequest[][] {
  return [0, 1].map((wave) =>
    tenants.flatMap((adapter, t) =>
      [0, 1].map((k) => ({
        id: `w${wave}-t${t}-${k}`,
        adapter,
        prompt: [...system, ...fx.prompt(3 + ((wave + t + k) % 5), 100 * wave + 10 * t + k)],
        maxTokens: 6,
        ignoreEos: true,
      })),
    ),
  );
}

function serve(prefixCache: boolean) {
  const cache = fx.newCache(128);
  const loop = makeLoop({ model: fx.model, cache, deltas: [fx.delta], decode: fx.decode, prefixCache, maxBatch: 8 });
  const results = new Map<string, FinishedRequest>();
  try {
    for (const wave of waves()) {
      for (const r of wave) loop.submit(r, { onFinish: (f) => results.set(f.id, f), onError: (e) => { throw e; } });
      for (let n = 0; loop.step() !== null; n++) if (n > 500) throw new Error('no progress');
    }
    return { results, stats: loop.stats(), usedAfter: cache.stats().usedPages };
  } finally {
    cache.dispose();
  }
}

describe('prefix cache on the engine', () => {
  it('greedy outputs with and without the cache are identical (and equal each request alone); the second wave hits', () => {
    const on = serve(true);
    const off = serve(false);
    const requests = waves().flat();
    for (const r of requests) {
      expect(on.results.get(r.id)!.tokens, r.id).toEqual(off.results.get(r.id)!.tokens);
    }
    for (const r of requests.filter((_, i) => i % 3 === 0)) {
      expect(on.results.get(r.id)!.tokens, r.id).toEqual(fx.alone({ prompt: r.prompt, maxTokens: 6, ignoreEos: true, key: r.adapter }));
    }
    // Within a wave, the first request of each tenant publishes; every later same-tenant request attaches the
    // system prompt's three full pages: 1 + 2 per tenant of the 4 requests of each tenant.
    const pages = 3 * KV_PAGE_SIZE;
    expect(on.stats.prefixHitTokens).toBe(tenants.length * 3 * pages);
    expect(on.stats.prefixLookupTokens).toBe(requests.reduce((n, r) => n + r.prompt.length, 0));
    expect(off.stats.prefixHitTokens).toBe(0);
    expect(on.usedAfter).toBe(0);
  });
});
