import { describe, expect, it } from 'vitest';
import {
  columnSum,
  DTypeMismatchError,
  embeddingBackward,
  geluErfBackward,
  geluTanhBackward,
  InvalidArgumentError,
  layerNormBackward,
  linearBackward,
  rmsNormBackward,
  rope,
  ropeBackward,
  ShapeMismatchError,
  siluBackward,
  siluMulBackward,
  softmaxBackward,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, randomInts, tensorF32, withThreads } from './helpers.js';
import { centralDiff, dotLoss, erf, i32 } from './train-helpers.js';

// Tolerances.
//  - Against float64 central differences (FD): the kernels are f32 with double-accumulated reductions, the FD
//    error (step 1e-5, smooth float64 forwards) is ~1e-9; what remains is f32 rounding of O(1) gradients:
//    rtol 1e-4, atol 1e-5 (measured worst ~2e-6).
//  - Fast path (every ISA) against the scalar double reference: a few f32 roundings of outputs of size ~1-10 plus the
//    vec_math exp / erfc approximations (~2e-7 relative): rtol 2e-5, atol 2e-6 (norm dx; measured worst ~5e-7
//    absolute); activations rtol 1e-5, atol 1e-6.
const FD_RTOL = 1e-4, FD_ATOL = 1e-5;
const REF_RTOL = 2e-5, REF_ATOL = 2e-6;

const dims = [1, 7, 8, 15, 16, 17, 33, 100];
const rowCounts = [0, 1, 3, 9];

// ---------------------------------------------------------------- float64 forwards

function jsLayerNorm(x: ArrayLike<number>, rows: number, dim: number, g: ArrayLike<number> | null, b: ArrayLike<number> | null, eps: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let mean = 0;
    for (let i = 0; i < dim; i++) mean += x[r * dim + i]!;
    mean /= dim;
    let v = 0;
    for (let i = 0; i < dim; i++) v += (x[r * dim + i]! - mean) ** 2;
    const rstd = 1 / Math.sqrt(v / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = (x[r * dim + i]! - mean) * rstd * (g ? g[i]! : 1) + (b ? b[i]! : 0);
  }
  return y;
}

function jsRmsNorm(x: ArrayLike<number>, rows: number, dim: number, g: ArrayLike<number> | null, eps: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let ss = 0;
    for (let i = 0; i < dim; i++) ss += x[r * dim + i]! ** 2;
    const rstd = 1 / Math.sqrt(ss / dim + eps);
    for (let i = 0; i < dim; i++) y[r * dim + i] = x[r * dim + i]! * rstd * (g ? g[i]! : 1);
  }
  return y;
}

function jsSoftmax(x: ArrayLike<number>, rows: number, dim: number, scale: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++) {
    let m = -Infinity;
    for (let i = 0; i < dim; i++) m = Math.max(m, x[r * dim + i]! * scale);
    let s = 0;
    for (let i = 0; i < dim; i++) s += Math.exp(x[r * dim + i]! * scale - m);
    for (let i = 0; i < dim; i++) y[r * dim + i] = Math.exp(x[r * dim + i]! * scale - m) / s;
  }
  return y;
}

function jsMaxRstd(x: ArrayLike<number>, rows: number, dim: number, eps: number, rms = false): number {
  let worst = 0;
  for (let r = 0; r < rows; r++) {
    let mean = 0;
    if (!rms) {
      for (let i = 0; i < dim; i++) mean += x[r * dim + i]!;
      mean /= dim;
    }
    let v = 0;
    for (let i = 0; i < dim; i++) v += (x[r * dim + i]! - mean) ** 2;
    worst = Math.max(worst, 1 / Math.sqrt(v / dim + eps));
  }
  return worst;
}

const maxAbs = (a: ArrayLike<number>): number => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]!));
  return m;
};

const sigmoid = (x: number): number => 1 / (1 + Math.exp(-x));
const acts = {
  gelu_erf: { fwd: (x: number) => 0.5 * x * (1 + erf(x / Math.SQRT2)), bwd: geluErfBackward },
  gelu_tanh: { fwd: (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3))), bwd: geluTanhBackward },
  silu: { fwd: (x: number) => x * sigmoid(x), bwd: siluBackward },
} as const;

