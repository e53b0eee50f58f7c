/**
 * safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON `{ name: { dtype, shape, data_offsets: [begin, end] }, "__metadata__": { … } }`, then the raw
 * little-endian tensor bytes (offsets are relative to the end of the header).
 */
import { closeSync, fsyncSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { type DType, Tensor, dtypeSize } from '@tessera/native';

/** safetensors dtype names ↔ native dtypes, for the dtypes the engine reads. */
export const SAFETENSORS_DTYPES: Readonly<Record<string, DType>> = {
  F32: 'f32',
  F16: 'f16',
  BF16: 'bf16',
  I32: 'i32',
  I64: 'i64',
  U8: 'u8',
};

export function safetensorsDtypeName(dtype: DType): string {
  for (const [name, d] of Object.entries(SAFETENSORS_DTYPES)) if (d === dtype) return name;
  throw new Error(`no safetensors name for dtype ${dtype}`);
}

/** One tensor to write: host bytes (a typed array in the dtype's layout, e.g. Uint16Array for f16/bf16) or a Tensor. */
export interface SafetensorsEntry {
  dtype: DType;
  shape: readonly number[];
  data: ArrayBufferView | Tensor;
}

function entryBytes(name: string, entry: SafetensorsEntry): number {
  const numel = entry.shape.reduce((a, b) => a * b, 1);
  const bytes = numel * dtypeSize(entry.dtype);
  const have = entry.data instanceof Tensor ? entry.data.nbytes : entry.data.byteLength;
  if (have !== bytes) {
    throw new RangeError(`writeSafetensors: ${name} is [${entry.shape.join(', ')}] ${entry.dtype} = ${bytes} bytes, but its data has ${have}`);
  }
  if (entry.data instanceof Tensor && entry.data.dtype !== entry.dtype) {
    throw new RangeError(`writeSafetensors: ${name} is declared ${entry.dtype} but its tensor is ${entry.data.dtype}`);
  }
  return bytes;
}

/**
 * Writes a safetensors file the way the Python `safetensors` library does: tensors ordered by dtype size
 * (largest first, so every tensor stays aligned) then by name, header padded with spaces to 8 bytes. The file
 * is written to a temporary name and renamed, so a reader never sees a partial file. Tensors are streamed one at
 * a time (no whole-file buffer).
 */
export function writeSafetensors(
  path: string,
  tensors: Iterable<[string, SafetensorsEntry]> | Record<string, SafetensorsEntry>,
  metadata: Record<string, string> = {},
): void {
  const entries = (Symbol.iterator in tensors ? [...(tensors as Iterable<[string, SafetensorsEntry]>)] : Object.entries(tensors))
    .sort(([na, a], [nb, b]) => dtypeSize(b.dtype) - dtypeSize(a.dtype) || (na < nb ? -1 : na > nb ? 1 : 0));
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  const sizes: number[] = [];
  for (const [name, entry] of entries) {
    if (name === '__metadata__' || name in header) throw new RangeError(`writeSafetensors: duplicate or reserved tensor name ${name}`);
    const bytes = entryBytes(name, entry);
    header[name] = { dtype: safetensorsDtypeName(entry.dtype), shape: [...entry.shape], data_offsets: [offset, offset + bytes] };
    sizes.push(bytes);
    offset += bytes;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (Buffer.byteLength(json) % 8)) % 8);
  const headerBytes = Buffer.from(json, 'utf8');
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(headerBytes.length));

  const tmp = `${path}.tmp-${process.pid}`;
  const fd = openSync(tmp, 'w');
  try {
    writeSync(fd, prefix);
    writeSync(fd, headerBytes);
    entries.forEach(([, entry], i) => {
      const data = entry.data instanceof Tensor ? entry.data.toArray() : entry.data;
      const view = Buffer.from(data.buffer, data.byteOffset, sizes[i]);
      let done = 0;
      while (done < view.length) done += writeSync(fd, view, done, view.length - done);
    });
    fsyncSync(fd);
    closeSync(fd);
    renameSync(tmp, path);
  } catch (err) {
    try { closeSync(fd); } catch { /* already closed */ }
    rmSync(tmp, { force: true });
    throw err;
  }
}
