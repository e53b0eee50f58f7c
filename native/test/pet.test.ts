/**
 * PetS's PET operators (petSiteRun) against float64 loops written here and the native double reference.
 *
 * Tolerance against float64 (every ISA's fast path and the reference), per output:
 *   |got − want| ≤ 1e-5 · |want| + 1e-6 · mag
 * where mag is the sum of the magnitudes of everything that went into the output (|y0| plus Σ|terms| of each dot
 * product; for the adapter the up-projection's terms carry the error of h, Σ_k |up[c,k]| · (|h_k| + 1.2 · mag(pre_k)),
 * 1.2 bounding GELU's slope; for LayerNorm |gamma|·(|x̂| + 1) + |beta|). That is the forward-error form of an f32 sum
 * (n·2⁻²⁴·Σ|terms| in the worst case, ~√n·2⁻²⁴ in practice). Bias adds are one f32 rounding: compared exactly.
 * Beyond that: bitwise identical on 1 and 2 threads, for numStreams 1, 2 and 4, and whatever other ops share the call;
 * rows outside an op keep their exact bits.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  addonDirectory,
  type Backend,
  DeviceMismatchError,
  DisposedTensorError,
  DTypeMismatchError,
  getBackend,
  InvalidArgumentError,
  layerNorm,
  type NativeTensor,
  petOpCost,
  type PetOp,
  type PetRows,
  petSiteRun,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, f32, forEachIsa, randomFloats, rng, tensorF32, withThreads } from './helpers.js';

const RTOL = 1e-5;
const MTOL = 1e-6;

// ---------------------------------------------------------------- float64 oracles

function erf(x: number): number {
  const ax = Math.abs(x);
  let r: number;
  if (ax < 3) {
    // Maclaurin series: terms peak near e^(x²) < 1e4, so ~4 digits of 16 are lost at worst.
    let term = ax;
    let sum = ax;
    for (let n = 1; n < 200; n++) {
      term *= (-ax * ax) / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    r = (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    // erfc continued fraction (Laplace), evaluated backwards: converges fast for x >= 3.
    let f = ax;
    for (let k = 80; k >= 1; k--) f = ax + k / 2 / f;
    r = 1 - Math.exp(-ax * ax) / Math.sqrt(Math.PI) / f;
  }
  return x < 0 ? -r : r;
}

const geluErf = (x: number): number => 0.5 * x * (1 + erf(x / Math.SQRT2));
const geluTanh = (x: number): number => 0.5 * x * (1 + Math.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));

function rowIds(r: PetRows): number[] {
  const out: number[] = [];
  for (let s = 0; s < r.seqs; s++) for (let t = 0; t < r.tokens; t++) out.push(r.start + s * r.stride + t);
  return out;
}

/** y (f64, updated in place) and mag for a [rows, width] output. */
interface Want {
  y: Float64Array;
  mag: Float64Array;
}

function startWant(y0: Float32Array): Want {
  return { y: Float64Array.from(y0), mag: Float64Array.from(y0, Math.abs) };
}

interface Csr {
  out: number;
  in: number;
  indptr: Int32Array;
  indices: Int32Array;
  values: Float32Array;
}

/** Unstructured random CSR [out, in]: each entry kept with probability density; some rows forced empty. */
function randomCsr(out: number, inW: number, density: number, seed: number, emptyRows = 0.2): Csr {
  const r = rng(seed);
  const indptr = [0];
  const indices: number[] = [];
  for (let o = 0; o < out; o++) {
    if (r() >= emptyRows) for (let c = 0; c < inW; c++) if (r() < density) indices.push(c);
    indptr.push(indices.length);
  }
  return { out, in: inW, indptr: Int32Array.from(indptr), indices: Int32Array.from(indices), values: randomFloats(indices.length, seed + 1) };
}

function csrF64(w: Want, x: Float32Array, rows: number[], m: Csr, scale: number): void {
  for (const row of rows) {
    for (let o = 0; o < m.out; o++) {
      let s = 0;
      let a = 0;
      for (let e = m.indptr[o]!; e < m.indptr[o + 1]!; e++) {
        const t = m.values[e]! * x[row * m.in + m.indices[e]!]!;
        s += t;
        a += Math.abs(t);
      }
      w.y[row * m.out + o]! += scale * s;
      w.mag[row * m.out + o]! += Math.abs(scale) * a;
    }
  }
}

interface AdapterW {
  d: number;
  m: number;
  down: Float32Array;
  downBias: Float32Array;
  up: Float32Array;
  upBias: Float32Array;
}

function randomAdapter(d: number, m: number, seed: number): AdapterW {
  // Scaled like trained adapters (pre-activations of order 1), so GELU sees its whole range.
  const down = randomFloats(m * d, seed, -2 / Math.sqrt(d), 2 / Math.sqrt(d));
  return { d, m, down, downBias: randomFloats(m, seed + 1, -0.5, 0.5), up: randomFloats(d * m, seed + 2, -1, 1), upBias: randomFloats(d, seed + 3) };
}

function adapterF64(w: Want, rows: number[], a: AdapterW, act: 'gelu' | 'gelu_tanh' | 'relu'): void {
  const { d, m } = a;
  const g = act === 'gelu' ? geluErf : act === 'relu' ? (x: number) => Math.max(x, 0) : geluTanh;
  for (const row of rows) {
    const h = new Float64Array(m);
    const hMag = new Float64Array(m);
    for (let k = 0; k < m; k++) {
      let s = a.downBias[k]!;
      let mg = Math.abs(s);
      for (let c = 0; c < d; c++) {
        const t = w.y[row * d + c]! * a.down[k * d + c]!;
        s += t;
        mg += Math.abs(t);
      }
      h[k] = g(s);
      hMag[k] = Math.abs(h[k]!) + 1.2 * mg;
    }
    for (let c = 0; c < d; c++) {
      let s = a.upBias[c]!;
      let mg = Math.abs(s);
      for (let k = 0; k < m; k++) {
        s += h[k]! * a.up[c * m + k]!;
        mg += Math.abs(a.up[c * m + k]!) * hMag[k]!;
      }
      w.y[row * d + c]! += s;
      w.mag[row * d + c]! += mg;
    }
  }
}

function layerNormF64(w: Want, x: Float64Array, rows: number[], d: number, gamma: Float32Array, beta: Float32Array, eps: number): void {
  for (const row of rows) {
    let mean = 0;
    for (let i = 0; i < d; i++) mean += x[row * d + i]!;
    mean /= d;
    let v = 0;
    for (let i = 0; i < d; i++) v += (x[row * d + i]! - mean) ** 2;
    const rstd = 1 / Math.sqrt(v / d + eps);
    for (let i = 0; i < d; i++) {
      const xh = (x[row * d + i]! - mean) * rstd;
      w.y[row * d + i] = xh * gamma[i]! + beta[i]!;
      w.mag[row * d + i] = Math.abs(gamma[i]!) * (Math.abs(xh) + 1) + Math.abs(beta[i]!);
    }
  }
}

