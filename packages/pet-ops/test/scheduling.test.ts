/**
 * Algorithm 2 (PET operator scheduling), the dynamic stream count and the analytic intensities (pets.md §6,
 * behaviours 14–15): pure functions, checked on random and edge-case inputs.
 */
import { InvalidArgumentError } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import { assignStreams, DEFAULT_STREAM_THRESHOLDS, dynamicStreamCount, intensityOf, medianOf } from '../src/engine/operator-scheduling.js';
import { type OpCost, adapterCost, biasCost, csrCost } from '../src/operators/cost.js';

function randomOps(n: number, seed: number): { cost: OpCost }[] {
  const f = randomFloats(2 * n, seed, 0, 1);
  return Array.from({ length: n }, (_, i) => ({ cost: { flops: Math.round(f[2 * i]! * 1e6), bytes: 1 + Math.round(f[2 * i + 1]! * 1e5) } }));
}

describe('intensityOf', () => {
  it('is FLOPs per byte; an op that moves nothing has intensity 0', () => {
    expect(intensityOf({ flops: 300, bytes: 100 })).toBe(3);
    expect(intensityOf({ flops: 0, bytes: 0 })).toBe(0);
    expect(intensityOf({ flops: 5, bytes: 0 })).toBe(Number.POSITIVE_INFINITY);
  });

  it('rejects negative or non-finite costs', () => {
    expect(() => intensityOf({ flops: -1, bytes: 1 })).toThrow(InvalidArgumentError);
    expect(() => intensityOf({ flops: 1, bytes: Number.NaN })).toThrow(/finite non-negative flops and bytes/);
  });
});

describe('assignStreams, mode intensity (Algorithm 2, contiguous chunks)', () => {
  it('gives every op exactly one stream in [0, S), for any op and stream count', () => {
    for (const n of [0, 1, 2, 3, 7, 16, 33]) {
      for (const S of [1, 2, 3, 4, 8, 40]) {
        const streams = assignStreams(randomOps(n, 10 * n + S), S, 'intensity');
        expect(streams.length).toBe(n);
        for (const s of streams) expect(s >= 0 && s < S && Number.isInteger(s)).toBe(true);
      }
    }
  });

  it('puts the lowest- and highest-intensity ops on different streams when S ≥ 2', () => {
    for (const n of [2, 3, 5, 12, 31]) {
      for (const S of [2, 3, 4, 32]) {
        const ops = randomOps(n, 100 + n * S);
        const streams = assignStreams(ops, S, 'intensity');
        const intensities = ops.map((o) => intensityOf(o.cost));
        const lo = intensities.indexOf(Math.min(...intensities));
        const hi = intensities.indexOf(Math.max(...intensities));
        expect(streams[lo]).not.toBe(streams[hi]);
        expect(streams[lo]).toBe(0);
        expect(streams[hi]).toBe(Math.floor(((n - 1) * S) / n)); // S − 1 whenever S ≤ n
      }
    }
  });

  it('is a contiguous, balanced chunking of the intensity-ascending order', () => {
    const ops = randomOps(23, 7);
    const S = 4;
    const streams = assignStreams(ops, S, 'intensity');
    const order = ops.map((o, i) => ({ i, x: intensityOf(o.cost) })).sort((a, b) => a.x - b.x || a.i - b.i);
    const along = order.map(({ i }) => streams[i]!);
    for (let k = 1; k < along.length; k++) expect(along[k]! - along[k - 1]!).toBeGreaterThanOrEqual(0);
    const sizes = Array.from({ length: S }, (_, s) => along.filter((x) => x === s).length);
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeLessThanOrEqual(1);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(23);
  });

  it('equals the printed ⌊idx / |S|⌋ when |O| = |S|²', () => {
    const S = 3;
    const ops = randomOps(S * S, 11);
    const streams = assignStreams(ops, S, 'intensity');
    const order = ops.map((o, i) => ({ i, x: intensityOf(o.cost) })).sort((a, b) => a.x - b.x || a.i - b.i);
    order.forEach(({ i }, idx) => expect(streams[i]).toBe(Math.floor(idx / S)));
  });

  it('keeps op order among equal intensities (deterministic)', () => {
    const ops = Array.from({ length: 6 }, () => ({ cost: { flops: 10, bytes: 5 } }));
    expect(Array.from(assignStreams(ops, 3, 'intensity'))).toEqual([0, 0, 1, 1, 2, 2]);
  });
});

describe('assignStreams, baselines and validation', () => {
  it('round-robin is op index mod S (the artifact: task id mod streams); sequential and S = 1 put all on 0', () => {
    const ops = randomOps(7, 3);
    expect(Array.from(assignStreams(ops, 3, 'round-robin'))).toEqual([0, 1, 2, 0, 1, 2, 0]);
    expect(Array.from(assignStreams(ops, 4, 'sequential'))).toEqual([0, 0, 0, 0, 0, 0, 0]);
    expect(Array.from(assignStreams(ops, 1, 'intensity'))).toEqual([0, 0, 0, 0, 0, 0, 0]);
  });

  it('rejects bad stream counts, modes and costs, naming the op', () => {
    expect(() => assignStreams(randomOps(3, 1), 0, 'intensity')).toThrow(/numStreams must be a positive integer, got 0/);
    expect(() => assignStreams(randomOps(3, 1), 1.5, 'round-robin')).toThrow(InvalidArgumentError);
    expect(() => assignStreams(randomOps(3, 1), 2, 'fastest' as never)).toThrow(/mode must be one of/);
    expect(() => assignStreams([{ cost: { flops: 1, bytes: 1 } }, { cost: { flops: -2, bytes: 1 } }], 2, 'intensity')).toThrow(/op 1/);
    expect(() => assignStreams([{ cost: { flops: Number.POSITIVE_INFINITY, bytes: 1 } }], 1, 'sequential')).toThrow(/op 0/);
  });
});

