/**
 * The LoRA add-on (shrink into a zeroed intermediate, then expand) and the operator baselines: all against the
 * float64 reference, the merged-weight formulation (T4) and each other (T9). Tolerance: normwise ≤ 1e-5.
 */
import { SegmentLayout } from '@tessera/engine';
import { InvalidArgumentError, ShapeMismatchError, Tensor, add, gemm, linear } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import { addLora, addLoraBgmv, referenceAddLora, rowIndexFromSegments } from '../src/index.js';
import {
  bmm,
  gatherBmm,
  gatherLoraWeights,
  indptrFromSizes,
  loraLoop,
  popularity,
  stackLoraWeights,
  tableViews,
} from '../src/bench.js';
import { TOL, disposeAll, normwiseError, randomMat, randomStack, readF32, sameBits } from './support.js';

const L = 2;

describe('addLora', () => {
  const hIn = 80;
  const hOut = 96;
  // Ranks 8, 4, none, 16, 8: the intermediate is 16 wide.
  const a = [randomStack(L, 8, hIn, 1), randomStack(L, 4, hIn, 2), null, randomStack(L, 16, hIn, 3), randomStack(L, 8, hIn, 4)];
  const b = [randomStack(L, 8, hOut, 5), randomStack(L, 4, hOut, 6), null, randomStack(L, 16, hOut, 7), randomStack(L, 8, hOut, 8)];
  const sizes = [3, 1, 4, 0, 6];
  const rows = 14;
  const indptr = indptrFromSizes(sizes);
  const aT = a.map((s) => s?.t ?? null);
  const bT = b.map((s) => s?.t ?? null);
  const aH = a.map((s) => s?.host ?? null);
  const bH = b.map((s) => s?.host ?? null);

  function run(segments: Parameters<typeof addLora>[4], options: Parameters<typeof addLora>[6] = {}, layer = 1): { got: Float32Array; want: Float64Array } {
    const x = randomMat(rows, hIn, 10);
    const y = randomMat(rows, hOut, 11);
    try {
      addLora(y.t, x.t, aT, bT, segments, layer, options);
      const scale = options.scale;
      const scales = typeof scale === 'number' ? new Array(sizes.length).fill(scale) : scale;
      return { got: readF32(y.t), want: referenceAddLora(y.host, x.host, aH, bH, indptr, layer, scales) };
    } finally {
      disposeAll(x, y);
    }
  }

  it('equals the reference for an Int32Array, a tensor indptr and a SegmentLayout', () => {
    const layout = SegmentLayout.fromCounts(sizes.map((count, i) => ({ key: `t${i}`, count })));
    const indptrT = Tensor.from(indptr, [indptr.length]);
    try {
      for (const segments of [indptr, indptrT, layout]) {
        for (let layer = 0; layer < L; layer++) {
          const { got, want } = run(segments, {}, layer);
          expect(normwiseError(got, want)).toBeLessThanOrEqual(TOL);
        }
      }
    } finally {
      indptrT.dispose();
      layout.dispose();
    }
  });

  it('applies one scale or one per segment', () => {
    for (const scale of [0.25, [2, -1, 5, 7, 0.5]]) {
      const { got, want } = run(indptr, { scale });
      expect(normwiseError(got, want)).toBeLessThanOrEqual(TOL);
    }
  });

  it('uses a wider rMax and a caller scratch (zeroing it first, even when it holds NaN)', () => {
    const scratch = Tensor.from(new Float32Array(rows * 24).fill(Number.NaN), [rows, 24]);
    try {
      const { got, want } = run(indptr, { rMax: 24, scratch });
      expect(normwiseError(got, want)).toBeLessThanOrEqual(TOL);
      const again = run(indptr, { rMax: 24, scratch });
      expect(sameBits(again.got, got)).toBe(true);
    } finally {
      scratch.dispose();
    }
  });

  it('the scalar reference kernels give the same result within tolerance', () => {
    const { got, want } = run(indptr, { reference: true });
    expect(normwiseError(got, want)).toBeLessThanOrEqual(TOL);
  });

  it('the BGMV form equals the SGMV form on the same rows (bit for bit)', () => {
    const x = randomMat(rows, hIn, 10);
    const y1 = randomMat(rows, hOut, 11);
    const y2 = randomMat(rows, hOut, 11);
    try {
      addLora(y1.t, x.t, aT, bT, indptr, 0, { scale: 0.5 });
      addLoraBgmv(y2.t, x.t, aT, bT, rowIndexFromSegments(indptr), 0, { scale: 0.5 });
      expect(sameBits(readF32(y2.t), readF32(y1.t))).toBe(true);
    } finally {
      disposeAll(x, y1, y2);
    }
  });

  it('with no adapter in the batch it is a no-op; zero rows are fine', () => {
    const x = randomMat(3, hIn, 1);
    const y = randomMat(3, hOut, 2);
    try {
      addLora(y.t, x.t, [null, null], [null, null], new Int32Array([0, 1, 3]), 0);
      expect(sameBits(readF32(y.t), y.host.data)).toBe(true);
      // and a batch of zero rows is fine too
      const [x0, y0] = [Tensor.empty([0, hIn]), Tensor.empty([0, hOut])];
      addLora(y0, x0, [aT[0]!], [bT[0]!], new Int32Array([0, 0]), 0);
      disposeAll(x0, y0);
    } finally {
      disposeAll(x, y);
    }
  });

  it('rejects mismatched A/B pairs, a narrow rMax or scratch, and wrong counts', () => {
    const x = randomMat(rows, hIn, 1);
    const y = randomMat(rows, hOut, 2);
    const narrow = Tensor.zeros([rows, 8]);
    try {
      expect(() => addLora(y.t, x.t, aT, bT.slice(0, 4), indptr, 0)).toThrow(/5 A weights but 4 B/);
      expect(() => addLora(y.t, x.t, aT, [bT[1]!, ...bT.slice(1)], indptr, 0)).toThrow(ShapeMismatchError);
      expect(() => addLora(y.t, x.t, aT, [null, ...bT.slice(1)], indptr, 0)).toThrow(/segment 0 has an A but no B/);
      expect(() => addLora(y.t, x.t, aT, bT, indptr, 0, { rMax: 8 })).toThrow(/rMax 8 is below the largest rank 16/);
      expect(() => addLora(y.t, x.t, aT, bT, indptr, 0, { scratch: narrow })).toThrow(/scratch f32 \[14, 8\] must be f32 \[14, 16\]/);
      expect(() => addLora(y.t, x.t, aT, bT, indptr, 0, { scale: [1, 2] })).toThrow(/2 scales for 5 segments/);
      expect(() => addLora(y.t, x.t, aT.slice(0, 4), bT.slice(0, 4), indptr, 0)).toThrow(InvalidArgumentError);
    } finally {
      disposeAll(x, y, narrow);
    }
  });
});