const map = (x: ArrayLike<number>, f: (v: number) => number): Float64Array => Float64Array.from(x as ArrayLike<number>, f);

// ---------------------------------------------------------------- LayerNorm / RMSNorm

describe('layerNormBackward', () => {
  it('matches float64 central differences for dx, dgamma and dbeta (fast and reference)', () => {
    const rows = 3, dim = 7, eps = 1e-5;
    const xs = randomFloats(rows * dim, 1, -2, 2), gs = randomFloats(dim, 2, 0.5, 1.5), bs = randomFloats(dim, 3), dys = randomFloats(rows * dim, 4);
    const fdx = centralDiff((x) => dotLoss(jsLayerNorm(x, rows, dim, gs, bs, eps), dys), xs);
    const fdg = centralDiff((g) => dotLoss(jsLayerNorm(xs, rows, dim, g, bs, eps), dys), gs);
    const fdb = centralDiff((b) => dotLoss(jsLayerNorm(xs, rows, dim, gs, b, eps), dys), bs);
    for (const reference of [false, true]) {
      const got = layerNormBackward(tensorF32(xs, [rows, dim]), tensorF32(gs, [dim]), tensorF32(dys, [rows, dim]), { eps, reference });
      expectClose(f32(got.dx!), fdx, FD_RTOL, FD_ATOL, `dx ref=${reference}`);
      expectClose(f32(got.dgamma!), fdg, FD_RTOL, FD_ATOL, `dgamma ref=${reference}`);
      expectClose(f32(got.dbeta!), fdb, FD_RTOL, FD_ATOL, `dbeta ref=${reference}`);
    }
  });

  it('matches the reference on every ISA for ragged and empty shapes, with and without gamma', () => {
    forEachIsa((isa) => {
      for (const dim of dims) {
        for (const rows of rowCounts) {
          const x = tensorF32(randomFloats(rows * dim, rows * 31 + dim, -3, 3), [rows, dim]);
          const dy = tensorF32(randomFloats(rows * dim, rows * 37 + dim), [rows, dim]);
          const g = tensorF32(randomFloats(dim, dim, 0.5, 1.5), [dim]);
          for (const gamma of [g, null]) {
            const label = `${isa} [${rows}, ${dim}] gamma=${!!gamma}`;
            const fast = layerNormBackward(x, gamma, dy, { dgamma: gamma ? undefined : Tensor.zeros([dim], 'f32', cpu()), dbeta: Tensor.zeros([dim], 'f32', cpu()) });
            const ref = layerNormBackward(x, gamma, dy, { reference: true, dgamma: gamma ? undefined : Tensor.zeros([dim], 'f32', cpu()), dbeta: Tensor.zeros([dim], 'f32', cpu()) });
            // dx = rstd (g·dy - ...): the f32 rounding of g·dy (or its absence, where the compiler fuses it into an fma)
            // is amplified by rstd, up to 1/sqrt(eps) = 316 for a one-element row.
            const dxAtol = REF_ATOL + 1e-7 * jsMaxRstd(f32(x), rows, dim, 1e-5) * maxAbs(f32(dy)) * (gamma ? 1.5 : 1);
            expectClose(f32(fast.dx!), f32(ref.dx!), REF_RTOL, dxAtol, `${label} dx`);
            expectClose(f32(fast.dgamma!), f32(ref.dgamma!), REF_RTOL, REF_ATOL * Math.max(1, rows), `${label} dgamma`);
            expectClose(f32(fast.dbeta!), f32(ref.dbeta!), REF_RTOL, REF_ATOL * Math.max(1, rows), `${label} dbeta`);
          }
        }
      }
    });
  });

  it('accumulates into given parameter gradients, skips null outputs and runs dx in place over dy', () => {
    const rows = 5, dim = 17;
    const x = tensorF32(randomFloats(rows * dim, 11, -2, 2), [rows, dim]);
    const g = tensorF32(randomFloats(dim, 12, 0.5, 1.5), [dim]);
    const dys = randomFloats(rows * dim, 13);
    const base = layerNormBackward(x, g, tensorF32(dys, [rows, dim]));
    const dgamma = tensorF32(new Float32Array(dim).fill(1), [dim]);
    const dbeta = tensorF32(new Float32Array(dim).fill(-1), [dim]);
    const dy = tensorF32(dys, [rows, dim]);
    const got = layerNormBackward(x, g, dy, { dx: dy, dgamma, dbeta, accumulate: true });
    expect(got.dx).toBe(dy);
    expectBitwiseEqual(f32(dy), f32(base.dx!), 'in-place dx');
    expectClose(f32(dgamma), f32(base.dgamma!).map((v) => v + 1), 1e-6, 1e-6, 'dgamma + 1');
    expectClose(f32(dbeta), f32(base.dbeta!).map((v) => v - 1), 1e-6, 1e-6, 'dbeta - 1');
    const none = layerNormBackward(x, g, tensorF32(dys, [rows, dim]), { dx: null, dgamma: null });
    expect(none.dx).toBeNull();
    expect(none.dgamma).toBeNull();
    expectBitwiseEqual(f32(none.dbeta!), f32(base.dbeta!), 'dbeta alone');
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const rows = 64, dim = 300;
    const x = tensorF32(randomFloats(rows * dim, 21, -3, 3), [rows, dim]);
    const dy = tensorF32(randomFloats(rows * dim, 22), [rows, dim]);
    const g = tensorF32(randomFloats(dim, 23, 0.5, 1.5), [dim]);
    forEachIsa((isa) => {
      const run = () => {
        const r = layerNormBackward(x, g, dy);
        return [r.dx!, r.dgamma!, r.dbeta!].map(f32);
      };
      const one = withThreads(1, run), two = withThreads(2, run);
      one.forEach((a, i) => expectBitwiseEqual(a, two[i]!, `${isa} layerNormBackward ${i}`));
    });
  });

  it('rejects bad shapes, dtypes and options', () => {
    const x = Tensor.zeros([2, 3], 'f32', cpu());
    expect(() => layerNormBackward(x, null, Tensor.zeros([3, 2], 'f32', cpu()))).toThrow(ShapeMismatchError);
    expect(() => layerNormBackward(x, Tensor.zeros([4], 'f32', cpu()), x)).toThrow(/gamma \[4\].*x \[2, 3\]/);
    expect(() => layerNormBackward(x, null, Tensor.zeros([2, 3], 'i32', cpu()))).toThrow(DTypeMismatchError);
    expect(() => layerNormBackward(x, null, x, { eps: -1 })).toThrow(InvalidArgumentError);
    expect(() => layerNormBackward(x, Tensor.zeros([3], 'f32', cpu()), x, { accumulate: true })).toThrow(/accumulate/);
    const b = cpu().binding;
    const dy = Tensor.zeros([2, 3], 'f32', cpu());
    expect(() => b.layerNormBackward(x.native, null, dy.native, null, Tensor.zeros([2], 'f32', cpu()).native, null, { eps: 1e-5, accumulate: false }))
      .toThrow(/dgamma/);
    expect(() => b.layerNormBackward(x.native, null, dy.native, x.native, null, null, { eps: 1e-5, accumulate: false })).toThrow(/overlaps/);
  });
});

