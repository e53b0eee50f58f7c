/**
 * Builds a PLOT value file from a list of keys, resumably (issue 15 item 1). Row i + 1 of the file holds keys[i]
 * (row 0 is the zero row), so the caller's key list plus the file is the table: an index maps keys[i] → i + 1.
 *
 * The keys are cut into chunks of `chunkKeys`; chunk c's rows sit at a fixed offset of `<out>.partial`. After each
 * chunk the data is synced and `<out>.build.json` (the manifest) records the chunk with its byte count and SHA-256.
 * A build that was killed, aborted or stopped at `maxChunks` picks up from the manifest: each recorded chunk is read
 * back and checked (bytes and digest); good ones are skipped, damaged or missing ones are recomputed. When every
 * chunk is there the file is finalized and renamed to `<out>`, and the manifest says `complete`, so a further run
 * with the same inputs returns at once. A manifest for other inputs (keys, model id, shape, layers, gate or chunk
 * size) is refused rather than silently mixed: pass `restart: true` to start over.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, renameSync, rmSync, statSync, writeFileSync, closeSync, openSync, readSync } from 'node:fs';

import { type EncoderModel, loadEncoder } from '@tessera/engine';

import { PlotFileStateError } from '../file/errors.js';
import { PLOT_FILE_HEADER_BYTES, plotFileBytes } from '../file/format.js';
import { littleEndianBytes, PlotValueFileWriter } from '../file/writer.js';
import { PlotStoreArgumentError } from '../policy/errors.js';
import { type PlotKey, TrigramKeyCodec } from '../policy/keys.js';
import { checkComputeOptions, computePlotValues, ENCODER_SLOTS, type PlotGate } from './compute.js';

export interface PlotBuildProgress {
  /** Keys whose values are on disk (chunks skipped on resume included). */
  doneKeys: number;
  totalKeys: number;
  /** Keys found finished on disk when this run started. */
  resumedKeys: number;
  /** Keys per second computed by this run (resumed keys excluded); 0 before the first chunk. */
  keysPerSecond: number;
  /** Seconds left at this run's rate; undefined before the first chunk. */
  etaSeconds: number | undefined;
  chunksDone: number;
  chunks: number;
}

export interface BuildPlotTableOptions {
  /** The encoder to run; or give `modelDir` and the builder loads (and frees) it. */
  model?: EncoderModel;
  modelDir?: string;
  /**
   * Names the model weights (a version id, a checkpoint digest). Recorded in the manifest: a resume with another id
   * is refused, since values of two models must not share a file. Default: the model directory, else 'model'.
   */
  modelId?: string;
  /** The keys, in row order: keys[i] gets row i + 1. Each must be storable (see TrigramKeyCodec.checkStorable). */
  keys: BigUint64Array | readonly PlotKey[];
  /** The value file to write. `<out>.partial` and `<out>.build.json` sit beside it. */
  out: string;
  /** Default: an encoder codec over the model's vocabulary. */
  codec?: TrigramKeyCodec;
  lowerLayers: number;
  gate: PlotGate;
  /** Windows per engine batch; default 512. */
  batchSize?: number;
  /** Keys per chunk (the unit of resumption and progress); default 8192. */
  chunkKeys?: number;
  /** Stop between chunks when aborted; the result says `complete: false` and the build resumes later. */
  signal?: AbortSignal;
  /** Compute at most this many chunks in this run (time-boxed jobs, tests), then stop as on abort. */
  maxChunks?: number;
  /** Discard a manifest and partial file of other inputs instead of refusing them. */
  restart?: boolean;
  onProgress?: (progress: PlotBuildProgress) => void;
  /** Also write one plain line per chunk ("plot-build: …") to this stream, or to stderr when true. No TTY needed. */
  progressLine?: boolean | NodeJS.WritableStream;
}

