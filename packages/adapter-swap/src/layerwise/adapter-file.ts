/**
 * One tenant's layer-wise adapters on disk (`<id>.tsadapt`, hmi.md §1.6–1.7): a fixed little-endian header, an
 * optional metadata record the caller owns (UTF-8, zero-padded to 4 bytes), then the f32 payload — one flat vector
 * per upper layer, `[W_down (m·d) | b_down (m) | W_up (d·m) | b_up (d)]`, then the head `W [labels, d]` and
 * `b [labels]`. The file's length is exact: a shorter or longer file is refused, as is any other magic, version,
 * checksum or shape.
 *
 *   offset  size  field
 *        0     8  magic "TSADAPT\0"
 *        8     4  u32 format version (1)
 *       12     4  u32 hidden d
 *       16     4  u32 bottleneck m
 *       20     4  u32 layers L (one adapter vector each)
 *       24     4  u32 labels C (head rows)
 *       28     4  u32 metadata bytes
 *       32     4  u32 CRC-32 of the metadata bytes
 *       36     4  u32 CRC-32 of the f32 payload
 *       40     4  u32 reserved, 0
 *       44     4  u32 CRC-32 of bytes 0 … 43 (the header checksum)
 *       48        metadata, then zeros to a multiple of 4
 *                 payload: L × (2dm + m + d) f32, then C·d + C f32
 */
import { crc32 } from 'node:zlib';

import { AdapterFileError, AdapterShapeError } from './store-errors.js';

export const ADAPTER_FILE_MAGIC = 'TSADAPT\0';
export const ADAPTER_FILE_VERSION = 1;
export const ADAPTER_FILE_HEADER_BYTES = 48;
export const ADAPTER_FILE_EXTENSION = '.tsadapt';
/** Metadata larger than this is refused (it is a small JSON record, not a second payload). */
export const MAX_ADAPTER_METADATA_BYTES = 1 << 20;

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export interface LayerwiseAdapterShape {
  hidden: number;
  bottleneck: number;
  /** Upper layers, one adapter vector each. */
  layers: number;
}

/** One tenant's adapters and classification head, as the runner gathers them. */
export interface LayerwiseAdapterSet {
  /** One flat f32 vector per layer, `[W_down (m·d) | b_down (m) | W_up (d·m) | b_up (d)]`. */
  readonly adapters: readonly Float32Array[];
  readonly head: { readonly weight: Float32Array; readonly bias: Float32Array };
}

export interface AdapterFileHeader {
  version: number;
  hidden: number;
  bottleneck: number;
  layers: number;
  labels: number;
  metaBytes: number;
  metaCrc: number;
  payloadCrc: number;
}

/** f32 elements of one layer's vector: 2dm + m + d. */
export function layerNumel(shape: Pick<LayerwiseAdapterShape, 'hidden' | 'bottleneck'>): number {
  return 2 * shape.hidden * shape.bottleneck + shape.bottleneck + shape.hidden;
}

/** Bytes of a set's arrays: L × (2dm + m + d) × 4 + (C·d + C) × 4. */
export function adapterSetBytes(shape: LayerwiseAdapterShape, labels: number): number {
  return 4 * (shape.layers * layerNumel(shape) + labels * shape.hidden + labels);
}

/** Σ byteLength of a set's arrays. */
export function byteLengthOf(set: LayerwiseAdapterSet): number {
  let n = set.head.weight.byteLength + set.head.bias.byteLength;
  for (const a of set.adapters) n += a.byteLength;
  return n;
}

const pad4 = (n: number) => (n + 3) & ~3;

/** The exact length of a file of this shape, label count and metadata size. */
export function adapterFileBytes(shape: LayerwiseAdapterShape, labels: number, metaBytes: number): number {
  return ADAPTER_FILE_HEADER_BYTES + pad4(metaBytes) + adapterSetBytes(shape, labels);
}

