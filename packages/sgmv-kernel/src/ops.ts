/**
 * The SGMV and BGMV kernels of @tessera/native with a friendlier surface (their own names: the native ops take only
 * an i32 tensor, these any Segments form): segments as an engine SegmentLayout,
 * a host Int32Array indptr or an i32 tensor; and `addLora`, the LoRA add-on as Punica runs it (punica.md §3.1,
 * §9.2): shrink into a zeroed rank-wide f32 intermediate, then expand into y with an optional per-segment scale.
 *
 * Weight layouts (one tensor per adapter and projection, all layers stacked):
 *   shrink (A): f32 [L, r, h_in]    expand (B): f32 [L, r, h_out]
 */
import { SegmentLayout } from '@tessera/engine';
import {
  type Backend,
  InvalidArgumentError,
  type SgmvOptions,
  ShapeMismatchError,
  Tensor,
  bgmvExpand as nativeBgmvExpand,
  bgmvShrink as nativeBgmvShrink,
  formatShape,
  sameBackend,
  sgmvExpand as nativeSgmvExpand,
  sgmvShrink as nativeSgmvShrink,
} from '@tessera/native';

/** Segment boundaries: a SegmentLayout, CSR row pointers on the host, or those pointers as an i32 tensor. */
export type Segments = SegmentLayout | Int32Array | Tensor;

/** Per-row adapter indices for BGMV: host Int32Array or i32 tensor (j ≥ 0 selects weights[j], −1 none). */
export type RowIndex = Int32Array | Tensor;

export interface ExpandOptions extends SgmvOptions {
  /** One factor per segment (SGMV) or per weight (BGMV), multiplying that segment's contribution. */
  scales?: ArrayLike<number>;
}

/** Host row pointers of any Segments form (reads a tensor back). */
export function hostIndptr(segments: Segments): Int32Array {
  if (segments instanceof SegmentLayout) return segments.indptr;
  if (segments instanceof Int32Array) return segments;
  if (segments.dtype !== 'i32' || segments.rank !== 1) throw new InvalidArgumentError(`indptr must be an i32 vector, got ${segments.dtype} ${formatShape(segments.shape)}`);
  return segments.toArray() as Int32Array;
}

/** The segments as an i32 tensor on `backend`, and whether the caller must free it. */
function indptrOn(segments: Segments, backend: Backend): { tensor: Tensor; owned: boolean } {
  if (segments instanceof SegmentLayout) return { tensor: segments.indptrTensor(backend), owned: false };
  if (segments instanceof Int32Array) return { tensor: Tensor.from(segments, [segments.length], { backend }), owned: true };
  return { tensor: segments, owned: false };
}

function rowIndexOn(rowIndex: RowIndex, backend: Backend): { tensor: Tensor; owned: boolean } {
  if (rowIndex instanceof Int32Array) return { tensor: Tensor.from(rowIndex, [rowIndex.length], { backend }), owned: true };
  return { tensor: rowIndex, owned: false };
}

function withTensor<T>(held: { tensor: Tensor; owned: boolean }, fn: (t: Tensor) => T): T {
  try {
    return fn(held.tensor);
  } finally {
    if (held.owned) held.tensor.dispose();
  }
}

/** SGMV shrink: y[rows_i, 0:r_i] += x[rows_i, :] · W_i[layer]ᵀ, W_i f32 [L, r_i, h_in]; a null weight skips its segment. */
export function sgmvShrinkSegments(y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], segments: Segments, layer: number, options: SgmvOptions = {}): void {
  withTensor(indptrOn(segments, sameBackend('sgmvShrinkSegments', y, x)), (indptr) => nativeSgmvShrink(y, x, weights, indptr, layer, options));
}

/** SGMV expand: y[rows_i, :] += scale_i · v[rows_i, 0:r_i] · W_i[layer], W_i f32 [L, r_i, h_out]. */
export function sgmvExpandSegments(y: Tensor, v: Tensor, weights: readonly (Tensor | null)[], segments: Segments, layer: number, options: ExpandOptions = {}): void {
  withTensor(indptrOn(segments, sameBackend('sgmvExpandSegments', y, v)), (indptr) => nativeSgmvExpand(y, v, weights, indptr, layer, options));
}

