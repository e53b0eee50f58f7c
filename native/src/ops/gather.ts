/**
 * Lookups and copies: embedding (f32/f16/bf16 tables → f32), row gather/scatter over rows of any dtype, and
 * dtype conversion (`cast`). Indices are i32 and range-checked here, before the native call (which checks
 * again, so a bad direct call can never read or write out of bounds).
 */
import type { DType } from '../binding.js';
import { callNative, DTypeMismatchError, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectRank, formatShape, sameShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

export interface GatherOptions {
  /** Write here instead of allocating (must not overlap the inputs). */
  out?: Tensor;
  /** Run the plain scalar reference kernel (CPU only; tests compare against it). */
  reference?: boolean;
}

const floatDtypes: readonly DType[] = ['f32', 'f16', 'bf16'];

/** Throws InvalidArgumentError naming the first index outside [0, limit). */
function checkIndices(op: string, name: string, idx: Tensor, limit: number, what: string): void {
  const values = idx.toArray() as Int32Array;
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (v < 0 || v >= limit) throw new InvalidArgumentError(`${op}: ${name}[${i}] = ${v} is outside [0, ${limit}) (${what})`);
  }
}

/**
 * out[..., :] = table[ids[...], :] as f32, for a [vocab, dim] table of f32, f16 or bf16 and i32 ids of any
 * shape; out has shape [...ids.shape, dim]. An id outside [0, vocab) throws InvalidArgumentError naming it and
 * the vocabulary size.
 */
export function embedding(table: Tensor, ids: Tensor, options: GatherOptions = {}): Tensor {
  const op = 'embedding';
  const backend = sameBackend(op, table, ids, options.out);
  expectDtype(op, 'table', table, floatDtypes);
  expectRank(op, 'table', table, 2);
  expectDtype(op, 'ids', ids, 'i32');
  const [vocab, dim] = table.shape as [number, number];
  checkIndices(op, 'ids', ids, vocab, `vocabulary size ${vocab} of table ${formatShape(table.shape)}`);
  const out = resolveOut(op, options.out, [...ids.shape, dim], 'f32', backend);
  callNative(() => backend.binding.embedding(table.native, ids.native, out.native, { reference: options.reference ?? false }));
  return out;
}

/** out[i] = src[idx[i]] for src [rows, ...rowShape] of any dtype and idx i32 [n]; out is [n, ...rowShape]. */
export function gatherRows(src: Tensor, idx: Tensor, options: Omit<GatherOptions, 'reference'> = {}): Tensor {
  const op = 'gatherRows';
  const backend = sameBackend(op, src, idx, options.out);
  if (src.rank < 1) throw new ShapeMismatchError(`${op}: src must have rank >= 1, got ${formatShape(src.shape)}`);
  expectDtype(op, 'idx', idx, 'i32');
  expectRank(op, 'idx', idx, 1);
  checkIndices(op, 'idx', idx, src.shape[0]!, `src ${formatShape(src.shape)} has ${src.shape[0]} rows`);
  const out = resolveOut(op, options.out, [idx.shape[0]!, ...src.shape.slice(1)], src.dtype, backend);
  callNative(() => backend.binding.gatherRows(src.native, idx.native, out.native));
  return out;
}

/**
 * dst[idx[i]] = src[i] for src [n, ...rowShape], idx i32 [n] and dst [rows, ...rowShape] of src's dtype, in
 * place; returns dst. Duplicate indices are allowed: the last occurrence wins, exactly as if the rows were
 * written one by one in index order (deterministic for any thread count).
 */
export function scatterRows(src: Tensor, idx: Tensor, dst: Tensor): Tensor {
  const op = 'scatterRows';
  const backend = sameBackend(op, src, idx, dst);
  if (src.rank < 1) throw new ShapeMismatchError(`${op}: src must have rank >= 1, got ${formatShape(src.shape)}`);
  if (dst.rank < 1) throw new ShapeMismatchError(`${op}: dst must have rank >= 1, got ${formatShape(dst.shape)}`);
  expectDtype(op, 'idx', idx, 'i32');
  expectRank(op, 'idx', idx, 1);
  if (dst.dtype !== src.dtype) {
    throw new DTypeMismatchError(`${op}: dst ${formatShape(dst.shape)} ${dst.dtype} and src ${formatShape(src.shape)} ${src.dtype} must have the same dtype`);
  }
  if (!sameShape(src.shape.slice(1), dst.shape.slice(1))) {
    throw new ShapeMismatchError(`${op}: rows of src ${formatShape(src.shape)} and dst ${formatShape(dst.shape)} differ in shape`);
  }
  if (idx.shape[0] !== src.shape[0]) {
    throw new ShapeMismatchError(`${op}: idx ${formatShape(idx.shape)} must have one entry per row of src ${formatShape(src.shape)}`);
  }
  checkIndices(op, 'idx', idx, dst.shape[0]!, `dst ${formatShape(dst.shape)} has ${dst.shape[0]} rows`);
  callNative(() => backend.binding.scatterRows(src.native, idx.native, dst.native));
  return dst;
}

/**
 * x converted to `dtype`: between f32, f16 and bf16 with round-to-nearest-even (subnormals kept, overflow to
 * ±Infinity, NaN stays NaN); to its own dtype (any dtype) it is a copy. Always a new tensor (or `out`).
 */
export function cast(x: Tensor, dtype: DType, options: GatherOptions = {}): Tensor {
  const op = 'cast';
  const backend = sameBackend(op, x, options.out);
  if (x.dtype !== dtype && (!floatDtypes.includes(x.dtype) || !floatDtypes.includes(dtype))) {
    throw new DTypeMismatchError(`${op}: cannot convert x ${formatShape(x.shape)} from ${x.dtype} to ${dtype} (conversions are between f32, f16 and bf16)`);
  }
  const out = resolveOut(op, options.out, x.shape, dtype, backend);
  callNative(() => backend.binding.convert(x.native, out.native, { reference: options.reference ?? false }));
  return out;
}
