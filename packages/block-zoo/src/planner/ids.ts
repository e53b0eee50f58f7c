/**
 * Content-addressed identities (design note §3.7). A tensor's id is the SHA-256 of its dtype, its shape and its
 * raw little-endian bytes, so every fine-tune that keeps a foundation tensor byte-identical shares it for free; a
 * block's id is the SHA-256 of its canonical manifest, so two byte-identical blocks are one block.
 */
import { createHash } from 'node:crypto';

import { ZooInvalidError } from './errors.js';

/** 'sha256:' + 64 hex digits. */
export type TensorId = string;
/** 'blk:' + 64 hex digits (the manifest's hash). */
export type BlockId = string;

/** Element sizes of the dtypes the zoo stores (safetensors spellings lower-cased as in @tessera/native). */
export const DTYPE_BYTES: Readonly<Record<string, number>> = {
  f64: 8,
  f32: 4,
  f16: 2,
  bf16: 2,
  i64: 8,
  i32: 4,
  i16: 2,
  i8: 1,
  u8: 1,
  bool: 1,
};

/** What a tensor is, without its bytes. */
export interface TensorDescriptor {
  dtype: string;
  shape: readonly number[];
}

/** Bytes a tensor of this descriptor holds; throws for an unknown dtype or a bad shape. */
export function tensorByteLength(desc: TensorDescriptor): number {
  const size = DTYPE_BYTES[desc.dtype];
  if (size === undefined) throw new ZooInvalidError(`unknown dtype ${JSON.stringify(desc.dtype)} (known: ${Object.keys(DTYPE_BYTES).join(', ')})`);
  let n = 1;
  for (const d of desc.shape) {
    if (!Number.isSafeInteger(d) || d < 0) throw new ZooInvalidError(`shape [${desc.shape.join(', ')}] has a dimension that is not a non-negative integer: ${d}`);
    n *= d;
  }
  return n * size;
}

const TENSOR_DOMAIN = 'tessera-zoo-tensor/v1';

/** The content id of a tensor: SHA-256 over (domain, dtype, shape, bytes). The bytes must match the descriptor. */
export function tensorId(desc: TensorDescriptor, bytes: ArrayBufferView): TensorId {
  const expected = tensorByteLength(desc);
  if (bytes.byteLength !== expected) {
    throw new ZooInvalidError(`a ${desc.dtype} tensor of shape [${desc.shape.join(', ')}] holds ${expected} bytes, but ${bytes.byteLength} were given`);
  }
  const h = createHash('sha256');
  h.update(`${TENSOR_DOMAIN}\0${desc.dtype}\0${desc.shape.join(',')}\0`);
  h.update(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  return `sha256:${h.digest('hex')}`;
}

const TENSOR_ID_RE = /^sha256:[0-9a-f]{64}$/;
const BLOCK_ID_RE = /^blk:[0-9a-f]{64}$/;

export function isTensorId(id: string): id is TensorId {
  return TENSOR_ID_RE.test(id);
}

export function isBlockId(id: string): id is BlockId {
  return BLOCK_ID_RE.test(id);
}

/** JSON with object keys sorted at every level: the same value always serialises to the same string. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') {
    if (typeof value === 'number' && !Number.isFinite(value)) throw new ZooInvalidError(`canonicalJson: ${value} is not a finite number`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** 'blk:' + SHA-256 of the canonical JSON of `body` (a manifest without its id). */
export function contentBlockId(body: unknown): BlockId {
  return `blk:${createHash('sha256').update('tessera-zoo-block/v1\0').update(canonicalJson(body)).digest('hex')}`;
}

/** A stable short hash of any JSON value (calibration sets, configs), 'sha256:' + hex. */
export function jsonHash(value: unknown): string {
  return `sha256:${createHash('sha256').update(canonicalJson(value)).digest('hex')}`;
}
