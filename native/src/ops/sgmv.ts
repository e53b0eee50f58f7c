/**
 * Punica's LoRA kernels (f32 activations and weights, fp32 accumulation, in place):
 *   - {@link sgmvShrink} / {@link sgmvExpand}: SGMV, rows grouped into segments of consecutive rows (indptr), one
 *     weight per segment;
 *   - {@link bgmvShrink} / {@link bgmvExpand}: BGMV, one adapter index per row.
 * A LoRA delta is a shrink into a zeroed [rows, rMax] intermediate v followed by an expand:
 *   sgmvShrink(v, x, A, indptr, layer); sgmvExpand(y, v, B, indptr, layer, { scales })
 * with A_i [L, r_i, hIn] and B_i [L, r_i, hOut] (both row-major over r, so both kernels read W contiguously).
 * Results are deterministic: the same bits for any thread count, on every call, and a row's result does not depend
 * on which other rows share the batch (BGMV equals SGMV over the same rows bit for bit).
 */
import { callNative, DeviceMismatchError, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, Tensor } from '../tensor.js';

export interface SgmvOptions {
  /** Run the plain reference kernel (one double-precision sum per output; tests compare the fast paths against it). */
  reference?: boolean;
}

/** Expand options: `scales` multiplies each weight's contribution (one per segment for SGMV, per weight for BGMV). */
export type SgmvExpandOptions = SgmvOptions & { scales?: ArrayLike<number> };

interface Kind {
  op: string;
  expand: boolean;
  bgmv: boolean;
}

function weightLabel(k: Kind, i: number): string {
  return `weights[${i}]${k.bgmv ? '' : ` (segment ${i})`}`;
}

/**
 * The argument checks, split by cost. Here: everything about y, x / v, the index tensor's dtype and length, the layer,
 * the scales, and that each weight is a Tensor of the same backend (pure JS). The per-weight dtype / shape / rank /
 * layer checks and the index values are left to the native binding, which runs them before any kernel and throws the
 * same typed errors with the same messages: repeating them here would cost a few native getter calls per weight on
 * every call (this op runs 14 times per layer per step) and, on CUDA, a second device-to-host read of the indices.
 */
function validate(k: Kind, y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], index: Tensor, layer: number, scales: ArrayLike<number> | undefined): number[] | null {
  const { op } = k;
  const xName = k.expand ? 'v' : 'x';
  const indexName = k.bgmv ? 'rowIndex' : 'indptr';
  const backend = sameBackend(op, y, x, index);
  if (!Array.isArray(weights)) throw new InvalidArgumentError(`${op}: weights must be an array of tensors or nulls`);
  for (let i = 0; i < weights.length; i++) {
    const w = weights[i];
    if (w === null) continue;
    if (!(w instanceof Tensor)) throw new InvalidArgumentError(`${op}: weights[${i}] must be a Tensor or null`);
    if (w.backend.binding !== backend.binding) {
      throw new DeviceMismatchError(`${op}: ${weightLabel(k, i)} lives on ${w.backend.device}, y on ${backend.device}`);
    }
  }
  expectDtype(op, 'y', y, 'f32');
  expectRank(op, 'y', y, 2);
  expectDtype(op, xName, x, 'f32');
  expectRank(op, xName, x, 2);
  const yShape = y.shape;
  const xShape = x.shape;
  const rows = yShape[0]!;
  if (xShape[0] !== rows) {
    throw new ShapeMismatchError(`${op}: y ${formatShape(yShape)} and ${xName} ${formatShape(xShape)} must have the same number of rows`);
  }
  if (y === x) throw new InvalidArgumentError(`${op}: y is ${xName}; the kernels cannot run in place over their input`);
  if (!Number.isInteger(layer) || layer < 0 || layer > 2147483647) {
    throw new InvalidArgumentError(`${op}: layer must be an integer >= 0, got ${layer}`);
  }
  const n = weights.length;
  let scaleList: number[] | null = null;
  if (scales !== undefined) {
    if (!k.expand) throw new InvalidArgumentError(`${op}: takes no scales (only the expand kernels scale)`);
    if (scales.length !== n) throw new InvalidArgumentError(`${op}: scales has ${scales.length} entries, want one per weight (${n})`);
    scaleList = Array.from(scales);
    scaleList.forEach((s, i) => {
      if (typeof s !== 'number' || !Number.isFinite(s) || Math.abs(s) > 3.4e38) {
        throw new InvalidArgumentError(`${op}: scales[${i}] must be a finite number, got ${String(s)}`);
      }
    });
  }
  expectDtype(op, indexName, index, 'i32');
  expectRank(op, indexName, index, 1);
  const wantLength = k.bgmv ? rows : n + 1;
  const indexShape = index.shape;
  if (indexShape[0] !== wantLength) {
    const why = k.bgmv ? `one per row of y ${formatShape(yShape)}` : `weights.length + 1 = ${n} + 1`;
    throw new ShapeMismatchError(`${op}: ${indexName} ${formatShape(indexShape)} must have ${wantLength} entries (${why})`);
  }
  return scaleList;
}

