import { describe, expect, it } from 'vitest';
import {
  DTypeMismatchError,
  InvalidArgumentError,
  layerNorm,
  rmsNorm,
  ShapeMismatchError,
  softmax,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, tensorF32, withThreads } from './helpers.js';

// dims straddle the SIMD widths (8, 16 lanes; the 2-vector unrolled loops) and real model widths.
const dims = [1, 7, 8, 15, 16, 17, 33, 768, 1000];
const rowCounts = [0, 1, 3, 64];

// Tolerances against the double-precision reference kernel (whose own correctness is checked against plain
// JS doubles below). Reductions accumulate in double on every path, so what remains is the f32 rounding of
// the final elementwise steps:
//  - LayerNorm: outputs up to ~6 in magnitude, 2-3 roundings (centre, scale, fma with beta): measured max
//    4.8e-7 absolute. rtol 1e-6 + atol 1e-6 (beta can cancel the product, so relative error alone is unfit).
//  - RMSNorm: two roundings (x*rstd, *gamma): measured max 2.1e-7 relative. rtol 1e-6, atol 1e-30.
//  - softmax: the exp argument x*scale - max is rounded to f32 once (fma), i.e. by up to |arg| * 2^-24; with
//    |arg| <= 40 here that is 2.4e-6 relative, plus vec_math.inl's exp (~2e-7 relative) and the final scaling.
//    Measured max 2.1e-6. rtol 4e-6, atol 1e-30.
const LN_RTOL = 1e-6, LN_ATOL = 1e-6;
const RMS_RTOL = 1e-6, RMS_ATOL = 1e-30;
const SM_RTOL = 4e-6, SM_ATOL = 1e-30;

function seedOf(rows: number, dim: number, k: number): number {
  return rows * 7919 + dim * 31 + k;
}

/** Plain JS double-precision versions, to check the reference kernels themselves. */
function jsLayerNorm(x: Float32Array, dim: number, g: Float32Array | null, b: Float32Array | null, eps: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let r = 0; r < x.length / dim; r++) {
    let mean = 0;
    for (let i = 0; i < dim; i++) mean += x[r * dim + i]!;
    mean /= dim;
    let v = 0;
    for (let i = 0; i < dim; i++) v += (x[r * dim + i]! - mean) ** 2;
    v /= dim;
    for (let i = 0; i < dim; i++) y[r * dim + i] = ((x[r * dim + i]! - mean) / Math.sqrt(v + eps)) * (g ? g[i]! : 1) + (b ? b[i]! : 0);
  }
  return y;
}

function jsRmsNorm(x: Float32Array, dim: number, g: Float32Array | null, eps: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let r = 0; r < x.length / dim; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[r * dim + i]! ** 2;
    const rstd = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * rstd * (g ? g[i]! : 1);
  }
  return y;
}

function jsSoftmax(x: Float32Array, dim: number, scale: number): Float64Array {
  const y = new Float64Array(x.length);
  for (let r = 0; r < x.length / dim; r++) {
    let m = -Infinity;
    for (let i = 0; i < dim; i++) m = Math.max(m, x[r * dim + i]! * scale);
    let s = 0;
    for (let i = 0; i < dim; i++) s += Math.exp(x[r * dim + i]! * scale - m);
    for (let i = 0; i < dim; i++) y[r * dim + i] = Math.exp(x[r * dim + i]! * scale - m) / s;
  }
  return y;
}

