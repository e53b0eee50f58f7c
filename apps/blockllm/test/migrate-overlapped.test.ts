/**
 * KV migration by overlapped front recompute and back copy (design note §4.4, algorithm 5.7) in the server: a
 * `migrate` job moves an attention instance while long requests run through it. The devices log each attention
 * instance's inputs per sequence; the serving core's planMigration splits each sequence's pages where the target's
 * chunked prefill (over the logged inputs) from the front and the source's copy from the back would meet. The rates
 * are pinned equal here, so both halves move pages; the requests keep exactly their tokens, and the instance,
 * migrated back, can recompute again (the target received the whole input log).
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, serve } from './support/fixture.js';
import { type JobBody, metric, type PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(
  async () =>
    ({ app, url } = await serve(fixture, {
      devices: 2,
      deviceBytes: 3_000_000,
      scaleOutQueue: 0,
      kvMigration: { mode: 'overlapped', rates: { copyPagesPerMs: 1, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 1 } },
    })),
);
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');

async function finished(id: string): Promise<JobBody> {
  for (;;) {
    const s = (await (await fetch(`${url}/v1/placement/jobs/${id}`)).json()) as JobBody;
    if (s.state === 'completed' || s.state === 'failed') return s;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

type Moved = { movedSequences: number; kvPages: number; recomputedPages: number; copiedPages: number };

describe('overlapped KV migration', () => {
  it('recomputes the front and copies the back of running sequences; they keep their tokens, twice over', async () => {
    const M = 56;
    const prompts = [Array.from({ length: 7 }, (_, t) => (77 + 11 * t) % 900), Array.from({ length: 13 }, (_, t) => (300 + 7 * t) % 900)];
    const alone = await Promise.all(prompts.map((prompt) => app.engine.call('alone', { app: FOUNDATION, prompt, maxTokens: M })));
    // The foundation's first attention block (position 1): it holds K/V.
    const key = (await placement()).chains.find((c) => c.app === FOUNDATION)!.instances[1]!;
    const results: Moved[] = [];
    const jobs: Promise<{ id: string }>[] = [];
    const streams = prompts.map((prompt, k) =>
      app.engine.submit({ request: { id: `overlap-${k}`, adapter: FOUNDATION, prompt, maxTokens: M, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }),
    );
    // Two moves of the same instance while both run: away at the 20th token, back at the 34th (once the first move
    // is done: placement jobs run one at a time, and how many steps a move takes depends on the machine's speed).
    let home = '';
    const tokens = await Promise.all(
      streams.map(async (stream, k) => {
        let seen = 0;
        let out: number[] = [];
        for await (const ev of stream) {
          if (ev.type === 'token' && k === 0 && ++seen === 20) {
            home = (await placement()).instances.find((i) => i.instance === key)!.device;
            jobs.push(app.engine.call('placementSubmit', { kind: 'migrate', block: key, device: other(home) }));
          } else if (ev.type === 'token' && k === 0 && seen === 34) {
            await finished((await jobs[0]!).id);
            jobs.push(app.engine.call('placementSubmit', { kind: 'migrate', block: key, device: home }));
          } else if (ev.type === 'finish') out = ev.result.tokens;
          else if (ev.type === 'error') throw ev.error;
        }
        return out;
      }),
    );
    expect(tokens).toEqual(alone);
    for (const j of jobs) {
      const s = await finished((await j).id);
      expect(s.state, JSON.stringify(s)).toBe('completed');
      results.push(s.result as Moved);
    }
    expect(results).toHaveLength(2);
    for (const r of results) {
      expect(r.movedSequences).toBe(2);
      // Equal rates: the pages split between the two halves, each page moved once.
      expect(r.recomputedPages).toBeGreaterThan(0);
      expect(r.copiedPages).toBeGreaterThan(0);
      expect(r.recomputedPages + r.copiedPages).toBe(r.kvPages);
    }
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(metric(text, 'tessera_blockllm_migration_kv_pages_total{how="recomputed"}')).toBe(results.reduce((n, r) => n + r.recomputedPages, 0));
    expect(metric(text, 'tessera_blockllm_migration_kv_pages_total{how="copied"}')).toBe(results.reduce((n, r) => n + r.copiedPages, 0));
  });
});