export interface PlotBuildResult {
  /** The finished value file (undefined until complete). */
  path: string | undefined;
  complete: boolean;
  /** Why the run stopped before the end. */
  stopped?: 'aborted' | 'chunk-limit';
  keys: number;
  /** Rows of the finished file: keys + 1. */
  rows: number;
  computedChunks: number;
  /** Chunks found on disk and verified. */
  skippedChunks: number;
  /** Chunks the manifest listed whose bytes did not verify, computed again. */
  recomputedChunks: number;
}

/** What a manifest pins: a resume must match it field for field. */
interface BuildIdentity {
  format: 'tessera-plot-build';
  version: 1;
  modelId: string;
  hidden: number;
  slots: number;
  vocabSize: number;
  lowerLayers: number;
  gateSha256: string;
  keys: number;
  keysSha256: string;
  chunkKeys: number;
}

interface Manifest extends BuildIdentity {
  complete: boolean;
  /** Finished chunks by index. */
  chunks: Record<string, { bytes: number; sha256: string }>;
}

const sha256 = (bytes: Uint8Array) => createHash('sha256').update(bytes).digest('hex');

export async function buildPlotTable(options: BuildPlotTableOptions): Promise<PlotBuildResult> {
  const { model: given, modelDir } = options;
  if ((given === undefined) === (modelDir === undefined)) throw new PlotStoreArgumentError('give exactly one of model and modelDir');
  const model = given ?? loadEncoder(modelDir!);
  try {
    return await build(model, options);
  } finally {
    if (given === undefined) model.dispose();
  }
}