describe('rmsNormBackward', () => {
  it('matches float64 central differences for dx and dgamma (fast and reference)', () => {
    const rows = 4, dim = 9, eps = 1e-6;
    const xs = randomFloats(rows * dim, 31, -2, 2), gs = randomFloats(dim, 32, 0.5, 1.5), dys = randomFloats(rows * dim, 33);
    const fdx = centralDiff((x) => dotLoss(jsRmsNorm(x, rows, dim, gs, eps), dys), xs);
    const fdg = centralDiff((g) => dotLoss(jsRmsNorm(xs, rows, dim, g, eps), dys), gs);
    for (const reference of [false, true]) {
      const got = rmsNormBackward(tensorF32(xs, [rows, dim]), tensorF32(gs, [dim]), tensorF32(dys, [rows, dim]), { eps, reference });
      expectClose(f32(got.dx!), fdx, FD_RTOL, FD_ATOL, `dx ref=${reference}`);
      expectClose(f32(got.dgamma!), fdg, FD_RTOL, FD_ATOL, `dgamma ref=${reference}`);
    }
  });

  it('matches the reference on every ISA and is bitwise identical on 1 and 2 threads', () => {
    forEachIsa((isa) => {
      for (const dim of dims) {
        for (const rows of rowCounts) {
          const x = tensorF32(randomFloats(rows * dim, rows * 41 + dim, -3, 3), [rows, dim]);
          const dy = tensorF32(randomFloats(rows * dim, rows * 43 + dim), [rows, dim]);
          const g = tensorF32(randomFloats(dim, dim + 5, 0.5, 1.5), [dim]);
          const fast = rmsNormBackward(x, g, dy), ref = rmsNormBackward(x, g, dy, { reference: true });
          const dxAtol = REF_ATOL + 1e-7 * jsMaxRstd(f32(x), rows, dim, 1e-6, true) * maxAbs(f32(dy)) * 1.5;
          expectClose(f32(fast.dx!), f32(ref.dx!), REF_RTOL, dxAtol, `${isa} [${rows}, ${dim}] dx`);
          expectClose(f32(fast.dgamma!), f32(ref.dgamma!), REF_RTOL, REF_ATOL * Math.max(1, rows), `${isa} [${rows}, ${dim}] dgamma`);
        }
      }
      const x = tensorF32(randomFloats(64 * 300, 44, -3, 3), [64, 300]);
      const dy = tensorF32(randomFloats(64 * 300, 45), [64, 300]);
      const g = tensorF32(randomFloats(300, 46), [300]);
      const run = () => {
        const r = rmsNormBackward(x, g, dy);
        return [f32(r.dx!), f32(r.dgamma!)];
      };
      const one = withThreads(1, run), two = withThreads(2, run);
      one.forEach((a, i) => expectBitwiseEqual(a, two[i]!, `${isa} rmsNormBackward ${i}`));
    });
  });
});