function expectWithin(got: Float32Array, w: Want, label: string): void {
  expect(got.length, `${label} length`).toBe(w.y.length);
  for (let i = 0; i < got.length; i++) {
    const err = Math.abs(got[i]! - w.y[i]!);
    const tol = RTOL * Math.abs(w.y[i]!) + MTOL * w.mag[i]!;
    if (!(err <= tol)) expect.fail(`${label}: element ${i} got ${got[i]}, want ${w.y[i]} (|err| ${err} > tol ${tol})`);
  }
}

/** Rows not in `covered` keep the exact bits of y0 (width elements per row). */
function expectUntouched(got: Float32Array, y0: Float32Array, width: number, covered: Set<number>, label: string): void {
  const rows = y0.length / width;
  for (let row = 0; row < rows; row++) {
    if (covered.has(row)) continue;
    expectBitwiseEqual(got.subarray(row * width, (row + 1) * width), y0.subarray(row * width, (row + 1) * width), `${label} untouched row ${row}`);
  }
}

// ---------------------------------------------------------------- ragged row layouts

/**
 * Disjoint row specs laid out left to right over [0, total): packed ranges (seqs = 1), padded mini-batches (seqs > 1,
 * stride > tokens: the padding rows between sequences are not touched), gaps between ops, and empty ops (tokens 0 or
 * seqs 0) thrown in.
 */
function raggedRows(seed: number, count: number): { rows: PetRows[]; total: number } {
  const r = rng(seed);
  const rows: PetRows[] = [];
  let cursor = Math.floor(r() * 3);
  for (let i = 0; i < count; i++) {
    const pick = r();
    if (pick < 0.15) {
      rows.push(r() < 0.5 ? { start: cursor, seqs: 1 + Math.floor(r() * 3), stride: 4, tokens: 0 } : { start: cursor, seqs: 0, stride: 4, tokens: 3 });
      continue;
    }
    if (pick < 0.55) {
      const tokens = 1 + Math.floor(r() * 12);
      rows.push({ start: cursor, seqs: 1, stride: Math.floor(r() * 3), tokens });
      cursor += tokens;
    } else {
      const stride = 2 + Math.floor(r() * 8);
      const seqs = 2 + Math.floor(r() * 3);
      const tokens = 1 + Math.floor(r() * stride);
      rows.push({ start: cursor, seqs, stride, tokens });
      cursor += (seqs - 1) * stride + tokens;
    }
    cursor += Math.floor(r() * 3); // rows no op touches
  }
  return { rows, total: cursor + 1 };
}

const coveredRows = (rows: readonly PetRows[]): Set<number> => new Set(rows.flatMap(rowIds));
const i32 = (v: ArrayLike<number>, backend: Backend = cpu()): Tensor => Tensor.from(Int32Array.from(v), [v.length], { dtype: 'i32', backend });

// ---------------------------------------------------------------- per-kind accuracy