describe('analytic intensities of the operators’ costs (pets.md §6.2)', () => {
  // BERT-base site d = 768 (qkv-like square site), 32 queries × 128 tokens.
  const d = 768;
  const tokens = 32 * 128;
  const cost = {
    bitfit: biasCost(tokens, d),
    diff: csrCost(tokens, Math.round(0.005 * d * d), d, d),
    maskbert: csrCost(tokens, Math.round(0.05 * d * d), d, d),
    adapter: adapterCost(tokens, d, 64),
  };

  it('order BitFit < Diff < MaskBert < Adapter at large n·l', () => {
    const x = Object.fromEntries(Object.entries(cost).map(([k, c]) => [k, intensityOf(c)])) as Record<keyof typeof cost, number>;
    expect(x.bitfit).toBeLessThan(x.diff);
    expect(x.diff).toBeLessThan(x.maskbert);
    expect(x.maskbert).toBeLessThan(x.adapter);
    // and approach the limits of the table: 0.125, nnz/(2(d_in + d_out)) ≈ 0.96 and 9.6, and for the adapter
    // d·r/(2d + r) ≈ 30.7 (r/2 = 32 when, as in the fused kernel, the bottleneck activations never leave registers).
    expect(x.bitfit).toBeCloseTo(0.125, 3);
    expect(x.diff).toBeCloseTo((0.005 * d * d) / (4 * d), 1);
    expect(x.maskbert).toBeCloseTo((0.05 * d * d) / (4 * d), 0);
    expect(x.adapter).toBeGreaterThan(30);
    expect(x.adapter).toBeLessThan(33);
  });

  it('sends a mixed macro-batch’s BitFit and Adapter mini-batches to the first and last streams', () => {
    const ops = [cost.adapter, cost.bitfit, cost.maskbert, cost.diff].map((c) => ({ cost: c }));
    expect(Array.from(assignStreams(ops, 4, 'intensity'))).toEqual([3, 0, 2, 1]);
    expect(Array.from(assignStreams(ops, 2, 'intensity'))).toEqual([1, 0, 1, 0]);
  });
});

describe('dynamicStreamCount (pets.md §6.3)', () => {
  it('uses few streams (1–2) for short sequences and small per-task batches, the maximum for long ones', () => {
    expect(dynamicStreamCount({ rowsPerTask: 1, maxLength: 4 })).toBe(DEFAULT_STREAM_THRESHOLDS.few);
    expect(dynamicStreamCount({ rowsPerTask: 2, maxLength: 4 })).toBeLessThanOrEqual(2);
    expect(dynamicStreamCount({ rowsPerTask: 1, maxLength: 128 })).toBe(DEFAULT_STREAM_THRESHOLDS.max);
    expect(dynamicStreamCount({ rowsPerTask: 4, maxLength: 32 })).toBe(32);
  });

  it('never decreases as the length or the per-task rows grow, and stays within [few, max]', () => {
    const t = { small: 24, long: 96, few: 1, max: 16 };
    for (const rows of [1, 2, 3, 5, 8]) {
      let last = 0;
      for (let len = 1; len <= 128; len++) {
        const s = dynamicStreamCount({ rowsPerTask: rows, maxLength: len }, t);
        expect(s).toBeGreaterThanOrEqual(Math.max(last, t.few));
        expect(s).toBeLessThanOrEqual(t.max);
        last = s;
      }
    }
    for (const len of [4, 8, 16, 40]) {
      let last = 0;
      for (let rows = 1; rows <= 32; rows++) {
        const s = dynamicStreamCount({ rowsPerTask: rows, maxLength: len }, t);
        expect(s).toBeGreaterThanOrEqual(last);
        last = s;
      }
    }
  });

  it('interpolates between the thresholds and takes partial overrides', () => {
    const t = { small: 16, long: 64, few: 2, max: 32 };
    // from = 16 / 1 = 16; at length 32 the fraction is log 2 / log 4 = ½ → 2·16^½ = 8.
    expect(dynamicStreamCount({ rowsPerTask: 1, maxLength: 32 }, t)).toBe(8);
    expect(dynamicStreamCount({ rowsPerTask: 1, maxLength: 128 }, { max: 4 })).toBe(4);
    expect(dynamicStreamCount({ rowsPerTask: 1, maxLength: 2 }, { few: 1 })).toBe(1);
  });

  it('rejects bad inputs and thresholds', () => {
    expect(() => dynamicStreamCount({ rowsPerTask: 0, maxLength: 4 })).toThrow(InvalidArgumentError);
    expect(() => dynamicStreamCount({ rowsPerTask: 1, maxLength: 4 }, { few: 4, max: 2 })).toThrow(/1 ≤ few ≤ max/);
    expect(() => dynamicStreamCount({ rowsPerTask: 1, maxLength: 4 }, { small: -1 })).toThrow(/small and long must be positive/);
  });

  it('medianOf takes the lower middle', () => {
    expect(medianOf([3, 1, 2])).toBe(2);
    expect(medianOf([1, 100, 2, 3])).toBe(2);
    expect(() => medianOf([])).toThrow(InvalidArgumentError);
  });
});
