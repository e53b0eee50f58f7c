/**
 * One "device" of a multi-device BlockLLM server: a worker thread with its own byte budget holding the block
 * instances placed on it (BlockRuntimes over DevicePools), each with its own KV cache. It is served over the same
 * worker-thread transport as the engine (server-kit's WorkerEngineClient ⇄ @tessera/cluster's serveWorkerHost):
 * its work arrives as admin calls — deploy / evict an instance, run a step program, commit or abort the step —
 * and it takes no generation requests of its own.
 *
 * A step program is the part of one chain step that runs on this device: groups of sequences, each group one block
 * instance over the rows of every sequence (of any application) whose chain reaches it at that point (per-block
 * batching). Consecutive groups on one device pass the hidden state on without copies; rows that arrive from or
 * leave for another device travel as f32 host buffers (the hand-off the communication metrics count).
 */
import type { BlockManifest } from '@tessera/block-zoo';
import type { KvSequenceSnapshot } from '@tessera/engine';
import { type EngineHost, WorkerEngineClient, workerEntry } from '@tessera/server-kit';

/** Hidden rows of some sequences, in order: `rows[i]` rows of `ids[i]`, `width` floats per row. */
export interface RowBlock {
  ids: string[];
  rows: number[];
  width: number;
  data: Float32Array;
}

export interface ProgramGroup {
  /** The block instance (a key of this device's instances). */
  instance: string;
  /** Its sequences in row order: new tokens (the prompt for a prefill, the last token for a decode). */
  seqs: { id: string; app: string; tokens: number[] }[];
  /**
   * A surrogate's prediction (speculation, design note §4.5): the group runs on a copy of its sequences' rows and
   * leaves its output as `predictionId(id)`, so the real block still finds its input under `id`.
   */
  predict?: boolean;
}

/** The rows a surrogate predicts for sequence `id` (a predict group's output, exported under this id). */
export function predictionId(id: string): string {
  return `${id}${PREDICTION_SUFFIX}`;
}

/** The sequence a prediction's rows belong to. */
export function predictedSequence(id: string): string {
  return id.endsWith(PREDICTION_SUFFIX) ? id.slice(0, -PREDICTION_SUFFIX.length) : id;
}

const PREDICTION_SUFFIX = '~predicted';

export interface DeviceProgram {
  /**
   * The coordinator's step number: every program of one step carries it; `end` names it. Several steps may be open
   * on a device at once (cohorts pipelined across devices): their sequences are disjoint.
   */
  step: number;
  /** Sequences to forget first (finished or cancelled since this device last heard). */
  release: string[];
  /** Rows arriving from other devices (they become those sequences' hidden state here). */
  imports: RowBlock | null;
  groups: ProgramGroup[];
  /** Sequences whose hidden rows go back with the result (their next block is on another device). */
  exports: string[];
}

export interface ProgramResult {
  /** Last-token logits of the sequences whose group ended at the LM head. */
  logits: { id: string; data: Float32Array }[];
  exports: RowBlock | null;
  /** Time spent running blocks (ms). */
  computeMs: number;
  /** Rows gathered into a new tensor between groups (0 when every group ran on its input or a view of it). */
  copiedRows: number;
  /** Batches that ran several variants of one base block together (consecutive groups of one variant group). */
  variantBatches: number;
  /** Per group: rows and the applications in it (per-block batching stats), and its wall time (ms; the route's profile). */
  runs: { instance: string; rows: number; apps: number; ms: number }[];
}

/** The inputs a block instance ran one sequence on: `length` positions of `width` floats (width 0 and the token ids for a block that starts at the embedding). */
export interface InputLogSnapshot {
  id: string;
  length: number;
  width: number;
  rows: Float32Array;
  tokens: number[];
}

export interface DeployArgs {
  instance: string;
  manifest: BlockManifest;
  /** Instances with one pool key share resident tensors (BlockLLM: 'shared'); per-model provisioning uses one pool per application, so nothing is shared. */
  pool: string;
  /**
   * Variant batching (the device's `variantBatching`): the zoo blocks the served chains use that are variants of
   * this one's base block (equal variantSignature, itself included). The instance joins a variant group of its
   * base block on the device, whose KV cache has this many × kvPages pages, one share per variant. Default 1.
   */
  variants?: number;
}

