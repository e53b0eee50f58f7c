/**
 * The PLOT value file layout (version 1). Everything is little-endian; the data needs no parsing, so a reader can
 * mmap it and index rows directly.
 *
 *   offset  size  field
 *        0     8  magic "TSPLOTV\0"
 *        8     4  u32 format version (1)
 *       12     4  u32 header length = data offset (64: the data starts 64-byte aligned)
 *       16     4  u32 slots (3 for encoder tri-gram values, 1 for last-slot causal values)
 *       20     4  u32 hidden
 *       24     8  u64 rows, row 0 included; 0 while the file is being written (not finalized)
 *       32     4  u32 dtype (1 = IEEE binary16)
 *       36     4  u32 reserved, 0
 *       40     4  u32 FNV-1a of bytes 0…39 (catches a damaged header before the shape is trusted)
 *       44    20  zero
 *       64     …  rows × slots × hidden binary16 values, row-major, row 0 all zeros, no framing
 *
 * File length = 64 + rows × slots × hidden × 2, exactly.
 */
import { PlotStoreArgumentError } from '../policy/errors.js';
import { F16_BYTES } from '../policy/value-store.js';
import { PlotFileFormatError } from './errors.js';

export const PLOT_FILE_MAGIC = 'TSPLOTV\0';
export const PLOT_FILE_VERSION = 1;
/** Header bytes; also the data offset, a multiple of 64 so rows are cache-line and SIMD aligned when mapped. */
export const PLOT_FILE_HEADER_BYTES = 64;
export const PLOT_FILE_DTYPE_F16 = 1;
const CHECKSUM_OFFSET = 40;

export interface PlotFileHeader {
  slots: number;
  hidden: number;
  /** Rows with row 0; 0 marks a file that is still being written. */
  rows: number;
}

/** Bytes per row of a shape. */
export function plotFileRowBytes(slots: number, hidden: number): number {
  return slots * hidden * F16_BYTES;
}

/** The exact length of a finalized file. */
export function plotFileBytes(header: PlotFileHeader): number {
  return PLOT_FILE_HEADER_BYTES + header.rows * plotFileRowBytes(header.slots, header.hidden);
}

function fnv1a(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  return h;
}

export function encodeHeader(header: PlotFileHeader): Uint8Array {
  const bytes = new Uint8Array(PLOT_FILE_HEADER_BYTES);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < PLOT_FILE_MAGIC.length; i++) bytes[i] = PLOT_FILE_MAGIC.charCodeAt(i);
  view.setUint32(8, PLOT_FILE_VERSION, true);
  view.setUint32(12, PLOT_FILE_HEADER_BYTES, true);
  view.setUint32(16, header.slots, true);
  view.setUint32(20, header.hidden, true);
  view.setBigUint64(24, BigInt(header.rows), true);
  view.setUint32(32, PLOT_FILE_DTYPE_F16, true);
  view.setUint32(CHECKSUM_OFFSET, fnv1a(bytes.subarray(0, CHECKSUM_OFFSET)), true);
  return bytes;
}

/** Parses and checks a header; `path` names the file in errors. Does not check the file length. */
export function decodeHeader(bytes: Uint8Array, path: string): PlotFileHeader {
  if (bytes.length < PLOT_FILE_HEADER_BYTES) throw new PlotFileFormatError(path, `${bytes.length} bytes is shorter than the ${PLOT_FILE_HEADER_BYTES}-byte header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, PLOT_FILE_HEADER_BYTES);
  const magic = String.fromCharCode(...bytes.subarray(0, PLOT_FILE_MAGIC.length));
  if (magic !== PLOT_FILE_MAGIC) throw new PlotFileFormatError(path, `bad magic ${JSON.stringify(magic)}`);
  const version = view.getUint32(8, true);
  if (version !== PLOT_FILE_VERSION) throw new PlotFileFormatError(path, `format version ${version}, this reader knows ${PLOT_FILE_VERSION}`);
  const stored = view.getUint32(CHECKSUM_OFFSET, true);
  const actual = fnv1a(bytes.subarray(0, CHECKSUM_OFFSET));
  if (stored !== actual) throw new PlotFileFormatError(path, `header checksum 0x${stored.toString(16)} does not match its bytes (0x${actual.toString(16)})`);
  const headerBytes = view.getUint32(12, true);
  if (headerBytes !== PLOT_FILE_HEADER_BYTES) throw new PlotFileFormatError(path, `header length ${headerBytes}, expected ${PLOT_FILE_HEADER_BYTES}`);
  const dtype = view.getUint32(32, true);
  if (dtype !== PLOT_FILE_DTYPE_F16) throw new PlotFileFormatError(path, `dtype code ${dtype}, only ${PLOT_FILE_DTYPE_F16} (binary16) is defined`);
  const slots = view.getUint32(16, true);
  const hidden = view.getUint32(20, true);
  if (slots < 1 || hidden < 1) throw new PlotFileFormatError(path, `shape ${slots} × ${hidden} has a zero dimension`);
  const rows = view.getBigUint64(24, true);
  if (rows > BigInt(Number.MAX_SAFE_INTEGER)) throw new PlotFileFormatError(path, `row count ${rows} is out of range`);
  return { slots, hidden, rows: Number(rows) };
}

/** Checks a shape for a new file. */
export function checkShape(slots: number, hidden: number): void {
  for (const [name, v] of [['slots', slots], ['hidden', hidden]] as const) {
    if (!Number.isInteger(v) || v < 1 || v > 0xffffffff) throw new PlotStoreArgumentError(`${name} must be a positive 32-bit integer, got ${v}`);
  }
}
