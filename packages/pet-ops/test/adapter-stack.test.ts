/**
 * HMI's batched adapter (hmi.md A10) on PetS's adapter kernel: the batch's rows of many tenants, each with its own
 * adapter from vBERT's flat layout, in one call, equal row by row a float64 loop that applies tenant(b)'s adapter
 * to row b (GELU erf; tolerance 2e-6 relative to the terms), and the fast kernel equals one call per tenant bit for
 * bit. Ragged segments, a row left alone, an empty batch, slot reuse and bad input.
 */
import { mulberry32 } from '@tessera/core';
import { Tensor } from '@tessera/native';
import { describe, expect, it } from 'vitest';

import { AdapterStackBuffer, adapterStackNumel, PetConfigError, PetShapeError } from '../src/index.js';

const d = 24, m = 8;

/** erf by its Taylor series, erf x = 2/√π Σ (−1)^n x^(2n+1) / (n! (2n+1)): double precision for |x| ≤ 4, ±1 beyond (error < 2e-8). */
function erf(x: number): number {
  if (Math.abs(x) > 4) return Math.sign(x);
  let term = x, sum = x;
  for (let n = 1; n < 200; n++) {
    term *= (-x * x) / n;
    const add = term / (2 * n + 1);
    sum += add;
    if (Math.abs(add) < 1e-17) break;
  }
  return (2 / Math.sqrt(Math.PI)) * sum;
}
const gelu = (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2));

const relu = (x: number) => Math.max(x, 0);

/** y[r] + W_up·act(W_down·y[r] + b_down) + b_up in float64, from the flat vector. */
function applyOne(y: Float32Array, r: number, v: Float32Array, act: (x: number) => number = gelu): Float64Array {
  const out = new Float64Array(d);
  const h = new Float64Array(m);
  for (let k = 0; k < m; k++) {
    let s = v[m * d + k]!;
    for (let c = 0; c < d; c++) s += v[k * d + c]! * y[r * d + c]!;
    h[k] = act(s);
  }
  for (let c = 0; c < d; c++) {
    let s = y[r * d + c]! + v[2 * m * d + m + c]!;
    for (let k = 0; k < m; k++) s += v[m * d + m + c * m + k]! * h[k]!;
    out[c] = s;
  }
  return out;
}

const rand = (n: number, seed: number, scale = 0.5) => {
  const r = mulberry32(seed);
  return Float32Array.from({ length: n }, () => (r() * 2 - 1) * scale);
};

describe('AdapterStackBuffer (HMI A10 on the PetS adapter kernel)', () => {
  const numel = adapterStackNumel({ hidden: d, bottleneck: m });
  const vectors = [0, 1, 2, 3, 4].map((s) => rand(numel, 10 + s));
  // Rows 0–2 tenant in slot 2, 3–9 slot 0, 10 slot 4, row 11 no adapter (left as it is).
  const segments = [
    { slot: 2, rows: { start: 0, seqs: 1, stride: 0, tokens: 3 } },
    { slot: 0, rows: { start: 3, seqs: 1, stride: 0, tokens: 7 } },
    { slot: 4, rows: { start: 10, seqs: 1, stride: 0, tokens: 1 } },
  ];
  const rows = 12;
  const input = rand(rows * d, 99, 1.5);

  function run(stack: AdapterStackBuffer, segs = segments, reference = false, act: 'gelu' | 'relu' = 'gelu'): Float32Array {
    const y = Tensor.from(input, [rows, d]);
    try {
      stack.apply(y, segs, { reference, act });
      return y.toArray() as Float32Array;
    } finally {
      y.dispose();
    }
  }

  it('equals a float64 loop applying each row its tenant’s adapter (GELU, and ReLU as in the HMI paper); rows outside every segment stay', () => {
    const stack = new AdapterStackBuffer({ hidden: d, bottleneck: m, slots: 5 });
    try {
      expect(numel).toBe(2 * d * m + m + d);
      vectors.forEach((v, s) => stack.write(s, v));
      for (const [reference, act] of [[false, 'gelu'], [true, 'gelu'], [false, 'relu'], [true, 'relu']] as const) {
        const got = run(stack, segments, reference, act);
        let worst = 0;
        for (const { slot, rows: seg } of segments) {
          for (let r = seg.start; r < seg.start + seg.tokens; r++) {
            const want = applyOne(input, r, vectors[slot]!, act === 'relu' ? relu : gelu);
            for (let c = 0; c < d; c++) worst = Math.max(worst, Math.abs(got[r * d + c]! - want[c]!) / (1 + Math.abs(want[c]!)));
          }
        }
        expect(worst, `reference=${reference} ${act}`).toBeLessThan(2e-6);
        expect(Array.from(got.subarray(11 * d))).toEqual(Array.from(input.subarray(11 * d)));
      }
    } finally {
      stack.dispose();
    }
  });

  it('one call over the mixed batch equals one call per tenant, bit for bit, and a rewritten slot serves the new tenant', () => {
    const stack = new AdapterStackBuffer({ hidden: d, bottleneck: m, slots: 5 });
    try {
      vectors.forEach((v, s) => stack.write(s, v));
      const together = run(stack);
      const y = Tensor.from(input, [rows, d]);
      for (const seg of segments) stack.apply(y, [seg]);
      expect(Array.from(y.toArray() as Float32Array)).toEqual(Array.from(together));
      y.dispose();
      // Slot 2 now holds tenant 3's adapter: rows 0–2 change, the others do not.
      stack.write(2, vectors[3]!);
      const after = run(stack);
      expect(Array.from(after.subarray(0, 3 * d))).not.toEqual(Array.from(together.subarray(0, 3 * d)));
      expect(Array.from(after.subarray(3 * d))).toEqual(Array.from(together.subarray(3 * d)));
      const want = applyOne(input, 1, vectors[3]!);
      for (let c = 0; c < d; c++) expect(after[d + c]!).toBeCloseTo(want[c]!, 5);
      // An empty batch is a no-op.
      expect(Array.from(run(stack, []))).toEqual(Array.from(input));
    } finally {
      stack.dispose();
    }
  });

  it('refuses bad shapes, slots and a disposed buffer with typed errors', () => {
    expect(() => new AdapterStackBuffer({ hidden: d, bottleneck: 0, slots: 2 })).toThrow(PetConfigError);
    const stack = new AdapterStackBuffer({ hidden: d, bottleneck: m, slots: 2 });
    expect(() => stack.write(0, new Float32Array(numel - 1))).toThrow(PetShapeError);
    expect(() => stack.write(2, vectors[0]!)).toThrow(/slot 2/);
    const wrong = Tensor.zeros([4, d + 1]);
    expect(() => stack.apply(wrong, [])).toThrow(PetShapeError);
    wrong.dispose();
    stack.dispose();
    stack.dispose();
    expect(() => stack.write(0, vectors[0]!)).toThrow(/disposed/);
  });
});
