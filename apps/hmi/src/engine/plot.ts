/**
 * The server's PLOT (hmi.md §1.3–1.5): a `PlotVersionTree` (root + one sparse table per domain version, A2/A6/A7)
 * whose values come from `computePlotValues` (window mode through the staged encoder, A4), served through immutable
 * per-version snapshots for the fused native lookup (A2 + A3 in one call).
 *
 * A version's table never changes once made (updates make new versions), so a snapshot of its lookup chain — its
 * tables as `NativePlotIndex`es, and the rows they reach gathered into one f16 tensor — stays exact for as long as
 * anyone holds it. Batches hold a reference while they run; a snapshot whose version was collected is freed when
 * the last batch lets go.
 *
 * Post-merge parameters (A3's second position/type embeddings and LayerNorm) are not trained by this server (the
 * library's FPT trains the lower layers only, see the README's "Not there yet"): every version uses the shared
 * model's position and token-type embeddings and the LayerNorm of the last lower layer's output, the tensors the
 * upper layers were trained to read. The tri-gram gate is untrained too: `w = 0, b = 0` (each slot × ½).
 */
import { crc32 } from 'node:zlib';

import { type EncoderModel, encoderNormModules, encoderTopModules } from '@tessera/engine';
import { Tensor } from '@tessera/native';
import { f16BitsToF32, HeapPlotValueStore, PlotVersionTree, rootKeys, TrigramCounts, TrigramKeyCodec, type VersionId } from '@tessera/plot-store';
import { computePlotValues, type PlotGate } from '@tessera/plot-store/build';
import { lookupAggregate, NativePlotIndex } from '@tessera/plot-store/native';

/** Windows per engine batch when computing values; also the granularity of progress and cancellation. */
export const PLOT_CHUNK = 512;

export interface PostMergeParams {
  posEmb: Tensor;
  typeEmb: Tensor;
  gamma: Tensor;
  beta: Tensor;
  eps: number;
  /** Host copies (the fine-tuning surrogate's embeddings are these). */
  host: { posEmb: Float32Array; typeEmb: Float32Array; gamma: Float32Array; beta: Float32Array };
}

/** One version's lookup chain, frozen: what a batch reads. */
export class PlotSnapshot {
  readonly version: VersionId;
  /** The chain's tables (child first), rows renumbered into `values`. */
  readonly chain: NativePlotIndex[];
  /** f16 [rows, 3, d]; row 0 the zero row. */
  readonly values: Tensor;
  readonly hostValues: Uint16Array;
  readonly hidden: number;
  private refs = 1;
  private collected = false;

  constructor(version: VersionId, chain: NativePlotIndex[], hostValues: Uint16Array, hidden: number) {
    this.version = version;
    this.chain = chain;
    this.hostValues = hostValues;
    this.hidden = hidden;
    this.values = Tensor.from(hostValues, [hostValues.length / (3 * hidden), 3, hidden], { dtype: 'f16' });
  }

  get bytes(): number {
    return this.hostValues.byteLength + this.chain.reduce((n, t) => n + t.byteLength, 0);
  }

  acquire(): this {
    this.refs++;
    return this;
  }

  release(): void {
    if (--this.refs === 0) this.free();
  }

  /** Its version was collected: free once no batch holds it. */
  markCollected(): void {
    if (this.collected) return;
    this.collected = true;
    this.release();
  }

  private free(): void {
    for (const t of this.chain) t.dispose();
    this.values.dispose();
  }
}

export interface PlotServiceOptions {
  /** The shared model (its lower layers compute the root's values). */
  model: EncoderModel;
  lowerLayers: number;
  /** Token ids of the general corpus: the root holds every uni-gram plus this corpus's bi- and tri-grams (A5). */
  generalCorpus: readonly (readonly number[])[];
  /** A domain corpus below this many tokens cannot create or update a branch. */
  minCorpusTokens: number;
}

