/**
 * The SGMV and BGMV kernels (through this package's wrappers) against the float64 reference, on Punica's test
 * grid at CPU sizes (punica.md §13 T1–T8): every popularity pattern, batch sizes 1…133, several layers, ranks
 * 8…128, h ∈ {64, 128} and one 4096 case, empty segments, accumulation, zero adapters, determinism, BGMV.
 * Tolerance: normwise relative error ≤ 1e-5 against float64 (f32 accumulation over h ≤ 4096 terms).
 */
import { SegmentLayout } from '@tessera/engine';
import { type Isa, InvalidArgumentError, ShapeMismatchError, Tensor, deviceInfo, gemm, getCpuBackend, setIsa, setThreads } from '@tessera/native';
import { randomFloats, randomInts } from '@tessera/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import {
  bgmvExpandRows,
  bgmvShrinkRows,
  referenceBgmvExpand,
  referenceBgmvShrink,
  referenceExpand,
  referenceShrink,
  rowIndexFromSegments,
  sgmvExpandSegments,
  sgmvShrinkSegments,
} from '../src/index.js';
import { type PopularityName, indptrFromSizes, popularity } from '../src/bench.js';
import { type Stack, TOL, disposeAll, normwiseError, randomMat, randomStack, readF32, sameBits } from './support.js';

const POPULARITIES: PopularityName[] = ['distinct', 'uniform', 'zipf', 'identical', 'skewed'];
const BATCHES = [1, 2, 3, 4, 7, 10, 16, 32, 64, 133];
const LAYERS = 3;
/** Distinct adapters per (rank, h); segment i uses pool[i mod POOL], so neighbouring segments always differ. */
const POOL = 13;

const pools = new Map<string, Stack[]>();
function pool(rank: number, features: number): Stack[] {
  const key = `${rank}x${features}`;
  let p = pools.get(key);
  if (!p) {
    p = Array.from({ length: POOL }, (_, i) => randomStack(LAYERS, rank, features, 1000 * rank + 10 * features + i));
    pools.set(key, p);
  }
  return p;
}
afterAll(() => {
  for (const p of pools.values()) disposeAll(p);
});

interface Case {
  sizes: number[];
  rank: number;
  hIn: number;
  hOut: number;
  layer: number;
  seed: number;
}

/** Shrink then expand of one case with `weights` chosen from the pools; returns both normwise errors. */
function checkCase(c: Case, options: { reference?: boolean } = {}): { shrink: number; expand: number } {
  const rows = c.sizes.reduce((a, b) => a + b, 0);
  const indptr = indptrFromSizes(c.sizes);
  const wa = pool(c.rank, c.hIn);
  const wb = pool(c.rank, c.hOut);
  const a = c.sizes.map((_, i) => wa[(i + c.seed) % POOL]!);
  const b = c.sizes.map((_, i) => wb[(i + c.seed) % POOL]!);
  const x = randomMat(rows, c.hIn, c.seed + 1);
  const v = randomMat(rows, c.rank, c.seed + 2);
  const y = randomMat(rows, c.hOut, c.seed + 3);
  try {
    const shrinkWant = { data: Float64Array.from(v.host.data), rows, cols: c.rank };
    referenceShrink(shrinkWant, x.host, a.map((s) => s.host), indptr, c.layer);
    sgmvShrinkSegments(v.t, x.t, a.map((s) => s.t), indptr, c.layer, options);
    const shrink = normwiseError(readF32(v.t), shrinkWant.data);

    // Expand from the (now updated) intermediate, like the LoRA op.
    const vNow = { data: readF32(v.t), rows, cols: c.rank };
    const expandWant = { data: Float64Array.from(y.host.data), rows, cols: c.hOut };
    referenceExpand(expandWant, vNow, b.map((s) => s.host), indptr, c.layer);
    sgmvExpandSegments(y.t, v.t, b.map((s) => s.t), indptr, c.layer, options);
    const expand = normwiseError(readF32(y.t), expandWant.data);
    return { shrink, expand };
  } finally {
    disposeAll(x, v, y);
  }
}

