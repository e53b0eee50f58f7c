/**
 * SGMV / BGMV (Punica's LoRA kernels) against a float64 TS loop and the scalar C++ reference.
 *
 * Tolerance: every fast path (each ISA) and the reference must be within a normwise relative error of 1e-5 of the
 * float64 result: ||got - want||_2 <= 1e-5 * ||want||_2 over the whole output (y prefilled with random values, so a
 * wrong or missing row shows as an O(1) error). Beyond that, the fast paths must be bitwise deterministic: the same
 * bits on 1 and 2 threads and on repeated calls, and BGMV must equal SGMV over the same rows bit for bit.
 */
import { describe, expect, it } from 'vitest';
import {
  bgmvExpand,
  bgmvShrink,
  DisposedTensorError,
  DTypeMismatchError,
  DeviceMismatchError,
  InvalidArgumentError,
  type NativeTensor,
  sgmvExpand,
  sgmvShrink,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, f32, forEachIsa, randomFloats, randomInts, rng, tensorF32, withThreads } from './helpers.js';

const L = 3; // layers per weight tensor
const TOL = 1e-5;

// ---------------------------------------------------------------- data

interface Adapter {
  r: number;
  a: Float32Array; // shrink weight [L, r, hIn]
  b: Float32Array; // expand weight [L, r, hOut]
  aT: Tensor;
  bT: Tensor;
}

function makeAdapter(r: number, hIn: number, hOut: number, seed: number): Adapter {
  const a = randomFloats(L * r * hIn, seed);
  const b = randomFloats(L * r * hOut, seed + 1);
  return { r, a, b, aT: tensorF32(a, [L, r, hIn]), bT: tensorF32(b, [L, r, hOut]) };
}

/** Per row: the weight (and its rank) that applies, or null. */
type RowWeight = { w: Float32Array; r: number; scale: number } | null;

/** y0 + the shrink contribution, in float64: y[row, 0:r] += x[row] · W[layer]ᵀ. */
function shrinkF64(y0: Float32Array, x: Float32Array, hIn: number, rMax: number, perRow: RowWeight[], layer: number): Float64Array {
  const y = Float64Array.from(y0);
  perRow.forEach((rw, row) => {
    if (!rw) return;
    const base = layer * rw.r * hIn;
    for (let k = 0; k < rw.r; k++) {
      let s = 0;
      for (let e = 0; e < hIn; e++) s += x[row * hIn + e]! * rw.w[base + k * hIn + e]!;
      y[row * rMax + k]! += s;
    }
  });
  return y;
}

/** y0 + the expand contribution, in float64: y[row, :] += scale · v[row, 0:r] · W[layer]. */
function expandF64(y0: Float32Array, v: Float32Array, hOut: number, rMax: number, perRow: RowWeight[], layer: number): Float64Array {
  const y = Float64Array.from(y0);
  perRow.forEach((rw, row) => {
    if (!rw) return;
    const base = layer * rw.r * hOut;
    for (let c = 0; c < hOut; c++) {
      let s = 0;
      for (let k = 0; k < rw.r; k++) s += v[row * rMax + k]! * rw.w[base + k * hOut + c]!;
      y[row * hOut + c]! += rw.scale * s;
    }
  });
  return y;
}

function expectNormwise(got: Float32Array, want: Float64Array, label: string, tol = TOL): void {
  expect(got.length, `${label} length`).toBe(want.length);
  let num = 0;
  let den = 0;
  for (let i = 0; i < want.length; i++) {
    const d = got[i]! - want[i]!;
    num += d * d;
    den += want[i]! * want[i]!;
  }
  const err = Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
  if (!(err <= tol)) expect.fail(`${label}: normwise relative error ${err} > ${tol}`);
}

const i32 = (values: ArrayLike<number>): Tensor => Tensor.from(Int32Array.from(values), [values.length], { dtype: 'i32', backend: cpu() });

function indptrOf(lengths: readonly number[]): number[] {
  const p = [0];
  for (const n of lengths) p.push(p[p.length - 1]! + n);
  return p;
}

type Pattern = 'distinct' | 'identical' | 'skewed' | 'ragged';

/** Segment lengths summing to bs for a popularity pattern; 'ragged' has random lengths with empty segments mixed in. */
function segmentLengths(pattern: Pattern, bs: number, seed: number): number[] {
  if (pattern === 'distinct') return Array.from({ length: bs }, () => 1);
  if (pattern === 'identical') return [bs];
  if (pattern === 'skewed') return bs > 1 ? [1, bs - 1] : [1];
  const r = rng(seed);
  const lengths: number[] = [0];
  let left = bs;
  while (left > 0) {
    const n = Math.min(left, 1 + Math.floor(r() * Math.max(1, bs / 3)));
    lengths.push(n);
    if (r() < 0.3) lengths.push(0);
    left -= n;
  }
  return lengths;
}

// ---------------------------------------------------------------- ragged shapes

interface Case {
  label: string;
  rows: number;
  hIn: number;
  hOut: number;
  rMax: number;
  layer: number;
  indptr: number[];
  segAdapter: (number | null)[]; // adapter per segment (repeats allowed), null = no weight
  scales: number[];
}

function makeCase(pattern: Pattern, bs: number, hIn: number, hOut: number, adapters: Adapter[], seed: number): Case {
  const lengths = segmentLengths(pattern, bs, seed);
  const r = rng(seed + 7);
  const segAdapter = lengths.map((_, i) => (i % 5 === 3 ? null : Math.floor(r() * adapters.length)));
  const rMax = Math.max(...adapters.map((a) => a.r)) + (seed % 2); // sometimes wider than every rank
  return {
    label: `${pattern} bs=${bs} hIn=${hIn} hOut=${hOut}`,
    rows: bs,
    hIn,
    hOut,
    rMax,
    layer: seed % L,
    indptr: indptrOf(lengths),
    segAdapter,
    scales: lengths.map(() => 0.25 + 2 * r()),
  };
}