describe('PET ops against float64 and the native reference', () => {
  it('csr: random shapes and densities, ragged rows, empty matrix rows, nnz = 0, any scale', () => {
    let seed = 1;
    for (const [out, inW, density] of [
      [1, 1, 1],
      [5, 3, 0.5],
      [37, 70, 0.1],
      [64, 256, 0.05],
      [130, 300, 0.2],
      [16, 40, 0],
    ] as const) {
      const { rows, total } = raggedRows(seed++, 6);
      const mats = rows.map(() => randomCsr(out, inW, density, seed++));
      const scales = rows.map((_, i) => [1, -1, 0.375, 2.5][i % 4]!);
      const xData = randomFloats(total * inW, seed++);
      const y0 = randomFloats(total * out, seed++);
      const want = startWant(y0);
      rows.forEach((r, i) => csrF64(want, xData, rowIds(r), mats[i]!, scales[i]!));
      const x = tensorF32(xData, [total, inW]);
      const matT = mats.map((m) => ({ indptr: i32(m.indptr), indices: i32(m.indices), values: tensorF32(m.values, [m.values.length]) }));
      const run = (reference: boolean): Float32Array => {
        const y = tensorF32(y0, [total, out]);
        petSiteRun(rows.map((r, i): PetOp => ({ kind: 'csr', rows: r, x, y, ...matT[i]!, scale: scales[i]! })), { reference });
        return f32(y);
      };
      const label = `csr [${out}, ${inW}] density ${density}`;
      const ref = run(true);
      expectWithin(ref, want, `${label} reference`);
      expectUntouched(ref, y0, out, coveredRows(rows), `${label} reference`);
      forEachIsa((isa) => {
        const got = run(false);
        expectWithin(got, want, `${label} ${isa}`);
        expectUntouched(got, y0, out, coveredRows(rows), `${label} ${isa}`);
      });
    }
  });

  it('csr: many rows, and dense enough to be split over output ranges too (1 and 2 threads bitwise)', () => {
    for (const [rowsN, out, inW, density, rows] of [
      [200, 256, 256, 0.05, { start: 3, seqs: 1, stride: 0, tokens: 190 }],
      [60, 300, 64, 0.6, { start: 1, seqs: 3, stride: 19, tokens: 17 }], // ~11.5k nonzeros over 64 columns: 2 output ranges
    ] as const) {
      const m = randomCsr(out, inW, density, 11, 0.1);
      const xData = randomFloats(rowsN * inW, 12);
      const y0 = randomFloats(rowsN * out, 13);
      const want = startWant(y0);
      csrF64(want, xData, rowIds(rows), m, -1);
      const x = tensorF32(xData, [rowsN, inW]);
      const [indptr, indices, values] = [i32(m.indptr), i32(m.indices), tensorF32(m.values, [m.values.length])];
      const run = (reference: boolean): Float32Array => {
        const y = tensorF32(y0, [rowsN, out]);
        petSiteRun([{ kind: 'csr', rows, x, y, indptr, indices, values, scale: -1 }], { reference });
        return f32(y);
      };
      const label = `csr [${out}, ${inW}] over ${rowIds(rows).length} rows`;
      expectWithin(run(true), want, `${label} reference`);
      forEachIsa((isa) => {
        const one = withThreads(1, () => run(false));
        expectWithin(one, want, `${label} ${isa}`);
        expectUntouched(one, y0, out, coveredRows([rows]), `${label} ${isa}`);
        expectBitwiseEqual(withThreads(2, () => run(false)), one, `${label} ${isa} 1 vs 2 threads`);
      });
    }
  });

  it('bias: exactly one f32 add per element, on every ISA and the reference', () => {
    let seed = 100;
    for (const d of [1, 7, 64, 200]) {
      const { rows, total } = raggedRows(seed++, 7);
      const biases = rows.map(() => randomFloats(d, seed++));
      const y0 = randomFloats(total * d, seed++);
      const want = Float32Array.from(y0);
      rows.forEach((r, i) => {
        for (const row of rowIds(r)) for (let c = 0; c < d; c++) want[row * d + c] = Math.fround(want[row * d + c]! + biases[i]![c]!);
      });
      const biasT = biases.map((b) => tensorF32(b, [d]));
      const run = (reference: boolean): Float32Array => {
        const y = tensorF32(y0, [total, d]);
        petSiteRun(rows.map((r, i): PetOp => ({ kind: 'bias', rows: r, y, bias: biasT[i]! })), { reference });
        return f32(y);
      };
      expectBitwiseEqual(run(true), want, `bias d=${d} reference`);
      forEachIsa((isa) => expectBitwiseEqual(run(false), want, `bias d=${d} ${isa}`));
    }
  });

  it('adapter: gelu, gelu_tanh and relu, bottlenecks 0 to 64, ragged rows', () => {
    let seed = 200;
    for (const [d, m] of [
      [8, 4],
      [33, 5],
      [96, 64],
      [40, 1],
      [24, 0],
      [130, 17],
    ] as const) {
      for (const act of ['gelu', 'gelu_tanh', 'relu'] as const) {
        const { rows, total } = raggedRows(seed++, 5);
        const ws = rows.map(() => randomAdapter(d, m, (seed += 4)));
        const y0 = randomFloats(total * d, seed++);
        const want = startWant(y0);
        rows.forEach((r, i) => adapterF64(want, rowIds(r), ws[i]!, act));
        const wt = ws.map((w) => ({
          down: tensorF32(w.down, [m, d]),
          downBias: tensorF32(w.downBias, [m]),
          up: tensorF32(w.up, [d, m]),
          upBias: tensorF32(w.upBias, [d]),
        }));
        const run = (reference: boolean): Float32Array => {
          const y = tensorF32(y0, [total, d]);
          petSiteRun(
            rows.map((r, i): PetOp => ({ kind: 'adapter', rows: r, y, ...wt[i]!, ...(act === 'gelu' && i % 2 === 0 ? {} : { act }) })),
            { reference },
          );
          return f32(y);
        };
        const label = `adapter d=${d} m=${m} ${act}`;
        const ref = run(true);
        expectWithin(ref, want, `${label} reference`);
        expectUntouched(ref, y0, d, coveredRows(rows), `${label} reference`);
        forEachIsa((isa) => {
          const got = run(false);
          expectWithin(got, want, `${label} ${isa}`);
          expectUntouched(got, y0, d, coveredRows(rows), `${label} ${isa}`);
        });
      }
    }
  });

  it('layernorm: in place and into another tensor, ragged rows; the same bits as layerNorm on every ISA', () => {
    let seed = 300;
    for (const d of [1, 7, 64, 129]) {
      for (const inPlace of [true, false]) {
        const { rows, total } = raggedRows(seed++, 6);
        const gammas = rows.map(() => randomFloats(d, seed++, 0.5, 1.5));
        const betas = rows.map(() => randomFloats(d, seed++));
        const xData = randomFloats(total * d, seed++, -3, 5);
        const y0 = inPlace ? xData : randomFloats(total * d, seed++);
        const want = startWant(y0);
        const x64 = Float64Array.from(xData);
        rows.forEach((r, i) => layerNormF64(want, x64, rowIds(r), d, gammas[i]!, betas[i]!, 1e-5));
        const gT = gammas.map((g) => tensorF32(g, [d]));
        const bT = betas.map((b) => tensorF32(b, [d]));
        const xT = tensorF32(xData, [total, d]);
        const run = (reference: boolean): Float32Array => {
          const y = inPlace ? tensorF32(xData, [total, d]) : tensorF32(y0, [total, d]);
          const x = inPlace ? y : xT;
          petSiteRun(rows.map((r, i): PetOp => ({ kind: 'layernorm', rows: r, x, y, gamma: gT[i]!, beta: bT[i]!, eps: 1e-5 })), { reference });
          return f32(y);
        };
        const label = `layernorm d=${d} inPlace=${inPlace}`;
        const ref = run(true);
        expectWithin(ref, want, `${label} reference`);
        expectUntouched(ref, y0, d, coveredRows(rows), `${label} reference`);
        forEachIsa((isa) => {
          const got = run(false);
          expectWithin(got, want, `${label} ${isa}`);
          expectUntouched(got, y0, d, coveredRows(rows), `${label} ${isa}`);
          // The row bodies are layerNorm's: the same bits for the same row, gamma and beta.
          rows.forEach((r, i) => {
            const full = f32(layerNorm(xT, gT[i]!, bT[i]!, { eps: 1e-5 }));
            for (const row of rowIds(r)) expectBitwiseEqual(got.subarray(row * d, (row + 1) * d), full.subarray(row * d, (row + 1) * d), `${label} ${isa} row ${row} vs layerNorm`);
          });
        });
      }
    }
  });

  it('empty ops (tokens 0, seqs 0), empty op lists and zero-width outputs change nothing', () => {
    const d = 6;
    const y0 = randomFloats(5 * d, 1);
    const y = tensorF32(y0, [5, d]);
    const x = tensorF32(randomFloats(5 * 4, 2), [5, 4]);
    const m = randomCsr(d, 4, 0.5, 3, 0);
    const empty: PetRows[] = [
      { start: 0, seqs: 3, stride: 1, tokens: 0 },
      { start: 4, seqs: 0, stride: 0, tokens: 5 },
      { start: 5, seqs: 1, stride: 0, tokens: 0 },
    ];
    for (const reference of [false, true]) {
      petSiteRun([], { reference });
      petSiteRun([], { reference, numStreams: 4, streams: [] });
      petSiteRun(
        empty.flatMap((rows): PetOp[] => [
          { kind: 'csr', rows, x, y, indptr: i32(m.indptr), indices: i32(m.indices), values: tensorF32(m.values, [m.values.length]) },
          { kind: 'bias', rows, y, bias: tensorF32(randomFloats(d, 4), [d]) },
          { kind: 'layernorm', rows, x: y, y, gamma: tensorF32(randomFloats(d, 5), [d]), beta: tensorF32(randomFloats(d, 6), [d]), eps: 1e-5 },
        ]),
        { reference, numStreams: 2, streams: [0, 1, 0, 1, 0, 1, 0, 1, 0] },
      );
      // Zero-width y: a bias over [3, 0].
      petSiteRun([{ kind: 'bias', rows: { start: 0, seqs: 1, stride: 0, tokens: 3 }, y: Tensor.zeros([3, 0], 'f32', cpu()), bias: Tensor.zeros([0], 'f32', cpu()) }], { reference });
      expectBitwiseEqual(f32(y), y0, `empty ops ref=${reference}`);
    }
  });
});

// ---------------------------------------------------------------- a mixed site: determinism and streams

type PetType = 'maskbert' | 'diff' | 'bitfit' | 'adapter';

interface MixedSite {
  total: number;
  din: number;
  d: number;
  x: Tensor;
  xData: Float32Array;
  y0: Float32Array;
  /** ops per task, in the task's order; task t owns its rows */
  taskOps: (y: Tensor) => PetOp[][];
  rows: PetRows[];
}

