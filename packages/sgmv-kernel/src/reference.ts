/**
 * A float64 TypeScript reference of SGMV, BGMV and the LoRA add-on (punica.md §9.2, §9.5): plain loops over
 * segments, rows and features, accumulating in double. It is the oracle the native kernels, the baselines and
 * the engine delta are tested against; it is far too slow to serve with.
 *
 * Layouts are those of the kernels: a weight is one adapter's stack over layers, [layers, rank, features] row
 * major: shrink weights [L, r, h_in] (A as PEFT stores it), expand weights [L, r, h_out] (Bᵀ).
 */
import { InvalidArgumentError, ShapeMismatchError } from '@tessera/native';

export type WritableArray = Float64Array | Float32Array | number[];

/** A row-major [rows, cols] matrix on the host. */
export interface HostMatrix<T extends ArrayLike<number> = ArrayLike<number>> {
  data: T;
  rows: number;
  cols: number;
}

/** One adapter's weight for every layer, [layers, rank, features] row major. */
export interface HostWeightStack {
  data: ArrayLike<number>;
  layers: number;
  rank: number;
  features: number;
}

function checkMatrix(op: string, name: string, m: HostMatrix): void {
  if (m.data.length !== m.rows * m.cols) {
    throw new ShapeMismatchError(`${op}: ${name} holds ${m.data.length} values but is [${m.rows}, ${m.cols}]`);
  }
}

/** Checks indptr (monotone, from 0 to rows) and the weight list length; returns the segment count. */
function checkSegments(op: string, indptr: ArrayLike<number>, rows: number, weights: readonly unknown[]): number {
  const n = indptr.length - 1;
  if (n < 0 || indptr[0] !== 0 || indptr[n] !== rows) {
    throw new InvalidArgumentError(`${op}: indptr must start at 0 and end at the row count ${rows}, got [${Array.from(indptr).join(', ')}]`);
  }
  for (let i = 0; i < n; i++) {
    if (indptr[i + 1]! < indptr[i]!) throw new InvalidArgumentError(`${op}: indptr decreases at ${i + 1} ([${Array.from(indptr).join(', ')}])`);
  }
  if (weights.length !== n) throw new InvalidArgumentError(`${op}: ${weights.length} weights for ${n} segments`);
  return n;
}

function checkWeight(op: string, i: number, w: HostWeightStack, layer: number, features: number, rMax: number): void {
  if (w.data.length !== w.layers * w.rank * w.features) {
    throw new ShapeMismatchError(`${op}: weight ${i} holds ${w.data.length} values but is [${w.layers}, ${w.rank}, ${w.features}]`);
  }
  if (!Number.isInteger(layer) || layer < 0 || layer >= w.layers) throw new InvalidArgumentError(`${op}: layer ${layer} outside weight ${i}'s ${w.layers} layers`);
  if (w.features !== features) throw new ShapeMismatchError(`${op}: weight ${i} has ${w.features} features, the activations ${features}`);
  if (w.rank > rMax) throw new ShapeMismatchError(`${op}: weight ${i} has rank ${w.rank} > the intermediate's ${rMax} columns`);
}

/** Shrink of the rows [r0, r1) with one weight: y[row, 0:r] += x[row, :] · W[layer]ᵀ. */
function shrinkRows(y: HostMatrix<WritableArray>, x: HostMatrix, w: HostWeightStack, layer: number, r0: number, r1: number): void {
  const hIn = x.cols;
  const base = layer * w.rank * hIn;
  for (let row = r0; row < r1; row++) {
    for (let j = 0; j < w.rank; j++) {
      let acc = 0;
      const wo = base + j * hIn;
      const xo = row * hIn;
      for (let k = 0; k < hIn; k++) acc += x.data[xo + k]! * w.data[wo + k]!;
      y.data[row * y.cols + j] = y.data[row * y.cols + j]! + acc;
    }
  }
}

/** Expand of the rows [r0, r1) with one weight: y[row, :] += scale · v[row, 0:r] · W[layer]. */
function expandRows(y: HostMatrix<WritableArray>, v: HostMatrix, w: HostWeightStack, layer: number, r0: number, r1: number, scale: number): void {
  const hOut = y.cols;
  const base = layer * w.rank * hOut;
  for (let row = r0; row < r1; row++) {
    for (let o = 0; o < hOut; o++) {
      let acc = 0;
      for (let j = 0; j < w.rank; j++) acc += v.data[row * v.cols + j]! * w.data[base + j * hOut + o]!;
      y.data[row * hOut + o] = y.data[row * hOut + o]! + scale * acc;
    }
  }
}

/** SGMV shrink: for segment i, y[rows_i, 0:r_i] += x[rows_i, :] · W_i[layer]ᵀ (W_i [L, r_i, h_in]); null skips. */
export function referenceShrink(
  y: HostMatrix<WritableArray>,
  x: HostMatrix,
  weights: readonly (HostWeightStack | null)[],
  indptr: ArrayLike<number>,
  layer: number,
): void {
  const op = 'referenceShrink';
  checkMatrix(op, 'y', y);
  checkMatrix(op, 'x', x);
  if (y.rows !== x.rows) throw new ShapeMismatchError(`${op}: y has ${y.rows} rows, x ${x.rows}`);
  const n = checkSegments(op, indptr, x.rows, weights);
  for (let i = 0; i < n; i++) {
    const w = weights[i];
    if (!w) continue;
    checkWeight(op, i, w, layer, x.cols, y.cols);
    shrinkRows(y, x, w, layer, indptr[i]!, indptr[i + 1]!);
  }
}