function perRowOf(c: Case, adapters: Adapter[], which: 'a' | 'b', withScales: boolean): RowWeight[] {
  const out: RowWeight[] = new Array<RowWeight>(c.rows).fill(null);
  c.segAdapter.forEach((ai, s) => {
    if (ai === null) return;
    const ad = adapters[ai]!;
    for (let row = c.indptr[s]!; row < c.indptr[s + 1]!; row++) out[row] = { w: ad[which], r: ad.r, scale: withScales ? c.scales[s]! : 1 };
  });
  return out;
}

function runShrink(c: Case, adapters: Adapter[], x: Tensor, y0: Float32Array, reference: boolean): Float32Array {
  const y = tensorF32(y0, [c.rows, c.rMax]);
  const weights = c.segAdapter.map((ai) => (ai === null ? null : adapters[ai]!.aT));
  sgmvShrink(y, x, weights, i32(c.indptr), c.layer, { reference });
  return f32(y);
}

function runExpand(c: Case, adapters: Adapter[], v: Tensor, y0: Float32Array, reference: boolean): Float32Array {
  const y = tensorF32(y0, [c.rows, c.hOut]);
  const weights = c.segAdapter.map((ai) => (ai === null ? null : adapters[ai]!.bT));
  sgmvExpand(y, v, weights, i32(c.indptr), c.layer, { reference, scales: c.scales });
  return f32(y);
}

describe('sgmvShrink / sgmvExpand on ragged shapes', () => {
  // Mixed ranks in one call; 300 = one full K-chunk of 256 and a ragged one.
  const sizes = [
    { hIn: 64, hOut: 48 },
    { hIn: 300, hOut: 130 },
  ];
  const batches = [1, 2, 3, 7, 16, 64, 133];
  const patterns: Pattern[] = ['distinct', 'identical', 'skewed', 'ragged'];

  it('match float64 (normwise 1e-5) on every ISA and the reference, for every pattern and batch size', () => {
    let seed = 1;
    for (const { hIn, hOut } of sizes) {
      const adapters = [8, 16, 32, 64, 16].map((r, i) => makeAdapter(r, hIn, hOut, 1000 + 10 * i + hIn));
      for (const bs of batches) {
        for (const pattern of patterns) {
          const c = makeCase(pattern, bs, hIn, hOut, adapters, seed++);
          const xData = randomFloats(bs * hIn, seed++);
          const vData = randomFloats(bs * c.rMax, seed++);
          const yShrink0 = randomFloats(bs * c.rMax, seed++);
          const yExpand0 = randomFloats(bs * hOut, seed++);
          const x = tensorF32(xData, [bs, hIn]);
          const v = tensorF32(vData, [bs, c.rMax]);
          const wantShrink = shrinkF64(yShrink0, xData, hIn, c.rMax, perRowOf(c, adapters, 'a', false), c.layer);
          const wantExpand = expandF64(yExpand0, vData, hOut, c.rMax, perRowOf(c, adapters, 'b', true), c.layer);
          expectNormwise(runShrink(c, adapters, x, yShrink0, true), wantShrink, `${c.label} shrink reference`);
          expectNormwise(runExpand(c, adapters, v, yExpand0, true), wantExpand, `${c.label} expand reference`);
          forEachIsa((isa) => {
            scrambleShrinkScratch();
            expectNormwise(runShrink(c, adapters, x, yShrink0, false), wantShrink, `${c.label} shrink ${isa}`);
            expectNormwise(runExpand(c, adapters, v, yExpand0, false), wantExpand, `${c.label} expand ${isa}`);
          });
        }
      }
    }
  });

  it('handle decode-size distinct batches at h = 4096 (several K-chunks, long W rows)', () => {
    const h = 4096;
    const adapters = [16, 8].map((r, i) => makeAdapter(r, h, h, 77 + i));
    const c = makeCase('distinct', 4, h, h, adapters, 12);
    const xData = randomFloats(4 * h, 5);
    const vData = randomFloats(4 * c.rMax, 6);
    const y0s = randomFloats(4 * c.rMax, 7);
    const y0e = randomFloats(4 * h, 8);
    const wantShrink = shrinkF64(y0s, xData, h, c.rMax, perRowOf(c, adapters, 'a', false), c.layer);
    const wantExpand = expandF64(y0e, vData, h, c.rMax, perRowOf(c, adapters, 'b', true), c.layer);
    forEachIsa((isa) => {
      expectNormwise(runShrink(c, adapters, tensorF32(xData, [4, h]), y0s, false), wantShrink, `shrink h=4096 ${isa}`);
      expectNormwise(runExpand(c, adapters, tensorF32(vData, [4, c.rMax]), y0e, false), wantExpand, `expand h=4096 ${isa}`);
    });
  });

  it('a single segment is a plain GEMM against the chosen layer slice (other layers are NaN and never read)', () => {
    const [hIn, hOut, r, rows, layer] = [40, 36, 8, 9, 1];
    const a = new Float32Array(L * r * hIn).fill(Number.NaN);
    const b = new Float32Array(L * r * hOut).fill(Number.NaN);
    a.set(randomFloats(r * hIn, 1), layer * r * hIn);
    b.set(randomFloats(r * hOut, 2), layer * r * hOut);
    const x = randomFloats(rows * hIn, 3);
    const v = randomFloats(rows * r, 4);
    const perA: RowWeight[] = new Array<RowWeight>(rows).fill({ w: a, r, scale: 1 });
    const perB: RowWeight[] = new Array<RowWeight>(rows).fill({ w: b, r, scale: 1 });
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const ys = Tensor.zeros([rows, r], 'f32', cpu());
        sgmvShrink(ys, tensorF32(x, [rows, hIn]), [tensorF32(a, [L, r, hIn])], i32([0, rows]), layer, { reference });
        expectNormwise(f32(ys), shrinkF64(new Float32Array(rows * r), x, hIn, r, perA, layer), `shrink ${isa} ref=${reference}`);
        const ye = Tensor.zeros([rows, hOut], 'f32', cpu());
        sgmvExpand(ye, tensorF32(v, [rows, r]), [tensorF32(b, [L, r, hOut])], i32([0, rows]), layer, { reference });
        expectNormwise(f32(ye), expandF64(new Float32Array(rows * hOut), v, hOut, r, perB, layer), `expand ${isa} ref=${reference}`);
      }
    });
  });
});