describe('layerNorm', () => {
  it('matches the double reference on every ISA, with and without gamma/beta, for odd shapes', () => {
    forEachIsa((isa) => {
      for (const dim of dims) {
        for (const rows of rowCounts) {
          const x = tensorF32(randomFloats(rows * dim, seedOf(rows, dim, 1), -3, 3), [rows, dim]);
          const g = tensorF32(randomFloats(dim, seedOf(rows, dim, 2), 0.5, 1.5), [dim]);
          const b = tensorF32(randomFloats(dim, seedOf(rows, dim, 3)), [dim]);
          for (const [gamma, beta] of [[g, b], [g, null], [null, b], [null, null]] as const) {
            const label = `${isa} [${rows}, ${dim}] gamma=${!!gamma} beta=${!!beta}`;
            const got = f32(layerNorm(x, gamma, beta));
            expectClose(got, f32(layerNorm(x, gamma, beta, { reference: true })), LN_RTOL, LN_ATOL, label);
          }
        }
      }
    });
  });

  it('reference kernel agrees with plain JS doubles', () => {
    const dim = 33, rows = 5;
    const xs = randomFloats(rows * dim, 11, -2, 2);
    const gs = randomFloats(dim, 12), bs = randomFloats(dim, 13);
    const ref = f32(layerNorm(tensorF32(xs, [rows, dim]), tensorF32(gs, [dim]), tensorF32(bs, [dim]), { reference: true, eps: 1e-3 }));
    // Single rounding of the double result to f32: half an ulp, <= 6e-8 relative; atol covers values near 0.
    expectClose(ref, jsLayerNorm(xs, dim, gs, bs, 1e-3), 6e-8, 1e-7, 'ref vs js');
  });

  it('gives the known values: LayerNorm([1, 2, 3]) = [-1.2247, 0, 1.2247]', () => {
    const y = f32(layerNorm(tensorF32(new Float32Array([1, 2, 3]), [1, 3]), null, null, { eps: 0 }));
    expectClose(y, [-Math.sqrt(1.5), 0, Math.sqrt(1.5)], 1e-7, 1e-7, 'ln [1,2,3]');
    expect(y[0]).toBeCloseTo(-1.2247, 4);
    // gamma/beta apply after normalising; eps enters under the square root.
    const g = tensorF32(new Float32Array([2, 2, 2]), [3]);
    const b = tensorF32(new Float32Array([1, 1, 1]), [3]);
    const y2 = f32(layerNorm(tensorF32(new Float32Array([1, 2, 3]), [1, 3]), g, b, { eps: 1 / 3 }));
    expectClose(y2, [1 - 2 * Math.sqrt(1), 1, 1 + 2 * Math.sqrt(1)], 1e-7, 1e-7, 'ln gamma/beta eps');
  });

  it('stays accurate when the mean is large against the spread (two-pass)', () => {
    // mean ~1000, std ~0.6: a one-pass E[x^2] - E[x]^2 in f32 would lose every digit of the variance.
    const dim = 1000, rows = 4;
    const xs = randomFloats(rows * dim, 21, -1, 1).map((v) => 1000 + v);
    const x = tensorF32(xs, [rows, dim]);
    forEachIsa((isa) => {
      expectClose(f32(layerNorm(x)), jsLayerNorm(xs, dim, null, null, 1e-5), LN_RTOL, LN_ATOL, `${isa} offset`);
    });
  });

  it('runs in place when out is x, and over the last dimension of any rank', () => {
    const xs = randomFloats(2 * 3 * 17, 31);
    const want = f32(layerNorm(tensorF32(xs, [6, 17])));
    const x = tensorF32(xs, [2, 3, 17]);
    const y = layerNorm(x, null, null, { out: x });
    expect(y).toBe(x);
    expect(x.shape).toEqual([2, 3, 17]);
    expectBitwiseEqual(f32(x), want, 'in place rank 3');
    expectBitwiseEqual(f32(layerNorm(tensorF32(xs.subarray(0, 17), [17]))), want.subarray(0, 17), 'rank 1');
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const x = tensorF32(randomFloats(64 * 1000, 41, -3, 3), [64, 1000]);
    const g = tensorF32(randomFloats(1000, 42), [1000]);
    const b = tensorF32(randomFloats(1000, 43), [1000]);
    forEachIsa((isa) => {
      const one = withThreads(1, () => f32(layerNorm(x, g, b)));
      const two = withThreads(2, () => f32(layerNorm(x, g, b)));
      expectBitwiseEqual(one, two, `${isa} layerNorm threads`);
    });
  });

  it('rejects bad shapes, dtypes and eps in TS, naming the shapes', () => {
    const x = Tensor.zeros([2, 3], 'f32', cpu());
    const g4 = Tensor.zeros([4], 'f32', cpu());
    expect(() => layerNorm(x, g4)).toThrow(ShapeMismatchError);
    expect(() => layerNorm(x, g4)).toThrow(/gamma \[4\].*x \[2, 3\]/);
    expect(() => layerNorm(x, null, Tensor.zeros([3, 1], 'f32', cpu()))).toThrow(/beta \[3, 1\].*x \[2, 3\]/);
    expect(() => layerNorm(x, null, null, { out: Tensor.zeros([3, 2], 'f32', cpu()) })).toThrow(/\[3, 2\].*\[2, 3\]/);
    expect(() => layerNorm(Tensor.zeros([2, 3], 'i32', cpu()))).toThrow(DTypeMismatchError);
    expect(() => layerNorm(x, Tensor.zeros([3], 'f16', cpu()))).toThrow(DTypeMismatchError);
    expect(() => layerNorm(Tensor.zeros([], 'f32', cpu()))).toThrow(ShapeMismatchError);
    expect(() => layerNorm(x, null, null, { eps: -1 })).toThrow(InvalidArgumentError);
    expect(() => layerNorm(x, null, null, { eps: Number.NaN })).toThrow(InvalidArgumentError);
  });

  it('native binding validates a bad direct call instead of crashing', () => {
    const b = cpu().binding;
    const x = Tensor.zeros([4, 8], 'f32', cpu());
    const out = Tensor.zeros([4, 8], 'f32', cpu());
    expect(() => b.layerNorm(x.native, Tensor.zeros([7], 'f32', cpu()).native, null, out.native, { eps: 1e-5 })).toThrow(/gamma.*\[7\].*\[8\]/);
    expect(() => b.layerNorm(x.native, null, null, Tensor.zeros([4, 7], 'f32', cpu()).native, { eps: 1e-5 })).toThrow(/out/);
    expect(() => b.layerNorm(x.native, null, null, out.native, { eps: -1 })).toThrow(/eps/);
    // A partly overlapping out (rows 1..3 over rows 0..2 of the same memory) is refused; exact aliasing is fine.
    expect(() => b.layerNorm(x.rows(0, 3).native, null, null, x.rows(1, 3).native, { eps: 1e-5 })).toThrow(/overlaps/);
    expect(() => b.layerNorm(x.native, null, null, x.native, { eps: 1e-5 })).not.toThrow();
  });
});

