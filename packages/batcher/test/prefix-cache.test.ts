/**
 * Issue 19, "prefix caching keyed by adapter", at the Scheduler (a fake runner; the engine-level equality of
 * greedy outputs is in @tessera/cluster's engine-loop tests): full prompt pages are published after the prefill,
 * a later request of the same adapter with the same leading tokens starts its prefill after them, never a request
 * of another adapter or of a same-name adapter with other weights; the last prompt token is always computed;
 * cached pages are evicted under the KV budget, and no page leaks.
 */
import { KV_PAGE_SIZE, KvPageAllocator, type StepPlan } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import { type AdapterResidency, type BatcherRequest, Scheduler } from '../src/index.js';
import { fakeRun } from './support/fake-runner.js';

const limits = { vocabSize: 100, maxPositions: 4096 };
const P = KV_PAGE_SIZE;

function setup(options: { numPages?: number; adapters?: AdapterResidency; prefixCache?: boolean } = {}) {
  const pages = new KvPageAllocator(options.numPages ?? 64);
  const scheduler = new Scheduler({ pages, limits, prefixCache: options.prefixCache ?? true, ...(options.adapters ? { adapters: options.adapters } : {}) });
  const produced = new Map<string, number>();
  const maxTokens = new Map<string, number>();
  const plans: StepPlan[] = [];
  const submit = (r: BatcherRequest) => {
    maxTokens.set(r.id, r.maxTokens);
    scheduler.submit(r);
  };
  const drain = () => {
    for (let plan = scheduler.plan(); plan; plan = scheduler.plan()) {
      plans.push(plan);
      scheduler.complete(fakeRun(plan, produced, maxTokens));
    }
  };
  const prefillOf = (id: string) => plans.flatMap((p) => p.sequences).find((s) => s.requestId === id && s.kind === 'prefill')!;
  return { pages, scheduler, submit, drain, prefillOf };
}

const system = Array.from({ length: 3 * P + 5 }, (_, i) => (i * 11) % 97); // a shared 53-token system prompt
const withSuffix = (suffix: number[]) => [...system, ...suffix];

describe('Scheduler prefix cache', () => {
  it('a shared system prompt is prefilled once: later requests of the same adapter start after its full pages', () => {
    const t = setup();
    t.submit({ id: 'a', adapter: 'x', prompt: withSuffix([1, 2, 3]), maxTokens: 4 });
    t.drain();
    t.submit({ id: 'b', adapter: 'x', prompt: withSuffix([4, 5]), maxTokens: 4 });
    t.submit({ id: 'base', adapter: null, prompt: withSuffix([4, 5]), maxTokens: 4 });
    t.drain();
    const a = t.prefillOf('a');
    expect([a.position, a.tokens.length]).toEqual([0, system.length + 3]);
    // b attaches the three full pages of the system prompt and prefills the rest.
    const b = t.prefillOf('b');
    expect(b.position).toBe(3 * P);
    expect(b.tokens).toEqual(withSuffix([4, 5]).slice(3 * P));
    // The base model never reads an adapter's pages.
    expect(t.prefillOf('base').position).toBe(0);
    const stats = t.scheduler.stats();
    expect(stats.prefixHitTokens).toBe(3 * P);
    expect(stats.prefixLookupTokens).toBe(3 * system.length + 3 + 2 + 2);
    expect(stats.kvPagesUsed).toBe(0);
    expect(stats.prefixCachedPages).toBeGreaterThanOrEqual(3);
  });

  it('the last prompt token is always computed, even when the whole prompt is cached', () => {
    const t = setup();
    const prompt = Array.from({ length: 2 * P }, (_, i) => i);
    t.submit({ id: 'first', adapter: null, prompt, maxTokens: 2 });
    t.drain();
    t.submit({ id: 'again', adapter: null, prompt, maxTokens: 2 });
    t.drain();
    const again = t.prefillOf('again');
    expect(again.position).toBe(P);
    expect(again.tokens).toEqual(prompt.slice(P));
  });

  it('pages filled by decoding are published too: a follow-up turn that extends the conversation hits them', () => {
    const t = setup();
    const prompt = Array.from({ length: P - 2 }, (_, i) => i + 3);
    t.submit({ id: 'turn1', adapter: 'x', prompt, maxTokens: 2 * P });
    t.drain();
    // The fake runner's tokens: each is the previous + 1 (mod 100); turn 2's prompt is turn 1's text plus more.
    const generated: number[] = [];
    let last = prompt[prompt.length - 1]!;
    for (let i = 0; i < 2 * P; i++) generated.push((last = (last + 1) % 100));
    t.submit({ id: 'turn2', adapter: 'x', prompt: [...prompt, ...generated, 7, 7], maxTokens: 2 });
    t.drain();
    // turn 1's KV held prompt + 2P − 1 tokens: two full pages published.
    expect(t.prefillOf('turn2').position).toBe(2 * P);
  });

  it('never across adapters, nor across a same-name reload (the residency’s identity changes)', () => {
    let version = 1;
    const residency: AdapterResidency = {
      isResident: () => true,
      ensureResident: async () => undefined,
      pin: () => {},
      unpin: () => {},
      identity: (name) => `${name}@${version}`,
    };
    const t = setup({ adapters: residency });
    t.submit({ id: 'x1', adapter: 'x', prompt: withSuffix([1]), maxTokens: 2 });
    t.drain();
    t.submit({ id: 'y1', adapter: 'y', prompt: withSuffix([1]), maxTokens: 2 });
    t.submit({ id: 'x2', adapter: 'x', prompt: withSuffix([1]), maxTokens: 2 });
    t.drain();
    expect(t.prefillOf('y1').position).toBe(0);
    expect(t.prefillOf('x2').position).toBe(3 * P);
    version = 2; // 'x' re-registered with other weights
    t.submit({ id: 'x3', adapter: 'x', prompt: withSuffix([1]), maxTokens: 2 });
    t.drain();
    expect(t.prefillOf('x3').position).toBe(0);
  });

  it('requests asking for prompt logprobs compute every prompt row (and still publish theirs)', () => {
    const t = setup();
    t.submit({ id: 'warm', adapter: null, prompt: withSuffix([1]), maxTokens: 2 });
    t.drain();
    t.submit({ id: 'scored', adapter: null, prompt: withSuffix([1]), maxTokens: 2, sampling: { promptLogprobs: 0 } });
    t.drain();
    expect(t.prefillOf('scored').position).toBe(0);
  });

  it('under a small KV budget cached pages are evicted (oldest first) for fresh ones; nothing leaks; off by default', () => {
    const t = setup({ numPages: 8 });
    for (let i = 0; i < 12; i++) {
      t.submit({ id: `r${i}`, adapter: `a${i % 3}`, prompt: withSuffix([i]), maxTokens: 3 });
      t.drain();
    }
    const stats = t.scheduler.stats();
    expect(stats.finished).toBe(12);
    expect(stats.kvPagesUsed).toBe(0);
    expect(stats.prefixEvictions).toBeGreaterThan(0);
    expect(t.pages.freePages).toBe(8);
    const off = setup({ prefixCache: false });
    off.submit({ id: 'a', adapter: null, prompt: system, maxTokens: 2 });
    off.drain();
    off.submit({ id: 'b', adapter: null, prompt: system, maxTokens: 2 });
    off.drain();
    expect(off.prefillOf('b').position).toBe(0);
    expect(off.scheduler.stats().prefixCachedPages).toBe(0);
  });

  it('refuses the static policy', () => {
    expect(() => new Scheduler({ pages: new KvPageAllocator(4), limits, policy: 'static', prefixCache: true })).toThrow(/static/);
  });
});
