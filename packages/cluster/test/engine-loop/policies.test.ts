/**
 * The paper's baselines (§9.9) against the Punica policy: same tokens whatever the batching (greedy), static
 * batching's wasted decode rows (T18), same-adapter head-of-line blocking, and preemption by recompute when the
 * KV cache runs out (the single-host form of Punica's migration, T21's token guarantees).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { type BatchPolicy, type BatcherRequest, type FinishedRequest, type StepReport } from '@tessera/batcher';
import { makeFixture } from './support/fixtures.js';
import { makeLoop } from './support/loop.js';
import type { EngineLoop } from '../../src/index.js';

const fx = makeFixture(4);
afterAll(() => fx.dispose());
const [A, B, C] = [...fx.adapterDirs.keys()] as [string, string, string, string];

interface Run {
  reports: StepReport[];
  finished: Map<string, FinishedRequest>;
  streamed: Map<string, number[]>;
  batcher: EngineLoop;
}

function runAll(policy: BatchPolicy, requests: readonly BatcherRequest[], options: { numPages?: number; maxBatch?: number } = {}): Run {
  const cache = fx.newCache(options.numPages ?? 256);
  const batcher = makeLoop({ model: fx.model, cache, deltas: [fx.delta], policy, maxBatch: options.maxBatch ?? 32 });
  const finished = new Map<string, FinishedRequest>();
  const streamed = new Map<string, number[]>();
  for (const r of requests) {
    streamed.set(r.id, []);
    batcher.submit(r, { onToken: (t) => streamed.get(r.id)!.push(t), onFinish: (f) => finished.set(r.id, f), onError: (e) => { throw e; } });
  }
  const reports: StepReport[] = [];
  for (let s = batcher.step(); s !== null; s = batcher.step()) {
    reports.push(s);
    if (reports.length > 5000) throw new Error(`${policy}: no progress`);
  }
  expect(cache.freePages).toBe(cache.numPages);
  expect(finished.size).toBe(requests.length);
  cache.dispose();
  return { reports, finished, streamed, batcher };
}

const request = (id: string, adapter: string | null, promptLength: number, maxTokens: number, seed: number): BatcherRequest => ({
  id,
  adapter,
  prompt: fx.prompt(promptLength, seed),
  maxTokens,
  ignoreEos: true,
});

describe('batching policies', () => {
  it('greedy tokens are the same under punica, same-adapter and static batching (only the batching differs)', () => {
    const adapters = [A, A, B, null, B, B, A, C, C, A];
    const requests = adapters.map((a, i) => request(`r${i}`, a, 3 + ((7 * i) % 13), 4 + ((5 * i) % 11), 300 + i));
    const runs = (['punica', 'same-adapter', 'static'] as const).map((p) => runAll(p, requests));
    for (const r of requests) {
      const want = fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });
      for (const run of runs) {
        expect(run.finished.get(r.id)!.tokens).toEqual(want);
        expect(run.streamed.get(r.id)).toEqual(want);
      }
    }
    // The policies did batch differently: punica mixes adapters in a step, the baselines never do.
    expect(Math.max(...runs[0]!.reports.map((s) => s.segments.length))).toBeGreaterThan(1);
    for (const run of runs.slice(1)) for (const s of run.reports) expect(new Set(s.segments.map((g) => g.key)).size).toBe(1);
    expect(runs[0]!.reports.length).toBeLessThan(runs[1]!.reports.length);
  });

  it('T18: static batches are maximal same-adapter runs; wasted decode rows = Σ (max_len − len_i)', () => {
    const plan: [string | null, number][] = [[A, 5], [A, 9], [A, 3], [B, 7], [B, 7], [A, 4], [null, 2], [null, 8], [null, 1], [C, 6]];
    const requests = plan.map(([a, n], i) => request(`s${i}`, a, 4 + i, n, 400 + i));
    const { reports, batcher } = runAll('static', requests);
    const batches = [[0, 1, 2], [3, 4], [5], [6, 7, 8], [9]];
    const expectedWaste = batches.reduce((sum, members) => {
      const lens = members.map((i) => plan[i]![1]);
      const longest = Math.max(...lens);
      return sum + lens.reduce((s, n) => s + (longest - n), 0);
    }, 0);
    expect(expectedWaste).toBe((9 - 5) + (9 - 9) + (9 - 3) + 0 + 0 + 0 + (8 - 2) + (8 - 8) + (8 - 1) + 0);
    expect(batcher.stats().wastedRows).toBe(expectedWaste);
    expect(reports.reduce((s, r) => s + r.wastedRows, 0)).toBe(expectedWaste);

    // Each batch: one step prefilling all members together, then max_len − 1 decode steps at full batch size.
    let k = 0;
    for (const members of batches) {
      const longest = Math.max(...members.map((i) => plan[i]![1]));
      const first = reports[k]!;
      expect(first.admitted).toEqual(members.map((i) => `s${i}`));
      expect(first.prefills).toBe(members.length);
      for (let j = 0; j < longest; j++) {
        const r = reports[k + j]!;
        expect(r.batchSize).toBe(members.length);
        expect(r.segments).toHaveLength(1);
        if (j > 0) expect(r.prefills).toBe(0);
      }
      k += longest;
    }
    expect(k).toBe(reports.length);

    // The batch cap splits a run: three A's with maxBatch 2 → [2, 1].
    const capped = runAll('static', requests.slice(0, 3), { maxBatch: 2 });
    expect(capped.reports.filter((r) => r.prefills > 0).map((r) => r.admitted)).toEqual([['s0', 's1'], ['s2']]);
    expect(capped.batcher.stats().wastedRows).toBe(9 - 5);
    // Continuous batching wastes nothing on the same trace.
    expect(runAll('punica', requests).batcher.stats().wastedRows).toBe(0);
  });

  it('same-adapter admits only the running adapter, one per step, strictly from the head (head-of-line blocking)', () => {
    const requests = [request('a0', A, 6, 6, 1), request('a1', A, 6, 3, 2), request('b0', B, 6, 4, 3), request('a2', A, 6, 4, 4), request('b1', B, 6, 2, 5)];
    const { reports } = runAll('same-adapter', requests);
    const admittedAt = new Map<string, number>();
    const finishedAt = new Map<string, number>();
    reports.forEach((r, k) => {
      expect(r.prefills).toBeLessThanOrEqual(1);
      for (const id of r.admitted) admittedAt.set(id, k);
      for (const id of r.finished) finishedAt.set(id, k);
    });
    expect(admittedAt.get('a0')).toBe(0);
    expect(admittedAt.get('a1')).toBe(1);
    // b0 waits until every A has left; a2 (same adapter as the running set) waits behind b0.
    expect(admittedAt.get('b0')).toBe(Math.max(finishedAt.get('a0')!, finishedAt.get('a1')!) + 1);
    expect(admittedAt.get('a2')).toBe(finishedAt.get('b0')! + 1);
    expect(admittedAt.get('b1')).toBe(finishedAt.get('a2')! + 1);
    // Under punica nobody waits for an adapter: five admissions in the first five steps.
    const punica = runAll('punica', requests);
    expect(punica.reports.slice(0, 5).map((r) => r.admitted)).toEqual([['a0'], ['a1'], ['b0'], ['a2'], ['b1']]);
  });

  for (const policy of ['punica', 'same-adapter', 'static'] as const) {
    it(`${policy}: KV exhaustion preempts the newest request and recomputes it; the output equals an unpreempted run`, () => {
      // Four requests of 10 + 40 tokens need 4 pages each at the end; 7 pages hold two of them.
      const adapters = policy === 'punica' ? [A, B, null, A] : [A, A, A, A];
      const requests = adapters.map((a, i) => request(`p${i}`, a, 10, 40, 900 + i));
      const tight = runAll(policy, requests, { numPages: 7 });
      const stats = tight.batcher.stats();
      expect(stats.preemptions).toBeGreaterThan(0);
      expect(stats.recomputedTokens).toBeGreaterThan(0);
      for (const r of requests) {
        const want = fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });
        expect(tight.finished.get(r.id)!.tokens).toEqual(want);
        // What reached the listener: every token once, in order.
        expect(tight.streamed.get(r.id)).toEqual(want);
      }
      // The victim is always the newest admission, and it comes back by prefilling prompt + generated tokens.
      const admittedOrder: string[] = [];
      for (const r of tight.reports) {
        for (const id of r.preempted) {
          const running = admittedOrder.filter((x) => !tight.reports.some((q) => q.step < r.step && q.finished.includes(x)));
          expect(id).toBe(running[running.length - 1]);
          admittedOrder.splice(admittedOrder.lastIndexOf(id), 1);
        }
        admittedOrder.push(...r.admitted);
      }
      const reAdmission = tight.reports.find((r) => r.admitted.some((id) => tight.reports.some((q) => q.step < r.step && q.preempted.includes(id))))!;
      expect(reAdmission.rows - reAdmission.decodes - reAdmission.wastedRows).toBeGreaterThan(10);
      expect(stats.tokensGenerated).toBe(4 * 40);
    });
  }
});

describe("kvExhaustion 'evict' and resuming with generated tokens (the host side of Punica's migration)", () => {
  it('evicts the newest running request with its tokens; resubmitted with them, it finishes with the unmigrated tokens', () => {
    const requests = [A, B, null, A].map((a, i) => request(`e${i}`, a, 10, 40, 900 + i));
    const cache = fx.newCache(7);
    const batcher = makeLoop({ model: fx.model, cache, deltas: [fx.delta], kvExhaustion: 'evict' });
    expect(batcher.kvExhaustion).toBe('evict');
    const streamed = new Map<string, number[]>(requests.map((r) => [r.id, []]));
    const finished = new Map<string, FinishedRequest>();
    const evictions: { id: string; generated: number[]; runningBefore: string[] }[] = [];
    let running: string[] = [];
    const submit = (r: BatcherRequest) =>
      batcher.submit(r, {
        onToken: (t) => streamed.get(r.id)!.push(t),
        onFinish: (f) => finished.set(r.id, f),
        onEvicted: (generated) => evictions.push({ id: r.id, generated, runningBefore: [...running] }),
        onError: (e) => {
          throw e;
        },
      });
    for (const r of requests) submit(r);
    let resubmitted = 0;
    for (let guard = 0; guard < 5000; guard++) {
      const report = batcher.step();
      if (report) {
        running = running.filter((id) => !report.finished.includes(id) && !report.preempted.includes(id)).concat(report.admitted);
      }
      // The "scheduler": every eviction goes back in as a new request carrying its generated tokens.
      while (resubmitted < evictions.length) {
        const ev = evictions[resubmitted++]!;
        const original = requests.find((r) => r.id === ev.id)!;
        submit({ ...original, generated: ev.generated });
      }
      if (!report && batcher.stats().queued === 0) break;
    }
    expect(evictions.length).toBeGreaterThan(0);
    expect(batcher.stats().preemptions).toBe(evictions.length);
    for (const ev of evictions) {
      // The victim is the newest admission among the running requests, and its tokens are what it streamed.
      expect(ev.id).toBe(ev.runningBefore[ev.runningBefore.length - 1]);
      expect(ev.generated.length).toBeGreaterThan(0);
    }
    for (const r of requests) {
      const want = fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });
      expect(finished.get(r.id)!.tokens).toEqual(want);
      // Every token streamed once: the resumed placement starts after the tokens it was given.
      expect(streamed.get(r.id)).toEqual(want);
    }
    expect(cache.freePages).toBe(cache.numPages);
    cache.dispose();
  });

  it('validates generated tokens: out of vocabulary, already at maxTokens, or already past EOS is refused, nothing queued', () => {
    const cache = fx.newCache(64);
    const batcher = makeLoop({ model: fx.model, cache, deltas: [fx.delta] });
    const base = request('g', A, 5, 4, 7);
    const vocab = fx.model.config.vocabSize;
    expect(() => batcher.submit({ ...base, generated: [vocab] })).toThrow(expect.objectContaining({ code: 'TESSERA_TOKEN_OUT_OF_VOCAB' }));
    expect(() => batcher.submit({ ...base, generated: [1, 2, 3, 4] })).toThrow(expect.objectContaining({ code: 'TESSERA_INVALID_MAX_TOKENS' }));
    const eos = fx.model.config.eosTokenIds[0]!;
    expect(() => batcher.submit({ ...base, ignoreEos: false, generated: [eos] })).toThrow(/already ends the request/);
    expect(batcher.stats().queued).toBe(0);
    expect(() => batcher.submit({ ...base, generated: [1, 2] })).not.toThrow();
    cache.dispose();
  });
});