describe('empty tensors', () => {
  it('rows of length 0 and rank-1 empty inputs work and write nothing', () => {
    for (const shape of [[3, 0], [0], [2, 0, 5], [0, 4]]) {
      const x = Tensor.zeros(shape, 'f32', cpu());
      const dim = shape[shape.length - 1]!;
      const g = Tensor.zeros([dim], 'f32', cpu());
      forEachIsa(() => {
        expect(layerNorm(x, g, g).shape).toEqual(shape);
        expect(rmsNorm(x, g).shape).toEqual(shape);
        expect(softmax(x).shape).toEqual(shape);
        expect(layerNorm(x, null, null, { reference: true }).shape).toEqual(shape);
      });
    }
  });
});

describe('rmsNorm', () => {
  it('matches the double reference on every ISA, with and without gamma, for odd shapes', () => {
    forEachIsa((isa) => {
      for (const dim of dims) {
        for (const rows of rowCounts) {
          const x = tensorF32(randomFloats(rows * dim, seedOf(rows, dim, 4), -3, 3), [rows, dim]);
          const g = tensorF32(randomFloats(dim, seedOf(rows, dim, 5), 0.5, 1.5), [dim]);
          for (const gamma of [g, null]) {
            const label = `${isa} [${rows}, ${dim}] gamma=${!!gamma}`;
            expectClose(f32(rmsNorm(x, gamma)), f32(rmsNorm(x, gamma, { reference: true })), RMS_RTOL, RMS_ATOL, label);
          }
        }
      }
    });
  });

  it('reference kernel agrees with plain JS doubles; known value', () => {
    const dim = 17, rows = 3;
    const xs = randomFloats(rows * dim, 51, -2, 2);
    const gs = randomFloats(dim, 52);
    const ref = f32(rmsNorm(tensorF32(xs, [rows, dim]), tensorF32(gs, [dim]), { reference: true }));
    expectClose(ref, jsRmsNorm(xs, dim, gs, 1e-6), 6e-8, 1e-30, 'ref vs js');
    // rms([3, 4]) = sqrt(12.5)
    const y = f32(rmsNorm(tensorF32(new Float32Array([3, 4]), [1, 2]), null, { eps: 0 }));
    expectClose(y, [3 / Math.sqrt(12.5), 4 / Math.sqrt(12.5)], 1e-7, 0, 'rms [3,4]');
  });

  it('is bitwise identical on 1 and 2 threads, and runs in place', () => {
    const x = tensorF32(randomFloats(64 * 1000, 61, -3, 3), [64, 1000]);
    const g = tensorF32(randomFloats(1000, 62), [1000]);
    forEachIsa((isa) => {
      const one = withThreads(1, () => f32(rmsNorm(x, g)));
      const two = withThreads(2, () => f32(rmsNorm(x, g)));
      expectBitwiseEqual(one, two, `${isa} rmsNorm threads`);
    });
    const copy = tensorF32(f32(x), [64, 1000]);
    rmsNorm(copy, g, { out: copy });
    expectBitwiseEqual(f32(copy), f32(rmsNorm(x, g)), 'in place');
  });

  it('rejects bad shapes and dtypes in TS, naming the shapes', () => {
    const x = Tensor.zeros([2, 5], 'f32', cpu());
    expect(() => rmsNorm(x, Tensor.zeros([2], 'f32', cpu()))).toThrow(/gamma \[2\].*x \[2, 5\]/);
    expect(() => rmsNorm(x, Tensor.zeros([5], 'bf16', cpu()))).toThrow(DTypeMismatchError);
    expect(() => rmsNorm(x, null, { eps: Number.POSITIVE_INFINITY })).toThrow(InvalidArgumentError);
    expect(() => cpu().binding.rmsNorm(x.native, null, Tensor.zeros([5, 2], 'f32', cpu()).native, { eps: 1e-6 })).toThrow(/\[5, 2\].*\[2, 5\]/);
  });
});