/** CRC-32s of a table's keys and values: equal tables from two runs (same model, corpus and seeds) match. */
export function plotFingerprint(keys: BigUint64Array, values: ArrayBufferView): string {
  const k = crc32(new Uint8Array(keys.buffer, keys.byteOffset, keys.byteLength));
  const v = crc32(new Uint8Array(values.buffer, values.byteOffset, values.byteLength));
  return `${keys.length}:${k.toString(16).padStart(8, '0')}:${v.toString(16).padStart(8, '0')}`;
}

export class PlotService {
  readonly codec: TrigramKeyCodec;
  readonly tree: PlotVersionTree;
  readonly lowerLayers: number;
  readonly hidden: number;
  readonly gate: PlotGate;
  readonly post: PostMergeParams;
  private readonly snapshots = new Map<VersionId, PlotSnapshot>();
  /** Each version's table fingerprint (`plotFingerprint`): a persisted tenant is served again only on the same table. */
  readonly fingerprints = new Map<VersionId, string>();

  constructor(options: PlotServiceOptions) {
    const { model, lowerLayers } = options;
    const c = model.config;
    this.lowerLayers = lowerLayers;
    this.hidden = c.hiddenSize;
    this.codec = new TrigramKeyCodec({ vocabSize: c.vocabSize });
    this.tree = new PlotVersionTree({ codec: this.codec, values: new HeapPlotValueStore({ hidden: c.hiddenSize }), minCorpusTokens: options.minCorpusTokens });
    this.gate = { weight: new Float32Array(c.hiddenSize), bias: 0 };
    const top = encoderTopModules(c);
    const ln = encoderNormModules(c, lowerLayers - 1).ffn_ln;
    const host = {
      posEmb: model.weights.hostF32(`${top.positionEmbeddings}.weight`),
      typeEmb: model.weights.hostF32(`${top.tokenTypeEmbeddings}.weight`),
      gamma: model.weights.hostF32(`${ln}.weight`),
      beta: model.weights.hostF32(`${ln}.bias`),
    };
    const H = c.hiddenSize;
    this.post = {
      posEmb: Tensor.from(host.posEmb, [c.maxPositions, H]),
      typeEmb: Tensor.from(host.typeEmb, [c.typeVocabSize, H]),
      gamma: Tensor.from(host.gamma, [H]),
      beta: Tensor.from(host.beta, [H]),
      eps: c.layerNormEps,
      host,
    };
    const general = new TrigramCounts().addBatch(this.codec.keys(options.generalCorpus));
    const keys = rootKeys(this.codec, general);
    const values = computePlotValues(model, keys, { codec: this.codec, lowerLayers, gate: this.gate, batchSize: PLOT_CHUNK });
    const root = this.tree.createRoot({ keys, values });
    this.fingerprints.set(root.id, plotFingerprint(keys, values));
  }

  /**
   * Window-mode values of `keys` under `model`'s lower layers, computed a chunk at a time so a job can report
   * progress and stop between chunks.
   */
  async computeValues(model: EncoderModel, keys: BigUint64Array, step: { signal: AbortSignal; progress: (fraction: number) => Promise<void> }): Promise<Uint16Array> {
    const rowWidth = 3 * this.hidden;
    const out = new Uint16Array(keys.length * rowWidth);
    for (let i = 0; i < keys.length; i += PLOT_CHUNK) {
      step.signal.throwIfAborted();
      const chunk = keys.subarray(i, Math.min(keys.length, i + PLOT_CHUNK));
      out.set(computePlotValues(model, chunk, { codec: this.codec, lowerLayers: this.lowerLayers, gate: this.gate, batchSize: PLOT_CHUNK }), i * rowWidth);
      await step.progress(Math.min(1, (i + chunk.length) / Math.max(1, keys.length)));
      await yieldTurn();
    }
    return out;
  }

  /** The snapshot of a live (or pinned) version, acquired: the caller releases it. */
  snapshot(version: VersionId): PlotSnapshot {
    let s = this.snapshots.get(version);
    if (!s) {
      s = this.build(version);
      this.snapshots.set(version, s);
    }
    return s.acquire();
  }

