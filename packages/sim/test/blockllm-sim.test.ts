/**
 * BlockLLM's cluster simulation at small sizes: deterministic per seed, every request completes exactly once with
 * every block step in chain order (routes through equivalent blocks included, rollbacks of speculation undone),
 * the ablations switch what they say, and the policies' shape where sharing matters (BlockLLM's p95 below PM's).
 */
import { describe, expect, it } from 'vitest';

import { SimArgumentError } from '../src/errors.js';
import {
  appMix,
  BLOCKLLM_ABLATIONS,
  type BlockllmSimOptions,
  type BlockllmSimResult,
  buildSimZoo,
  runBlockllmSimulation,
  syntheticWorkload,
} from '../src/index.js';

const APPS = appMix(6);
const ZOO = buildSimZoo(APPS);
const SMALL: Omit<BlockllmSimOptions, 'policy' | 'seed'> = { prebuilt: ZOO, requests: 24, durationMs: 20_000, output: [2, 12], prompt: [8, 64], cluster: { servers: [2, 2] } };

const latencies = (r: BlockllmSimResult) => r.requests.map((q) => [q.id, q.finishMs]);

/** Checks every request's trace: iterations 0..n−1, each walking its chain from position 0 to the end in order. */
function checkConservation(r: BlockllmSimResult, chainLength: (app: string) => number) {
  const ids = r.requests.map((q) => q.id);
  expect(new Set(ids).size).toBe(ids.length);
  for (const q of r.requests) {
    expect(q.finishMs).toBeGreaterThanOrEqual(q.arrivalMs);
    const steps = r.trace!.get(q.id)!;
    const iterations = new Map<number, typeof steps>();
    for (const s of steps) iterations.set(s.iteration, [...(iterations.get(s.iteration) ?? []), s]);
    expect([...iterations.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: q.outputTokens }, (_, i) => i));
    for (const list of iterations.values()) {
      list.sort((a, b) => a.step - b.step);
      expect(list.map((s) => s.step)).toEqual(list.map((_, i) => i));
      let pos = 0;
      let k = 0;
      for (const s of list) {
        expect(s.chainPos).toBe(pos);
        expect(s.routeIndex).toBe(k);
        k++;
        if (k === s.routeLength) {
          pos = r.policy === 'blockllm' ? s.rejoin : pos + 1;
          k = 0;
        }
      }
      expect(k).toBe(0);
      expect(pos).toBe(r.policy === 'blockllm' ? chainLength(q.app) : 1);
    }
  }
}