// ---------------------------------------------------------------- softmax, activations, SwiGLU

describe('softmaxBackward', () => {
  it('matches central differences of softmax(x * scale), the reference on every ISA, and 1 vs 2 threads', () => {
    const rows = 3, dim = 11, scale = 0.7;
    const xs = randomFloats(rows * dim, 51, -3, 3), dys = randomFloats(rows * dim, 52);
    const y = tensorF32(Float32Array.from(jsSoftmax(xs, rows, dim, scale)), [rows, dim]);
    const fd = centralDiff((x) => dotLoss(jsSoftmax(x, rows, dim, scale), dys), xs);
    expectClose(f32(softmaxBackward(y, tensorF32(dys, [rows, dim]), { scale })), fd, FD_RTOL, FD_ATOL, 'fd');
    forEachIsa((isa) => {
      for (const d of dims) {
        for (const r of rowCounts) {
          const yy = tensorF32(Float32Array.from(jsSoftmax(randomFloats(r * d, r + d), r, d, 1)), [r, d]);
          const dy = tensorF32(randomFloats(r * d, r * 3 + d), [r, d]);
          expectClose(f32(softmaxBackward(yy, dy, { scale: 2 })), f32(softmaxBackward(yy, dy, { scale: 2, reference: true })), REF_RTOL, 1e-7, `${isa} [${r}, ${d}]`);
        }
      }
      const yy = tensorF32(Float32Array.from(jsSoftmax(randomFloats(64 * 500, 53), 64, 500, 1)), [64, 500]);
      const dy = tensorF32(randomFloats(64 * 500, 54), [64, 500]);
      expectBitwiseEqual(withThreads(1, () => f32(softmaxBackward(yy, dy))), withThreads(2, () => f32(softmaxBackward(yy, dy))), `${isa} threads`);
    });
  });
});

