/**
 * safetensors (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON `{ name: { dtype, shape, data_offsets: [begin, end] }, "__metadata__": { … } }`, then the raw
 * little-endian tensor bytes (offsets are relative to the end of the header).
 */
import { closeSync, fstatSync, fsyncSync, openSync, read, readSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import {
  type AnyTypedArray,
  type Backend,
  type DType,
  DTypeMismatchError,
  Tensor,
  type TensorOptions,
  UnsupportedOpError,
  cast,
  dtypeSize,
} from '@tessera/native';
import { BadHeaderError, MissingTensorError, ModelFormatError, TruncatedFileError, UnknownDtypeError } from '../errors.js';

/** safetensors dtype names ↔ native dtypes, for the dtypes the engine reads. */
export const SAFETENSORS_DTYPES: Readonly<Record<string, DType>> = {
  F32: 'f32',
  F16: 'f16',
  BF16: 'bf16',
  I32: 'i32',
  I64: 'i64',
  U8: 'u8',
};

/**
 * Element sizes of the safetensors dtypes the engine does not read. A file may carry such tensors (an F64 buffer, an
 * I8 or BOOL mask the model never uses): they are validated like any other (offsets, size, overlaps) and skipped;
 * reading one, or asking its info, throws UnknownDtypeError naming it. Sub-byte packed dtypes (F4, F6_*) and names
 * this table lacks are checked for bounds only.
 */
const UNREAD_DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8, I8: 1, I16: 2, U16: 2, U32: 4, U64: 8, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1, F8_E8M0: 1, C64: 8,
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

// ─── Reader ────────────────────────────────────────────────────────────────────────────────────────────────

/** The Rust `safetensors` crate's limit (MAX_HEADER_SIZE): a larger header is a corrupt length, not a model. */
export const SAFETENSORS_MAX_HEADER_BYTES = 100_000_000;

/** fs.read moves at most 2 GiB − 1 per call, so larger tensors are read in chunks. */
const MAX_READ_CHUNK = 0x7fff_f000;

/** Where one tensor lives. `byteOffset` is absolute in the file (header included). */
export interface SafetensorsTensorInfo {
  dtype: DType;
  shape: number[];
  byteOffset: number;
  byteLength: number;
}

export interface SafetensorsReadOptions {
  /** Backend to allocate on (default: the process backend). */
  backend?: Backend;
  /** Convert to this dtype after reading; only between f32, f16 and bf16 (native `cast`). */
  dtype?: DType;
}

const FLOAT_DTYPES: readonly DType[] = ['f32', 'f16', 'bf16'];

/** The Rust crate rejects a header that is not UTF-8; so do we (instead of decoding U+FFFD). */
const utf8Strict = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

let hostIsLittleEndian: boolean | undefined;
/** safetensors stores little-endian bytes and we hand them to typed arrays and tensors unswapped. */
function assertLittleEndianHost(): void {
  hostIsLittleEndian ??= new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  if (!hostIsLittleEndian) {
    throw new UnsupportedOpError('safetensors: this host is big-endian; the reader maps little-endian bytes without swapping');
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isNonNegativeSafeInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

function shapeString(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

/** A host typed array of the dtype's layout over `bytes` (which must own its ArrayBuffer from offset 0). */
function hostView(dtype: DType, bytes: Buffer): AnyTypedArray {
  const { buffer, byteOffset, byteLength } = bytes;
  switch (dtype) {
    case 'f32': return new Float32Array(buffer, byteOffset, byteLength / 4);
    case 'f16':
    case 'bf16': return new Uint16Array(buffer, byteOffset, byteLength / 2);
    case 'i32': return new Int32Array(buffer, byteOffset, byteLength / 4);
    case 'i64': return new BigInt64Array(buffer, byteOffset, byteLength / 8);
    case 'u8': return new Uint8Array(buffer, byteOffset, byteLength);
  }
}

/**
 * Parses and validates a safetensors header (the JSON text after the length prefix). `dataBytes` is the size of
 * the data region (file size − 8 − header length). Gaps between tensors and trailing bytes are allowed; overlaps
 * are not.
 */
function parseHeader(path: string, headerBytes: Buffer, dataBytes: number): { tensors: Map<string, SafetensorsTensorInfo>; unread: Map<string, UnreadTensor>; metadata: Record<string, string> } {
  let json: unknown;
  try {
    json = JSON.parse(utf8Strict.decode(headerBytes));
  } catch (cause) {
    throw new BadHeaderError(path, `${path}: safetensors header is not valid UTF-8 JSON (${(cause as Error).message})`, { cause });
  }
  if (!isPlainObject(json)) throw new BadHeaderError(path, `${path}: safetensors header must be a JSON object`);
  const headerEnd = 8 + headerBytes.length;
  const metadata: Record<string, string> = {};
  const tensors = new Map<string, SafetensorsTensorInfo>();
  const unread = new Map<string, UnreadTensor>();
  const ranges: { name: string; begin: number; end: number }[] = [];
  for (const [name, entry] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (entry === null) continue;
      if (!isPlainObject(entry)) throw new BadHeaderError(path, `${path}: __metadata__ must be an object of strings`);
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== 'string') throw new BadHeaderError(path, `${path}: __metadata__.${k} must be a string, got ${JSON.stringify(v)}`);
        metadata[k] = v;
      }
      continue;
    }
    if (!isPlainObject(entry)) throw new BadHeaderError(path, `${path}: tensor ${name}: header entry must be an object`);
    const { dtype: dtypeName, shape, data_offsets: offsets } = entry;
    if (typeof dtypeName !== 'string') throw new BadHeaderError(path, `${path}: tensor ${name}: dtype must be a string, got ${JSON.stringify(dtypeName)}`);
    const dtype = Object.hasOwn(SAFETENSORS_DTYPES, dtypeName) ? SAFETENSORS_DTYPES[dtypeName] : undefined;
    if (!Array.isArray(shape) || !shape.every(isNonNegativeSafeInteger)) {
      throw new BadHeaderError(path, `${path}: tensor ${name}: shape must be a list of non-negative integers, got ${JSON.stringify(shape)}`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every(isNonNegativeSafeInteger)) {
      throw new BadHeaderError(path, `${path}: tensor ${name}: data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    const numel = (shape as number[]).reduce((a, b) => a * b, 1);
    const elementBytes = dtype !== undefined ? dtypeSize(dtype) : Object.hasOwn(UNREAD_DTYPE_BYTES, dtypeName) ? UNREAD_DTYPE_BYTES[dtypeName]! : null;
    const expected = elementBytes === null ? end - begin : numel * elementBytes;
    if (!Number.isSafeInteger(expected) || end < begin || end - begin !== expected) {
      throw new BadHeaderError(path, `${path}: tensor ${name}: data_offsets [${begin}, ${end}] span ${end - begin} bytes but ${shapeString(shape as number[])} ${dtypeName} needs ${expected}`);
    }
    if (end > dataBytes) {
      throw new TruncatedFileError(path, `${path}: tensor ${name} ends at data byte ${end} but the file holds only ${dataBytes} data bytes (truncated?)`);
    }
    ranges.push({ name, begin, end });
    if (dtype === undefined) {
      unread.set(name, { dtypeName, byteOffset: headerEnd + begin });
      continue;
    }
    tensors.set(name, { dtype, shape: [...(shape as number[])], byteOffset: headerEnd + begin, byteLength: expected });
  }
  // Overlap check over non-empty ranges (empty tensors may share any offset, as in the Rust crate).
  const nonEmpty = ranges.filter((r) => r.end > r.begin).sort((a, b) => a.begin - b.begin || a.end - b.end);
  for (let i = 1; i < nonEmpty.length; i++) {
    const prev = nonEmpty[i - 1]!;
    const cur = nonEmpty[i]!;
    if (cur.begin < prev.end) {
      throw new BadHeaderError(path, `${path}: tensors ${prev.name} [${prev.begin}, ${prev.end}) and ${cur.name} [${cur.begin}, ${cur.end}) overlap`);
    }
  }
  return { tensors, unread, metadata };
}

/** A tensor of a dtype the engine does not read: kept only to name it when something asks for it. */
interface UnreadTensor {
  dtypeName: string;
  byteOffset: number;
}

/** Closes the descriptor of a file that was garbage-collected without close(). */
const leakedFiles = new FinalizationRegistry<number>((fd) => {
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
});

/**
 * A safetensors file opened for lazy, per-tensor reads. `open` reads only the length prefix and the JSON
 * header and validates every entry against the file size, so a bad file fails here, before any tensor is
 * allocated. Each read is a positioned read of exactly one tensor's bytes into a host buffer, copied once into
 * native memory. Keep it open while loading, then `close()`.
 */
export class SafetensorsFile {
  readonly path: string;
  /** `__metadata__` (string → string), empty when absent. */
  readonly metadata: Readonly<Record<string, string>>;
  /** File size in bytes at open time. */
  readonly fileSize: number;
  private readonly tensors: Map<string, SafetensorsTensorInfo>;
  /** Tensors of dtypes the engine does not read (F64, I8, BOOL, …): listed, skipped, refused by name when asked for. */
  private readonly unread: Map<string, UnreadTensor>;
  private fd: number | null;
  /** Asynchronous reads in flight: close() defers closing the descriptor until they settle. */
  private pending = 0;
  private closeRequested = false;

  private constructor(path: string, fd: number, fileSize: number, parsed: { tensors: Map<string, SafetensorsTensorInfo>; unread: Map<string, UnreadTensor>; metadata: Record<string, string> }) {
    const { tensors, unread, metadata } = parsed;
    this.path = path;
    this.fd = fd;
    this.fileSize = fileSize;
    this.tensors = tensors;
    this.unread = unread;
    this.metadata = Object.freeze(metadata);
    leakedFiles.register(this, fd, this);
  }

  /** Opens `path` and reads and validates its header. Throws a {@link ModelFormatError} subclass for a bad file. */
  static open(path: string): SafetensorsFile {
    assertLittleEndianHost();
    // Checked before the open: opening a FIFO for reading blocks until a writer appears, i.e. possibly forever.
    let isFile = false;
    try {
      isFile = statSync(path).isFile();
    } catch (cause) {
      throw new ModelFormatError('TESSERA_FILE_UNREADABLE', path, `${path}: cannot open safetensors file (${(cause as Error).message})`, { cause });
    }
    if (!isFile) throw new ModelFormatError('TESSERA_FILE_UNREADABLE', path, `${path}: not a regular file`);
    let fd: number;
    try {
      fd = openSync(path, 'r');
    } catch (cause) {
      throw new ModelFormatError('TESSERA_FILE_UNREADABLE', path, `${path}: cannot open safetensors file (${(cause as Error).message})`, { cause });
    }
    try {
      const stat = fstatSync(fd);
      if (!stat.isFile()) throw new ModelFormatError('TESSERA_FILE_UNREADABLE', path, `${path}: not a regular file`);
      const size = stat.size;
      if (size < 8) throw new TruncatedFileError(path, `${path}: ${size} bytes is shorter than the 8-byte safetensors header length`);
      const prefix = Buffer.alloc(8);
      readFully(fd, path, prefix, 0, 'the header length');
      const headerLength = prefix.readBigUInt64LE(0);
      if (headerLength > BigInt(SAFETENSORS_MAX_HEADER_BYTES)) {
        throw new BadHeaderError(path, `${path}: header length ${headerLength} exceeds the ${SAFETENSORS_MAX_HEADER_BYTES}-byte limit (not a safetensors file?)`);
      }
      const n = Number(headerLength);
      if (n > size - 8) throw new TruncatedFileError(path, `${path}: header length ${n} runs past the end of the ${size}-byte file (truncated?)`);
      const headerBytes = Buffer.allocUnsafe(n);
      readFully(fd, path, headerBytes, 8, 'the header');
      return new SafetensorsFile(path, fd, size, parseHeader(path, headerBytes, size - 8 - n));
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Tensor names in file order (by byte offset, then name), those of unread dtypes included. */
  names(): string[] {
    return [...this.tensors.entries(), ...this.unread.entries()]
      .sort(([na, a], [nb, b]) => a.byteOffset - b.byteOffset || (na < nb ? -1 : na > nb ? 1 : 0))
      .map(([name]) => name);
  }

  has(name: string): boolean {
    return this.tensors.has(name) || this.unread.has(name);
  }

  /** Dtype, shape and absolute byte range of `name`. Throws MissingTensorError for an unknown name. */
  info(name: string): SafetensorsTensorInfo {
    const t = this.lookup(name);
    return { dtype: t.dtype, shape: [...t.shape], byteOffset: t.byteOffset, byteLength: t.byteLength };
  }

  /** Reads `name` into a new tensor (converted to `options.dtype` when given). Nothing stays allocated on failure. */
  read(name: string, options: SafetensorsReadOptions = {}): Tensor {
    const info = this.lookup(name);
    checkConversion(this.path, name, info.dtype, options.dtype);
    const bytes = this.readBytes(name, info);
    const tensor = Tensor.from(bytes, info.shape, tensorOptions(info.dtype, options.backend));
    return convert(tensor, options.dtype);
  }

  /** Reads `name` into a host typed array (f16/bf16 as raw bits in a Uint16Array), for consumers outside native. */
  readHost(name: string): AnyTypedArray {
    const info = this.lookup(name);
    return hostView(info.dtype, this.readBytes(name, info));
  }

  /** Like {@link read}, with the file read and the copy into native memory off the main thread. */
  async readAsync(name: string, options: SafetensorsReadOptions = {}): Promise<Tensor> {
    const info = this.lookup(name);
    checkConversion(this.path, name, info.dtype, options.dtype);
    const fd = this.liveFd();
    this.pending++;
    try {
      const bytes = Buffer.allocUnsafeSlow(info.byteLength);
      let done = 0;
      while (done < info.byteLength) {
        const len = Math.min(MAX_READ_CHUNK, info.byteLength - done);
        const { bytesRead } = await readAsyncChunk(fd, bytes, done, len, info.byteOffset + done).catch((cause: unknown) => {
          throw new ModelFormatError('TESSERA_FILE_UNREADABLE', this.path, `${this.path}: reading tensor ${name} failed (${(cause as Error).message})`, { cause });
        });
        if (bytesRead === 0) throw this.shortRead(name, info, done);
        done += bytesRead;
      }
      const tensor = await Tensor.fromAsync(bytes, info.shape, tensorOptions(info.dtype, options.backend));
      return convert(tensor, options.dtype);
    } finally {
      this.pending--;
      if (this.closeRequested && this.pending === 0) this.closeNow();
    }
  }

  /** Closes the file (after any asynchronous reads in flight). Idempotent. */
  close(): void {
    this.closeRequested = true;
    if (this.pending === 0) this.closeNow();
  }

  get closed(): boolean {
    return this.closeRequested;
  }

  private closeNow(): void {
    if (this.fd === null) return;
    const fd = this.fd;
    this.fd = null;
    leakedFiles.unregister(this);
    closeSync(fd);
  }

  private liveFd(): number {
    if (this.closeRequested || this.fd === null) throw new ModelFormatError('TESSERA_FILE_CLOSED', this.path, `${this.path}: safetensors file is closed`);
    return this.fd;
  }

  private lookup(name: string): SafetensorsTensorInfo {
    const info = this.tensors.get(name);
    if (info) return info;
    const unread = this.unread.get(name);
    if (unread) {
      throw new UnknownDtypeError(this.path, `${this.path}: tensor ${name} has dtype ${unread.dtypeName}, which this engine does not read (known: ${Object.keys(SAFETENSORS_DTYPES).join(', ')})`);
    }
    throw new MissingTensorError(this.path, `${this.path}: no tensor named ${name}`);
  }

  /** Exactly the tensor's bytes, in a Buffer that owns its ArrayBuffer (so typed views are aligned). */
  private readBytes(name: string, info: SafetensorsTensorInfo): Buffer {
    const fd = this.liveFd();
    const bytes = Buffer.allocUnsafeSlow(info.byteLength);
    let done = 0;
    while (done < info.byteLength) {
      let n: number;
      try {
        n = readSync(fd, bytes, done, Math.min(MAX_READ_CHUNK, info.byteLength - done), info.byteOffset + done);
      } catch (cause) {
        throw new ModelFormatError('TESSERA_FILE_UNREADABLE', this.path, `${this.path}: reading tensor ${name} failed (${(cause as Error).message})`, { cause });
      }
      if (n === 0) throw this.shortRead(name, info, done);
      done += n;
    }
    return bytes;
  }

  /** The file shrank after open (the header was checked against the size then). */
  private shortRead(name: string, info: SafetensorsTensorInfo, got: number): TruncatedFileError {
    return new TruncatedFileError(this.path, `${this.path}: tensor ${name} needs ${info.byteLength} bytes at offset ${info.byteOffset} but the file ended after ${got} (truncated since it was opened?)`);
  }
}

function readFully(fd: number, path: string, into: Buffer, position: number, what: string): void {
  let done = 0;
  while (done < into.length) {
    const n = readSync(fd, into, done, into.length - done, position + done);
    if (n === 0) throw new TruncatedFileError(path, `${path}: file ended while reading ${what}`);
    done += n;
  }
}

function readAsyncChunk(fd: number, buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }> {
  return new Promise((resolve, reject) => {
    read(fd, buffer, offset, length, position, (err, bytesRead) => (err ? reject(err) : resolve({ bytesRead })));
  });
}

function tensorOptions(dtype: DType, backend: Backend | undefined): TensorOptions {
  return backend ? { dtype, backend } : { dtype };
}

function checkConversion(path: string, name: string, from: DType, to: DType | undefined): void {
  if (to === undefined || to === from) return;
  if (!FLOAT_DTYPES.includes(from) || !FLOAT_DTYPES.includes(to)) {
    throw new DTypeMismatchError(`${path}: tensor ${name} is ${from} and cannot be read as ${to} (conversions are between f32, f16 and bf16)`);
  }
}

/** Converts with native `cast`, freeing the source; on failure frees everything it allocated. */
function convert(tensor: Tensor, to: DType | undefined): Tensor {
  if (to === undefined || to === tensor.dtype) return tensor;
  let out: Tensor | undefined;
  try {
    out = Tensor.empty(tensor.shape, to, tensor.backend);
    cast(tensor, to, { out });
    return out;
  } catch (err) {
    out?.dispose();
    throw err;
  } finally {
    tensor.dispose();
  }
}