async function build(model: EncoderModel, options: BuildPlotTableOptions): Promise<PlotBuildResult> {
  const c = model.config;
  const codec = options.codec ?? new TrigramKeyCodec({ vocabSize: c.vocabSize });
  const computeOptions = { codec, lowerLayers: options.lowerLayers, gate: options.gate, ...(options.batchSize === undefined ? {} : { batchSize: options.batchSize }) };
  checkComputeOptions(model, computeOptions);
  const chunkKeys = options.chunkKeys ?? 8192;
  if (!Number.isInteger(chunkKeys) || chunkKeys < 1) throw new PlotStoreArgumentError(`chunkKeys must be a positive integer, got ${chunkKeys}`);
  const maxChunks = options.maxChunks ?? Number.POSITIVE_INFINITY;
  if (!(maxChunks >= 0) || (Number.isFinite(maxChunks) && !Number.isInteger(maxChunks))) throw new PlotStoreArgumentError(`maxChunks must be an integer ≥ 0, got ${maxChunks}`);
  const keys = options.keys instanceof BigUint64Array ? options.keys : BigUint64Array.from(options.keys);
  // Every key is checked before anything is written: a bad key fails the build, not chunk 57 of it.
  for (const key of keys) codec.checkStorable(key);

  const H = c.hiddenSize;
  const rowBytes = ENCODER_SLOTS * H * 2;
  const chunks = Math.ceil(keys.length / chunkKeys);
  const identity: BuildIdentity = {
    format: 'tessera-plot-build',
    version: 1,
    modelId: options.modelId ?? options.modelDir ?? 'model',
    hidden: H,
    slots: ENCODER_SLOTS,
    vocabSize: codec.vocabSize,
    lowerLayers: options.lowerLayers,
    gateSha256: sha256(new Uint8Array(Float64Array.from([...Array.from(options.gate.weight), options.gate.bias]).buffer)),
    keys: keys.length,
    keysSha256: sha256(littleEndianKeys(keys)),
    chunkKeys,
  };
  const out = options.out;
  const partial = `${out}.partial`;
  const manifestPath = `${out}.build.json`;
  const rows = keys.length + 1;
  const result: PlotBuildResult = { path: undefined, complete: false, keys: keys.length, rows, computedChunks: 0, skippedChunks: 0, recomputedChunks: 0 };

  let manifest = readManifest(manifestPath);
  if (manifest !== undefined && !sameIdentity(manifest, identity)) {
    if (!options.restart) {
      throw new PlotFileStateError(manifestPath, `belongs to another build (${differences(manifest, identity).join(', ')} differ); pass restart: true to discard it`);
    }
    manifest = undefined;
  }
  if (manifest?.complete && existsSync(out) && statSync(out).size === plotFileBytes({ slots: ENCODER_SLOTS, hidden: H, rows })) {
    return { ...result, path: out, complete: true, skippedChunks: chunks };
  }
  // Killed between the rename and the manifest's last write: the finished file is there, every chunk recorded.
  if (manifest !== undefined && !manifest.complete && !existsSync(partial) && existsSync(out) && Object.keys(manifest.chunks).length === chunks) {
    const recorded = manifest.chunks;
    const intact = Object.entries(recorded).every(([index, record]) => {
      const bytes = readChunk(out, Number(index), chunkKeys, keys.length, rowBytes);
      return bytes !== undefined && bytes.length === record.bytes && sha256(bytes) === record.sha256;
    });
    if (intact && statSync(out).size === plotFileBytes({ slots: ENCODER_SLOTS, hidden: H, rows })) {
      manifest.complete = true;
      writeManifest(manifestPath, manifest);
      return { ...result, path: out, complete: true, skippedChunks: chunks };
    }
  }
  if (manifest === undefined || manifest.complete || !existsSync(partial)) {
    manifest = { ...identity, complete: false, chunks: {} };
    rmSync(out, { force: true });
    PlotValueFileWriter.create(partial, { slots: ENCODER_SLOTS, hidden: H }).close();
    writeManifest(manifestPath, manifest);
  }

  // Verify the chunks the manifest lists; drop the ones whose bytes are not what it recorded.
  const done = new Set<number>();
  for (const [index, record] of Object.entries(manifest.chunks)) {
    const chunk = Number(index);
    const bytes = readChunk(partial, chunk, chunkKeys, keys.length, rowBytes);
    if (bytes !== undefined && bytes.length === record.bytes && sha256(bytes) === record.sha256) done.add(chunk);
    else {
      delete manifest.chunks[index];
      result.recomputedChunks++;
    }
  }
  result.skippedChunks = done.size;
  const keysIn = (chunk: number) => Math.min(chunkKeys, keys.length - chunk * chunkKeys);
  const resumedKeys = [...done].reduce((a, chunk) => a + keysIn(chunk), 0);
  const progress = progressReporter(options, keys.length, chunks, resumedKeys, done.size);
  const writer = PlotValueFileWriter.reopen(partial, { slots: ENCODER_SLOTS, hidden: H });
  try {
    for (let chunk = 0; chunk < chunks; chunk++) {
      if (done.has(chunk)) continue;
      if (options.signal?.aborted) return { ...result, stopped: 'aborted' };
      if (result.computedChunks >= maxChunks) return { ...result, stopped: 'chunk-limit' };
      const first = chunk * chunkKeys;
      const values = computePlotValues(model, keys.subarray(first, first + keysIn(chunk)), computeOptions);
      writer.writeRows(1 + first, values);
      writer.sync();
      const bytes = littleEndianBytes(values);
      manifest.chunks[chunk] = { bytes: bytes.length, sha256: sha256(bytes) };
      writeManifest(manifestPath, manifest);
      done.add(chunk);
      result.computedChunks++;
      progress(keysIn(chunk), done.size);
      // Let an abort signal (or anything else waiting on the event loop) in between chunks.
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
    writer.finalize(rows);
  } finally {
    writer.close();
  }
  renameSync(partial, out);
  manifest.complete = true;
  writeManifest(manifestPath, manifest);
  return { ...result, path: out, complete: true };
}

/** The keys' bytes, little-endian, for the manifest's digest. */
function littleEndianKeys(keys: BigUint64Array): Uint8Array {
  const bytes = new Uint8Array(keys.length * 8);
  const view = new DataView(bytes.buffer);
  keys.forEach((k, i) => view.setBigUint64(8 * i, k, true));
  return bytes;
}

/** The bytes of a chunk as they are on disk, or undefined when the file does not reach its end. */
function readChunk(path: string, chunk: number, chunkKeys: number, totalKeys: number, rowBytes: number): Uint8Array | undefined {
  const count = Math.min(chunkKeys, totalKeys - chunk * chunkKeys);
  if (!Number.isInteger(chunk) || chunk < 0 || count <= 0) return undefined;
  const bytes = new Uint8Array(count * rowBytes);
  const fd = openSync(path, 'r');
  try {
    let done = 0;
    const at = PLOT_FILE_HEADER_BYTES + (1 + chunk * chunkKeys) * rowBytes;
    while (done < bytes.length) {
      const got = readSync(fd, bytes, done, bytes.length - done, at + done);
      if (got === 0) return undefined;
      done += got;
    }
    return bytes;
  } finally {
    closeSync(fd);
  }
}

function readManifest(path: string): Manifest | undefined {
  if (!existsSync(path)) return undefined;
  try {
    const m = JSON.parse(readFileSync(path, 'utf8')) as Manifest;
    if (m.format !== 'tessera-plot-build' || typeof m.chunks !== 'object' || m.chunks === null) throw new Error('not a build manifest');
    return m;
  } catch (err) {
    throw new PlotFileStateError(path, `is not a readable build manifest (${(err as Error).message}); delete it to start over`);
  }
}

/** Writes the manifest through a temporary file and a rename, so a crash leaves the old one or the new one. */
function writeManifest(path: string, manifest: Manifest): void {
  writeFileSync(`${path}.tmp`, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(`${path}.tmp`, path);
}

const IDENTITY_FIELDS: readonly (keyof BuildIdentity)[] = ['format', 'version', 'modelId', 'hidden', 'slots', 'vocabSize', 'lowerLayers', 'gateSha256', 'keys', 'keysSha256', 'chunkKeys'];

function differences(a: BuildIdentity, b: BuildIdentity): string[] {
  return IDENTITY_FIELDS.filter((f) => a[f] !== b[f]);
}

function sameIdentity(a: BuildIdentity, b: BuildIdentity): boolean {
  return differences(a, b).length === 0;
}

/** Calls onProgress and writes the plain progress line after each chunk. */
function progressReporter(options: BuildPlotTableOptions, totalKeys: number, chunks: number, resumedKeys: number, resumedChunks: number) {
  const started = performance.now();
  let doneKeys = resumedKeys;
  let computed = 0;
  const stream = options.progressLine === true ? process.stderr : options.progressLine || undefined;
  return (chunkKeys: number, chunksDone: number) => {
    doneKeys += chunkKeys;
    computed += chunkKeys;
    const seconds = (performance.now() - started) / 1000;
    const keysPerSecond = seconds > 0 ? computed / seconds : 0;
    const etaSeconds = keysPerSecond > 0 ? (totalKeys - doneKeys) / keysPerSecond : undefined;
    const p: PlotBuildProgress = { doneKeys, totalKeys, resumedKeys, keysPerSecond, etaSeconds, chunksDone, chunks };
    options.onProgress?.(p);
    stream?.write(`${formatProgress(p)}\n`);
  };
}

/** "plot-build: 16384/100000 keys (16.4%), chunk 2/13, 812 keys/s, ETA 1m43s". */
export function formatProgress(p: PlotBuildProgress): string {
  const pct = p.totalKeys === 0 ? 100 : (100 * p.doneKeys) / p.totalKeys;
  const eta = p.etaSeconds === undefined ? '?' : formatSeconds(p.etaSeconds);
  return `plot-build: ${p.doneKeys}/${p.totalKeys} keys (${pct.toFixed(1)}%), chunk ${p.chunksDone}/${p.chunks}, ${Math.round(p.keysPerSecond)} keys/s, ETA ${eta}`;
}

function formatSeconds(s: number): string {
  const t = Math.ceil(s);
  if (t < 60) return `${t}s`;
  if (t < 3600) return `${Math.floor(t / 60)}m${String(t % 60).padStart(2, '0')}s`;
  return `${Math.floor(t / 3600)}h${String(Math.floor((t % 3600) / 60)).padStart(2, '0')}m`;
}
