/**
 * The data a PetS host hands out: plain, structured-cloneable records (they cross a worker thread or a queue as
 * they are), in the vocabulary of a serving API rather than of the TaskManager's internals.
 */
import type { PetSchedulingOptions } from '../engine/pet-engine.js';

/** One input of a classify request, tokenized by the caller. */
export interface EncodedInput {
  ids: number[];
  /** Token type ids (0 for the first text, 1 for the pair); absent: all 0. */
  tokenTypes?: number[];
}

/** One input's result: the task head's logits and the label they pick. */
export interface ClassifyResult {
  label: string;
  labelIndex: number;
  logits: number[];
}

export type TaskState = 'registered' | 'loaded';

export interface TaskSummary {
  id: string;
  name: string | null;
  petType: string;
  sharedModel: string;
  labels: string[];
  state: TaskState;
  /** Bytes of the task's parameters as stored (compressed: bit-packed masks, CSR). */
  storedBytes: number;
  /** Device bytes while loaded, else null. */
  deviceBytes: number | null;
}

export interface MemorySummary {
  budgetBytes: number;
  sharedBytes: number;
  petBytes: number;
  loadedTasks: number;
  registeredTasks: number;
}

export interface ModelSummary {
  tag: string;
  /** The model directory (absolute). */
  dir: string;
  architecture: string;
  hiddenSize: number;
  numLayers: number;
  maxPositions: number;
  vocabSize: number;
  typeVocabSize: number;
  /** Which backend runs the kernels: 'cpu' or 'cuda'. */
  device: string;
  /** The PET types this engine can run. */
  petTypes: string[];
}

/** One executed macro-batch, for the metrics. */
export interface MacroBatchRecord {
  /** Queries (rows) in it. */
  queries: number;
  /** PET segments (mini-batches). */
  segments: number;
  /** Distinct tasks. */
  tasks: number;
  /** Its padded length. */
  maxLength: number;
  totalMs: number;
  petMs: number;
  sharedMs: number;
  /** Token rows the shared operators computed, and how many of them were padding. */
  rows: number;
  paddingRows: number;
}

/** One window's plan, for the metrics. */
export interface PlanRecord {
  /** The strategy used: the configured one, or the one 'auto' picked. */
  strategy: string;
  queries: number;
  batches: number;
}

/** A host's figures for metrics, sampled on demand. Lists are drained: records since the previous call. */
export interface PetsHostStats {
  memory: MemorySummary;
  /** Queries waiting in the open window or its planned batches. */
  pendingQueries: number;
  queriesClassified: number;
  batches: MacroBatchRecord[];
  plans: PlanRecord[];
}

/** A task registered at start-up (a demo's), from a parameter file on disk. */
export interface StartupTask {
  path: string;
  petType: string;
  id?: string;
  name?: string;
  load: boolean;
}

/** What a register call carries: the task's metadata and its parameter file's bytes. */
export interface RegisterTask {
  petType: string;
  sharedModel: string;
  params: Uint8Array;
  /** Where the bytes came from ('upload', or the path under a params root), for messages. */
  source: string;
  id?: string;
  name?: string;
  load: boolean;
}

/** How a PetsHost is built: the shared model, the device budget and the engine's layout and scheduling. */
export interface PetsHostOptions {
  /** A Hugging Face BERT-style encoder directory: the shared model. */
  modelDir: string;
  /** The shared model's tag (the `sharedModel` of its tasks). */
  tag: string;
  /** Device bytes for the shared model plus the loaded tasks. */
  budgetBytes: number;
  /** Batch layout in the engine (default 'padded', as PetS's dense batches). */
  layout?: 'padded' | 'packed';
  /** PET operator scheduling (default Algorithm 2's intensity chunks, dynamic streams). */
  scheduling?: PetSchedulingOptions;
  /** CPU kernel threads (sets the process-wide pool; null or absent: leave it as it is). */
  threads?: number | null;
}