describe('BlockLLM cluster simulation', () => {
  it('is deterministic per seed: the same seed gives identical runs, another seed differs', () => {
    const a = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 3 });
    const b = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 3 });
    const c = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 4 });
    expect(latencies(b)).toEqual(latencies(a));
    expect(b.speculation).toEqual(a.speculation);
    expect(b.events).toBe(a.events);
    expect(latencies(c)).not.toEqual(latencies(a));
    const pm1 = runBlockllmSimulation({ ...SMALL, policy: 'pm', seed: 3 });
    const pm2 = runBlockllmSimulation({ ...SMALL, policy: 'pm', seed: 3 });
    expect(latencies(pm2)).toEqual(latencies(pm1));
  });

  it('completes every request exactly once, each block step in chain order, under every policy and ablation', () => {
    const length = (app: string) => ZOO.chains.get(app)!.blocks.length;
    const runs: BlockllmSimResult[] = [
      runBlockllmSimulation({ ...SMALL, policy: 'pm', seed: 5, traceSteps: true }),
      runBlockllmSimulation({ ...SMALL, policy: 'ps', seed: 5, traceSteps: true }),
      runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 5, traceSteps: true, specAcceptance: 0.5 }),
      ...Object.values(BLOCKLLM_ABLATIONS).map((features) => runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 5, traceSteps: true, features })),
      // The earlier GPU model (one batch at a time) and the mechanisms switched off one by one.
      runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 5, traceSteps: true, gpuSharing: 'serial', specAcceptance: 0.5 }),
      runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 5, traceSteps: true, countdownHold: false, warmReplicas: false }),
    ];
    for (const r of runs) {
      expect(r.requests).toHaveLength(24);
      checkConservation(r, length);
    }
    // Forced mispredictions happened and were rolled back, and the conservation check above still held.
    expect(runs[2]!.speculation.rolledBack).toBeGreaterThan(0);
  });

  it('switches what each ablation says', () => {
    const off = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 6, features: { speculation: 'off' } });
    expect(off.speculation.speculations).toBe(0);
    const perfect = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 6, features: { speculation: 'perfect' } });
    expect(perfect.speculation.speculations).toBeGreaterThan(0);
    expect(perfect.speculation.rolledBack).toBe(0);
    const fixed = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 6, features: { adaptive: false } });
    expect(fixed.adaptiveRequests).toBe(0);
    const pm = runBlockllmSimulation({ ...SMALL, policy: 'pm', seed: 6 });
    expect(pm.swaps).toBeGreaterThan(0);
    expect(pm.transferMs).toBe(0);
    expect(pm.features).toBeNull();
  });

  it("puts BlockLLM's p95 below PM's where sharing matters (more applications than GPUs)", () => {
    const mix = appMix(9);
    const zoo = buildSimZoo(mix);
    const opts = { prebuilt: zoo, requests: 60, durationMs: 30_000, output: [4, 24] as [number, number], prompt: [8, 64] as [number, number], cluster: { servers: [2, 2] }, seed: 11 };
    const pm = runBlockllmSimulation({ ...opts, policy: 'pm' });
    const bl = runBlockllmSimulation({ ...opts, policy: 'blockllm' });
    expect(bl.p95Ms).toBeLessThan(pm.p95Ms);
    // The zoo holds each shared tensor once: fewer parameter bytes on the devices than PM's swapped-in models.
    expect(bl.memory.peakParamBytes).toBeLessThan(pm.memory.peakParamBytes * 2);
  });

  it('rejects bad options with typed errors', () => {
    expect(() => runBlockllmSimulation({ ...SMALL, policy: 'nope' as 'pm', seed: 1 })).toThrow(SimArgumentError);
    expect(() => runBlockllmSimulation({ ...SMALL, policy: 'pm', seed: 1.5 })).toThrow(SimArgumentError);
    expect(() => appMix(0)).toThrow(SimArgumentError);
    expect(() => syntheticWorkload({ apps: [], seed: 1 })).toThrow(SimArgumentError);
  });
});

describe('BlockLLM workload and app mix', () => {
  it('draws the §6.1 workload: weights summing to 1, lengths in range and within the maximum sequence', () => {
    const w = syntheticWorkload({ apps: ['a', 'b', 'c'], seed: 9, requests: 200, durationMs: 60_000, prompt: [8, 512], output: [8, 800] });
    expect([...w.weights.values()].reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(w.requests).toHaveLength(200);
    for (let i = 1; i < w.requests.length; i++) expect(w.requests[i]!.arrivalMs).toBeGreaterThanOrEqual(w.requests[i - 1]!.arrivalMs);
    for (const r of w.requests) {
      expect(r.promptTokens).toBeGreaterThanOrEqual(8);
      expect(r.promptTokens).toBeLessThanOrEqual(512);
      expect(r.promptTokens + r.outputTokens).toBeLessThanOrEqual(1024);
    }
    expect(syntheticWorkload({ apps: ['a', 'b', 'c'], seed: 9, requests: 200 })).toEqual(syntheticWorkload({ apps: ['a', 'b', 'c'], seed: 9, requests: 200 }));
  });

  it('mixes 20 applications 7 / 7 / 6 with a full fine-tune per LLaMA family, and the zoo shares their blocks', () => {
    const mix = appMix(20);
    const per = (f: string) => mix.filter((a) => a.foundation === f).length;
    expect([per('chatglm-6b'), per('llama-7b'), per('llama-13b')]).toEqual([7, 7, 6]);
    expect(mix.filter((a) => a.kind === 'full').map((a) => a.foundation).sort()).toEqual(['llama-13b', 'llama-7b']);
    // PE apps of one family share their first block; the full fine-tunes have equivalence edges to their base.
    const pe = APPS.filter((a) => a.kind !== 'full' && a.foundation === 'chatglm-6b').map((a) => ZOO.chains.get(a.id)!.blocks[0]!.blockId);
    expect(new Set(pe).size).toBe(1);
    expect(ZOO.zoo.equivalences().length).toBeGreaterThan(0);
    const full = APPS.find((a) => a.kind === 'full')!;
    expect(ZOO.routes(full.id, 1).some((r) => !r.designated)).toBe(true);
  });
});