/** A site like PetS's S4 (input width din, output d): 8 tasks of the four PET types on disjoint ragged rows. */
function mixedSite(seed: number, din: number, d: number): MixedSite {
  const { rows, total } = raggedRows(seed, 8);
  const types: PetType[] = ['maskbert', 'diff', 'bitfit', 'adapter'];
  const xData = randomFloats(total * din, seed + 1);
  const y0 = randomFloats(total * d, seed + 2);
  const x = tensorF32(xData, [total, din]);
  const params = rows.map((_, t) => {
    const s = seed + 10 * (t + 1);
    const type = types[t % 4]!;
    const m = type === 'maskbert' ? randomCsr(d, din, 0.05, s) : randomCsr(d, din, 0.01, s);
    const a = randomAdapter(d, 16, s + 3);
    return {
      type,
      csr: { indptr: i32(m.indptr), indices: i32(m.indices), values: tensorF32(m.values, [m.values.length]) },
      bias: tensorF32(randomFloats(d, s + 5), [d]),
      adapter: { down: tensorF32(a.down, [16, d]), downBias: tensorF32(a.downBias, [16]), up: tensorF32(a.up, [d, 16]), upBias: tensorF32(a.upBias, [d]) },
      gamma: tensorF32(randomFloats(d, s + 6, 0.5, 1.5), [d]),
      beta: tensorF32(randomFloats(d, s + 7), [d]),
    };
  });
  const taskOps = (y: Tensor): PetOp[][] =>
    rows.map((r, t) => {
      const p = params[t]!;
      const ln: PetOp = { kind: 'layernorm', rows: r, x: y, y, gamma: p.gamma, beta: p.beta, eps: 1e-5 };
      switch (p.type) {
        case 'maskbert':
          return [{ kind: 'csr', rows: r, x, y, ...p.csr, scale: -1 }, ln];
        case 'diff':
          return [{ kind: 'csr', rows: r, x, y, ...p.csr }, { kind: 'bias', rows: r, y, bias: p.bias }, ln];
        case 'bitfit':
          return [{ kind: 'bias', rows: r, y, bias: p.bias }, ln];
        default:
          return [{ kind: 'adapter', rows: r, y, ...p.adapter, act: 'gelu' }, ln];
      }
    });
  return { total, din, d, x, xData, y0, taskOps, rows };
}

/** Interleaves the tasks' op lists (op k of every task, then op k + 1, ...): list order differs from stream order. */
function interleave(perTask: PetOp[][], streamOf: (task: number) => number): { ops: PetOp[]; streams: number[] } {
  const ops: PetOp[] = [];
  const streams: number[] = [];
  const longest = Math.max(...perTask.map((l) => l.length));
  for (let k = 0; k < longest; k++) {
    perTask.forEach((list, t) => {
      if (k < list.length) {
        ops.push(list[k]!);
        streams.push(streamOf(t));
      }
    });
  }
  return { ops, streams };
}

describe('PET site determinism and streams', () => {
  const site = mixedSite(500, 48, 40);
  const runSite = (numStreams: number, reference = false): Float32Array => {
    const y = tensorF32(site.y0, [site.total, site.d]);
    const { ops, streams } = interleave(site.taskOps(y), (t) => t % numStreams);
    petSiteRun(ops, { numStreams, streams, reference });
    return f32(y);
  };

  it('is bitwise identical for numStreams 1, 2 and 4 on 1 and 2 threads, and on repeated calls', () => {
    forEachIsa((isa) => {
      const base = withThreads(1, () => runSite(1));
      for (const threads of [1, 2]) {
        for (const s of [1, 2, 4]) {
          withThreads(threads, () => {
            expectBitwiseEqual(runSite(s), base, `${isa} threads=${threads} numStreams=${s}`);
          });
        }
      }
    });
    // The reference ignores streams: list order on one thread.
    expectBitwiseEqual(runSite(4, true), runSite(1, true), 'reference numStreams 4 vs 1');
  });

  it('matches the native reference (normwise 1e-5) and leaves rows outside every op untouched', () => {
    const ref = runSite(1, true);
    forEachIsa((isa) => {
      const got = runSite(2);
      let num = 0;
      let den = 0;
      for (let i = 0; i < ref.length; i++) {
        num += (got[i]! - ref[i]!) ** 2;
        den += ref[i]! ** 2;
      }
      expect(Math.sqrt(num / den), `${isa} normwise`).toBeLessThan(1e-5);
      expectUntouched(got, site.y0, site.d, coveredRows(site.rows), isa);
    });
  });

  it("a task's rows get the same bits alone in a call as among the other tasks' ops", () => {
    forEachIsa((isa) => {
      const together = runSite(2);
      const y = tensorF32(site.y0, [site.total, site.d]);
      for (const list of site.taskOps(y)) petSiteRun(list);
      expectBitwiseEqual(f32(y), together, `${isa} one call per task vs one call`);
    });
  });

  it('every op kind is bitwise identical on 1 and 2 threads with large ops (many tasks per op)', () => {
    const [n, din, d] = [150, 200, 160];
    const xData = randomFloats(n * din, 1);
    const y0 = randomFloats(n * d, 2);
    const x = tensorF32(xData, [n, din]);
    const m = randomCsr(d, din, 0.1, 3, 0.05);
    const a = randomAdapter(d, 48, 4);
    const rows: PetRows = { start: 1, seqs: 3, stride: 49, tokens: 47 };
    const run = (): Float32Array => {
      const y = tensorF32(y0, [n, d]);
      const ops: PetOp[] = [
        { kind: 'csr', rows, x, y, indptr: i32(m.indptr), indices: i32(m.indices), values: tensorF32(m.values, [m.values.length]), scale: 0.5 },
        { kind: 'bias', rows, y, bias: tensorF32(randomFloats(d, 5), [d]) },
        { kind: 'adapter', rows, y, down: tensorF32(a.down, [48, d]), downBias: tensorF32(a.downBias, [48]), up: tensorF32(a.up, [d, 48]), upBias: tensorF32(a.upBias, [d]), act: 'gelu_tanh' },
        { kind: 'layernorm', rows, x: y, y, gamma: tensorF32(randomFloats(d, 6), [d]), beta: tensorF32(randomFloats(d, 7), [d]), eps: 1e-6 },
      ];
      petSiteRun(ops);
      return f32(y);
    };
    forEachIsa((isa) => {
      const one = withThreads(1, run);
      const two = withThreads(2, run);
      expectBitwiseEqual(two, one, `${isa} 1 vs 2 threads`);
      expectBitwiseEqual(withThreads(2, run), two, `${isa} repeat`);
    });
  });
});

// ---------------------------------------------------------------- validation