describe('activation backward', () => {
  it('geluErf / geluTanh / silu match central differences and the reference on every ISA', () => {
    // Inputs over [-6, 6] cover both tails and the region where GELU's erfc / sigmoid forms switch branches.
    const xs = randomFloats(301, 61, -6, 6), dys = randomFloats(301, 62);
    for (const [name, { fwd, bwd }] of Object.entries(acts)) {
      const fd = centralDiff((x) => dotLoss(map(x, fwd), dys), xs);
      expectClose(f32(bwd(tensorF32(xs, [301]), tensorF32(dys, [301]), { reference: true })), fd, FD_RTOL, FD_ATOL, `${name} ref fd`);
      forEachIsa((isa) => {
        for (const n of [0, 1, 7, 8, 17, 301]) {
          const x = tensorF32(xs.subarray(0, n), [n]), dy = tensorF32(dys.subarray(0, n), [n]);
          const fast = f32(bwd(x, dy));
          expectClose(fast, fd.subarray(0, n), FD_RTOL, FD_ATOL, `${isa} ${name} fd n=${n}`);
          expectClose(fast, f32(bwd(x, dy, { reference: true })), 1e-5, 1e-6, `${isa} ${name} ref n=${n}`);
        }
        const big = tensorF32(randomFloats(40000, 63, -5, 5), [200, 200]);
        const dy = tensorF32(randomFloats(40000, 64), [200, 200]);
        expectBitwiseEqual(withThreads(1, () => f32(bwd(big, dy))), withThreads(2, () => f32(bwd(big, dy))), `${isa} ${name} threads`);
      });
    }
  });

  it('siluMulBackward matches central differences of silu(gate) * up and the reference on every ISA', () => {
    const n = 57;
    const gs = randomFloats(n, 71, -5, 5), us = randomFloats(n, 72, -2, 2), dys = randomFloats(n, 73);
    const fwd = (g: ArrayLike<number>, u: ArrayLike<number>) => Float64Array.from({ length: n }, (_, i) => g[i]! * sigmoid(g[i]!) * u[i]!);
    const fdg = centralDiff((g) => dotLoss(fwd(g, us), dys), gs);
    const fdu = centralDiff((u) => dotLoss(fwd(gs, u), dys), us);
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const r = siluMulBackward(tensorF32(gs, [n]), tensorF32(us, [n]), tensorF32(dys, [n]), { reference });
        expectClose(f32(r.dgate), fdg, FD_RTOL, FD_ATOL, `${isa} dgate ref=${reference}`);
        expectClose(f32(r.dup), fdu, FD_RTOL, FD_ATOL, `${isa} dup ref=${reference}`);
      }
      // In place: dgate over gate, dup over up.
      const gate = tensorF32(gs, [n]), up = tensorF32(us, [n]);
      const want = siluMulBackward(gate, up, tensorF32(dys, [n]));
      siluMulBackward(gate, up, tensorF32(dys, [n]), { dgate: gate, dup: up });
      expectBitwiseEqual(f32(gate), f32(want.dgate), `${isa} in-place dgate`);
      expectBitwiseEqual(f32(up), f32(want.dup), `${isa} in-place dup`);
    });
    const g0 = Tensor.zeros([4], 'f32', cpu());
    expect(() => siluMulBackward(g0, Tensor.zeros([5], 'f32', cpu()), g0)).toThrow(ShapeMismatchError);
    const d = Tensor.zeros([4], 'f32', cpu());
    expect(() => siluMulBackward(g0, g0, g0, { dgate: d, dup: d })).toThrow(InvalidArgumentError);
  });
});

// ---------------------------------------------------------------- RoPE, embedding, column sums, linear