describe('T4: the LoRA op is the merged-weight delta x·(W + ΔW)ᵀ − x·Wᵀ', () => {
  it('for one adapter with its scale, at h = 256', () => {
    const h = 256;
    const rank = 16;
    const scale = 2;
    const wA = randomStack(L, rank, h, 1, 0.1);
    const wB = randomStack(L, rank, h, 2, 0.1);
    const W = Tensor.from(randomFloats(h * h, 3, -0.05, 0.05), [h, h]);
    const x = randomMat(9, h, 4);
    const y = Tensor.zeros([9, h]);
    const aL = wA.t.rows(1, 1).reshape([rank, h]);
    const bL = wB.t.rows(1, 1).reshape([rank, h]);
    try {
      addLora(y, x.t, [wA.t], [wB.t], new Int32Array([0, 9]), 1, { scale });
      // ΔW [out, in] = scale · B[layer]ᵀ · A[layer]
      const dW = gemm(bL, aL, { transA: true, alpha: scale });
      const merged = add(W, dW);
      const yMerged = linear(x.t, merged);
      const yBase = linear(x.t, W);
      const diff = readF32(yMerged).map((v, i) => v - readF32(yBase)[i]!);
      // The difference of two f32 products carries their rounding (relative to |x·W|), hence 1e-4 here.
      expect(normwiseError(readF32(y), diff)).toBeLessThanOrEqual(1e-4);
      disposeAll(dW, merged, yMerged, yBase);
    } finally {
      disposeAll(wA, wB, W, x, y, aL, bL);
    }
  });
});

