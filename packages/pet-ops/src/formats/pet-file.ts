/**
 * PET parameter files: safetensors with `__metadata__` = { format: "tessera-pet", format_version: "1", pet_type,
 * pet_config (JSON of PetConfig) } and the type's tensors (f32, i32 and u8 only; names and shapes per LAYOUTS.md).
 *
 * Files go through the engine's safetensors reader and writer. The engine's are file-only, so the in-memory pair
 * (readPetParams / writePetParams) parses and serializes here, with the same checks and byte-for-byte the same
 * output as writeSafetensors (tensors by dtype size then name, header padded with spaces to 8 bytes).
 */
import { SafetensorsFile, writeSafetensors, type SafetensorsEntry } from '@tessera/engine';
import { TesseraError } from '@tessera/native';
import { PetFormatError, PetShapeError } from '../errors.js';
import { ADAPTER_ACTIVATIONS } from '../operators/adapter.js';
import { PET_TYPES, type HostTensor, type PetConfig, type PetParams, type PetType } from '../types.js';

export const PET_FORMAT = 'tessera-pet';
export const PET_FORMAT_VERSION = '1';
const BYTES_SOURCE = '<bytes>';

/** safetensors dtype names of the dtypes a PET file may hold. */
const PET_DTYPE_NAMES: Readonly<Record<string, HostTensor['dtype']>> = { F32: 'f32', I32: 'i32', U8: 'u8' };
const DTYPE_SIZE: Readonly<Record<HostTensor['dtype'], number>> = { f32: 4, i32: 4, u8: 1 };
const DTYPE_NAME: Readonly<Record<HostTensor['dtype'], string>> = { f32: 'F32', i32: 'I32', u8: 'U8' };
/** The Rust safetensors crate's header limit: a larger length is a corrupt file. */
const MAX_HEADER_BYTES = 100_000_000;

const CONFIG_KEYS = ['labels', 'bottleneck', 'activation', 'rank', 'alpha', 'targetModules', 'prefixLength'] as const;

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** pet_config JSON → PetConfig, checking each field's JSON type (value ranges are the operator's to check). */
function parseConfig(source: string, text: string): PetConfig {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new PetFormatError(source, `__metadata__.pet_config is not valid JSON (${(cause as Error).message})`, { cause });
  }
  if (!isPlainObject(json)) throw new PetFormatError(source, '__metadata__.pet_config must be a JSON object');
  for (const key of Object.keys(json)) {
    if (!(CONFIG_KEYS as readonly string[]).includes(key)) throw new PetFormatError(source, `__metadata__.pet_config has an unknown key ${JSON.stringify(key)} (known: ${CONFIG_KEYS.join(', ')})`);
  }
  const bad = (key: string, want: string) => new PetFormatError(source, `__metadata__.pet_config.${key} must be ${want}, got ${JSON.stringify(json[key])}`);
  const isStringList = (v: unknown) => Array.isArray(v) && v.every((s) => typeof s === 'string');
  if (!isStringList(json.labels)) throw bad('labels', 'a list of strings');
  const config: { -readonly [K in keyof PetConfig]: PetConfig[K] } = { labels: [...(json.labels as string[])] };
  for (const key of ['bottleneck', 'rank', 'prefixLength'] as const) {
    const v = json[key];
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isInteger(v)) throw bad(key, 'an integer');
    config[key] = v;
  }
  if (json.alpha !== undefined) {
    if (typeof json.alpha !== 'number') throw bad('alpha', 'a number');
    config.alpha = json.alpha;
  }
  if (json.activation !== undefined) {
    if (!(ADAPTER_ACTIVATIONS as readonly unknown[]).includes(json.activation)) throw bad('activation', `one of ${ADAPTER_ACTIVATIONS.join(', ')}`);
    config.activation = json.activation as 'gelu' | 'gelu_tanh';
  }
  if (json.targetModules !== undefined) {
    if (!isStringList(json.targetModules)) throw bad('targetModules', 'a list of strings');
    config.targetModules = [...(json.targetModules as string[])];
  }
  return config;
}

/** The PET metadata: format tag and version, a known pet_type, a parseable pet_config. */
function parseMetadata(source: string, metadata: Readonly<Record<string, string>> | null): { type: PetType; config: PetConfig } {
  if (!metadata) throw new PetFormatError(source, `no __metadata__ (a PET file names format "${PET_FORMAT}", format_version, pet_type and pet_config there)`);
  if (metadata.format !== PET_FORMAT) throw new PetFormatError(source, `__metadata__.format is ${JSON.stringify(metadata.format ?? null)}, not "${PET_FORMAT}" (not a PET parameter file?)`);
  if (metadata.format_version !== PET_FORMAT_VERSION) {
    throw new PetFormatError(source, `__metadata__.format_version is ${JSON.stringify(metadata.format_version ?? null)}; this reader knows version "${PET_FORMAT_VERSION}"`);
  }
  const type = metadata.pet_type;
  if (type === undefined || !(PET_TYPES as readonly string[]).includes(type)) {
    throw new PetFormatError(source, `__metadata__.pet_type is ${JSON.stringify(type ?? null)}, not one of ${PET_TYPES.join(', ')}`);
  }
  if (metadata.pet_config === undefined) throw new PetFormatError(source, '__metadata__ has no pet_config');
  return { type: type as PetType, config: parseConfig(source, metadata.pet_config) };
}