// ---------------------------------------------------------------- blocked GEMM path (many-row segments)

/**
 * The fast shrink keeps its partials in a scratch buffer that lives across calls: fills it with unrelated values
 * (a 64-row, rank-64 shrink over 8 K-chunks: 32K partials), so a partial a kernel fails to write shows up as a wrong
 * result instead of silently reusing what an earlier call (another ISA on the same shapes) left there.
 */
let scrambleArgs: { y: Tensor; x: Tensor; w: Tensor; indptr: Tensor } | null = null;
function scrambleShrinkScratch(): void {
  scrambleArgs ??= {
    y: Tensor.zeros([64, 64], 'f32', cpu()),
    x: tensorF32(randomFloats(64 * 2048, 99), [64, 2048]),
    w: tensorF32(randomFloats(64 * 2048, 98), [1, 64, 2048]),
    indptr: i32([0, 64]),
  };
  const { y, x, w, indptr } = scrambleArgs;
  sgmvShrink(y, x, [w], indptr, 0);
}

describe('sgmv blocked GEMM path (segments of many rows) against the reference', () => {
  // Segments of 0, 1 and 3 rows take the row path; 17, 64 and more rows the register-blocked GEMM path, with every
  // remainder of the row blocking (17 and 64 leave different numbers of rows after full blocks on each ISA) and
  // ranks that are not multiples of the W-row blocking. h = 1100 has a ragged last K-chunk and column vector.
  const lengths = [0, 1, 3, 17, 0, 64, 5, 33, 2, 70];
  const ranks = [16, 13, 6, 32, 1];

  function caseOf(hIn: number, hOut: number, seed: number) {
    const adapters = ranks.map((r, i) => makeAdapter(r, hIn, hOut, seed + 10 * i));
    const rows = lengths.reduce((p, q) => p + q, 0);
    const segAdapter = lengths.map((_, i) => (i === 6 ? null : i % adapters.length));
    const c: Case = {
      label: `gemm-path hIn=${hIn} hOut=${hOut}`,
      rows,
      hIn,
      hOut,
      rMax: 33,
      layer: seed % L,
      indptr: indptrOf(lengths),
      segAdapter,
      scales: lengths.map((_, i) => 0.5 + 0.25 * i),
    };
    return { adapters, c };
  }

  it('fast paths match the scalar reference and float64 on ragged segments (0, 1, 3, 17, 64 rows ...), every ISA, 1 and 2 threads', () => {
    let seed = 4000;
    for (const [hIn, hOut] of [
      [1100, 1100],
      [256, 72],
      [40, 520],
    ] as const) {
      const { adapters, c } = caseOf(hIn, hOut, seed);
      const xData = randomFloats(c.rows * hIn, seed++);
      const vData = randomFloats(c.rows * c.rMax, seed++);
      const y0s = randomFloats(c.rows * c.rMax, seed++);
      const y0e = randomFloats(c.rows * hOut, seed++);
      const x = tensorF32(xData, [c.rows, hIn]);
      const v = tensorF32(vData, [c.rows, c.rMax]);
      const wantShrink = shrinkF64(y0s, xData, hIn, c.rMax, perRowOf(c, adapters, 'a', false), c.layer);
      const wantExpand = expandF64(y0e, vData, hOut, c.rMax, perRowOf(c, adapters, 'b', true), c.layer);
      const refShrink = runShrink(c, adapters, x, y0s, true);
      const refExpand = runExpand(c, adapters, v, y0e, true);
      expectNormwise(refShrink, wantShrink, `${c.label} shrink reference`);
      expectNormwise(refExpand, wantExpand, `${c.label} expand reference`);
      forEachIsa((isa) => {
        const fast = (): [Float32Array, Float32Array] => {
          scrambleShrinkScratch();
          return [runShrink(c, adapters, x, y0s, false), runExpand(c, adapters, v, y0e, false)];
        };
        const [s1, e1] = withThreads(1, fast);
        const [s2, e2] = withThreads(2, fast);
        expectNormwise(s2, wantShrink, `${c.label} shrink ${isa}`);
        expectNormwise(e2, wantExpand, `${c.label} expand ${isa}`);
        // Fast against the scalar reference directly (both are close to float64, so to each other).
        expectNormwise(s2, Float64Array.from(refShrink), `${c.label} shrink ${isa} vs reference`, 2 * TOL);
        expectNormwise(e2, Float64Array.from(refExpand), `${c.label} expand ${isa} vs reference`, 2 * TOL);
        expectBitwiseEqual(s1, s2, `${c.label} shrink ${isa} 1 vs 2 threads`);
        expectBitwiseEqual(e1, e2, `${c.label} expand ${isa} 1 vs 2 threads`);
        // Columns past a segment's rank and rows without a weight keep their bits.
        for (let s = 0; s < lengths.length; s++) {
          const ai = c.segAdapter[s];
          const r = ai === null || ai === undefined ? 0 : adapters[ai]!.r;
          for (let row = c.indptr[s]!; row < c.indptr[s + 1]!; row++) {
            const from = row * c.rMax;
            expectBitwiseEqual(s2.subarray(from + r, from + c.rMax), y0s.subarray(from + r, from + c.rMax), `${c.label} ${isa} row ${row} past rank ${r}`);
            if (r === 0) expectBitwiseEqual(e2.subarray(row * hOut, (row + 1) * hOut), y0e.subarray(row * hOut, (row + 1) * hOut), `${c.label} ${isa} row ${row} no weight`);
          }
        }
      });
    }
  });

  it('a row gives the same bits in a segment of 1, 3, 17 or 64 rows (row path and GEMM path agree), every ISA', () => {
    const h = 1100;
    for (const r of [16, 13]) {
      const w = makeAdapter(r, h, h, 4100 + r);
      const rows = 64;
      const xData = randomFloats(rows * h, 1);
      const vData = randomFloats(rows * r, 2);
      const y0s = randomFloats(rows * r, 3);
      const y0e = randomFloats(rows * h, 4);
      const run = (sizes: number[]): [Float32Array, Float32Array] => {
        const indptr = indptrOf(sizes);
        scrambleShrinkScratch();
        const ys = tensorF32(y0s, [rows, r]);
        sgmvShrink(ys, tensorF32(xData, [rows, h]), sizes.map(() => w.aT), i32(indptr), 2);
        const ye = tensorF32(y0e, [rows, h]);
        sgmvExpand(ye, tensorF32(vData, [rows, r]), sizes.map(() => w.bT), i32(indptr), 2, { scales: sizes.map(() => 1.5) });
        return [f32(ys), f32(ye)];
      };
      forEachIsa((isa) => {
        const [s1, e1] = run(Array.from({ length: rows }, () => 1));
        for (const sizes of [[64], [17, 17, 17, 13], [3, 61], [1, 2, 3, 17, 41]]) {
          const [s, e] = run(sizes);
          expectBitwiseEqual(s, s1, `r=${r} ${isa} shrink segments ${sizes.join(',')} vs one-row segments`);
          expectBitwiseEqual(e, e1, `r=${r} ${isa} expand segments ${sizes.join(',')} vs one-row segments`);
        }
      });
    }
  });

  it('empty shapes: h_in = 0, a weightless segment between empty ones and zero rows leave y as it was, every ISA', () => {
    const w = makeAdapter(16, 64, 64, 4200);
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const opts = { reference };
        const y0 = randomFloats(20 * 16, 1);
        const ys = tensorF32(y0, [20, 16]);
        sgmvShrink(ys, Tensor.zeros([20, 0], 'f32', cpu()), [Tensor.zeros([1, 16, 0], 'f32', cpu())], i32([0, 20]), 0, opts);
        expectBitwiseEqual(f32(ys), y0, `${isa} hIn = 0 ref=${reference}`);
        const ye0 = randomFloats(20 * 64, 2);
        const ye = tensorF32(ye0, [20, 64]);
        sgmvExpand(ye, tensorF32(randomFloats(20 * 16, 3), [20, 16]), [w.bT, null, w.bT], i32([0, 0, 20, 20]), 0, opts);
        expectBitwiseEqual(f32(ye), ye0, `${isa} weightless 20-row segment ref=${reference}`);
        const yz = Tensor.zeros([0, 16], 'f32', cpu());
        sgmvShrink(yz, Tensor.zeros([0, 64], 'f32', cpu()), [w.aT, w.aT], i32([0, 0, 0]), 0, opts);
        expect(yz.shape).toEqual([0, 16]);
        sgmvExpand(Tensor.zeros([0, 64], 'f32', cpu()), Tensor.zeros([0, 16], 'f32', cpu()), [w.bT], i32([0, 0]), 0, opts);
      }
    });
  });
});