export interface DeviceStats {
  device: string;
  budgetBytes: number;
  /** Bytes of the distinct tensors resident, over all pools. */
  residentBytes: number;
  instances: { instance: string; block: string; pool: string; bytes: number; sequences: number }[];
  /** Time spent running blocks since start (ms), and since the device started. */
  busyMs: number;
  upMs: number;
}

export interface DeviceProtocol {
  placement: never;
  item: never;
  result: never;
  notice: never;
  admin: {
    deploy: { args: DeployArgs; result: { residentBytes: number } };
    evict: { args: { instance: string }; result: { residentBytes: number } };
    run: { args: DeviceProgram; result: ProgramResult };
    /**
     * Ends a step: commit makes its KV appends permanent; abort gives the step's pages back. The coordinator posts
     * it as soon as the step is decided, so it reaches the device before any later program of those sequences.
     */
    end: { args: { step: number; commit: boolean; release: string[] }; result: null };
    stats: { args: null; result: DeviceStats };
    /**
     * A KV migration's two halves: the committed K/V of the listed sequences the instance holds, as host snapshots
     * (from position `from[id]` on, default 0: an overlapped migration copies only the back), and putting them into
     * another instance of the same block (a snapshot that starts past 0 extends a sequence whose front is there).
     */
    exportKv: { args: { instance: string; ids: string[]; from?: Record<string, number> }; result: { sequences: { id: string; snapshot: KvSequenceSnapshot }[] } };
    importKv: { args: { instance: string; sequences: { id: string; snapshot: KvSequenceSnapshot }[] }; result: { pages: number } };
    /**
     * What moving sequences into or out of an instance takes: the pages the listed sequences hold in its KV cache and
     * the pages it has free (`cache` false: the instance holds no attention, hence no KV).
     */
    kvPages: { args: { instance: string; ids: string[] }; result: { cache: boolean; pages: number; free: number } };
    /**
     * An overlapped migration's front (design note 5.7): the inputs the instance logged for the listed sequences —
     * every position the sequence's K/V there covers — of those whose log is whole (none: a sequence that arrived
     * by a KV move, or a prefix-tuned block, whose prefix positions have no input).
     */
    exportInputs: { args: { instance: string; ids: string[] }; result: { sequences: InputLogSnapshot[] } };
    /**
     * Recomputes the K/V of positions [0, upTo) of each sequence by chunked prefill over its logged inputs (`chunk`
     * tokens a chunk) into a new instance, which keeps the whole log; the back is copied in after (importKv).
     */
    recomputeKv: { args: { instance: string; chunk: number; sequences: (InputLogSnapshot & { upTo: number })[] }; result: { tokens: number } };
    /** Gives an instance another key (a migrated instance takes the key of the one it replaces). */
    rename: { args: { from: string; to: string }; result: null };
  };
  ready: { device: string; backend: string };
}

export type DeviceHost = EngineHost<DeviceProtocol>;

export interface DeviceInit {
  device: string;
  zooDir: string;
  budgetBytes: number;
  kvPages: number;
  maxPositions: number;
  /** Log each attention instance's inputs per sequence (what an overlapped migration recomputes the front from). */
  inputLog: boolean;
  /**
   * Variants of one base block in the shared pool (the foundation's component and the fused PE blocks that modify
   * it) share a KV cache, and their consecutive groups in a program run as one batch: the base weights pass once.
   */
  variantBatching: boolean;
}

/** Starts one device worker (several may run in one process: each is its own JS environment of the addon). */
export function startDevice(init: DeviceInit): Promise<WorkerEngineClient<DeviceProtocol>> {
  return WorkerEngineClient.start<DeviceProtocol>({
    entry: workerEntry(import.meta.url, { source: './device-worker.ts', built: './device-worker.js' }),
    workerData: init,
    name: `tessera-blockllm-${init.device}`,
  });
}