describe('baselines equal SGMV (T9)', () => {
  it('Loop, Gather-BMM, and Gather then BMM agree with addLora and the reference on every popularity', () => {
    const hIn = 256;
    const hOut = 192;
    const rank = 16;
    const adapters = 9;
    const A = Array.from({ length: adapters }, (_, i) => randomStack(L, rank, hIn, 100 + i));
    const B = Array.from({ length: adapters }, (_, i) => randomStack(L, rank, hOut, 200 + i));
    const table = stackLoraWeights(A.map((s) => s.t), B.map((s) => s.t));
    const views = tableViews(table);
    try {
      for (const pop of ['distinct', 'uniform', 'zipf', 'identical', 'skewed'] as const) {
        for (const bs of [1, 7, 33]) {
          const sizes = popularity(pop, bs);
          const indptr = indptrFromSizes(sizes);
          const which = sizes.map((_, i) => (i * 4) % adapters); // adapter of each segment
          const x = randomMat(bs, hIn, bs);
          const y0 = randomFloats(bs * hOut, bs + 1);
          const want = referenceAddLora({ data: y0, rows: bs, cols: hOut }, x.host, which.map((j) => A[j]!.host), which.map((j) => B[j]!.host), indptr, 1, new Array(sizes.length).fill(0.5));
          const outputs: Record<string, Float32Array> = {};
          const runOne = (name: string, fn: (y: Tensor) => void) => {
            const y = Tensor.from(y0, [bs, hOut]);
            try {
              fn(y);
              outputs[name] = readF32(y);
            } finally {
              y.dispose();
            }
          };
          const a = which.map((j) => views.a[j]!);
          const b = which.map((j) => views.b[j]!);
          const rowAdapter = rowIndexFromSegments(indptr, which);
          runOne('sgmv', (y) => addLora(y, x.t, a, b, indptr, 1, { scale: 0.5 }));
          runOne('loop', (y) => loraLoop(y, x.t, a, b, indptr, 1, { scale: 0.5 }));
          runOne('gather-bmm', (y) => gatherBmm(y, x.t, table, rowAdapter, 1, { scale: 0.5 }));
          runOne('gather then bmm', (y) => {
            const g = gatherLoraWeights(table, rowAdapter, 1);
            try {
              expect(g.a.shape).toEqual([bs, rank, hIn]);
              bmm(y, x.t, g, { scale: 0.5 });
            } finally {
              disposeAll(g.a, g.b);
            }
          });
          for (const [name, got] of Object.entries(outputs)) {
            expect(normwiseError(got, want), `${name} ${pop} bs=${bs}`).toBeLessThanOrEqual(TOL);
            expect(normwiseError(got, outputs.sgmv!), `${name} vs sgmv ${pop} bs=${bs}`).toBeLessThanOrEqual(TOL);
          }
          x.t.dispose();
        }
      }
    } finally {
      disposeAll(A, B, views.a, views.b, table.a, table.b);
    }
  });

  it('Gather-BMM into caller stacks, and its argument checks', () => {
    const A = [randomStack(L, 4, 32, 1), randomStack(L, 4, 32, 2)];
    const B = [randomStack(L, 4, 24, 3), randomStack(L, 4, 24, 4)];
    const table = stackLoraWeights(A.map((s) => s.t), B.map((s) => s.t));
    const stacks = { a: Tensor.empty([3, 4, 32]), b: Tensor.empty([3, 4, 24]) };
    const x = randomMat(3, 32, 5);
    const y = Tensor.zeros([3, 24]);
    const y2 = Tensor.zeros([3, 24]);
    try {
      gatherBmm(y, x.t, table, new Int32Array([1, 0, 1]), 0, { stacks });
      expect(stacks.a.disposed).toBe(false);
      loraLoop(y2, x.t, [A[1]!.t, A[0]!.t, A[1]!.t], [B[1]!.t, B[0]!.t, B[1]!.t], new Int32Array([0, 1, 2, 3]), 0);
      expect(normwiseError(readF32(y), readF32(y2))).toBeLessThanOrEqual(TOL);
      // BMM also takes x and y already viewed as [rows, 1, h].
      const y3 = Tensor.zeros([3, 1, 24]);
      const x3 = x.t.reshape([3, 1, 32]);
      bmm(y3, x3, stacks);
      expect(normwiseError(readF32(y3), readF32(y2))).toBeLessThanOrEqual(TOL);
      disposeAll(x3, y3);
      expect(() => bmm(Tensor.zeros([3, 2, 24]), x.t, stacks)).toThrow(/y \[3, 2, 24\] must be/);
      expect(() => gatherBmm(y, x.t, table, new Int32Array([0, 2, 1]), 0)).toThrow(/rowAdapter\[1\] = 2 is outside the table's 2 adapters/);
      expect(() => gatherBmm(y, x.t, table, new Int32Array([0, -1, 1]), 0)).toThrow(InvalidArgumentError);
      expect(() => gatherBmm(y, x.t, table, new Int32Array([0, 0, 0]), 2)).toThrow(/layer 2/);
      expect(() => stackLoraWeights([A[0]!.t], [B[0]!.t, B[1]!.t])).toThrow(InvalidArgumentError);
      expect(() => loraLoop(y, x.t, [A[0]!.t], [B[0]!.t], new Int32Array([0, 1, 3]), 0)).toThrow(/1 A and 1 B weights for 2 segments/);
    } finally {
      disposeAll(A, B, table.a, table.b, stacks.a, stacks.b, x, y, y2);
    }
  });
});