/** BGMV shrink: per row, y[row, 0:r] += x[row, :] · W_{idx[row]}[layer]ᵀ (−1: nothing). */
export function bgmvShrinkRows(y: Tensor, x: Tensor, weights: readonly (Tensor | null)[], rowIndex: RowIndex, layer: number, options: SgmvOptions = {}): void {
  withTensor(rowIndexOn(rowIndex, sameBackend('bgmvShrinkRows', y, x)), (idx) => nativeBgmvShrink(y, x, weights, idx, layer, options));
}

/** BGMV expand: per row, y[row, :] += scale_j · v[row, 0:r_j] · W_j[layer] with j = idx[row] (−1: nothing). */
export function bgmvExpandRows(y: Tensor, v: Tensor, weights: readonly (Tensor | null)[], rowIndex: RowIndex, layer: number, options: ExpandOptions = {}): void {
  withTensor(rowIndexOn(rowIndex, sameBackend('bgmvExpandRows', y, v)), (idx) => nativeBgmvExpand(y, v, weights, idx, layer, options));
}

// ─── zeroing ───────────────────────────────────────────────────────────────────────────────────────────────

/** A shared all-zero host buffer (never written), grown on demand: the source of every zero fill. */
let zeroSource = new Float32Array(0);

/** Sets an f32 tensor to zero (a copy from a zero buffer: unlike scaling by 0 it also clears NaN and ±Inf). */
export function zeroFill(t: Tensor): void {
  if (t.dtype !== 'f32') throw new InvalidArgumentError(`zeroFill: expects an f32 tensor, got ${t.dtype} ${formatShape(t.shape)}`);
  const n = t.numel;
  if (zeroSource.length < n) zeroSource = new Float32Array(Math.max(n, 2 * zeroSource.length));
  t.write(zeroSource.subarray(0, n));
}

// ─── the LoRA add-on ───────────────────────────────────────────────────────────────────────────────────────

export interface AddLoraOptions extends SgmvOptions {
  /** alpha / r per segment (or one number for all); default none: the scale is folded into B. */
  scale?: number | ArrayLike<number>;
  /** Columns of the intermediate; default the largest rank among the weights. */
  rMax?: number;
  /**
   * f32 [rows, rMax] to use as the intermediate (it is zeroed first); default a fresh tensor, freed on return.
   * Reusing one across calls saves an allocation per call.
   */
  scratch?: Tensor;
}

/** Checks that A and B pair up segment by segment; returns the largest rank (0 when every segment is null). */
function pairRanks(op: string, a: readonly (Tensor | null)[], b: readonly (Tensor | null)[]): number {
  if (a.length !== b.length) throw new InvalidArgumentError(`${op}: ${a.length} A weights but ${b.length} B weights`);
  let rMax = 0;
  for (let i = 0; i < a.length; i++) {
    const ai = a[i] ?? null;
    const bi = b[i] ?? null;
    if ((ai === null) !== (bi === null)) throw new InvalidArgumentError(`${op}: segment ${i} has ${ai ? 'an A' : 'no A'} but ${bi ? 'a B' : 'no B'} weight`);
    if (!ai || !bi) continue;
    if (ai.rank !== 3 || bi.rank !== 3 || ai.shape[0] !== bi.shape[0] || ai.shape[1] !== bi.shape[1]) {
      throw new ShapeMismatchError(`${op}: segment ${i}: A ${formatShape(ai.shape)} and B ${formatShape(bi.shape)} must be [L, r, in] and [L, r, out] with the same L and r`);
    }
    rMax = Math.max(rMax, ai.shape[1]!);
  }
  return rMax;
}

