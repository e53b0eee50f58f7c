/**
 * Float64 dense linear algebra for the zoo's closed-form fits: row-major matrices, Gram matrices, a Cholesky
 * solve, and ridge regression. The fits are small (hidden sizes of tens to thousands, samples in the thousands),
 * offline, and want double precision; this is not a kernel library.
 */
import { ZooInvalidError } from '../planner/errors.js';

/** A row-major matrix. */
export interface Mat {
  rows: number;
  cols: number;
  data: Float64Array;
}

export function mat(rows: number, cols: number, data?: ArrayLike<number>): Mat {
  if (!Number.isInteger(rows) || !Number.isInteger(cols) || rows < 0 || cols < 0) throw new ZooInvalidError(`a matrix needs non-negative integer dimensions, got ${rows}×${cols}`);
  if (data !== undefined && data.length !== rows * cols) throw new ZooInvalidError(`a ${rows}×${cols} matrix needs ${rows * cols} values, got ${data.length}`);
  return { rows, cols, data: data === undefined ? new Float64Array(rows * cols) : Float64Array.from(data) };
}

/** A · B. */
export function matmul(a: Mat, b: Mat): Mat {
  if (a.cols !== b.rows) throw new ZooInvalidError(`matmul: ${a.rows}×${a.cols} by ${b.rows}×${b.cols}`);
  const out = mat(a.rows, b.cols);
  const { data: o } = out;
  for (let i = 0; i < a.rows; i++) {
    for (let k = 0; k < a.cols; k++) {
      const v = a.data[i * a.cols + k]!;
      if (v === 0) continue;
      const bo = k * b.cols;
      const oo = i * b.cols;
      for (let j = 0; j < b.cols; j++) o[oo + j]! += v * b.data[bo + j]!;
    }
  }
  return out;
}

/** A · Bᵀ (B in [out, in] Linear layout: x Wᵀ). */
export function matmulT(a: Mat, b: Mat): Mat {
  if (a.cols !== b.cols) throw new ZooInvalidError(`matmulT: ${a.rows}×${a.cols} by (${b.rows}×${b.cols})ᵀ`);
  const out = mat(a.rows, b.rows);
  for (let i = 0; i < a.rows; i++) {
    const ao = i * a.cols;
    for (let j = 0; j < b.rows; j++) {
      const bo = j * b.cols;
      let s = 0;
      for (let k = 0; k < a.cols; k++) s += a.data[ao + k]! * b.data[bo + k]!;
      out.data[i * b.rows + j] = s;
    }
  }
  return out;
}

export function transpose(a: Mat): Mat {
  const out = mat(a.cols, a.rows);
  for (let i = 0; i < a.rows; i++) for (let j = 0; j < a.cols; j++) out.data[j * a.rows + i] = a.data[i * a.cols + j]!;
  return out;
}

/** Aᵀ A (p×p) and Aᵀ B (p×q) in one pass over the rows. */
function normalEquations(x: Mat, y: Mat): { g: Float64Array; r: Float64Array } {
  const p = x.cols;
  const q = y.cols;
  const g = new Float64Array(p * p);
  const r = new Float64Array(p * q);
  for (let n = 0; n < x.rows; n++) {
    const xo = n * p;
    const yo = n * q;
    for (let i = 0; i < p; i++) {
      const xi = x.data[xo + i]!;
      if (xi === 0) continue;
      for (let j = i; j < p; j++) g[i * p + j]! += xi * x.data[xo + j]!;
      for (let j = 0; j < q; j++) r[i * q + j]! += xi * y.data[yo + j]!;
    }
  }
  for (let i = 0; i < p; i++) for (let j = 0; j < i; j++) g[i * p + j] = g[j * p + i]!;
  return { g, r };
}