function run(k: Kind, y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], index: Tensor, layer: number, options: SgmvExpandOptions): void {
  const scales = validate(k, y, x, weights, index, layer, options.scales);
  const backend = y.backend;
  const natives = weights.map((w) => (w === null ? null : w.native));
  const opts = { layer, reference: options.reference ?? false, ...(k.expand ? { scales } : {}) };
  callNative(() => {
    if (k.bgmv) (k.expand ? backend.binding.bgmvExpand : backend.binding.bgmvShrink)(y.native, x.native, natives, index.native, opts);
    else (k.expand ? backend.binding.sgmvExpand : backend.binding.sgmvShrink)(y.native, x.native, natives, index.native, opts);
  });
}

/**
 * SGMV shrink, in place: for every segment i with a weight, y[rows_i, 0:r_i] += x[rows_i, :] · W_i[layer]ᵀ, where
 * rows_i = [indptr[i], indptr[i+1]). y f32 [rows, rMax]; x f32 [rows, hIn]; weights[i] f32 [L, r_i, hIn] (r_i ≤ rMax)
 * or null (the segment is skipped; a base-model request); indptr i32 [n + 1] with indptr[0] = 0, indptr[n] = rows,
 * non-decreasing (empty segments are fine; a weight may serve several segments). Columns r_i..rMax of a segment's
 * rows are left as they are. Bad shapes, dtypes, indices or a layer outside a weight throw typed errors naming the
 * argument and the segment.
 */
export function sgmvShrink(y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], indptr: Tensor, layer: number, options: SgmvOptions = {}): void {
  run({ op: 'sgmvShrink', expand: false, bgmv: false }, y, x, weights, indptr, layer, options);
}

/**
 * SGMV expand, in place: for every segment i with a weight, y[rows_i, :] += scales[i] · v[rows_i, 0:r_i] · W_i[layer].
 * y f32 [rows, hOut]; v f32 [rows, rMax]; weights[i] f32 [L, r_i, hOut] (r_i ≤ rMax) or null; indptr as in
 * {@link sgmvShrink}. `scales` (one finite number per segment) defaults to 1.
 */
export function sgmvExpand(y: Tensor, v: Tensor, weights: readonly (Tensor | null)[], indptr: Tensor, layer: number, options: SgmvExpandOptions = {}): void {
  run({ op: 'sgmvExpand', expand: true, bgmv: false }, y, v, weights, indptr, layer, options);
}

/**
 * BGMV shrink, in place: y[row, 0:r_j] += x[row, :] · W_j[layer]ᵀ with j = rowIndex[row] (i32 [rows]; -1 = no adapter,
 * and a null weights[j] also contributes nothing). Shapes as in {@link sgmvShrink}. The kernel groups the rows by
 * adapter, so each weight is read once per call.
 */
export function bgmvShrink(y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], rowIndex: Tensor, layer: number, options: SgmvOptions = {}): void {
  run({ op: 'bgmvShrink', expand: false, bgmv: true }, y, x, weights, rowIndex, layer, options);
}

/**
 * BGMV expand, in place: y[row, :] += scales[j] · v[row, 0:r_j] · W_j[layer] with j = rowIndex[row] (-1 = none).
 * `scales` has one entry per weight (default 1). Shapes as in {@link sgmvExpand}.
 */
export function bgmvExpand(y: Tensor, v: Tensor, weights: readonly (Tensor | null)[], rowIndex: Tensor, layer: number, options: SgmvExpandOptions = {}): void {
  run({ op: 'bgmvExpand', expand: true, bgmv: true }, y, v, weights, rowIndex, layer, options);
}