function runAddLora(
  op: string,
  y: Tensor,
  x: Tensor,
  a: readonly (Tensor | null)[],
  b: readonly (Tensor | null)[],
  scaleCount: number,
  options: AddLoraOptions,
  run: (v: Tensor, scales: ArrayLike<number> | undefined) => void,
): void {
  const backend = sameBackend(op, y, x, options.scratch);
  const widest = pairRanks(op, a, b);
  if (widest === 0) return; // no segment has an adapter: nothing to add
  const rMax = options.rMax ?? widest;
  if (!Number.isSafeInteger(rMax) || rMax < widest) throw new InvalidArgumentError(`${op}: rMax ${rMax} is below the largest rank ${widest}`);
  if (x.rank !== 2) throw new ShapeMismatchError(`${op}: x must be [rows, h_in], got ${formatShape(x.shape)}`);
  const rows = x.shape[0]!;
  let scales: ArrayLike<number> | undefined;
  if (typeof options.scale === 'number') scales = new Float32Array(scaleCount).fill(options.scale);
  else if (options.scale !== undefined) {
    if (options.scale.length !== scaleCount) throw new InvalidArgumentError(`${op}: ${options.scale.length} scales for ${scaleCount} segments`);
    scales = options.scale;
  }
  let v = options.scratch;
  if (v && (v.dtype !== 'f32' || v.rank !== 2 || v.shape[0] !== rows || v.shape[1] !== rMax)) {
    throw new ShapeMismatchError(`${op}: scratch ${v.dtype} ${formatShape(v.shape)} must be f32 [${rows}, ${rMax}]`);
  }
  const owned = !v;
  v ??= Tensor.empty([rows, rMax], 'f32', backend);
  try {
    zeroFill(v);
    run(v, scales);
  } finally {
    if (owned) v.dispose();
  }
}

/**
 * The LoRA add-on over segments: y[rows_i] += scale_i · (x[rows_i] · A_i[layer]ᵀ) · B_i[layer]. One SGMV shrink
 * into a zeroed f32 [rows, rMax] intermediate, one SGMV expand into y (two launches however many adapters).
 * a[i] / b[i]: f32 [L, r_i, h_in] / [L, r_i, h_out], or both null (segment skipped, e.g. base-model rows).
 */
export function addLora(
  y: Tensor,
  x: Tensor,
  a: readonly (Tensor | null)[],
  b: readonly (Tensor | null)[],
  segments: Segments,
  layer: number,
  options: AddLoraOptions = {},
): void {
  const op = 'addLora';
  const backend = sameBackend(op, y, x);
  const held = indptrOn(segments, backend);
  withTensor(held, (indptr) => {
    const n = indptr.shape[0]! - 1;
    if (a.length !== n) throw new InvalidArgumentError(`${op}: ${a.length} weights for ${n} segments`);
    runAddLora(op, y, x, a, b, n, options, (v, scales) => {
      const kernel: SgmvOptions = options.reference === undefined ? {} : { reference: options.reference };
      nativeSgmvShrink(v, x, a, indptr, layer, kernel);
      nativeSgmvExpand(y, v, b, indptr, layer, scales ? { ...kernel, scales } : kernel);
    });
  });
}

/** The LoRA add-on with per-row adapter indices (BGMV): the same result as {@link addLora} on sorted rows. */
export function addLoraBgmv(
  y: Tensor,
  x: Tensor,
  a: readonly (Tensor | null)[],
  b: readonly (Tensor | null)[],
  rowIndex: RowIndex,
  layer: number,
  options: AddLoraOptions = {},
): void {
  const op = 'addLoraBgmv';
  const backend = sameBackend(op, y, x);
  withTensor(rowIndexOn(rowIndex, backend), (idx) => {
    runAddLora(op, y, x, a, b, a.length, options, (v, scales) => {
      const kernel: SgmvOptions = options.reference === undefined ? {} : { reference: options.reference };
      nativeBgmvShrink(v, x, a, idx, layer, kernel);
      nativeBgmvExpand(y, v, b, idx, layer, scales ? { ...kernel, scales } : kernel);
    });
  });
}

/**
 * Per-row indices from segments: row r of segment i gets `segmentIndex[i]` (default i). Turns an SGMV batch
 * into the BGMV (and Gather-BMM) form.
 */
export function rowIndexFromSegments(segments: Segments, segmentIndex?: ArrayLike<number>): Int32Array {
  const indptr = hostIndptr(segments);
  const n = indptr.length - 1;
  if (segmentIndex && segmentIndex.length !== n) throw new InvalidArgumentError(`rowIndexFromSegments: ${segmentIndex.length} indices for ${n} segments`);
  const out = new Int32Array(n >= 0 ? indptr[n]! : 0);
  for (let i = 0; i < n; i++) out.fill(segmentIndex ? segmentIndex[i]! : i, indptr[i]!, indptr[i + 1]!);
  return out;
}