/** Solves S X = B for symmetric positive-definite S (p×p) and B (p×q) by Cholesky; throws if S is not SPD. */
export function choleskySolve(s: Mat, b: Mat): Mat {
  const p = s.rows;
  if (s.cols !== p || b.rows !== p) throw new ZooInvalidError(`choleskySolve: ${s.rows}×${s.cols} system with ${b.rows}×${b.cols} right-hand side`);
  const l = new Float64Array(p * p);
  for (let i = 0; i < p; i++) {
    for (let j = 0; j <= i; j++) {
      let sum = s.data[i * p + j]!;
      for (let k = 0; k < j; k++) sum -= l[i * p + k]! * l[j * p + k]!;
      if (i === j) {
        if (!(sum > 0)) throw new ZooInvalidError(`choleskySolve: the matrix is not positive definite (pivot ${i} is ${sum}); add regularisation`);
        l[i * p + i] = Math.sqrt(sum);
      } else l[i * p + j] = sum / l[j * p + j]!;
    }
  }
  const q = b.cols;
  const x = Float64Array.from(b.data);
  for (let c = 0; c < q; c++) {
    for (let i = 0; i < p; i++) {
      let sum = x[i * q + c]!;
      for (let k = 0; k < i; k++) sum -= l[i * p + k]! * x[k * q + c]!;
      x[i * q + c] = sum / l[i * p + i]!;
    }
    for (let i = p - 1; i >= 0; i--) {
      let sum = x[i * q + c]!;
      for (let k = i + 1; k < p; k++) sum -= l[k * p + i]! * x[k * q + c]!;
      x[i * q + c] = sum / l[i * p + i]!;
    }
  }
  return { rows: p, cols: q, data: x };
}

/**
 * Ridge regression in closed form: W = (XᵀX + λ·n·I)⁻¹ XᵀY, the W (p×q) minimising ‖XW − Y‖² / n + λ‖W‖².
 * λ is per sample, so the same λ means the same shrinkage whatever the sample count. `unpenalised` columns of X
 * (a bias or a position feature) are left out of the penalty.
 */
export function ridge(x: Mat, y: Mat, lambda: number, options: { unpenalised?: readonly number[] } = {}): Mat {
  if (x.rows !== y.rows) throw new ZooInvalidError(`ridge: X has ${x.rows} rows but Y has ${y.rows}`);
  if (!(lambda >= 0) || !Number.isFinite(lambda)) throw new ZooInvalidError(`ridge: lambda must be a finite number >= 0, got ${lambda}`);
  if (x.rows === 0) throw new ZooInvalidError('ridge: no samples');
  const { g, r } = normalEquations(x, y);
  const p = x.cols;
  const free = new Set(options.unpenalised ?? []);
  for (let i = 0; i < p; i++) if (!free.has(i)) g[i * p + i]! += lambda * x.rows;
  return choleskySolve({ rows: p, cols: p, data: g }, { rows: p, cols: y.cols, data: r });
}

export function cosine(a: ArrayLike<number>, b: ArrayLike<number>, aOffset = 0, bOffset = 0, n = a.length): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < n; i++) {
    const x = a[aOffset + i]!;
    const y = b[bOffset + i]!;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  if (na === 0 && nb === 0) return 1;
  if (na === 0 || nb === 0) return 0;
  return dot / Math.sqrt(na * nb);
}

/** Mean row-wise cosine of two matrices of the same shape. */
export function meanRowCosine(a: Mat, b: Mat): number {
  if (a.rows !== b.rows || a.cols !== b.cols) throw new ZooInvalidError(`meanRowCosine: ${a.rows}×${a.cols} vs ${b.rows}×${b.cols}`);
  if (a.rows === 0) throw new ZooInvalidError('meanRowCosine: no rows');
  let s = 0;
  for (let i = 0; i < a.rows; i++) s += cosine(a.data, b.data, i * a.cols, i * b.cols, a.cols);
  return s / a.rows;
}

/** Rows stacked: [A; B; …] (same column count). */
export function vstack(parts: readonly Mat[]): Mat {
  if (parts.length === 0) throw new ZooInvalidError('vstack: nothing to stack');
  const cols = parts[0]!.cols;
  let rows = 0;
  for (const p of parts) {
    if (p.cols !== cols) throw new ZooInvalidError(`vstack: ${p.cols} columns where ${cols} were expected`);
    rows += p.rows;
  }
  const out = mat(rows, cols);
  let o = 0;
  for (const p of parts) {
    out.data.set(p.data, o);
    o += p.data.length;
  }
  return out;
}