describe('ropeBackward', () => {
  it('is the transpose of rope: matches central differences of Σ dy ⊙ rope(x) and inverts rope', () => {
    const shape: [number, number, number] = [4, 2, 8];
    const n = 4 * 2 * 8;
    const pos = i32([0, 3, 17, 1000]);
    const xs = randomFloats(n, 81), dys = randomFloats(n, 82);
    // Σ dy ⊙ R x is linear in x, so its gradient is Rᵀ dy exactly; FD of the native double reference forward.
    const fwd = (x: Float64Array) => {
      const t = tensorF32(Float32Array.from(x), shape);
      return f32(rope(t, pos, { rotDim: 6, reference: true }));
    };
    const fd = centralDiff((x) => dotLoss(fwd(x), dys), xs, 1e-2);
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const dy = tensorF32(dys, shape);
        expect(ropeBackward(dy, pos, { rotDim: 6, reference })).toBe(dy);
        expectClose(f32(dy), fd, 1e-5, 2e-6, `${isa} fd ref=${reference}`);
      }
      const x = tensorF32(xs, shape);
      ropeBackward(rope(x, pos), pos);
      expectClose(f32(x), xs, 0, 1e-6, `${isa} inverse`);
    });
    expect(() => ropeBackward(Tensor.zeros([2, 2, 3], 'f32', cpu()), i32([0, 1]))).toThrow(/ropeBackward.*odd/);
  });
});

describe('embeddingBackward', () => {
  it('scatter-adds rows in token order: central differences, reference, repeated ids, accumulate, threads', () => {
    const vocab = 11, dim = 70, n = 40;
    const ids = randomInts(n, 91, 0, vocab);
    ids[5] = ids[6] = ids[7] = 3; // repeats
    const dys = randomFloats(n * dim, 92);
    const tables = randomFloats(vocab * dim, 93);
    const fwd = (t: ArrayLike<number>) => {
      let s = 0;
      for (let i = 0; i < n; i++) for (let c = 0; c < dim; c++) s += t[ids[i]! * dim + c]! * dys[i * dim + c]!;
      return s;
    };
    const fd = centralDiff(fwd, tables, 1e-3);
    const idsT = i32(ids, [4, 10]);
    const dy = tensorF32(dys, [4, 10, dim]);
    forEachIsa((isa) => {
      const fast = embeddingBackward(dy, idsT, vocab);
      expectClose(f32(fast), fd, 1e-5, 1e-5, `${isa} fd`);
      expectClose(f32(fast), f32(embeddingBackward(dy, idsT, vocab, { reference: true })), 1e-6, 1e-6, `${isa} ref`);
      const acc = tensorF32(new Float32Array(vocab * dim).fill(2), [vocab, dim]);
      embeddingBackward(dy, idsT, vocab, { out: acc, accumulate: true });
      expectClose(f32(acc), f32(fast).map((v) => v + 2), 1e-6, 1e-6, `${isa} accumulate`);
      const big = tensorF32(randomFloats(300 * 256, 94), [300, 256]);
      const bigIds = i32(randomInts(300, 95, 0, 20));
      expectBitwiseEqual(withThreads(1, () => f32(embeddingBackward(big, bigIds, 20))), withThreads(2, () => f32(embeddingBackward(big, bigIds, 20))), `${isa} threads`);
    });
    expect(f32(embeddingBackward(Tensor.zeros([0, 4], 'f32', cpu()), i32([]), 3))).toEqual(new Float32Array(12));
    expect(() => embeddingBackward(dy, idsT, 3)).toThrow(/ids\[\d+\] = \d+ is outside \[0, 3\)/);
    expect(() => embeddingBackward(Tensor.zeros([40, 5], 'f32', cpu()), idsT, vocab)).toThrow(ShapeMismatchError);
    expect(() => embeddingBackward(dy, idsT, vocab, { accumulate: true })).toThrow(InvalidArgumentError);
  });
});