/** Throws AdapterShapeError unless `set` has `shape`'s layers and vector sizes and a consistent head. */
export function checkAdapterSet(id: string, set: LayerwiseAdapterSet, shape: LayerwiseAdapterShape): number {
  const numel = layerNumel(shape);
  const fail = (what: string) => {
    throw new AdapterShapeError(id, `adapter set ${JSON.stringify(id)}: ${what}`, shape);
  };
  if (!Array.isArray(set.adapters) || set.adapters.length !== shape.layers) fail(`${set.adapters?.length} layer vectors, want ${shape.layers}`);
  for (const [j, a] of set.adapters.entries()) {
    if (!(a instanceof Float32Array)) fail(`layer ${j} is not a Float32Array`);
    if (a.length !== numel) fail(`layer ${j} has ${a.length} floats, want 2dm + m + d = ${numel}`);
  }
  const { weight, bias } = set.head ?? {};
  if (!(weight instanceof Float32Array) || !(bias instanceof Float32Array)) return fail('the head needs Float32Array weight and bias');
  const labels = bias.length;
  if (labels < 1 || weight.length !== labels * shape.hidden) fail(`a head of ${weight.length} + ${labels} floats; want labels × ${shape.hidden} + labels with labels ≥ 1`);
  return labels;
}

function bytesOf(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

function writeF32(out: Uint8Array, offset: number, a: Float32Array): number {
  if (LITTLE_ENDIAN) out.set(bytesOf(a), offset);
  else {
    const view = new DataView(out.buffer, out.byteOffset);
    for (let i = 0; i < a.length; i++) view.setFloat32(offset + 4 * i, a[i]!, true);
  }
  return offset + a.byteLength;
}

/** The file's bytes. `meta` is stored as given (the store passes JSON text encoded as UTF-8). */
export function encodeAdapterFile(id: string, set: LayerwiseAdapterSet, shape: LayerwiseAdapterShape, meta: Uint8Array = new Uint8Array(0)): Uint8Array {
  const labels = checkAdapterSet(id, set, shape);
  if (meta.length > MAX_ADAPTER_METADATA_BYTES) throw new AdapterShapeError(id, `adapter set ${JSON.stringify(id)}: ${meta.length} metadata bytes, at most ${MAX_ADAPTER_METADATA_BYTES}`, shape);
  const out = new Uint8Array(adapterFileBytes(shape, labels, meta.length));
  const view = new DataView(out.buffer);
  let off = ADAPTER_FILE_HEADER_BYTES;
  out.set(meta, off);
  off += pad4(meta.length);
  const payloadStart = off;
  for (const a of set.adapters) off = writeF32(out, off, a);
  off = writeF32(out, off, set.head.weight);
  writeF32(out, off, set.head.bias);
  for (let i = 0; i < 8; i++) out[i] = ADAPTER_FILE_MAGIC.charCodeAt(i);
  const fields = [ADAPTER_FILE_VERSION, shape.hidden, shape.bottleneck, shape.layers, labels, meta.length, crc32(meta), crc32(out.subarray(payloadStart)), 0];
  fields.forEach((v, i) => view.setUint32(8 + 4 * i, v >>> 0, true));
  view.setUint32(44, crc32(out.subarray(0, 44)), true);
  return out;
}

/**
 * Parses and checks a header against the store's shape and, when given, the file's length. `file` names the
 * file in errors.
 */
export function decodeAdapterHeader(file: string, head: Uint8Array, shape: LayerwiseAdapterShape, fileBytes?: number): AdapterFileHeader {
  if (head.length < ADAPTER_FILE_HEADER_BYTES) throw new AdapterFileError(file, 'length', `${file}: ${head.length} bytes, shorter than the ${ADAPTER_FILE_HEADER_BYTES}-byte header`);
  for (let i = 0; i < 8; i++) {
    if (head[i] !== ADAPTER_FILE_MAGIC.charCodeAt(i)) throw new AdapterFileError(file, 'magic', `${file}: not a Tessera adapter file (bad magic)`);
  }
  const view = new DataView(head.buffer, head.byteOffset, ADAPTER_FILE_HEADER_BYTES);
  const u32 = (off: number) => view.getUint32(off, true);
  if (crc32(head.subarray(0, 44)) !== u32(44)) throw new AdapterFileError(file, 'checksum', `${file}: header checksum mismatch`);
  const h: AdapterFileHeader = { version: u32(8), hidden: u32(12), bottleneck: u32(16), layers: u32(20), labels: u32(24), metaBytes: u32(28), metaCrc: u32(32), payloadCrc: u32(36) };
  if (h.version !== ADAPTER_FILE_VERSION) throw new AdapterFileError(file, 'version', `${file}: format version ${h.version}; this reader knows ${ADAPTER_FILE_VERSION}`);
  if (u32(40) !== 0) throw new AdapterFileError(file, 'checksum', `${file}: reserved header field is not 0`);
  if (h.hidden !== shape.hidden || h.bottleneck !== shape.bottleneck || h.layers !== shape.layers) {
    throw new AdapterShapeError(file, `${file}: adapters of hidden ${h.hidden}, bottleneck ${h.bottleneck}, ${h.layers} layers; the store holds hidden ${shape.hidden}, bottleneck ${shape.bottleneck}, ${shape.layers} layers`, shape, { hidden: h.hidden, bottleneck: h.bottleneck, layers: h.layers });
  }
  if (h.labels < 1 || h.metaBytes > MAX_ADAPTER_METADATA_BYTES) throw new AdapterFileError(file, 'length', `${file}: ${h.labels} labels, ${h.metaBytes} metadata bytes`);
  const want = adapterFileBytes(shape, h.labels, h.metaBytes);
  if (fileBytes !== undefined && fileBytes !== want) throw new AdapterFileError(file, 'length', `${file}: ${fileBytes} bytes, want exactly ${want} for ${h.labels} labels and ${h.metaBytes} metadata bytes`);
  return h;
}

/** The metadata bytes of a whole file or of its first `48 + metaBytes` bytes, checked against its CRC. */
export function decodeAdapterMeta(file: string, bytes: Uint8Array, h: AdapterFileHeader): Uint8Array {
  const meta = bytes.subarray(ADAPTER_FILE_HEADER_BYTES, ADAPTER_FILE_HEADER_BYTES + h.metaBytes);
  if (meta.length !== h.metaBytes) throw new AdapterFileError(file, 'length', `${file}: metadata cut short`);
  if (crc32(meta) !== h.metaCrc) throw new AdapterFileError(file, 'checksum', `${file}: metadata checksum mismatch`);
  return meta;
}

/**
 * A whole file → its set (arrays in one fresh buffer of exactly the payload's bytes) and metadata. Every check of
 * the header, the exact length, the padding and both checksums.
 */
export function decodeAdapterFile(file: string, bytes: Uint8Array, shape: LayerwiseAdapterShape): { set: LayerwiseAdapterSet; meta: Uint8Array; header: AdapterFileHeader } {
  const h = decodeAdapterHeader(file, bytes, shape, bytes.length);
  const meta = decodeAdapterMeta(file, bytes, h);
  const metaEnd = ADAPTER_FILE_HEADER_BYTES + h.metaBytes;
  const start = ADAPTER_FILE_HEADER_BYTES + pad4(h.metaBytes);
  for (let i = metaEnd; i < start; i++) if (bytes[i] !== 0) throw new AdapterFileError(file, 'checksum', `${file}: non-zero metadata padding`);
  const payload = bytes.subarray(start);
  if (crc32(payload) !== h.payloadCrc) throw new AdapterFileError(file, 'checksum', `${file}: payload checksum mismatch`);
  const all = new Float32Array(payload.length / 4);
  if (LITTLE_ENDIAN) new Uint8Array(all.buffer).set(payload);
  else {
    const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
    for (let i = 0; i < all.length; i++) all[i] = view.getFloat32(4 * i, true);
  }
  const numel = layerNumel(shape);
  const adapters = Array.from({ length: shape.layers }, (_, j) => all.subarray(j * numel, (j + 1) * numel));
  const w0 = shape.layers * numel;
  const b0 = w0 + h.labels * shape.hidden;
  return { set: { adapters, head: { weight: all.subarray(w0, b0), bias: all.subarray(b0, b0 + h.labels) } }, meta: meta.slice(), header: h };
}