describe('SGMV vs the float64 reference (T1)', () => {
  it('every popularity × batch 1…133 × rank 8/16/32/64 × h 64/128, layer by layer', () => {
    let worst = 0;
    let cases = 0;
    for (const pop of POPULARITIES) {
      for (const bs of BATCHES) {
        for (const rank of [8, 16, 32, 64]) {
          for (const h of [64, 128]) {
            const sizes = popularity(pop, bs);
            const layer = (bs + rank) % LAYERS;
            const err = checkCase({ sizes, rank, hIn: h, hOut: h, layer, seed: bs * 7 + rank });
            const label = `${pop} bs=${bs} r=${rank} h=${h} layer=${layer}`;
            expect(err.shrink, `${label} shrink`).toBeLessThanOrEqual(TOL);
            expect(err.expand, `${label} expand`).toBeLessThanOrEqual(TOL);
            worst = Math.max(worst, err.shrink, err.expand);
            cases++;
          }
        }
      }
    }
    expect(cases).toBe(400);
    expect(worst).toBeGreaterThan(0); // the comparison really measured something
  });

  it('ranks 96 and 128, every layer, in and out widths that differ', () => {
    for (const pop of POPULARITIES) {
      for (const bs of [7, 64, 133]) {
        for (const rank of [96, 128]) {
          for (let layer = 0; layer < LAYERS; layer++) {
            const err = checkCase({ sizes: popularity(pop, bs), rank, hIn: 64, hOut: 128, layer, seed: bs + layer });
            expect(Math.max(err.shrink, err.expand), `${pop} bs=${bs} r=${rank} layer=${layer}`).toBeLessThanOrEqual(TOL);
          }
        }
      }
    }
  });

  it('h = 4096, r = 16 (the paper\'s shape), zipf and distinct', () => {
    for (const pop of ['zipf', 'distinct'] as const) {
      const err = checkCase({ sizes: popularity(pop, 32), rank: 16, hIn: 4096, hOut: 4096, layer: 2, seed: 99 });
      expect(err.shrink).toBeLessThanOrEqual(TOL);
      expect(err.expand).toBeLessThanOrEqual(TOL);
    }
  });

  it('widths and ranks that are not multiples of the SIMD width (h 1, 7, 100, 257; r 1, 3, 5)', () => {
    for (const h of [1, 7, 100, 257]) {
      for (const rank of [1, 3, 5]) {
        const err = checkCase({ sizes: [3, 1, 5], rank, hIn: h, hOut: h + 3, layer: 1, seed: h + rank });
        expect(Math.max(err.shrink, err.expand), `h=${h} r=${rank}`).toBeLessThanOrEqual(TOL);
      }
    }
  });

  it('the scalar reference kernel and every ISA agree with the float64 reference', () => {
    const best = deviceInfo(getCpuBackend()).bestIsa ?? 'scalar';
    const isas = (['scalar', 'avx2', 'avx512'] as Isa[]).slice(0, ['scalar', 'avx2', 'avx512'].indexOf(best) + 1);
    try {
      for (const isa of isas) {
        setIsa(isa);
        for (const pop of POPULARITIES) {
          const err = checkCase({ sizes: popularity(pop, 33), rank: 16, hIn: 300, hOut: 136, layer: 1, seed: 5 });
          expect(Math.max(err.shrink, err.expand), `${isa} ${pop}`).toBeLessThanOrEqual(TOL);
        }
      }
    } finally {
      setIsa('best');
    }
    const err = checkCase({ sizes: popularity('zipf', 64), rank: 32, hIn: 128, hOut: 64, layer: 0, seed: 8 }, { reference: true });
    expect(Math.max(err.shrink, err.expand)).toBeLessThanOrEqual(TOL);
  });

  it('mixed ranks in one batch (r_i ≤ the intermediate width) and null segments', () => {
    const hIn = 64;
    const hOut = 48;
    const sizes = [4, 2, 3, 1, 6];
    const rows = 16;
    const indptr = indptrFromSizes(sizes);
    const a = [randomStack(2, 8, hIn, 1), null, randomStack(2, 3, hIn, 2), randomStack(2, 16, hIn, 3), randomStack(2, 1, hIn, 4)];
    const b = [randomStack(2, 8, hOut, 5), null, randomStack(2, 3, hOut, 6), randomStack(2, 16, hOut, 7), randomStack(2, 1, hOut, 8)];
    const x = randomMat(rows, hIn, 9);
    const v = randomMat(rows, 20, 10); // wider than every rank
    const y = randomMat(rows, hOut, 11);
    try {
      const vWant = { data: Float64Array.from(v.host.data), rows, cols: 20 };
      referenceShrink(vWant, x.host, a.map((s) => s?.host ?? null), indptr, 1);
      sgmvShrinkSegments(v.t, x.t, a.map((s) => s?.t ?? null), indptr, 1);
      const vGot = readF32(v.t);
      expect(normwiseError(vGot, vWant.data)).toBeLessThanOrEqual(TOL);
      // Columns past a segment's rank and the null segment's rows are untouched (bitwise).
      for (let row = 0; row < rows; row++) {
        const seg = row < 4 ? 0 : row < 6 ? 1 : row < 9 ? 2 : row < 10 ? 3 : 4;
        const r = [8, 0, 3, 16, 1][seg]!;
        for (let j = r; j < 20; j++) expect(vGot[row * 20 + j]).toBe(v.host.data[row * 20 + j]);
      }
      const yWant = { data: Float64Array.from(y.host.data), rows, cols: hOut };
      referenceExpand(yWant, { data: vGot, rows, cols: 20 }, b.map((s) => s?.host ?? null), indptr, 1, [0.5, 9, -2, 1, 3]);
      sgmvExpandSegments(y.t, v.t, b.map((s) => s?.t ?? null), indptr, 1, { scales: [0.5, 9, -2, 1, 3] });
      expect(normwiseError(readF32(y.t), yWant.data)).toBeLessThanOrEqual(TOL);
    } finally {
      disposeAll(a, b, x, v, y);
    }
  });
});