describe('softmax', () => {
  it('matches the double reference on every ISA, for odd shapes and scales', () => {
    forEachIsa((isa) => {
      for (const dim of dims) {
        for (const rows of rowCounts) {
          const x = tensorF32(randomFloats(rows * dim, seedOf(rows, dim, 6), -20, 20), [rows, dim]);
          for (const scale of [1, 0.125, -0.5]) {
            const label = `${isa} [${rows}, ${dim}] scale=${scale}`;
            expectClose(f32(softmax(x, { scale })), f32(softmax(x, { scale, reference: true })), SM_RTOL, SM_ATOL, label);
          }
        }
      }
    });
  });

  it('reference kernel agrees with plain JS doubles; rows sum to 1', () => {
    const dim = 1000, rows = 3;
    const xs = randomFloats(rows * dim, 71, -10, 10);
    const ref = f32(softmax(tensorF32(xs, [rows, dim]), { scale: 0.3, reference: true }));
    // The kernel receives scale as f32.
    expectClose(ref, jsSoftmax(xs, dim, Math.fround(0.3)), 6e-8, 1e-30, 'ref vs js');
    forEachIsa((isa) => {
      const y = f32(softmax(tensorF32(xs, [rows, dim])));
      for (let r = 0; r < rows; r++) {
        let s = 0;
        for (let i = 0; i < dim; i++) s += y[r * dim + i]!;
        expect(Math.abs(s - 1), `${isa} row ${r} sum`).toBeLessThan(1e-5);
      }
    });
  });

  it('masks: -Infinity entries get exactly 0, an all -Infinity row is all zeros, NaN poisons its row only', () => {
    const dim = 19; // a full vector plus a tail on both ISAs
    const ninf = Number.NEGATIVE_INFINITY;
    const rows: number[][] = [
      Array.from({ length: dim }, (_, i) => (i % 3 === 0 ? ninf : i * 0.1)), // partly masked
      Array.from({ length: dim }, () => ninf), // fully masked
      Array.from({ length: dim }, (_, i) => (i === 17 ? Number.NaN : i)), // NaN in the tail
      Array.from({ length: dim }, (_, i) => (i === 2 ? Number.NaN : ninf)), // NaN among -inf
      Array.from({ length: dim }, (_, i) => (i === 5 ? 1e4 : -1e4)), // far apart: exp underflows to exactly 0
    ];
    const x = tensorF32(Float32Array.from(rows.flat()), [rows.length, dim]);
    const check = (y: Float32Array, label: string) => {
      const row = (r: number) => Array.from(y.subarray(r * dim, (r + 1) * dim));
      const masked = row(0);
      for (let i = 0; i < dim; i++) if (i % 3 === 0) expect(masked[i], `${label} masked ${i}`).toBe(0);
      expect(Math.abs(masked.reduce((a, v) => a + v, 0) - 1)).toBeLessThan(1e-6);
      expect(row(1).every((v) => v === 0 && !Object.is(v, -0)), `${label} all-masked row`).toBe(true);
      expect(row(2).every(Number.isNaN), `${label} NaN row`).toBe(true);
      expect(row(3).every(Number.isNaN), `${label} NaN among -inf`).toBe(true);
      expect(row(4), `${label} far apart`).toEqual(Array.from({ length: dim }, (_, i) => (i === 5 ? 1 : 0)));
    };
    forEachIsa((isa) => check(f32(softmax(x)), isa));
    check(f32(softmax(x, { reference: true })), 'reference');
  });

  it('is bitwise identical on 1 and 2 threads, and runs in place', () => {
    const x = tensorF32(randomFloats(64 * 1000, 81, -8, 8), [64, 1000]);
    forEachIsa((isa) => {
      const one = withThreads(1, () => f32(softmax(x, { scale: 0.7 })));
      const two = withThreads(2, () => f32(softmax(x, { scale: 0.7 })));
      expectBitwiseEqual(one, two, `${isa} softmax threads`);
    });
    const copy = tensorF32(f32(x), [64, 1000]);
    softmax(copy, { out: copy, scale: 0.7 });
    expectBitwiseEqual(f32(copy), f32(softmax(x, { scale: 0.7 })), 'in place');
  });

  it('rejects bad inputs in TS and in the binding', () => {
    const x = Tensor.zeros([2, 3], 'f32', cpu());
    expect(() => softmax(x, { out: Tensor.zeros([2, 4], 'f32', cpu()) })).toThrow(/\[2, 4\].*\[2, 3\]/);
    expect(() => softmax(Tensor.zeros([2, 3], 'f16', cpu()))).toThrow(DTypeMismatchError);
    expect(() => softmax(x, { scale: Number.NaN })).toThrow(InvalidArgumentError);
    expect(() => cpu().binding.softmax(x.native, Tensor.zeros([2, 3], 'i32', cpu()).native, { scale: 1 })).toThrow(/out must be f32/);
  });
});