// ---------------------------------------------------------------- semantics

describe('sgmv semantics', () => {
  const [hIn, hOut] = [70, 50];
  const adapters = [16, 8].map((r, i) => makeAdapter(r, hIn, hOut, 300 + i));

  it('accumulates: y keeps its prefill, and calling twice adds the contribution twice', () => {
    const rows = 6;
    const indptr = i32([0, 2, 2, 6]);
    const weightsA = [adapters[0]!.aT, null, adapters[1]!.aT];
    const weightsB = [adapters[0]!.bT, null, adapters[1]!.bT];
    const perA: RowWeight[] = [0, 0, 1, 1, 1, 1].map((i) => ({ w: adapters[i]!.a, r: adapters[i]!.r, scale: 1 }));
    const perB: RowWeight[] = [0, 0, 1, 1, 1, 1].map((i) => ({ w: adapters[i]!.b, r: adapters[i]!.r, scale: i === 0 ? 0.5 : -3 }));
    const x = randomFloats(rows * hIn, 1);
    const v = randomFloats(rows * 16, 2);
    const y0s = randomFloats(rows * 16, 3);
    const y0e = randomFloats(rows * hOut, 4);
    const once = shrinkF64(y0s, x, hIn, 16, perA, 2);
    const twice = shrinkF64(Float32Array.from(once), x, hIn, 16, perA, 2);
    const onceE = expandF64(y0e, v, hOut, 16, perB, 2);
    const twiceE = expandF64(Float32Array.from(onceE), v, hOut, 16, perB, 2);
    for (const reference of [false, true]) {
      const ys = tensorF32(y0s, [rows, 16]);
      sgmvShrink(ys, tensorF32(x, [rows, hIn]), weightsA, indptr, 2, { reference });
      expectNormwise(f32(ys), once, `shrink once ref=${reference}`);
      sgmvShrink(ys, tensorF32(x, [rows, hIn]), weightsA, indptr, 2, { reference });
      expectNormwise(f32(ys), twice, `shrink twice ref=${reference}`);
      const ye = tensorF32(y0e, [rows, hOut]);
      const opts = { reference, scales: [0.5, 7, -3] };
      sgmvExpand(ye, tensorF32(v, [rows, 16]), weightsB, indptr, 2, opts);
      expectNormwise(f32(ye), onceE, `expand once ref=${reference}`);
      sgmvExpand(ye, tensorF32(v, [rows, 16]), weightsB, indptr, 2, opts);
      expectNormwise(f32(ye), twiceE, `expand twice ref=${reference}`);
    }
  });

  it('rows of null weights, -1 indices and columns past a segment\'s rank keep their exact bits', () => {
    const rows = 5;
    const y0s = randomFloats(rows * 20, 9); // rMax 20 > both ranks
    const x = tensorF32(randomFloats(rows * hIn, 10), [rows, hIn]);
    for (const reference of [false, true]) {
      const ys = tensorF32(y0s, [rows, 20]);
      sgmvShrink(ys, x, [null, adapters[1]!.aT, null], i32([0, 2, 3, 5]), 0, { reference });
      const got = f32(ys);
      for (let row = 0; row < rows; row++) {
        const from = row === 2 ? 8 : 0; // row 2 has the rank-8 adapter: columns 8..19 untouched
        expectBitwiseEqual(got.subarray(row * 20 + from, row * 20 + 20), y0s.subarray(row * 20 + from, row * 20 + 20), `row ${row} ref=${reference}`);
      }
      const yb = tensorF32(y0s, [rows, 20]);
      bgmvShrink(yb, x, [adapters[0]!.aT, null], i32([-1, 1, -1, 0, -1]), 1, { reference });
      const gotB = f32(yb);
      for (const row of [0, 1, 2, 4]) expectBitwiseEqual(gotB.subarray(row * 20, row * 20 + 20), y0s.subarray(row * 20, row * 20 + 20), `bgmv row ${row}`);
    }
  });

  it('zero rows, zero segments, only empty segments, all-null weights and zero-width outputs are no-ops', () => {
    for (const reference of [false, true]) {
      const opts = { reference };
      sgmvShrink(Tensor.zeros([0, 16], 'f32', cpu()), Tensor.zeros([0, hIn], 'f32', cpu()), [], i32([0]), 0, opts);
      sgmvShrink(Tensor.zeros([0, 16], 'f32', cpu()), Tensor.zeros([0, hIn], 'f32', cpu()), [adapters[0]!.aT, null], i32([0, 0, 0]), 1, opts);
      sgmvExpand(Tensor.zeros([0, hOut], 'f32', cpu()), Tensor.zeros([0, 16], 'f32', cpu()), [adapters[0]!.bT], i32([0, 0]), 0, opts);
      bgmvShrink(Tensor.zeros([0, 16], 'f32', cpu()), Tensor.zeros([0, hIn], 'f32', cpu()), [adapters[0]!.aT], i32([]), 0, opts);
      bgmvExpand(Tensor.zeros([0, hOut], 'f32', cpu()), Tensor.zeros([0, 16], 'f32', cpu()), [], i32([]), 0, opts);
      const y0 = randomFloats(3 * hOut, 1);
      const y = tensorF32(y0, [3, hOut]);
      sgmvExpand(y, tensorF32(randomFloats(48, 2), [3, 16]), [null, null], i32([0, 1, 3]), 0, opts);
      bgmvExpand(y, tensorF32(randomFloats(48, 2), [3, 16]), [adapters[0]!.bT], i32([-1, -1, -1]), 0, opts);
      expectBitwiseEqual(f32(y), y0, `untouched ref=${reference}`);
      // hOut = 0 and rank-0 weights.
      sgmvExpand(Tensor.zeros([2, 0], 'f32', cpu()), Tensor.zeros([2, 4], 'f32', cpu()), [Tensor.zeros([1, 4, 0], 'f32', cpu())], i32([0, 2]), 0, opts);
      const ys = tensorF32(y0.subarray(0, 8), [2, 4]);
      sgmvShrink(ys, Tensor.zeros([2, 5], 'f32', cpu()), [Tensor.zeros([1, 0, 5], 'f32', cpu())], i32([0, 2]), 0, opts);
      expectBitwiseEqual(f32(ys), y0.subarray(0, 8), `rank 0 ref=${reference}`);
    }
  });

  it('the same weight may serve several segments, each with its own scale', () => {
    const rows = 7;
    const v = randomFloats(rows * 16, 20);
    const y0 = randomFloats(rows * hOut, 21);
    const w = adapters[0]!;
    const scales = [1, 2, 0.5];
    const per: RowWeight[] = [0, 0, 0, 1, 1, 2, 2].map((s) => ({ w: w.b, r: w.r, scale: scales[s]! }));
    const want = expandF64(y0, v, hOut, 16, per, 1);
    for (const reference of [false, true]) {
      const y = tensorF32(y0, [rows, hOut]);
      sgmvExpand(y, tensorF32(v, [rows, 16]), [w.bT, w.bT, w.bT], i32([0, 3, 5, 7]), 1, { reference, scales });
      expectNormwise(f32(y), want, `repeated weight ref=${reference}`);
    }
  });
});