describe('SGMV semantics (T2, T3, T5, T6, T7)', () => {
  const hIn = 96;
  const hOut = 80;
  const rank = 16;

  it('accumulates: y is read, and two calls add twice (T2)', () => {
    const sizes = [5, 3, 8];
    const indptr = indptrFromSizes(sizes);
    const a = pool(rank, hIn).slice(0, 3);
    const x = randomMat(16, hIn, 1);
    const y = randomMat(16, rank, 2);
    try {
      const want = { data: Float64Array.from(y.host.data), rows: 16, cols: rank };
      referenceShrink(want, x.host, a.map((s) => s.host), indptr, 0);
      referenceShrink(want, x.host, a.map((s) => s.host), indptr, 0);
      sgmvShrinkSegments(y.t, x.t, a.map((s) => s.t), indptr, 0);
      sgmvShrinkSegments(y.t, x.t, a.map((s) => s.t), indptr, 0);
      expect(normwiseError(readF32(y.t), want.data)).toBeLessThanOrEqual(TOL);
    } finally {
      disposeAll(x, y);
    }
  });

  it('empty segments anywhere (first, last, runs of them) contribute nothing and do not disturb others (T3)', () => {
    for (const sizes of [[0, 3, 0, 0, 2, 0], [0], [0, 0, 4], [4, 0], [1, 0, 1, 0, 1]]) {
      const err = checkCase({ sizes, rank, hIn, hOut, layer: 1, seed: sizes.length });
      expect(Math.max(err.shrink, err.expand), JSON.stringify(sizes)).toBeLessThanOrEqual(TOL);
    }
    // A batch of zero rows: nothing to do, and no error.
    const x = Tensor.empty([0, hIn]);
    const y = Tensor.empty([0, rank]);
    try {
      sgmvShrinkSegments(y, x, [pool(rank, hIn)[0]!.t, null], new Int32Array([0, 0, 0]), 0);
    } finally {
      disposeAll(x, y);
    }
  });

  it('a single segment is a plain GEMM (T3)', () => {
    const rows = 10;
    const wa = pool(rank, hIn)[4]!;
    const wb = pool(rank, hOut)[4]!;
    const x = randomMat(rows, hIn, 3);
    const v = Tensor.zeros([rows, rank]);
    const y = Tensor.zeros([rows, hOut]);
    const aLayer = Tensor.from((wa.host.data as Float32Array).subarray(2 * rank * hIn, 3 * rank * hIn), [rank, hIn]);
    const bLayer = Tensor.from((wb.host.data as Float32Array).subarray(2 * rank * hOut, 3 * rank * hOut), [rank, hOut]);
    try {
      sgmvShrinkSegments(v, x.t, [wa.t], SegmentLayout.uniform(rows, 'one'), 2);
      const vGemm = gemm(x.t, aLayer, { transB: true });
      expect(normwiseError(readF32(v), readF32(vGemm))).toBeLessThanOrEqual(TOL);
      sgmvExpandSegments(y, v, [wb.t], new Int32Array([0, rows]), 2);
      const yGemm = gemm(v, bLayer);
      expect(normwiseError(readF32(y), readF32(yGemm))).toBeLessThanOrEqual(TOL);
      disposeAll(vGemm, yGemm);
    } finally {
      disposeAll(x, v, y, aLayer, bLayer);
    }
  });

  it('a zero adapter and a null weight leave y bit for bit unchanged (T5)', () => {
    const zeroA = Tensor.zeros([LAYERS, rank, hIn]);
    const zeroB = Tensor.zeros([LAYERS, rank, hOut]);
    const x = randomMat(6, hIn, 4);
    const v = randomMat(6, rank, 5);
    const y = randomMat(6, hOut, 6);
    try {
      sgmvShrinkSegments(v.t, x.t, [zeroA, null], new Int32Array([0, 4, 6]), 1);
      expect(sameBits(readF32(v.t), v.host.data)).toBe(true);
      sgmvExpandSegments(y.t, v.t, [null, zeroB], new Int32Array([0, 4, 6]), 1);
      expect(sameBits(readF32(y.t), y.host.data)).toBe(true);
    } finally {
      disposeAll(zeroA, zeroB, x, v, y);
    }
  });

  it('a row\'s output does not depend on the rest of the batch, bit for bit (T6)', () => {
    const wa = pool(rank, hIn);
    const wb = pool(rank, hOut);
    const sizes = [3, 5, 1, 7];
    const indptr = indptrFromSizes(sizes);
    const x = randomMat(16, hIn, 7);
    const v = Tensor.zeros([16, rank]);
    const y = Tensor.zeros([16, hOut]);
    try {
      sgmvShrinkSegments(v, x.t, [wa[0]!.t, wa[1]!.t, wa[2]!.t, wa[3]!.t], indptr, 0);
      sgmvExpandSegments(y, v, [wb[0]!.t, wb[1]!.t, wb[2]!.t, wb[3]!.t], indptr, 0);
      const vAll = readF32(v);
      const yAll = readF32(y);
      // Row 5 (segment 1) alone, in a batch of one.
      const x1 = x.t.rows(5, 1);
      const v1 = Tensor.zeros([1, rank]);
      const y1 = Tensor.zeros([1, hOut]);
      sgmvShrinkSegments(v1, x1, [wa[1]!.t], new Int32Array([0, 1]), 0);
      sgmvExpandSegments(y1, v1, [wb[1]!.t], new Int32Array([0, 1]), 0);
      expect(sameBits(readF32(v1), vAll.subarray(5 * rank, 6 * rank))).toBe(true);
      expect(sameBits(readF32(y1), yAll.subarray(5 * hOut, 6 * hOut))).toBe(true);
      disposeAll(x1, v1, y1);
    } finally {
      disposeAll(x, v, y);
    }
  });

  it('repeated calls and any thread count give the same bits (T7)', () => {
    const sizes = popularity('zipf', 64);
    const indptr = indptrFromSizes(sizes);
    const a = sizes.map((_, i) => pool(rank, 1024)[i % POOL]!.t);
    const b = sizes.map((_, i) => pool(rank, hOut)[i % POOL]!.t);
    const x = randomMat(64, 1024, 8);
    const run = (): [Float32Array, Float32Array] => {
      const v = Tensor.zeros([64, rank]);
      const y = Tensor.zeros([64, hOut]);
      try {
        sgmvShrinkSegments(v, x.t, a, indptr, 1);
        sgmvExpandSegments(y, v, b, indptr, 1);
        return [readF32(v), readF32(y)];
      } finally {
        disposeAll(v, y);
      }
    };
    const threads = deviceInfo(getCpuBackend()).threads ?? 1;
    try {
      const [v0, y0] = run();
      for (let i = 0; i < 3; i++) {
        const [v1, y1] = run();
        expect(sameBits(v1, v0) && sameBits(y1, y0)).toBe(true);
      }
      for (const n of [1, 3, 8]) {
        setThreads(n);
        const [v1, y1] = run();
        expect(sameBits(v1, v0), `shrink at ${n} threads`).toBe(true);
        expect(sameBits(y1, y0), `expand at ${n} threads`).toBe(true);
      }
    } finally {
      setThreads(threads);
      disposeAll(x);
    }
  });
});