describe('petSiteRun validation', () => {
  const [n, din, d] = [12, 10, 8];
  const x = (): Tensor => Tensor.zeros([n, din], 'f32', cpu());
  const y = (): Tensor => Tensor.zeros([n, d], 'f32', cpu());
  const all: PetRows = { start: 0, seqs: 1, stride: 0, tokens: n };
  const csrOf = (indptr: number[], indices: number[], values?: number[]) => ({
    indptr: i32(indptr),
    indices: i32(indices),
    values: tensorF32(Float32Array.from(values ?? indices.map(() => 1)), [values?.length ?? indices.length]),
  });
  // A valid [8, 10] matrix: rows 0..7 with a few columns each.
  const goodCsr = (): ReturnType<typeof csrOf> => csrOf([0, 2, 2, 3, 5, 5, 6, 6, 8], [0, 9, 4, 1, 2, 7, 3, 5]);
  const adapterOf = (m = 4, dd = d) => ({
    down: Tensor.zeros([m, dd], 'f32', cpu()),
    downBias: Tensor.zeros([m], 'f32', cpu()),
    up: Tensor.zeros([dd, m], 'f32', cpu()),
    upBias: Tensor.zeros([dd], 'f32', cpu()),
  });
  const vec = (len: number): Tensor => Tensor.zeros([len], 'f32', cpu());

  /** The packing of pet.ts, to call the binding directly (its checks must hold without the TS layer). */
  function raw(ops: PetOp[], streams?: number[], numStreams = 1): () => void {
    const meta = new Float64Array(ops.length * 9);
    const slots = new Int32Array(ops.length * 6).fill(-1);
    const tensors: NativeTensor[] = [];
    const code = { csr: 0, bias: 1, adapter: 2, layernorm: 3 };
    ops.forEach((op, i) => {
      meta.set([code[op.kind], streams?.[i] ?? 0, op.rows.start, op.rows.seqs, op.rows.stride, op.rows.tokens, 1, 0, 0], i * 9);
      const list: (Tensor | undefined)[] =
        op.kind === 'csr' ? [op.y, op.x, op.indptr, op.indices, op.values]
        : op.kind === 'bias' ? [op.y, undefined, op.bias]
        : op.kind === 'adapter' ? [op.y, undefined, op.down, op.downBias, op.up, op.upBias]
        : [op.y, op.x, op.gamma, op.beta];
      if (op.kind === 'csr') meta[i * 9 + 6] = op.scale ?? 1;
      if (op.kind === 'layernorm') meta[i * 9 + 7] = op.eps;
      list.forEach((t, s) => {
        if (!t) return;
        slots[i * 6 + s] = tensors.length; // no sharing: each slot its own entry
        tensors.push(t.native);
      });
    });
    const binding = cpu().binding as unknown as { petSiteRun: (m: Float64Array, s: Int32Array, t: NativeTensor[], o: object) => void };
    return () => binding.petSiteRun(meta, slots, tensors, { numStreams });
  }

  /** The TS wrapper throws `cls` with `message`; the raw binding (when given) throws the same message. */
  function rejects(ops: PetOp[], cls: new (...args: never[]) => Error, message: RegExp, opts: { streams?: number[]; numStreams?: number; native?: boolean } = {}): void {
    const call = (): void => petSiteRun(ops, { ...(opts.streams ? { streams: opts.streams } : {}), ...(opts.numStreams ? { numStreams: opts.numStreams } : {}) });
    expect(call).toThrow(cls);
    expect(call).toThrow(message);
    if (opts.native !== false) expect(raw(ops, opts.streams, opts.numStreams)).toThrow(message);
  }

  it('accepts the valid baseline of each kind', () => {
    const yy = y();
    const xx = x();
    petSiteRun([
      { kind: 'csr', rows: all, x: xx, y: yy, ...goodCsr() },
      { kind: 'bias', rows: all, y: yy, bias: vec(d) },
      { kind: 'adapter', rows: all, y: yy, ...adapterOf() },
      { kind: 'layernorm', rows: all, x: yy, y: yy, gamma: vec(d), beta: vec(d), eps: 1e-5 },
    ]);
    raw([{ kind: 'csr', rows: all, x: xx, y: yy, ...goodCsr() }])();
  });

  it('rejects bad op structure, rows fields and numbers (checked in TS and natively)', () => {
    expect(() => petSiteRun([{ kind: 'relu', rows: all, y: y() } as unknown as PetOp])).toThrow(/ops\[0\]\.kind must be 'csr', 'bias', 'adapter' or 'layernorm', got relu/);
    expect(() => petSiteRun([{ kind: 'bias', rows: all, y: y(), bias: [1, 2] } as unknown as PetOp])).toThrow(/ops\[0\] \(bias\) bias must be a Tensor/);
    for (const [field, bad] of [
      ['start', -1],
      ['tokens', 1.5],
      ['seqs', 2 ** 31],
    ] as const) {
      rejects([{ kind: 'bias', rows: { ...all, [field]: bad }, y: y(), bias: vec(d) }], InvalidArgumentError, new RegExp(`ops\\[0\\] \\(bias\\) rows\\.${field} must be an integer in \\[0, 2\\^31\\), got ${String(bad).replace('.', '\\.')}`));
    }
    rejects([{ kind: 'bias', rows: { start: 0, seqs: 3, stride: 3, tokens: 4 }, y: y(), bias: vec(d) }], InvalidArgumentError, /ops\[0\] \(bias\) rows\.stride = 3 must be >= rows\.tokens = 4 when rows\.seqs > 1 \(sequences would overlap\)/);
    rejects([{ kind: 'csr', rows: all, x: x(), y: y(), ...goodCsr(), scale: Infinity }], InvalidArgumentError, /ops\[0\] \(csr\) scale must be a finite number, got Infinity/);
    rejects([{ kind: 'layernorm', rows: all, x: y(), y: y(), gamma: vec(d), beta: vec(d), eps: -1 }], InvalidArgumentError, /ops\[0\] \(layernorm\) eps must be a finite number >= 0, got -1/);
    expect(() => petSiteRun([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(), act: 'swish' as 'gelu' }])).toThrow(/ops\[0\] \(adapter\) act must be 'gelu', 'gelu_tanh' or 'relu', got swish/);
    expect(() => petSiteRun([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(), act: 'toString' as 'gelu' }])).toThrow(/act must be/);
  });

  it('rejects rows outside the tensors, bad dtypes, ranks and shapes, naming the op and the field', () => {
    rejects([{ kind: 'bias', rows: { start: 0, seqs: 2, stride: 7, tokens: 6 }, y: y(), bias: vec(d) }], InvalidArgumentError, /ops\[0\] \(bias\) rows end at row 13 \(start \+ \(seqs - 1\) \* stride \+ tokens\) but y \[12, 8\] has 12 rows/);
    rejects([{ kind: 'bias', rows: all, y: Tensor.zeros([n, d], 'i32', cpu()), bias: vec(d) }], DTypeMismatchError, /ops\[0\] \(bias\) y \[12, 8\] must be f32, got i32/);
    rejects([{ kind: 'bias', rows: all, y: Tensor.zeros([n * d], 'f32', cpu()), bias: vec(d) }], ShapeMismatchError, /ops\[0\] \(bias\) y must have rank 2, got \[96\]/);
    rejects([{ kind: 'bias', rows: all, y: y(), bias: vec(d + 1) }], ShapeMismatchError, /ops\[0\] \(bias\) bias \[9\] must be \[8\], the columns of y \[12, 8\]/);
    rejects([{ kind: 'csr', rows: all, x: Tensor.zeros([n + 1, din], 'f32', cpu()), y: y(), ...goodCsr() }], ShapeMismatchError, /ops\[0\] \(csr\) x \[13, 10\] and y \[12, 8\] must have the same number of rows/);
    rejects([{ kind: 'csr', rows: all, x: x(), y: y(), ...csrOf([0, 1, 2], [0, 1]) }], ShapeMismatchError, /ops\[0\] \(csr\) indptr \[3\] must be \[9\], out \+ 1 entries \(out = the columns of y \[12, 8\]\)/);
    rejects([{ kind: 'csr', rows: all, x: x(), y: y(), ...goodCsr(), values: vec(7) }], ShapeMismatchError, /ops\[0\] \(csr\) indices \[8\] and values \[7\] must have the same length \(nnz\)/);
    rejects([{ kind: 'csr', rows: all, x: x(), y: y(), ...goodCsr(), indices: tensorF32(new Float32Array(8), [8]) }], DTypeMismatchError, /ops\[0\] \(csr\) indices \[8\] must be i32, got f32/);
    rejects([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(4, d), down: Tensor.zeros([4, d + 1], 'f32', cpu()) }], ShapeMismatchError, /ops\[0\] \(adapter\) down \[4, 9\] must be \[m, 8\] with d = the columns of y \[12, 8\]/);
    rejects([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(), downBias: vec(5) }], ShapeMismatchError, /ops\[0\] \(adapter\) downBias \[5\] must be \[4\], m \(the rows of down \[4, 8\]\)/);
    rejects([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(), up: Tensor.zeros([4, d], 'f32', cpu()) }], ShapeMismatchError, /ops\[0\] \(adapter\) up \[4, 8\] must be \[8, 4\] \(\[d, m\]\)/);
    rejects([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(), upBias: vec(4) }], ShapeMismatchError, /ops\[0\] \(adapter\) upBias \[4\] must be \[8\], d \(the columns of y \[12, 8\]\)/);
    rejects([{ kind: 'adapter', rows: all, y: y(), ...adapterOf(4097) }], InvalidArgumentError, /ops\[0\] \(adapter\) bottleneck m = 4097 \(the rows of down \[4097, 8\]\) exceeds 4096/);
    rejects([{ kind: 'layernorm', rows: all, x: Tensor.zeros([n, d + 1], 'f32', cpu()), y: y(), gamma: vec(d), beta: vec(d), eps: 1e-5 }], ShapeMismatchError, /ops\[0\] \(layernorm\) x \[12, 9\] and y \[12, 8\] must have the same shape/);
    rejects([{ kind: 'layernorm', rows: all, x: y(), y: y(), gamma: vec(d), beta: vec(3), eps: 1e-5 }], ShapeMismatchError, /ops\[0\] \(layernorm\) beta \[3\] must be \[8\], the columns of y \[12, 8\]/);
    // The op index in the message is the failing op's.
    rejects([{ kind: 'bias', rows: all, y: y(), bias: vec(d) }, { kind: 'bias', rows: all, y: y(), bias: vec(2) }], ShapeMismatchError, /ops\[1\] \(bias\) bias \[2\]/);
  });

  it('rejects bad CSR index contents (checked natively on every call)', () => {
    const bad = (indptr: number[], indices: number[], message: RegExp): void =>
      rejects([{ kind: 'csr', rows: all, x: x(), y: y(), ...csrOf(indptr, indices) }], InvalidArgumentError, message);
    bad([1, 2, 2, 3, 5, 5, 6, 6, 8], [0, 9, 4, 1, 2, 7, 3, 5], /ops\[0\] \(csr\) indptr\[0\] = 1 must be 0/);
    bad([0, 2, 1, 3, 5, 5, 6, 6, 8], [0, 9, 4, 1, 2, 7, 3, 5], /ops\[0\] \(csr\) indptr must be non-decreasing: indptr\[2\] = 1 < indptr\[1\] = 2/);
    bad([0, 2, 2, 3, 5, 5, 6, 6, 7], [0, 9, 4, 1, 2, 7, 3, 5], /ops\[0\] \(csr\) indices has 8 entries but indptr\[out\] = 7/);
    bad([0, 2, 2, 3, 5, 5, 6, 6, 8], [0, 10, 4, 1, 2, 7, 3, 5], /ops\[0\] \(csr\) indices\[1\] = 10 is outside \[0, 10\) \(the columns of x \[12, 10\]\)/);
    bad([0, 2, 2, 3, 5, 5, 6, 6, 8], [0, 9, 4, 1, 2, 7, 3, -5], /ops\[0\] \(csr\) indices\[7\] = -5 is outside \[0, 10\)/);
    bad([0, 2, 2, 3, 5, 5, 6, 6, 8], [0, 9, 4, 2, 2, 7, 3, 5], /ops\[0\] \(csr\) the columns of row 3 must be strictly increasing: indices\[4\] = 2 follows indices\[3\] = 2/);
    bad([0, 2, 2, 3, 5, 5, 6, 6, 8], [9, 0, 4, 1, 2, 7, 3, 5], /the columns of row 0 must be strictly increasing: indices\[1\] = 0 follows indices\[0\] = 9/);
    // An empty op is still a malformed matrix.
    expect(() => petSiteRun([{ kind: 'csr', rows: { ...all, tokens: 0 }, x: x(), y: y(), ...csrOf([0, 0, 0, 0, 0, 0, 0, 0, 1], [10]) }])).toThrow(/indices\[0\] = 10 is outside/);
    // A matrix shared by several ops is checked once and accepted for all.
    const shared = goodCsr();
    const yy = y();
    const xx = x();
    petSiteRun([0, 4, 8].map((start): PetOp => ({ kind: 'csr', rows: { start, seqs: 1, stride: 0, tokens: 4 }, x: xx, y: yy, ...shared })));
  });

  it('checks a matrix on its first use; one written afterwards is re-checked by the reference and clamped by the fast path', () => {
    const m = goodCsr();
    const xx = tensorF32(randomFloats(n * din, 1), [n, din]);
    const y0 = randomFloats(n * d, 2);
    const yy = tensorF32(y0, [n, d]);
    const rows: PetRows = { start: 2, seqs: 1, stride: 0, tokens: 5 };
    petSiteRun([{ kind: 'csr', rows, x: xx, y: yy, ...m }]);
    // The same index tensors against a narrower x: a different check (columns 4..9 are now out of range).
    const narrow = Tensor.zeros([n, 4], 'f32', cpu());
    expect(() => petSiteRun([{ kind: 'csr', rows, x: narrow, y: y(), ...m }])).toThrow(/indices\[1\] = 9 is outside \[0, 4\)/);
    // Corrupt the validated tensors in place: columns far out of range, an indptr past nnz.
    m.indices.write(Int32Array.from([0, 1 << 30, 4, -7, 2, 7, 3, 5]));
    m.indptr.write(Int32Array.from([0, 2, 2, 3, 5, 5, 6, 6, 1 << 20]));
    expect(() => petSiteRun([{ kind: 'csr', rows, x: xx, y: yy, ...m }], { reference: true })).toThrow(/indices has 8 entries but indptr\[out\] = 1048576/);
    forEachIsa((isa) => {
      for (const threads of [1, 2]) {
        const yt = tensorF32(y0, [n, d]);
        withThreads(threads, () => petSiteRun([{ kind: 'csr', rows, x: xx, y: yt, ...m }]));
        expectUntouched(f32(yt), y0, d, coveredRows([rows]), `${isa} threads=${threads} stale matrix`);
      }
    });
  });

  it('rejects aliasing inside an op', () => {
    const t = y();
    rejects([{ kind: 'csr', rows: all, x: t, y: t, ...goodCsr() }], InvalidArgumentError, /ops\[0\] \(csr\) y \[12, 8\] overlaps x \[12, 8\] in memory/);
    // Views of one buffer: x is rows 0..5, y rows 4..9 of the same storage.
    const big = Tensor.zeros([20, d], 'f32', cpu());
    const xv = big.rows(0, 6);
    const yv = big.rows(4, 6);
    const m = csrOf([0, 1, 1, 1, 1, 1, 1, 1, 1], [0]);
    rejects([{ kind: 'csr', rows: { start: 0, seqs: 1, stride: 0, tokens: 6 }, x: xv, y: yv, ...m }], InvalidArgumentError, /ops\[0\] \(csr\) y \[6, 8\] overlaps x \[6, 8\] in memory/);
    rejects([{ kind: 'bias', rows: all, y: big.rows(0, 12), bias: big.rows(11, 1).reshape([d]) }], InvalidArgumentError, /ops\[0\] \(bias\) y \[12, 8\] overlaps bias \[8\] in memory/);
    rejects([{ kind: 'layernorm', rows: { start: 0, seqs: 1, stride: 0, tokens: 6 }, x: xv, y: yv, gamma: vec(d), beta: vec(d), eps: 1e-5 }], InvalidArgumentError, /ops\[0\] \(layernorm\) y \[6, 8\] overlaps x \[6, 8\] in memory/);
  });

  it('rejects bad streams and ops of different streams touching rows another stream writes', () => {
    const ops = (): PetOp[] => [
      { kind: 'bias', rows: { start: 0, seqs: 1, stride: 0, tokens: 4 }, y: y(), bias: vec(d) },
      { kind: 'bias', rows: { start: 4, seqs: 1, stride: 0, tokens: 4 }, y: y(), bias: vec(d) },
    ];
    rejects(ops(), InvalidArgumentError, /petSiteRun: streams\[1\] = 2 is outside \[0, 2\) \(numStreams = 2\)/, { streams: [0, 2], numStreams: 2 });
    rejects(ops(), InvalidArgumentError, /petSiteRun: streams\[0\] = -1 is outside \[0, 3\)/, { streams: [-1, 0], numStreams: 3 });
    expect(() => petSiteRun(ops(), { streams: [0] })).toThrow(/petSiteRun: streams has 1 entries, want one per op \(2\)/);
    for (const bad of [0, 1.5, 1025]) {
      expect(() => petSiteRun(ops(), { numStreams: bad })).toThrow(new RegExp(`numStreams must be an integer in \\[1, 1024\\], got ${String(bad).replace('.', '\\.')}`));
      expect(raw(ops(), undefined, bad)).toThrow(/numStreams must be an integer in \[1, 1024\]/);
    }

    const yy = y();
    const xx = x();
    // Two streams writing overlapping rows of y (rows 3..5 of one, 5..8 of the other).
    const clash: PetOp[] = [
      { kind: 'bias', rows: { start: 3, seqs: 1, stride: 0, tokens: 3 }, y: yy, bias: vec(d) },
      { kind: 'csr', rows: { start: 5, seqs: 1, stride: 0, tokens: 4 }, x: xx, y: yy, ...goodCsr() },
    ];
    rejects(clash, InvalidArgumentError, /petSiteRun: ops\[0\] \(bias\) on stream 0 writes y row 5 and ops\[1\] \(csr\) on stream 1 writes y row 5 \(the same memory\): ops on different streams must not touch memory another stream writes/, { streams: [0, 1], numStreams: 2 });
    // The same ops on one stream are ordered: fine.
    petSiteRun(clash, { streams: [1, 1], numStreams: 2 });
    petSiteRun(clash);
    // One stream reads rows (LayerNorm's x) that another writes.
    const out = y();
    const readClash: PetOp[] = [
      { kind: 'bias', rows: { start: 0, seqs: 1, stride: 0, tokens: 6 }, y: yy, bias: vec(d) },
      { kind: 'layernorm', rows: { start: 2, seqs: 2, stride: 6, tokens: 2 }, x: yy, y: out, gamma: vec(d), beta: vec(d), eps: 1e-5 },
    ];
    rejects(readClash, InvalidArgumentError, /ops\[0\] \(bias\) on stream 1 writes y row 2 and ops\[1\] \(layernorm\) on stream 0 reads x row 2/, { streams: [1, 0], numStreams: 2 });
    // Padded sequences interleaved with another stream's rows: disjoint rows, no clash; reads of shared x are fine.
    petSiteRun(
      [
        { kind: 'bias', rows: { start: 0, seqs: 3, stride: 4, tokens: 2 }, y: yy, bias: vec(d) },
        { kind: 'bias', rows: { start: 2, seqs: 3, stride: 4, tokens: 2 }, y: yy, bias: vec(d) },
        { kind: 'csr', rows: { start: 0, seqs: 3, stride: 4, tokens: 2 }, x: xx, y: out, ...goodCsr() },
        { kind: 'csr', rows: { start: 1, seqs: 1, stride: 0, tokens: 3 }, x: xx, y: y(), ...goodCsr() },
      ],
      { streams: [0, 1, 2, 3], numStreams: 4 },
    );
    // A parameter another stream writes.
    const shared = y();
    rejects(
      [
        { kind: 'bias', rows: { start: 0, seqs: 1, stride: 0, tokens: 1 }, y: shared, bias: vec(d) },
        { kind: 'bias', rows: all, y: yy, bias: shared.rows(0, 1).reshape([d]) },
      ],
      InvalidArgumentError,
      /ops\[0\] \(bias\) on stream 0 writes y row 0 and ops\[1\] \(bias\) on stream 1 reads bias \(the same memory\)/,
      { streams: [0, 1], numStreams: 2 },
    );
  });

  it('rejects tensors of another backend and disposed tensors', () => {
    const backend = cpu();
    const other: Backend = { ...backend, binding: { ...backend.binding } };
    const foreign = new Tensor(vec(d).native, other);
    expect(() => petSiteRun([{ kind: 'bias', rows: all, y: y(), bias: foreign }])).toThrow(DeviceMismatchError);
    expect(() => petSiteRun([{ kind: 'bias', rows: all, y: y(), bias: foreign }])).toThrow(/ops\[0\] \(bias\) bias lives on cpu, ops\[0\] y on cpu/);
    const gone = vec(d);
    gone.dispose();
    expect(() => petSiteRun([{ kind: 'bias', rows: all, y: y(), bias: gone }])).toThrow(DisposedTensorError);
  });
});