/** SGMV expand: for segment i, y[rows_i, :] += scale_i · v[rows_i, 0:r_i] · W_i[layer] (W_i [L, r_i, h_out]). */
export function referenceExpand(
  y: HostMatrix<WritableArray>,
  v: HostMatrix,
  weights: readonly (HostWeightStack | null)[],
  indptr: ArrayLike<number>,
  layer: number,
  scales?: ArrayLike<number>,
): void {
  const op = 'referenceExpand';
  checkMatrix(op, 'y', y);
  checkMatrix(op, 'v', v);
  if (y.rows !== v.rows) throw new ShapeMismatchError(`${op}: y has ${y.rows} rows, v ${v.rows}`);
  const n = checkSegments(op, indptr, v.rows, weights);
  if (scales && scales.length !== n) throw new InvalidArgumentError(`${op}: ${scales.length} scales for ${n} segments`);
  for (let i = 0; i < n; i++) {
    const w = weights[i];
    if (!w) continue;
    checkWeight(op, i, w, layer, y.cols, v.cols);
    expandRows(y, v, w, layer, indptr[i]!, indptr[i + 1]!, scales ? scales[i]! : 1);
  }
}

/**
 * The LoRA add-on in float64: returns y + Σ_i scale_i · (x[rows_i] · A_i[layer]ᵀ) · B_i[layer] as a new
 * Float64Array (y itself is not modified). The intermediate stays in double (no rounding between the two
 * products), so this is the exact result the f32 kernels approximate.
 */
export function referenceAddLora(
  y: HostMatrix,
  x: HostMatrix,
  a: readonly (HostWeightStack | null)[],
  b: readonly (HostWeightStack | null)[],
  indptr: ArrayLike<number>,
  layer: number,
  scales?: ArrayLike<number>,
): Float64Array {
  if (a.length !== b.length) throw new InvalidArgumentError(`referenceAddLora: ${a.length} A weights but ${b.length} B weights`);
  a.forEach((ai, i) => {
    const bi = b[i];
    if ((ai === null) !== (bi === null) || (ai && bi && ai.rank !== bi.rank)) {
      throw new InvalidArgumentError(`referenceAddLora: segment ${i} has A of rank ${ai?.rank ?? 'none'} and B of rank ${bi?.rank ?? 'none'}`);
    }
  });
  const rMax = Math.max(1, ...a.map((w) => w?.rank ?? 0));
  const v = { data: new Float64Array(x.rows * rMax), rows: x.rows, cols: rMax };
  referenceShrink(v, x, a, indptr, layer);
  const out = { data: Float64Array.from(y.data), rows: y.rows, cols: y.cols };
  referenceExpand(out, v, b, indptr, layer, scales);
  return out.data;
}

function checkRowIndex(op: string, rowIndex: ArrayLike<number>, rows: number, count: number): void {
  if (rowIndex.length !== rows) throw new InvalidArgumentError(`${op}: ${rowIndex.length} row indices for ${rows} rows`);
  for (let r = 0; r < rows; r++) {
    const j = rowIndex[r]!;
    if (!Number.isInteger(j) || j < -1 || j >= count) throw new InvalidArgumentError(`${op}: rowIndex[${r}] = ${j} is outside [-1, ${count})`);
  }
}

/** BGMV shrink: y[row, 0:r] += x[row, :] · W_{idx[row]}[layer]ᵀ; idx −1 = no adapter. */
export function referenceBgmvShrink(
  y: HostMatrix<WritableArray>,
  x: HostMatrix,
  weights: readonly (HostWeightStack | null)[],
  rowIndex: ArrayLike<number>,
  layer: number,
): void {
  const op = 'referenceBgmvShrink';
  checkMatrix(op, 'y', y);
  checkMatrix(op, 'x', x);
  checkRowIndex(op, rowIndex, x.rows, weights.length);
  for (let row = 0; row < x.rows; row++) {
    const j = rowIndex[row]!;
    const w = j >= 0 ? weights[j] : null;
    if (!w) continue;
    checkWeight(op, j, w, layer, x.cols, y.cols);
    shrinkRows(y, x, w, layer, row, row + 1);
  }
}

/** BGMV expand: y[row, :] += scale_j · v[row, 0:r] · W_j[layer] with j = idx[row]; −1 = no adapter. */
export function referenceBgmvExpand(
  y: HostMatrix<WritableArray>,
  v: HostMatrix,
  weights: readonly (HostWeightStack | null)[],
  rowIndex: ArrayLike<number>,
  layer: number,
  scales?: ArrayLike<number>,
): void {
  const op = 'referenceBgmvExpand';
  checkMatrix(op, 'y', y);
  checkMatrix(op, 'v', v);
  checkRowIndex(op, rowIndex, v.rows, weights.length);
  if (scales && scales.length !== weights.length) throw new InvalidArgumentError(`${op}: ${scales.length} scales for ${weights.length} weights`);
  for (let row = 0; row < v.rows; row++) {
    const j = rowIndex[row]!;
    const w = j >= 0 ? weights[j] : null;
    if (!w) continue;
    checkWeight(op, j, w, layer, y.cols, v.cols);
    expandRows(y, v, w, layer, row, row + 1, scales ? scales[j]! : 1);
  }
}
