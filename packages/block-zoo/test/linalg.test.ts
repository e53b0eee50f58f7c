/** The float64 linear algebra of the fits against plain references on random, ragged and empty inputs. */
import { describe, expect, it } from 'vitest';

import { choleskySolve, cosine, mat, matmul, matmulT, meanRowCosine, ridge, transpose, vstack } from '../src/fit/index.js';
import { ZooInvalidError } from '../src/planner/index.js';
import { normals } from './support/fixtures.js';

function naiveMatmul(a: number[][], b: number[][]): number[][] {
  return a.map((row) => b[0]!.map((_, j) => row.reduce((s, v, k) => s + v * b[k]![j]!, 0)));
}
const toRows = (m: { rows: number; cols: number; data: Float64Array }) => Array.from({ length: m.rows }, (_, i) => Array.from(m.data.subarray(i * m.cols, (i + 1) * m.cols)));

/** Gaussian elimination with partial pivoting: the plain reference for a linear solve. */
function gaussSolve(a: number[][], b: number[][]): number[][] {
  const n = a.length;
  const m = a.map((row, i) => [...row, ...b[i]!]);
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(m[r]![c]!) > Math.abs(m[p]![c]!)) p = r;
    [m[c], m[p]] = [m[p]!, m[c]!];
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = m[r]![c]! / m[c]![c]!;
      for (let k = c; k < m[r]!.length; k++) m[r]![k]! -= f * m[c]![k]!;
    }
  }
  return m.map((row, i) => row.slice(n).map((v) => v / m[i]![i]!));
}

const random = (r: number, c: number, seed: number) => mat(r, c, normals(r * c, seed));

describe('linalg', () => {
  it.each([[1, 1, 1], [3, 5, 2], [7, 1, 4], [4, 6, 9]])('matmul / matmulT / transpose agree with a plain product (%i×%i by %i)', (m, k, n) => {
    const a = random(m, k, m * 31 + k);
    const b = random(k, n, n * 17 + 1);
    const want = naiveMatmul(toRows(a), toRows(b));
    const got = toRows(matmul(a, b));
    const gotT = toRows(matmulT(a, transpose(b)));
    for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) {
      expect(got[i]![j]).toBeCloseTo(want[i]![j]!, 12);
      expect(gotT[i]![j]).toBeCloseTo(want[i]![j]!, 12);
    }
  });

  it.each([1, 2, 5, 13])('choleskySolve matches Gaussian elimination on a random SPD system of size %i', (p) => {
    const a = random(p + 3, p, p);
    const s = matmul(transpose(a), a);
    for (let i = 0; i < p; i++) s.data[i * p + i]! += 0.1;
    const b = random(p, 3, p + 100);
    const got = toRows(choleskySolve(s, b));
    const want = gaussSolve(toRows(s), toRows(b));
    for (let i = 0; i < p; i++) for (let j = 0; j < 3; j++) expect(got[i]![j]).toBeCloseTo(want[i]![j]!, 9);
  });

  it('ridge equals the normal-equation solution (XᵀX + λnI)⁻¹XᵀY, and recovers an exact linear map at λ → 0', () => {
    for (const [n, p, q] of [[40, 6, 3], [9, 9, 1], [100, 3, 7]] as const) {
      const x = random(n, p, n + p);
      const y = random(n, q, n + q + 50);
      const lambda = 0.05;
      const xt = transpose(x);
      const g = toRows(matmul(xt, x)).map((row, i) => row.map((v, j) => v + (i === j ? lambda * n : 0)));
      const want = gaussSolve(g, toRows(matmul(xt, y)));
      const got = toRows(ridge(x, y, lambda));
      for (let i = 0; i < p; i++) for (let j = 0; j < q; j++) expect(got[i]![j]).toBeCloseTo(want[i]![j]!, 9);
      // Exact data: Y = X W.
      const w = random(p, q, 7);
      const exact = toRows(ridge(x, matmul(x, w), 0));
      for (let i = 0; i < p; i++) for (let j = 0; j < q; j++) expect(exact[i]![j]).toBeCloseTo(w.data[i * q + j]!, 8);
    }
  });

  it('leaves unpenalised columns out of the penalty', () => {
    const n = 30;
    const x = random(n, 3, 5);
    for (let r = 0; r < n; r++) x.data[r * 3 + 2] = 1; // a bias column
    const y = mat(n, 1, Array.from({ length: n }, (_, r) => 10 + 0 * r));
    const w = ridge(x, y, 1e3, { unpenalised: [2] });
    expect(w.data[2]).toBeCloseTo(10, 2);
    expect(Math.abs(w.data[0]!)).toBeLessThan(1e-2);
  });

  it('refuses empty, mismatched and singular inputs by name', () => {
    expect(() => ridge(mat(0, 3), mat(0, 2), 0.1)).toThrow(/no samples/);
    expect(() => ridge(mat(3, 2), mat(4, 2), 0.1)).toThrow(/3 rows but Y has 4/);
    expect(() => ridge(mat(3, 2), mat(3, 1), -1)).toThrow(ZooInvalidError);
    expect(() => ridge(mat(3, 2), mat(3, 1), 0)).toThrow(/not positive definite/);
    expect(() => matmul(mat(2, 3), mat(2, 3))).toThrow(ZooInvalidError);
    expect(() => vstack([])).toThrow(ZooInvalidError);
    expect(() => mat(2, 2, [1, 2, 3])).toThrow(/needs 4 values/);
    expect(() => meanRowCosine(mat(0, 2), mat(0, 2))).toThrow(/no rows/);
  });

  it('cosine: 1 for parallel, −1 for opposite, 0 against zero, symmetric', () => {
    expect(cosine([1, 2, 3], [2, 4, 6])).toBeCloseTo(1, 15);
    expect(cosine([1, 2, 3], [-1, -2, -3])).toBeCloseTo(-1, 15);
    expect(cosine([1, 2], [0, 0])).toBe(0);
    expect(cosine([0, 0], [0, 0])).toBe(1);
    const a = Array.from(normals(9, 1));
    const b = Array.from(normals(9, 2));
    expect(cosine(a, b)).toBeCloseTo(cosine(b, a), 15);
  });
});