// ---------------------------------------------------------------- cost model

describe('petOpCost', () => {
  it('follows the analytic formulas of pets.md §6.2', () => {
    const rows: PetRows = { start: 0, seqs: 3, stride: 10, tokens: 7 }; // R = 21
    const R = 21;
    const x = Tensor.zeros([30, 48], 'f32', cpu());
    const y = Tensor.zeros([30, 40], 'f32', cpu());
    const csr = { indptr: i32(new Array<number>(41).fill(0)), indices: i32(new Array<number>(13).fill(0)), values: Tensor.zeros([13], 'f32', cpu()) };
    expect(petOpCost({ kind: 'csr', rows, x, y, ...csr })).toEqual({ flops: 2 * R * 13, bytes: 13 * 8 + 41 * 4 + R * (48 + 40) * 4 });
    const m = 16;
    const ad = { down: Tensor.zeros([m, 40], 'f32', cpu()), downBias: Tensor.zeros([m], 'f32', cpu()), up: Tensor.zeros([40, m], 'f32', cpu()), upBias: Tensor.zeros([40], 'f32', cpu()) };
    expect(petOpCost({ kind: 'adapter', rows, y, ...ad })).toEqual({ flops: 2 * R * 2 * 40 * m + R * m, bytes: (2 * 40 * m + m + 40) * 4 + R * 2 * 40 * 4 });
    expect(petOpCost({ kind: 'bias', rows, y, bias: Tensor.zeros([40], 'f32', cpu()) })).toEqual({ flops: R * 40, bytes: R * 40 * 8 + 40 * 4 });
    const ln = { kind: 'layernorm' as const, rows, x: y, y, gamma: Tensor.zeros([40], 'f32', cpu()), beta: Tensor.zeros([40], 'f32', cpu()), eps: 1e-5 };
    expect(petOpCost(ln)).toEqual({ flops: 8 * R * 40, bytes: R * 40 * 8 + 2 * 40 * 4 });
    expect(petOpCost({ ...ln, rows: { ...rows, tokens: 0 } })).toEqual({ flops: 0, bytes: 2 * 40 * 4 });
    // Operational intensity orders the kinds as PetS's Algorithm 2 expects at BERT-base sizes: bias < diff < maskbert < adapter.
    const big: PetRows = { start: 0, seqs: 1, stride: 0, tokens: 512 };
    const X = Tensor.zeros([512, 768], 'f32', cpu());
    const Y = Tensor.zeros([512, 768], 'f32', cpu());
    const sparse = (nnz: number) => ({ indptr: i32(new Array<number>(769).fill(0)), indices: i32(new Array<number>(nnz).fill(0)), values: Tensor.zeros([nnz], 'f32', cpu()) });
    const intensity = (c: { flops: number; bytes: number }): number => c.flops / c.bytes;
    const bias = intensity(petOpCost({ kind: 'bias', rows: big, y: Y, bias: Tensor.zeros([768], 'f32', cpu()) }));
    const diff = intensity(petOpCost({ kind: 'csr', rows: big, x: X, y: Y, ...sparse(Math.round(768 * 768 * 0.005)) }));
    const mask = intensity(petOpCost({ kind: 'csr', rows: big, x: X, y: Y, ...sparse(Math.round(768 * 768 * 0.05)) }));
    const adapter = intensity(
      petOpCost({ kind: 'adapter', rows: big, y: Y, down: Tensor.zeros([64, 768], 'f32', cpu()), downBias: Tensor.zeros([64], 'f32', cpu()), up: Tensor.zeros([768, 64], 'f32', cpu()), upBias: Tensor.zeros([768], 'f32', cpu()) }),
    );
    expect(bias).toBeLessThan(diff);
    expect(diff).toBeLessThan(mask);
    expect(mask).toBeLessThan(adapter);
  });
});