function hostArray(dtype: HostTensor['dtype'], buffer: ArrayBuffer, byteOffset: number, byteLength: number): HostTensor['data'] {
  switch (dtype) {
    case 'f32': return new Float32Array(buffer, byteOffset, byteLength / 4);
    case 'i32': return new Int32Array(buffer, byteOffset, byteLength / 4);
    case 'u8': return new Uint8Array(buffer, byteOffset, byteLength);
  }
}

/** Parses a PET parameter file held in memory. Throws PetFormatError for anything malformed. */
export function readPetParams(bytes: Uint8Array, source = BYTES_SOURCE): PetParams {
  if (bytes.length < 8) throw new PetFormatError(source, `${bytes.length} bytes is shorter than the 8-byte safetensors header length (truncated?)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = view.getBigUint64(0, true);
  if (headerLength > BigInt(MAX_HEADER_BYTES)) throw new PetFormatError(source, `header length ${headerLength} exceeds the ${MAX_HEADER_BYTES}-byte limit (not a safetensors file?)`);
  const n = Number(headerLength);
  if (n > bytes.length - 8) throw new PetFormatError(source, `header length ${n} runs past the end of the ${bytes.length}-byte file (truncated?)`);
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes.subarray(8, 8 + n)));
  } catch (cause) {
    throw new PetFormatError(source, `safetensors header is not valid UTF-8 JSON (${(cause as Error).message})`, { cause });
  }
  if (!isPlainObject(json)) throw new PetFormatError(source, 'safetensors header must be a JSON object');
  const dataStart = 8 + n;
  const dataBytes = bytes.length - dataStart;
  let metadata: Record<string, string> | null = null;
  const tensors = new Map<string, HostTensor>();
  const ranges: { name: string; begin: number; end: number }[] = [];
  for (const [name, entry] of Object.entries(json)) {
    if (name === '__metadata__') {
      if (!isPlainObject(entry)) throw new PetFormatError(source, '__metadata__ must be an object of strings');
      metadata = {};
      for (const [k, v] of Object.entries(entry)) {
        if (typeof v !== 'string') throw new PetFormatError(source, `__metadata__.${k} must be a string, got ${JSON.stringify(v)}`);
        metadata[k] = v;
      }
      continue;
    }
    if (!isPlainObject(entry)) throw new PetFormatError(source, `tensor ${name}: header entry must be an object`);
    const { dtype: dtypeName, shape, data_offsets: offsets } = entry;
    const dtype = typeof dtypeName === 'string' && Object.hasOwn(PET_DTYPE_NAMES, dtypeName) ? PET_DTYPE_NAMES[dtypeName]! : undefined;
    if (!dtype) throw new PetFormatError(source, `tensor ${name} has dtype ${JSON.stringify(dtypeName)}; PET files hold ${Object.keys(PET_DTYPE_NAMES).join(', ')} only`);
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new PetFormatError(source, `tensor ${name}: shape must be a list of non-negative integers, got ${JSON.stringify(shape)}`);
    }
    if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw new PetFormatError(source, `tensor ${name}: data_offsets must be [begin, end] non-negative integers, got ${JSON.stringify(offsets)}`);
    }
    const [begin, end] = offsets as [number, number];
    const expected = (shape as number[]).reduce((a, b) => a * b, 1) * DTYPE_SIZE[dtype];
    if (end < begin || end - begin !== expected) {
      throw new PetFormatError(source, `tensor ${name}: data_offsets [${begin}, ${end}] span ${end - begin} bytes but [${shape.join(', ')}] ${dtypeName} needs ${expected}`);
    }
    if (end > dataBytes) throw new PetFormatError(source, `tensor ${name} ends at data byte ${end} but the file holds only ${dataBytes} data bytes (truncated?)`);
    // A copy into a fresh buffer: aligned for the typed array, and independent of the caller's bytes.
    // (new Uint8Array(view) copies; Buffer#slice would not.)
    const copy = new Uint8Array(bytes.subarray(dataStart + begin, dataStart + end));
    tensors.set(name, { dtype, shape: [...(shape as number[])], data: hostArray(dtype, copy.buffer, 0, expected) });
    ranges.push({ name, begin, end });
  }
  const nonEmpty = ranges.filter((r) => r.end > r.begin).sort((a, b) => a.begin - b.begin);
  for (let i = 1; i < nonEmpty.length; i++) {
    if (nonEmpty[i]!.begin < nonEmpty[i - 1]!.end) throw new PetFormatError(source, `tensors ${nonEmpty[i - 1]!.name} and ${nonEmpty[i]!.name} overlap`);
  }
  const { type, config } = parseMetadata(source, metadata);
  return { type, config, tensors };
}

/** Reads a PET parameter file through the engine's safetensors reader. Throws PetFormatError for a bad file. */
export function readPetParamsFile(path: string): PetParams {
  let file: SafetensorsFile;
  try {
    file = SafetensorsFile.open(path);
  } catch (cause) {
    if (cause instanceof TesseraError) throw new PetFormatError(path, cause.message.startsWith(path) ? cause.message.slice(path.length).replace(/^:\s*/, '') : cause.message, { cause });
    throw cause;
  }
  try {
    const hasMetadata = Object.keys(file.metadata).length > 0;
    const tensors = new Map<string, HostTensor>();
    for (const name of file.names()) {
      const info = file.info(name);
      const dtype = (['f32', 'i32', 'u8'] as const).find((d) => d === info.dtype);
      if (!dtype) throw new PetFormatError(path, `tensor ${name} has dtype ${info.dtype}; PET files hold ${Object.keys(PET_DTYPE_NAMES).join(', ')} only`);
      let data: HostTensor['data'];
      try {
        data = file.readHost(name) as HostTensor['data'];
      } catch (cause) {
        if (cause instanceof TesseraError) throw new PetFormatError(path, cause.message, { cause });
        throw cause;
      }
      tensors.set(name, { dtype, shape: info.shape, data });
    }
    const { type, config } = parseMetadata(path, hasMetadata ? file.metadata : null);
    return { type, config, tensors };
  } finally {
    file.close();
  }
}

/** pet_config as JSON with a fixed key order (defined fields only), so equal configs give equal bytes. */
export function petConfigJson(config: PetConfig): string {
  const out: Record<string, unknown> = {};
  for (const key of CONFIG_KEYS) if (config[key] !== undefined) out[key] = config[key];
  return JSON.stringify(out);
}

export function petMetadata(params: PetParams): Record<string, string> {
  return { format: PET_FORMAT, format_version: PET_FORMAT_VERSION, pet_type: params.type, pet_config: petConfigJson(params.config) };
}

/** Each tensor's data is a typed array of its dtype holding exactly the shape's elements. */
function checkWritable(params: PetParams): void {
  if (!(PET_TYPES as readonly string[]).includes(params.type)) throw new PetFormatError(BYTES_SOURCE, `pet_type ${JSON.stringify(params.type)} is not one of ${PET_TYPES.join(', ')}`);
  for (const [name, t] of params.tensors) {
    const ctor = t.dtype === 'f32' ? Float32Array : t.dtype === 'i32' ? Int32Array : t.dtype === 'u8' ? Uint8Array : null;
    if (!ctor) throw new PetShapeError(name, 'dtype f32, i32 or u8', String(t.dtype));
    const numel = t.shape.reduce((a, b) => a * b, 1);
    if (!(t.data instanceof ctor) || t.data.length !== numel) {
      throw new PetShapeError(name, `a ${ctor.name} of ${numel} elements ([${t.shape.join(', ')}])`, `a ${t.data.constructor.name} of ${t.data.length}`);
    }
  }
}

/** Tensors in the order writeSafetensors stores them: by dtype size (largest first), then by name. */
function orderedEntries(params: PetParams): [string, HostTensor][] {
  return [...params.tensors].sort(([na, a], [nb, b]) => DTYPE_SIZE[b.dtype] - DTYPE_SIZE[a.dtype] || (na < nb ? -1 : na > nb ? 1 : 0));
}

/** Serializes a task's parameters to PET file bytes (identical to what writePetParamsFile writes). */
export function writePetParams(params: PetParams): Uint8Array {
  checkWritable(params);
  const entries = orderedEntries(params);
  const header: Record<string, unknown> = { __metadata__: petMetadata(params) };
  let offset = 0;
  for (const [name, t] of entries) {
    header[name] = { dtype: DTYPE_NAME[t.dtype], shape: [...t.shape], data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  const encoder = new TextEncoder();
  json += ' '.repeat((8 - (encoder.encode(json).length % 8)) % 8);
  const headerBytes = encoder.encode(json);
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let at = 8 + headerBytes.length;
  for (const [, t] of entries) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), at);
    at += t.data.byteLength;
  }
  return out;
}

/** Writes a task's parameters as a PET file (atomically, through the engine's safetensors writer). */
export function writePetParamsFile(path: string, params: PetParams): void {
  checkWritable(params);
  const entries: [string, SafetensorsEntry][] = orderedEntries(params).map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, data: t.data }]);
  writeSafetensors(path, entries, petMetadata(params));
}