// ---------------------------------------------------------------- determinism, BGMV == SGMV

describe('sgmv determinism', () => {
  it('is bitwise identical on 1 and 2 threads and on repeated calls (split-K shrink, tiled expand)', () => {
    // Few large groups force the shrink to split K over tasks (partials reduced in chunk order) and the expand to
    // split columns; many small groups exercise the other end.
    const h = 2304; // 9 chunks
    // Rank 3 at h = 2304 is a small adapter slice (27 KB): groups of up to 3 rows of it run whole, in runs of
    // consecutive groups, which a larger group breaks.
    const adapters = [16, 64, 8, 3].map((r, i) => makeAdapter(r, h, h, 500 + i));
    for (const [label, indptr, segAdapter] of [
      ['one group', [0, 40], [1]],
      ['skewed', [0, 1, 40], [0, 2]],
      ['distinct', Array.from({ length: 41 }, (_, i) => i), Array.from({ length: 40 }, (_, i) => i % 3)],
      ['distinct small adapters', Array.from({ length: 41 }, (_, i) => i), Array.from({ length: 40 }, () => 3)],
      // Groups of 1, 2, 0 and 3 rows of the small adapter, a 6-row group of a large one, then 27 one-row groups.
      ['small adapters broken up', [0, 1, 3, 3, 6, 12, 13, ...Array.from({ length: 27 }, (_, i) => 14 + i)], [3, 3, 3, 3, 0, 3, ...Array.from({ length: 27 }, (_, i) => (i % 7 === 0 ? 2 : 3))]],
    ] as const) {
      const rows = 40;
      const x = tensorF32(randomFloats(rows * h, 1), [rows, h]);
      const v = tensorF32(randomFloats(rows * 64, 2), [rows, 64]);
      const y0s = randomFloats(rows * 64, 3);
      const y0e = randomFloats(rows * h, 4);
      const run = (): [Float32Array, Float32Array] => {
        const ys = tensorF32(y0s, [rows, 64]);
        sgmvShrink(ys, x, segAdapter.map((i) => adapters[i]!.aT), i32(indptr), 2);
        const ye = tensorF32(y0e, [rows, h]);
        sgmvExpand(ye, v, segAdapter.map((i) => adapters[i]!.bT), i32(indptr), 2, { scales: segAdapter.map((i) => 1 + i) });
        return [f32(ys), f32(ye)];
      };
      forEachIsa((isa) => {
        const [s1, e1] = withThreads(1, run);
        const [s2, e2] = withThreads(2, run);
        const [s3, e3] = withThreads(2, run);
        expectBitwiseEqual(s1, s2, `${label} ${isa} shrink threads`);
        expectBitwiseEqual(e1, e2, `${label} ${isa} expand threads`);
        expectBitwiseEqual(s2, s3, `${label} ${isa} shrink repeat`);
        expectBitwiseEqual(e2, e3, `${label} ${isa} expand repeat`);
      });
    }
  });

  it('a row\'s result does not depend on the rest of the batch: alone, in a distinct batch or in a big group, bit for bit', () => {
    // The task partition differs completely between these calls (a lone group is split over K-chunks and columns,
    // 24 one-row groups are not, a 24-row group runs the multi-row blocks); the per-row arithmetic must not.
    // Rank 3 makes each one-row group a small slice (13 KB), which runs whole in runs of groups.
    const h = 1100; // 4 full chunks and a ragged one
    const rows = 24;
    const xData = randomFloats(rows * h, 1);
    const y0e = randomFloats(rows * h, 4);
    for (const R of [16, 3]) {
      const w = makeAdapter(R, h, h, 900 + R);
      const vData = randomFloats(rows * R, 2);
      const y0s = randomFloats(rows * R, 3);
      forEachIsa((isa) => {
        const run = (indptr: number[], from: number, n: number): [Float32Array, Float32Array] => {
          const ys = tensorF32(y0s.slice(from * R, (from + n) * R), [n, R]);
          sgmvShrink(ys, tensorF32(xData.slice(from * h, (from + n) * h), [n, h]), indptr.slice(1).map(() => w.aT), i32(indptr), 1);
          const ye = tensorF32(y0e.slice(from * h, (from + n) * h), [n, h]);
          sgmvExpand(ye, tensorF32(vData.slice(from * R, (from + n) * R), [n, R]), indptr.slice(1).map(() => w.bT), i32(indptr), 1, { scales: indptr.slice(1).map(() => 0.75) });
          return [f32(ys), f32(ye)];
        };
        const [sd, ed] = run(Array.from({ length: rows + 1 }, (_, i) => i), 0, rows); // distinct: 24 one-row groups
        const [sg, eg] = run([0, rows], 0, rows); // one 24-row group
        for (const row of [0, 5, 23]) {
          const [s1, e1] = run([0, 1], row, 1);
          expectBitwiseEqual(s1, sd.subarray(row * R, (row + 1) * R), `${isa} rank ${R} shrink row ${row} alone vs distinct`);
          expectBitwiseEqual(e1, ed.subarray(row * h, (row + 1) * h), `${isa} rank ${R} expand row ${row} alone vs distinct`);
        }
        expectBitwiseEqual(sg, sd, `${isa} rank ${R} shrink one group vs distinct`);
        expectBitwiseEqual(eg, ed, `${isa} rank ${R} expand one group vs distinct`);
      });
    }
  });

  it('BGMV equals SGMV after sorting the rows by adapter, bit for bit (fast paths and reference)', () => {
    const [hIn, hOut, rows, rMax] = [520, 96, 53, 32];
    const adapters = [8, 32, 16, 16].map((r, i) => makeAdapter(r, hIn, hOut, 700 + i));
    const weightsA = [adapters[0]!.aT, adapters[1]!.aT, null, adapters[2]!.aT, adapters[3]!.aT];
    const weightsB = [adapters[0]!.bT, adapters[1]!.bT, null, adapters[2]!.bT, adapters[3]!.bT];
    const scales = [0.5, 2, 3, -1, 1.25];
    const rowIndex = randomInts(rows, 3, -1, weightsA.length);
    const xData = randomFloats(rows * hIn, 4);
    const vData = randomFloats(rows * rMax, 5);
    const y0s = randomFloats(rows * rMax, 6);
    const y0e = randomFloats(rows * hOut, 7);
    // Sort rows by adapter (stable), -1 first; SGMV segments follow, with segment s using weight s - 1 (s = 0: none).
    const order = Array.from({ length: rows }, (_, i) => i).sort((p, q) => rowIndex[p]! - rowIndex[q]! || p - q);
    const lengths = new Array<number>(weightsA.length + 1).fill(0);
    for (const j of rowIndex) lengths[j + 1]!++;
    const permute = (data: Float32Array, width: number): Float32Array => {
      const out = new Float32Array(data.length);
      order.forEach((src, dst) => out.set(data.subarray(src * width, (src + 1) * width), dst * width));
      return out;
    };
    const indptr = i32(indptrOf(lengths));
    forEachIsa((isa) => {
      for (const reference of [false, true]) {
        const yb = tensorF32(y0s, [rows, rMax]);
        bgmvShrink(yb, tensorF32(xData, [rows, hIn]), weightsA, i32(rowIndex), 1, { reference });
        const ys = tensorF32(permute(y0s, rMax), [rows, rMax]);
        sgmvShrink(ys, tensorF32(permute(xData, hIn), [rows, hIn]), [null, ...weightsA], indptr, 1, { reference });
        expectBitwiseEqual(permute(f32(yb), rMax), f32(ys), `shrink ${isa} ref=${reference}`);

        const ybe = tensorF32(y0e, [rows, hOut]);
        bgmvExpand(ybe, tensorF32(vData, [rows, rMax]), weightsB, i32(rowIndex), 1, { reference, scales });
        const yse = tensorF32(permute(y0e, hOut), [rows, hOut]);
        sgmvExpand(yse, tensorF32(permute(vData, rMax), [rows, rMax]), [null, ...weightsB], indptr, 1, { reference, scales: [1, ...scales] });
        expectBitwiseEqual(permute(f32(ybe), hOut), f32(yse), `expand ${isa} ref=${reference}`);
      }
    });
    // And BGMV against float64 directly.
    const perA: RowWeight[] = Array.from(rowIndex, (j) => (j < 0 || j === 2 ? null : { w: adapters[j > 2 ? j - 1 : j]!.a, r: adapters[j > 2 ? j - 1 : j]!.r, scale: 1 }));
    const perB: RowWeight[] = Array.from(rowIndex, (j) => (j < 0 || j === 2 ? null : { w: adapters[j > 2 ? j - 1 : j]!.b, r: adapters[j > 2 ? j - 1 : j]!.r, scale: scales[j]! }));
    const yb = tensorF32(y0s, [rows, rMax]);
    bgmvShrink(yb, tensorF32(xData, [rows, hIn]), weightsA, i32(rowIndex), 1);
    expectNormwise(f32(yb), shrinkF64(y0s, xData, hIn, rMax, perA, 1), 'bgmv shrink vs f64');
    const ybe = tensorF32(y0e, [rows, hOut]);
    bgmvExpand(ybe, tensorF32(vData, [rows, rMax]), weightsB, i32(rowIndex), 1, { scales });
    expectNormwise(f32(ybe), expandF64(y0e, vData, hOut, rMax, perB, 1), 'bgmv expand vs f64');
  });
});

