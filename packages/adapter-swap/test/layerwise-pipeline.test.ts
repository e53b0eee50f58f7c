/**
 * The layer-wise staging pipeline (hmi.md A12, §7.8, Table 6): the synchronization rule holds on every schedule
 * (random stage times, random arrivals, every mode and switch), two worked timelines are exact, and the ablations
 * order as the paper's Table 6 does when copies are cheaper than layers. Virtual time only.
 */
import { InvalidArgumentError, mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { LayerwisePipeline, type LayerwisePipelineOptions, type PipelineAction, PipelineStateError, type PipelineSpan, simulateLayerwisePipeline } from '../src/index.js';

const key = (a: PipelineAction): string => `${a.kind}:${a.batch}${'layer' in a ? `:${a.layer}` : ''}`;

/** Checks the A12 rules on a finished timeline; returns the violations. */
function violations(spans: readonly PipelineSpan[], o: LayerwisePipelineOptions & { arrivalsMs: readonly number[] }): string[] {
  const L = o.layers;
  const K = o.slots;
  const mode = o.mode ?? 'fine';
  const pipelineRetrieval = o.pipelineRetrieval ?? mode !== 'synchronized';
  const pipelineAdapters = o.pipelineAdapters ?? mode !== 'synchronized';
  const at = new Map<string, PipelineSpan>();
  const bad: string[] = [];
  for (const s of spans) {
    if (at.has(key(s.action))) bad.push(`${key(s.action)} ran twice`);
    at.set(key(s.action), s);
  }
  const end = (k: string) => at.get(k)?.endMs ?? NaN;
  const need = (s: PipelineSpan, k: string, why: string) => {
    if (!(s.startMs >= end(k) - 1e-9)) bad.push(`${key(s.action)} started at ${s.startMs} before ${k} ended (${end(k)}): ${why}`);
  };
  const B = o.arrivalsMs.length;
  for (let b = 0; b < B; b++) {
    for (const k of [`retrieve:${b}`, `gather:${b}`, ...Array.from({ length: L }, (_, j) => [`copy:${b}:${j}`, `compute:${b}:${j}`]).flat()]) {
      if (!at.has(k)) bad.push(`${k} never ran`);
    }
    const r = at.get(`retrieve:${b}`);
    if (!r) continue;
    if (r.startMs < o.arrivalsMs[b]!) bad.push(`batch ${b} retrieved before it arrived`);
    if (b >= K) need(r, `compute:${b - K}:${L - 1}`, 'its host slot is still in use');
    if (!pipelineRetrieval && b > 0) need(r, `compute:${b - 1}:${L - 1}`, 'retrieval is not pipelined');
    need(at.get(`gather:${b}`)!, `retrieve:${b}`, 'the CPU retrieves first');
    for (let j = 0; j < L; j++) {
      const copy = at.get(`copy:${b}:${j}`)!;
      const comp = at.get(`compute:${b}:${j}`)!;
      need(copy, `gather:${b}`, 'copies read the gathered slot');
      if (b > 0) need(copy, `compute:${b - 1}:${mode === 'coarse' ? L - 1 : j}`, "layer j's device buffer still serves batch b - 1");
      if (!pipelineAdapters) need(copy, j > 0 ? `compute:${b}:${j - 1}` : `retrieve:${b}`, 'the copy is synchronous');
      need(comp, `copy:${b}:${j}`, 'the layer needs its adapters');
      if (j > 0) need(comp, `compute:${b}:${j - 1}`, 'layers go in order');
      else {
        need(comp, `retrieve:${b}`, 'layer 0 takes h0');
        if (b > 0) need(comp, `compute:${b - 1}:${L - 1}`, 'the compute is serial, in batch order');
      }
    }
  }
  // Each resource runs one action at a time.
  for (const r of ['cpu', 'copy', 'compute'] as const) {
    const mine = spans.filter((s) => (s.action.kind === 'copy' ? 'copy' : s.action.kind === 'compute' ? 'compute' : 'cpu') === r).sort((a, b) => a.startMs - b.startMs);
    for (let i = 1; i < mine.length; i++) if (mine[i]!.startMs < mine[i - 1]!.endMs - 1e-9) bad.push(`${r}: ${key(mine[i]!.action)} overlaps ${key(mine[i - 1]!.action)}`);
  }
  return bad;
}

describe('LayerwisePipeline', () => {
  it('gives the exact fine-grained and synchronized timelines of a worked example', () => {
    // L = 3, K = 2, two batches at t = 0; retrieve 1, gather 1, copy 1 per layer, compute 2 per layer.
    const durations: Record<string, number> = { retrieve: 1, gather: 1, copy: 1, compute: 2 };
    const run = (mode: 'fine' | 'synchronized') =>
      simulateLayerwisePipeline({ layers: 3, slots: 2, mode, arrivalsMs: [0, 0], durationMs: (a) => durations[a.kind]! });
    const fine = run('fine');
    const starts = (r: typeof fine) => Object.fromEntries(r.spans.map((s) => [key(s.action), s.startMs]));
    // Batch 1's copies wait for batch 0 to free each layer's buffer (5, 7, 9), and its layers follow batch 0's.
    expect(starts(fine)).toEqual({
      'retrieve:0': 0, 'gather:0': 1, 'copy:0:0': 2, 'copy:0:1': 3, 'copy:0:2': 4, 'compute:0:0': 3, 'compute:0:1': 5, 'compute:0:2': 7,
      'retrieve:1': 2, 'gather:1': 3, 'copy:1:0': 5, 'copy:1:1': 7, 'copy:1:2': 9, 'compute:1:0': 9, 'compute:1:1': 11, 'compute:1:2': 13,
    });
    expect(fine.makespanMs).toBe(15);
    expect(fine.latencyMs).toEqual([9, 15]);
    // Synchronized: one resource at a time.
    const sync = run('synchronized');
    expect(sync.makespanMs).toBe(22);
    expect(starts(sync)['retrieve:1']).toBe(11);
    expect(sync.busyMs).toEqual({ cpu: 4, copy: 6, compute: 12 });
  });

  it('keeps the A12 rule on random stage times and arrivals, in every mode and ablation', () => {
    const rng = mulberry32(7);
    const modes: LayerwisePipelineOptions[] = [
      { layers: 1, slots: 1 },
      { layers: 6, slots: 4 },
      { layers: 6, slots: 4, mode: 'coarse' },
      { layers: 6, slots: 4, mode: 'synchronized' },
      { layers: 5, slots: 2, pipelineRetrieval: false },
      { layers: 5, slots: 3, pipelineAdapters: false },
      { layers: 4, slots: 1, mode: 'coarse', pipelineRetrieval: false },
    ];
    for (const [m, base] of modes.entries()) {
      for (let trial = 0; trial < 20; trial++) {
        const n = Math.floor(rng() * 9); // 0 … 8 batches
        let t = 0;
        const arrivalsMs = Array.from({ length: n }, () => (t += rng() < 0.3 ? 0 : rng() * 20));
        const dur = new Map<string, number>();
        const o = { ...base, arrivalsMs, durationMs: (a: PipelineAction) => dur.get(key(a)) ?? (dur.set(key(a), rng() < 0.1 ? 0 : rng() * 10), dur.get(key(a))!) };
        const r = simulateLayerwisePipeline(o);
        expect(violations(r.spans, o), `mode ${m} trial ${trial}`).toEqual([]);
        expect(r.spans).toHaveLength(n * (2 + 2 * base.layers));
        for (const l of r.latencyMs) expect(l).toBeGreaterThanOrEqual(0);
      }
    }
  });

  it('orders the ablations as Table 6 does when a copy is cheaper than a layer: fine ≤ coarse ≤ synchronized', () => {
    const durations: Record<string, number> = { retrieve: 6, gather: 2, copy: 1.5, compute: 2.5 };
    const arrivalsMs = Array.from({ length: 12 }, (_, b) => b * 5);
    const makespan = (o: Partial<LayerwisePipelineOptions>) =>
      simulateLayerwisePipeline({ layers: 6, slots: 4, arrivalsMs, durationMs: (a) => durations[a.kind]!, ...o }).makespanMs;
    const fine = makespan({ mode: 'fine' });
    const coarse = makespan({ mode: 'coarse' });
    const noRetrieval = makespan({ pipelineRetrieval: false });
    const noAdapters = makespan({ pipelineAdapters: false });
    const sync = makespan({ mode: 'synchronized' });
    expect(fine).toBeLessThanOrEqual(coarse);
    expect(coarse).toBeLessThan(sync);
    expect(fine).toBeLessThan(noRetrieval);
    expect(fine).toBeLessThan(noAdapters);
    expect(Math.max(noRetrieval, noAdapters)).toBeLessThanOrEqual(sync);
    // Fine-grained: the compute never waits once the first batch started (retrieval 8 < 6 layers × 2.5).
    const r = simulateLayerwisePipeline({ layers: 6, slots: 4, arrivalsMs: Array(8).fill(0), durationMs: (a) => durations[a.kind]! });
    expect(r.makespanMs).toBe(6 + 2 + 1.5 + 8 * 6 * 2.5);
  });

  it('hands out nothing twice, refuses completions it did not hand out, and validates its options', () => {
    const p = new LayerwisePipeline({ layers: 2, slots: 1 });
    expect(p.next('cpu')).toBeNull(); // nothing submitted
    expect(p.submit()).toBe(0);
    const r = p.next('cpu')!;
    expect(r).toEqual({ kind: 'retrieve', batch: 0, slot: 0 });
    expect(p.next('cpu')).toBeNull(); // busy
    expect(p.running('cpu')).toEqual(r);
    expect(() => p.complete({ kind: 'gather', batch: 0, slot: 0 })).toThrow(PipelineStateError);
    p.complete(r);
    expect(() => p.complete(r)).toThrow(/running nothing/);
    expect(p.next('compute')).toBeNull(); // no adapters copied yet
    expect(() => p.finished(3)).toThrow(InvalidArgumentError);
    expect(() => new LayerwisePipeline({ layers: 0, slots: 1 })).toThrow(InvalidArgumentError);
    expect(() => new LayerwisePipeline({ layers: 2, slots: 1.5 })).toThrow(/slots/);
    expect(() => new LayerwisePipeline({ layers: 2, slots: 1, mode: 'eager' as never })).toThrow(/mode/);
    expect(() => simulateLayerwisePipeline({ layers: 1, slots: 1, arrivalsMs: [2, 1], durationMs: () => 1 })).toThrow(/non-decreasing/);
    expect(() => simulateLayerwisePipeline({ layers: 1, slots: 1, arrivalsMs: [0], durationMs: () => -1 })).toThrow(/durationMs/);
    expect(simulateLayerwisePipeline({ layers: 3, slots: 2, arrivalsMs: [], durationMs: () => 1 })).toEqual({ spans: [], makespanMs: 0, latencyMs: [], busyMs: { cpu: 0, copy: 0, compute: 0 } });
  });
});
