/**
 * The float64 reference is the oracle of every other test, so it is checked here against an independent
 * formulation: the dense per-row products x · Aᵀ and (x · Aᵀ) · B written as plain matrix algebra per row.
 */
import { InvalidArgumentError, ShapeMismatchError } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import {
  type HostWeightStack,
  referenceAddLora,
  referenceBgmvExpand,
  referenceBgmvShrink,
  referenceExpand,
  referenceShrink,
  rowIndexFromSegments,
} from '../src/index.js';
import { indptrFromSizes } from '../src/bench.js';

function stack(layers: number, rank: number, features: number, seed: number): HostWeightStack {
  return { data: randomFloats(layers * rank * features, seed), layers, rank, features };
}

/** Row r of the LoRA delta with one adapter, built as Δ = A[layer]ᵀ B[layer] (h_in × h_out) then x_r · Δ. */
function denseDelta(x: Float32Array, row: number, hIn: number, a: HostWeightStack, b: HostWeightStack, layer: number, hOut: number): number[] {
  const r = a.rank;
  const delta = new Float64Array(hIn * hOut);
  for (let k = 0; k < hIn; k++) for (let o = 0; o < hOut; o++) {
    let s = 0;
    for (let j = 0; j < r; j++) s += a.data[layer * r * hIn + j * hIn + k]! * b.data[layer * r * hOut + j * hOut + o]!;
    delta[k * hOut + o] = s;
  }
  const out: number[] = [];
  for (let o = 0; o < hOut; o++) {
    let s = 0;
    for (let k = 0; k < hIn; k++) s += x[row * hIn + k]! * delta[k * hOut + o]!;
    out.push(s);
  }
  return out;
}

describe('float64 reference', () => {
  const hIn = 12;
  const hOut = 10;
  const L = 3;
  const sizes = [2, 0, 3, 1];
  const indptr = indptrFromSizes(sizes);
  const rows = 6;
  const x = randomFloats(rows * hIn, 1);
  const y0 = randomFloats(rows * hOut, 2);
  const a = [stack(L, 4, hIn, 3), stack(L, 2, hIn, 4), null, stack(L, 3, hIn, 5)];
  const b = [stack(L, 4, hOut, 6), stack(L, 2, hOut, 7), null, stack(L, 3, hOut, 8)];
  const scales = [0.5, 2, 3, -1];

  it('addLora equals y + scale · x · (Aᵀ B) per row (T4), null and empty segments contributing nothing', () => {
    for (let layer = 0; layer < L; layer++) {
      const got = referenceAddLora({ data: y0, rows, cols: hOut }, { data: x, rows, cols: hIn }, a, b, indptr, layer, scales);
      for (let seg = 0; seg < sizes.length; seg++) {
        for (let row = indptr[seg]!; row < indptr[seg + 1]!; row++) {
          const ai = a[seg];
          const bi = b[seg];
          const d = ai && bi ? denseDelta(x, row, hIn, ai, bi, layer, hOut) : new Array(hOut).fill(0);
          for (let o = 0; o < hOut; o++) expect(got[row * hOut + o]).toBeCloseTo(y0[row * hOut + o]! + scales[seg]! * d[o]!, 10);
        }
      }
    }
  });

  it('shrink writes only the first r columns of its segment rows and accumulates', () => {
    const y = { data: new Float64Array(rows * 4).fill(1), rows, cols: 4 };
    referenceShrink(y, { data: x, rows, cols: hIn }, a, indptr, 1);
    // segment 3 (row 5) has rank 3: column 3 is untouched
    expect(y.data[5 * 4 + 3]).toBe(1);
    let s = 0;
    for (let k = 0; k < hIn; k++) s += x[5 * hIn + k]! * a[3]!.data[1 * 3 * hIn + 0 * hIn + k]!;
    expect(y.data[5 * 4]).toBeCloseTo(1 + s, 12);
  });

  it('BGMV on per-row indices equals SGMV on the segments', () => {
    const rowIndex = rowIndexFromSegments(indptr);
    const ySgmv = { data: new Float64Array(rows * 4), rows, cols: 4 };
    const yBgmv = { data: new Float64Array(rows * 4), rows, cols: 4 };
    referenceShrink(ySgmv, { data: x, rows, cols: hIn }, a, indptr, 2);
    referenceBgmvShrink(yBgmv, { data: x, rows, cols: hIn }, a, rowIndex, 2);
    expect(Array.from(yBgmv.data)).toEqual(Array.from(ySgmv.data));
    const oS = { data: new Float64Array(rows * hOut), rows, cols: hOut };
    const oB = { data: new Float64Array(rows * hOut), rows, cols: hOut };
    referenceExpand(oS, ySgmv, b, indptr, 2, scales);
    referenceBgmvExpand(oB, yBgmv, b, rowIndex, 2, scales); // segment i ↔ weight i here, so the scales line up
    expect(Array.from(oB.data)).toEqual(Array.from(oS.data));
  });

  it('rejects malformed input', () => {
    const y = { data: new Float64Array(rows * 4), rows, cols: 4 };
    const xm = { data: x, rows, cols: hIn };
    expect(() => referenceShrink(y, xm, a, [0, 2, 6], 0)).toThrow(InvalidArgumentError);
    expect(() => referenceShrink(y, xm, a, [0, 3, 2, 5, 6], 0)).toThrow(/decreases/);
    expect(() => referenceShrink(y, xm, a, [1, 2, 3, 5, 6], 0)).toThrow(/start at 0/);
    expect(() => referenceShrink(y, xm, a, indptr, 3)).toThrow(/layer 3/);
    expect(() => referenceShrink({ data: new Float64Array(rows * 2), rows, cols: 2 }, xm, a, indptr, 0)).toThrow(ShapeMismatchError);
    expect(() => referenceBgmvShrink(y, xm, a, [0, 1, 2, 3, 4, 5], 0)).toThrow(/rowIndex\[4\] = 4/);
    expect(() => referenceAddLora({ data: y0, rows, cols: hOut }, xm, a, b.slice(0, 3), indptr, 0)).toThrow(/4 A weights but 3 B/);
  });
});