describe('BGMV (T8)', () => {
  it('per-row indices (unsorted, with −1 rows and scales) equal the reference and SGMV on the sorted rows', () => {
    const hIn = 128;
    const hOut = 72;
    const rank = 8;
    const rows = 37;
    const weightsA = pool(rank, hIn).slice(0, 5);
    const weightsB = pool(rank, hOut).slice(0, 5);
    const idx = randomInts(rows, 3, -1, 5);
    const scales = [1, 0.5, 2, -1, 0.25];
    const x = randomMat(rows, hIn, 12);
    const v = Tensor.zeros([rows, rank]);
    const y = randomMat(rows, hOut, 13);
    try {
      bgmvShrinkRows(v, x.t, weightsA.map((s) => s.t), idx, 2);
      const vWant = { data: new Float64Array(rows * rank), rows, cols: rank };
      referenceBgmvShrink(vWant, x.host, weightsA.map((s) => s.host), idx, 2);
      const vGot = readF32(v);
      expect(normwiseError(vGot, vWant.data)).toBeLessThanOrEqual(TOL);
      bgmvExpandRows(y.t, v, weightsB.map((s) => s.t), Tensor.from(idx, [rows]), 2, { scales });
      const yWant = { data: Float64Array.from(y.host.data), rows, cols: hOut };
      referenceBgmvExpand(yWant, { data: vGot, rows, cols: rank }, weightsB.map((s) => s.host), idx, 2, scales);
      const yGot = readF32(y.t);
      expect(normwiseError(yGot, yWant.data)).toBeLessThanOrEqual(TOL);

      // Sort rows by adapter (stable), run SGMV over the segments, un-permute: the same bits.
      const order = Array.from({ length: rows }, (_, r) => r).sort((p, q) => idx[p]! - idx[q]! || p - q);
      const keys = order.map((r) => (idx[r]! < 0 ? null : String(idx[r])));
      const layout = SegmentLayout.fromRowKeys(keys);
      const segWeight = layout.segments.map((s) => (s.key === null ? -1 : Number(s.key)));
      const xs = new Float32Array(rows * hIn);
      const ys = new Float32Array(rows * hOut);
      order.forEach((r, i) => {
        xs.set(x.host.data.subarray(r * hIn, (r + 1) * hIn), i * hIn);
        ys.set(y.host.data.subarray(r * hOut, (r + 1) * hOut), i * hOut);
      });
      const xsT = Tensor.from(xs, [rows, hIn]);
      const vsT = Tensor.zeros([rows, rank]);
      const ysT = Tensor.from(ys, [rows, hOut]);
      const pick = <T>(list: T[]) => segWeight.map((j) => (j < 0 ? null : list[j]!));
      sgmvShrinkSegments(vsT, xsT, pick(weightsA.map((s) => s.t)), layout, 2);
      sgmvExpandSegments(ysT, vsT, pick(weightsB.map((s) => s.t)), layout, 2, { scales: segWeight.map((j) => (j < 0 ? 1 : scales[j]!)) });
      const vs = readF32(vsT);
      const ysGot = readF32(ysT);
      const vBack = new Float32Array(rows * rank);
      const yBack = new Float32Array(rows * hOut);
      order.forEach((r, i) => {
        vBack.set(vs.subarray(i * rank, (i + 1) * rank), r * rank);
        yBack.set(ysGot.subarray(i * hOut, (i + 1) * hOut), r * hOut);
      });
      expect(sameBits(vBack, vGot)).toBe(true);
      expect(sameBits(yBack, yGot)).toBe(true);
      // And the helper that goes the other way: segments → per-row indices.
      expect(Array.from(rowIndexFromSegments(layout, segWeight))).toEqual(order.map((r) => idx[r]));
      disposeAll(xsT, vsT, ysT);
    } finally {
      disposeAll(x, v, y);
    }
  });
});