// ---------------------------------------------------------------- validation

describe('sgmv validation', () => {
  const [rows, hIn, hOut, rMax] = [4, 12, 10, 8];
  const x = (): Tensor => Tensor.zeros([rows, hIn], 'f32', cpu());
  const ys = (): Tensor => Tensor.zeros([rows, rMax], 'f32', cpu());
  const ye = (): Tensor => Tensor.zeros([rows, hOut], 'f32', cpu());
  const v = (): Tensor => Tensor.zeros([rows, rMax], 'f32', cpu());
  const a = (r = 4, h = hIn, layers = 2): Tensor => Tensor.zeros([layers, r, h], 'f32', cpu());
  const b = (r = 4, h = hOut, layers = 2): Tensor => Tensor.zeros([layers, r, h], 'f32', cpu());
  const indptr = (): Tensor => i32([0, 1, 4]);
  const b0 = cpu().binding;
  const nat = (ws: (Tensor | null)[]): (NativeTensor | null)[] => ws.map((w) => w?.native ?? null);

  /** Expects the TS wrapper to throw `cls` matching `message`, and the raw binding (no TS checks) to match it too. */
  function rejects(ts: () => void, native: (() => void) | null, cls: new (...args: never[]) => Error, message: RegExp): void {
    expect(ts).toThrow(cls);
    expect(ts).toThrow(message);
    if (native) expect(native).toThrow(message);
  }

  it('rejects bad dtypes', () => {
    const xi = Tensor.zeros([rows, hIn], 'i32', cpu());
    rejects(() => sgmvShrink(ys(), xi, [a(), a()], indptr(), 0), () => b0.sgmvShrink(ys().native, xi.native, nat([a(), a()]), indptr().native, { layer: 0 }), DTypeMismatchError, /sgmvShrink: x \[4, 12\] must be f32, got i32/);
    const wh = Tensor.zeros([2, 4, hIn], 'bf16', cpu());
    rejects(() => sgmvShrink(ys(), x(), [a(), wh], indptr(), 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), wh]), indptr().native, { layer: 0 }), DTypeMismatchError, /weights\[1\] \(segment 1\) \[2, 4, 12\] must be f32, got bf16/);
    const pf = Tensor.zeros([3], 'f32', cpu());
    rejects(() => sgmvShrink(ys(), x(), [a(), a()], pf, 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a()]), pf.native, { layer: 0 }), DTypeMismatchError, /indptr \[3\] must be i32, got f32/);
    rejects(() => bgmvExpand(Tensor.zeros([rows, hOut], 'f16', cpu()), v(), [b()], i32([0, 0, 0, 0]), 0), null, DTypeMismatchError, /bgmvExpand: y \[4, 10\] must be f32, got f16/);
  });

  it('rejects shapes that do not fit, naming the argument and the segment', () => {
    rejects(() => sgmvShrink(ys(), Tensor.zeros([5, hIn], 'f32', cpu()), [a(), a()], indptr(), 0), () => b0.sgmvShrink(ys().native, Tensor.zeros([5, hIn], 'f32', cpu()).native, nat([a(), a()]), indptr().native, { layer: 0 }), ShapeMismatchError, /y \[4, 8\] and x \[5, 12\] must have the same number of rows/);
    rejects(() => sgmvShrink(ys(), x(), [a(), a(4, 13)], indptr(), 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a(4, 13)]), indptr().native, { layer: 0 }), ShapeMismatchError, /weights\[1\] \(segment 1\) \[2, 4, 13\] must be \[L, r, hIn\] with hIn = 12 \(from x \[4, 12\]\)/);
    rejects(() => sgmvExpand(ye(), v(), [b(4, 9), null], indptr(), 0), () => b0.sgmvExpand(ye().native, v().native, nat([b(4, 9), null]), indptr().native, { layer: 0 }), ShapeMismatchError, /weights\[0\] \(segment 0\) \[2, 4, 9\] must be \[L, r, hOut\] with hOut = 10 \(from y \[4, 10\]\)/);
    rejects(() => sgmvShrink(ys(), x(), [a(), a(9)], indptr(), 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a(9)]), indptr().native, { layer: 0 }), ShapeMismatchError, /weights\[1\] \(segment 1\) \[2, 9, 12\] has rank r = 9 > rMax = 8 \(the columns of y \[4, 8\]\)/);
    rejects(() => bgmvExpand(ye(), v(), [b(16)], i32([0, 0, 0, 0]), 0), () => b0.bgmvExpand(ye().native, v().native, nat([b(16)]), i32([0, 0, 0, 0]).native, { layer: 0 }), ShapeMismatchError, /bgmvExpand: weights\[0\] \[2, 16, 10\] has rank r = 16 > rMax = 8 \(the columns of v \[4, 8\]\)/);
    const flat = Tensor.zeros([4, hIn], 'f32', cpu());
    rejects(() => sgmvShrink(ys(), x(), [flat, null], indptr(), 0), () => b0.sgmvShrink(ys().native, x().native, nat([flat, null]), indptr().native, { layer: 0 }), ShapeMismatchError, /weights\[0\] \(segment 0\) \[4, 12\] must be \[L, r, hIn\]/);
    rejects(() => sgmvShrink(ys(), x(), [a(), a()], i32([0, 4]), 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a()]), i32([0, 4]).native, { layer: 0 }), ShapeMismatchError, /indptr \[2\] must have 3 entries \(weights.length \+ 1 = 2 \+ 1\)/);
    rejects(() => bgmvShrink(ys(), x(), [a()], i32([0, 0, 0]), 0), () => b0.bgmvShrink(ys().native, x().native, nat([a()]), i32([0, 0, 0]).native, { layer: 0 }), ShapeMismatchError, /rowIndex \[3\] must have 4 entries \(one per row of y \[4, 8\]\)/);
    rejects(() => sgmvShrink(Tensor.zeros([rows], 'f32', cpu()), x(), [], i32([0]), 0), null, ShapeMismatchError, /y must have rank 2, got \[4\]/);
  });

  it('rejects a bad layer, indptr, rowIndex and scales', () => {
    rejects(() => sgmvShrink(ys(), x(), [a(4, hIn, 3), a(4, hIn, 2)], indptr(), 2), () => b0.sgmvShrink(ys().native, x().native, nat([a(4, hIn, 3), a(4, hIn, 2)]), indptr().native, { layer: 2 }), InvalidArgumentError, /layer 2 is outside \[0, 2\) for weights\[1\] \(segment 1\) \[2, 4, 12\]/);
    for (const bad of [-1, 1.5, Number.NaN]) {
      rejects(() => sgmvShrink(ys(), x(), [a(), a()], indptr(), bad), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a()]), indptr().native, { layer: bad }), InvalidArgumentError, /layer must be an integer >= 0/);
    }
    const cases: [number[], RegExp][] = [
      [[1, 1, 4], /indptr\[0\] = 1 must be 0/],
      [[0, 3, 2], /indptr must be non-decreasing: indptr\[2\] = 2 < indptr\[1\] = 3 \(segment 1\)/],
      [[0, 1, 5], /indptr\[2\] = 5 must equal the 4 rows of y \[4, 8\]/],
      [[0, 1, 3], /indptr\[2\] = 3 must equal the 4 rows/],
    ];
    for (const [p, message] of cases) {
      rejects(() => sgmvShrink(ys(), x(), [a(), a()], i32(p), 0), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a()]), i32(p).native, { layer: 0 }), InvalidArgumentError, message);
    }
    for (const bad of [2, -2]) {
      const idx = i32([0, bad, -1, 1]);
      rejects(() => bgmvShrink(ys(), x(), [a(), null], idx, 0), () => b0.bgmvShrink(ys().native, x().native, nat([a(), null]), idx.native, { layer: 0 }), InvalidArgumentError, new RegExp(`rowIndex\\[1\\] = ${bad} is outside \\[-1, 2\\) \\(2 weights; -1 = no adapter\\)`));
    }
    rejects(() => sgmvExpand(ye(), v(), [b(), b()], indptr(), 0, { scales: [1] }), () => b0.sgmvExpand(ye().native, v().native, nat([b(), b()]), indptr().native, { layer: 0, scales: [1] }), InvalidArgumentError, /scales has 1 entries, want one per weight \(2\)/);
    rejects(() => sgmvExpand(ye(), v(), [b(), b()], indptr(), 0, { scales: [1, Number.POSITIVE_INFINITY] }), () => b0.sgmvExpand(ye().native, v().native, nat([b(), b()]), indptr().native, { layer: 0, scales: [1, Number.POSITIVE_INFINITY] }), InvalidArgumentError, /scales\[1\] must be a finite number/);
    rejects(() => sgmvShrink(ys(), x(), [a(), a()], indptr(), 0, { scales: [1, 1] } as never), () => b0.sgmvShrink(ys().native, x().native, nat([a(), a()]), indptr().native, { layer: 0, scales: [1, 1] } as never), InvalidArgumentError, /takes no scales/);
  });

  it('rejects y aliasing an input, non-tensor weights and tensors of another backend', () => {
    const sq = Tensor.zeros([rows, rMax], 'f32', cpu());
    rejects(() => sgmvExpand(sq, sq, [null], i32([0, 4]), 0), () => b0.sgmvExpand(sq.native, sq.native, [null], i32([0, 4]).native, { layer: 0 }), InvalidArgumentError, /sgmvExpand: y|overlaps/);
    // Overlapping views of one storage are caught natively.
    const big = Tensor.zeros([8, 8], 'f32', cpu());
    expect(() => sgmvExpand(big.rows(0, 4), big.rows(2, 4), [null], i32([0, 4]), 0)).toThrow(InvalidArgumentError);
    expect(() => sgmvExpand(big.rows(0, 4), big.rows(2, 4), [null], i32([0, 4]), 0)).toThrow(/y \[4, 8\] overlaps v \[4, 8\] in memory/);
    // y overlapping a weight.
    const wy = Tensor.zeros([1, 4, 8], 'f32', cpu());
    expect(() => sgmvShrink(wy.reshape([4, 8]), Tensor.zeros([4, 8], 'f32', cpu()), [wy], i32([0, 4]), 0)).toThrow(/sgmvShrink: y \[4, 8\] overlaps weights\[0\] \[1, 4, 8\] in memory/);
    expect(() => sgmvShrink(ys(), x(), [a(), 'w' as never], indptr(), 0)).toThrow(/weights\[1\] must be a Tensor or null/);
    expect(() => b0.sgmvShrink(ys().native, x().native, [a().native, 7 as never], indptr().native, { layer: 0 })).toThrow(/weights\[1\] must be a native tensor/);
    expect(() => b0.sgmvShrink(ys().native, x().native, 'nope' as never, indptr().native, { layer: 0 })).toThrow(/weights must be an array/);
    const disposed = a();
    disposed.dispose();
    expect(() => sgmvShrink(ys(), x(), [a(), disposed], indptr(), 0)).toThrow(DisposedTensorError);
    // A tensor of another backend: a stand-in backend object with a different binding.
    const other = new Tensor(a().native, { ...cpu(), binding: { ...cpu().binding } });
    expect(() => sgmvShrink(ys(), x(), [a(), other], indptr(), 0)).toThrow(DeviceMismatchError);
  });
});