describe('columnSum and linearBackward', () => {
  it('columnSum sums rows in double for ragged shapes, accumulates, and is thread independent', () => {
    for (const [rows, cols] of [[0, 5], [1, 1], [7, 300], [33, 17]] as const) {
      const xs = randomFloats(rows * cols, rows + cols);
      const want = new Float64Array(cols);
      for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) want[c]! += xs[r * cols + c]!;
      const x = tensorF32(xs, [rows, cols]);
      expectClose(f32(columnSum(x)), want, 1e-7, 1e-7, `[${rows}, ${cols}]`);
      expectBitwiseEqual(f32(columnSum(x)), f32(columnSum(x, { reference: true })), `[${rows}, ${cols}] ref`);
      const out = tensorF32(new Float32Array(cols).fill(1), [cols]);
      columnSum(x, { out, accumulate: true });
      expectClose(f32(out), want.map((v) => v + 1), 1e-7, 1e-7, 'accumulate');
    }
    const x = tensorF32(randomFloats(500 * 700, 101), [500, 700]);
    expectBitwiseEqual(withThreads(1, () => f32(columnSum(x))), withThreads(2, () => f32(columnSum(x))), 'threads');
    expect(() => columnSum(x, { out: Tensor.zeros([699], 'f32', cpu()) })).toThrow(ShapeMismatchError);
  });

  it('linearBackward gives dx, dW, db matching central differences, and accumulates dW / db', () => {
    const [b, s, inF, outF] = [2, 3, 5, 4];
    const xs = randomFloats(b * s * inF, 111), ws = randomFloats(outF * inF, 112), bs = randomFloats(outF, 113), dys = randomFloats(b * s * outF, 114);
    const fwd = (x: ArrayLike<number>, w: ArrayLike<number>, bias: ArrayLike<number>) => {
      const y = new Float64Array(b * s * outF);
      for (let r = 0; r < b * s; r++) for (let o = 0; o < outF; o++) {
        let acc = bias[o]!;
        for (let i = 0; i < inF; i++) acc += x[r * inF + i]! * w[o * inF + i]!;
        y[r * outF + o] = acc;
      }
      return y;
    };
    const fdx = centralDiff((x) => dotLoss(fwd(x, ws, bs), dys), xs);
    const fdw = centralDiff((w) => dotLoss(fwd(xs, w, bs), dys), ws);
    const fdb = centralDiff((bias) => dotLoss(fwd(xs, ws, bias), dys), bs);
    const x = tensorF32(xs, [b, s, inF]), w = tensorF32(ws, [outF, inF]), dy = tensorF32(dys, [b, s, outF]);
    for (const reference of [false, true]) {
      const g = linearBackward(x, w, dy, { bias: true, reference });
      expect(g.dx!.shape).toEqual([b, s, inF]);
      expectClose(f32(g.dx!), fdx, FD_RTOL, FD_ATOL, `dx ref=${reference}`);
      expectClose(f32(g.dWeight!), fdw, FD_RTOL, FD_ATOL, `dW ref=${reference}`);
      expectClose(f32(g.dBias!), fdb, FD_RTOL, FD_ATOL, `db ref=${reference}`);
    }
    const dWeight = tensorF32(new Float32Array(outF * inF).fill(1), [outF, inF]);
    const dBias = tensorF32(new Float32Array(outF).fill(1), [outF]);
    const acc = linearBackward(x, w, dy, { dx: null, dWeight, dBias, accumulate: true });
    expect(acc.dx).toBeNull();
    expectClose(f32(dWeight), Float64Array.from(fdw, (v) => v + 1), FD_RTOL, FD_ATOL, 'dW accumulate');
    expectClose(f32(dBias), Float64Array.from(fdb, (v) => v + 1), FD_RTOL, FD_ATOL, 'db accumulate');
    // No rows: zero parameter gradients.
    const empty = linearBackward(Tensor.zeros([0, inF], 'f32', cpu()), w, Tensor.zeros([0, outF], 'f32', cpu()), { bias: true });
    expect(f32(empty.dWeight!)).toEqual(new Float32Array(outF * inF));
    expect(f32(empty.dBias!)).toEqual(new Float32Array(outF));
    expect(() => linearBackward(x, w, Tensor.zeros([b, s, outF + 1], 'f32', cpu()))).toThrow(ShapeMismatchError);
    expect(() => linearBackward(x, tensorF32(ws, [inF, outF]), dy)).toThrow(/in_features/);
    expect(() => linearBackward(x, w, dy, { accumulate: true })).toThrow(InvalidArgumentError);
  });
});