  /** Frees the snapshots of versions the tree collected (after a delete, an update or an unpin). */
  collect(): void {
    for (const [version, s] of this.snapshots) {
      if (!this.tree.has(version)) {
        this.snapshots.delete(version);
        s.markCollected();
      }
    }
  }

  /** Bytes of the tree (values, indexes, reserved row) and of the serving snapshots. */
  storage(): { treeBytes: number; entries: number; snapshotBytes: number; versions: number } {
    const { totals } = this.tree.storage();
    let snapshotBytes = 0;
    for (const s of this.snapshots.values()) snapshotBytes += s.bytes;
    return { treeBytes: totals.totalBytes, entries: totals.entries, snapshotBytes, versions: this.tree.versions().length };
  }

  close(): void {
    for (const s of this.snapshots.values()) s.markCollected();
    this.snapshots.clear();
    for (const t of [this.post.posEmb, this.post.typeEmb, this.post.gamma, this.post.beta]) t.dispose();
  }

  /**
   * A3's sum before its LayerNorm, z_i = V_i[centre] + V_{i+1}[left] + V_{i−1}[right], for one sequence (f32
   * [len, d]): the fine-tuning surrogate adds the post-merge embeddings and normalises it as the native call does.
   */
  preNorm(snapshot: PlotSnapshot, ids: readonly number[]): Float32Array {
    const batch = this.codec.keys([ids]);
    const n = batch.lengths[0]!;
    const rows = new Int32Array(batch.keys.length);
    // One lookup along the chain, child first, with back-off: the same rows the fused call reads.
    for (let k = 0; k < n; k++) {
      search: for (const { key } of this.codec.backoff(batch.keys[k]!)) {
        for (const table of snapshot.chain) {
          const row = table.get(key);
          if (row !== 0) {
            rows[k] = row;
            break search;
          }
        }
      }
    }
    const d = this.hidden;
    const v = snapshot.hostValues;
    const slot = (row: number, s: number, c: number) => f16BitsToF32(v[(row * 3 + s) * d + c]!);
    const z = new Float32Array(n * d);
    for (let i = 0; i < n; i++) {
      for (let c = 0; c < d; c++) {
        let acc = slot(rows[i]!, 1, c);
        if (i + 1 < n) acc = Math.fround(acc + slot(rows[i + 1]!, 0, c));
        if (i > 0) acc = Math.fround(acc + slot(rows[i - 1]!, 2, c));
        z[i * d + c] = acc;
      }
    }
    return z;
  }

  /** A2 + A3 for a batch in one native call: f32 [B, T, d], T = `seqLen`. */
  lookup(snapshot: PlotSnapshot, sequences: readonly (readonly number[])[], seqLen: number): Tensor {
    const { posEmb, typeEmb, gamma, beta, eps } = this.post;
    return lookupAggregate(snapshot.chain, this.codec.keys(sequences), { values: snapshot.values, posEmb, typeEmb, gamma, beta, eps }, { seqLen });
  }

  private build(version: VersionId): PlotSnapshot {
    const chainIds = this.tree.chain(version);
    const remap = new Map<number, number>();
    const rows: number[] = [];
    const tables = chainIds.map((v) => this.tree.tableEntries(v));
    for (const entries of tables) {
      for (const [, row] of entries) {
        if (!remap.has(row)) {
          remap.set(row, rows.length + 1);
          rows.push(row);
        }
      }
    }
    const d = this.hidden;
    const host = new Uint16Array((rows.length + 1) * 3 * d);
    this.tree.values.gather(rows, host.subarray(3 * d));
    const chain: NativePlotIndex[] = [];
    try {
      for (const entries of tables) {
        const index = new NativePlotIndex({ expectedKeys: entries.length });
        chain.push(index);
        for (const [key, row] of entries) index.set(key, remap.get(row)!);
      }
      return new PlotSnapshot(version, chain, host, d);
    } catch (err) {
      for (const t of chain) t.dispose();
      throw err;
    }
  }
}

/** Lets the event loop run (HTTP, other stages) between two slices of synchronous work. */
export function yieldTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