// ---------------------------------------------------------------- CUDA (skipped without a device)

const cudaBuilt = existsSync(join(addonDirectory(), 'tessera_cuda.node'));
const hasCuda = cudaBuilt && getBackend('auto').device === 'cuda';

describe('the CUDA addon (runs wherever it is built)', () => {
  it.skipIf(!cudaBuilt)('exports petSiteRun', () => {
    const binding = createRequire(import.meta.url)(join(addonDirectory(), 'tessera_cuda.node')) as Record<string, unknown>;
    expect(typeof binding.petSiteRun).toBe('function');
  });
});

describe.skipIf(!hasCuda)('PET ops on CUDA against the CPU reference', () => {
  const gpu = (): Backend => getBackend('auto');
  const moveTo = (t: Tensor, backend: Backend): Tensor => Tensor.from(t.toArray(), t.shape, { dtype: t.dtype, backend });

  /** Rebuilds an op list with every tensor moved to `backend` (tensors shared between ops stay shared). */
  function opsOn(ops: PetOp[], backend: Backend): PetOp[] {
    const moved = new Map<Tensor, Tensor>();
    const mv = (t: Tensor): Tensor => {
      let m = moved.get(t);
      if (!m) moved.set(t, (m = moveTo(t, backend)));
      return m;
    };
    return ops.map((op) => Object.fromEntries(Object.entries(op).map(([k, v]) => [k, v instanceof Tensor ? mv(v) : v])) as PetOp);
  }

  it('each op kind and the mixed site match the CPU reference; streams and repeats are bitwise equal on the device', () => {
    const site = mixedSite(900, 96, 80);
    const cases: { label: string; build: (y: Tensor) => PetOp[]; streams: (n: number) => number[] }[] = [
      { label: 'mixed site', build: (y) => interleave(site.taskOps(y), (t) => t).ops, streams: (n) => interleave(site.taskOps(Tensor.zeros([site.total, site.d], 'f32', cpu())), (t) => t % n).streams },
    ];
    for (const kind of ['csr', 'bias', 'adapter', 'layernorm'] as const) {
      cases.push({
        label: kind,
        build: (y) => site.taskOps(y).flat().filter((op) => op.kind === kind),
        streams: (n) => site.taskOps(Tensor.zeros([site.total, site.d], 'f32', cpu())).flat().filter((op) => op.kind === kind).map((_, i) => i % n),
      });
    }
    for (const c of cases) {
      const yCpu = tensorF32(site.y0, [site.total, site.d]);
      const cpuOps = c.build(yCpu);
      petSiteRun(cpuOps, { reference: true });
      const want = f32(yCpu);
      const results: Float32Array[] = [];
      for (const reference of [false, true]) {
        for (const numStreams of [1, 3]) {
          const yG = tensorF32(site.y0, [site.total, site.d], gpu());
          const gpuOps = opsOn(c.build(tensorF32(site.y0, [site.total, site.d])), gpu()).map((op) => ({ ...op, y: yG, ...('x' in op && op.kind === 'layernorm' ? { x: yG } : {}) })) as PetOp[];
          petSiteRun(gpuOps, { reference, numStreams, streams: c.streams(numStreams) });
          const got = f32(yG);
          let num = 0;
          let den = 0;
          for (let i = 0; i < want.length; i++) {
            num += (got[i]! - want[i]!) ** 2;
            den += want[i]! ** 2;
          }
          expect(Math.sqrt(num / den), `${c.label} cuda ref=${reference} streams=${numStreams}`).toBeLessThan(1e-5);
          expectUntouched(got, site.y0, site.d, coveredRows(site.rows), `${c.label} cuda`);
          if (!reference) results.push(got);
        }
      }
      expectBitwiseEqual(results[1]!, results[0]!, `${c.label} cuda numStreams 3 vs 1`);
    }
  });
});