describe('argument checking', () => {
  it('typed errors for bad segments, weights and layers', () => {
    const a = pool(16, 64)[0]!.t;
    const x = randomMat(4, 64, 1);
    const v = Tensor.zeros([4, 16]);
    const narrow = Tensor.zeros([4, 8]);
    try {
      expect(() => sgmvShrinkSegments(v, x.t, [a], new Int32Array([0, 3]), 0)).toThrow(InvalidArgumentError);
      expect(() => sgmvShrinkSegments(v, x.t, [a, a, a], new Int32Array([0, 3, 2, 4]), 0)).toThrow(/non-decreasing/);
      expect(() => sgmvShrinkSegments(v, x.t, [a], new Int32Array([0, 4]), LAYERS)).toThrow(InvalidArgumentError);
      expect(() => sgmvShrinkSegments(narrow, x.t, [a], new Int32Array([0, 4]), 0)).toThrow(ShapeMismatchError);
      expect(() => sgmvShrinkSegments(v, x.t, [a, a], new Int32Array([0, 4]), 0)).toThrow(ShapeMismatchError);
      expect(() => bgmvShrinkRows(v, x.t, [a], new Int32Array([0, 1, 0, 0]), 0)).toThrow(InvalidArgumentError);
      expect(() => sgmvShrinkSegments(v, x.t, [a], SegmentLayout.uniform(3), 0)).toThrow(InvalidArgumentError);
    } finally {
      disposeAll(x, v, narrow);
    }
  });
});
