/**
 * PetS's instance of the host protocol (@tessera/cluster), between the HTTP thread and the engine worker thread
 * (server-kit's WorkerEngineClient ⇄ cluster's serveWorkerHost). A classify request is placed with its inputs'
 * token ids; its events are one `result` item per input (index = the input's position), then `finish`. Admin calls
 * register, load, unload and delete tasks and read stats; the `memory` notice follows every change of the task set
 * or of what is loaded, so /health never waits on a batch. Errors cross as core's serializeError.
 *
 * A parameter file travels as bytes (an upload, or a file the HTTP thread read inside --params-root), transferred,
 * not copied: the worker never opens a path a client named.
 */
import type { ItemEvent } from '@tessera/cluster';
import { registerErrors, TesseraError } from '@tessera/core';

/** One input of a classify request, tokenized on the HTTP thread. */
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

/** How the worker prices batches: which cost model the planner uses. */
export interface CostSummary {
  source: 'analytic' | 'tables' | 'profiled';
  /** The tables file, for 'tables'. */
  file: string | null;
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

/** What /metrics needs from the worker, sampled when scraped. Lists are drained: records since the previous call. */
export interface EngineStats {
  memory: MemorySummary;
  /** Queries waiting in the open window or its planned batches. */
  pendingQueries: number;
  queriesClassified: number;
  batches: MacroBatchRecord[];
  plans: PlanRecord[];
}

/** A task registered at start-up (the demo's), from a parameter file on disk. */
export interface StartupTask {
  path: string;
  petType: string;
  id?: string;
  name?: string;
  load: boolean;
}

/** workerData of the engine worker. */
export interface WorkerInit {
  modelDir: string;
  tag: string;
  budgetBytes: number;
  strategy: string;
  layout: 'padded' | 'packed';
  scheduling: { mode: 'intensity' | 'round-robin' | 'sequential'; streams: number | 'dynamic' };
  windowMs: number;
  windowQueries: number;
  /** Cost model: profiled tables (the file's parsed JSON), profile at start, or the analytic default. */
  cost: { kind: 'analytic' } | { kind: 'tables'; file: string; json: unknown } | { kind: 'profile'; out: string | null };
  threads: number | null;
  startupTasks: StartupTask[];
  /** The module to run, for the dev bootstrap (worker-dev.mjs): the TypeScript worker's URL. */
  entry?: string;
}

/** What a register call carries: the task's metadata and its parameter file's bytes. */
export interface RegisterTask {
  petType: string;
  sharedModel: string;
  params: Uint8Array;
  /** Where the bytes came from ('upload', or the path under --params-root), for messages. */
  source: string;
  id?: string;
  name?: string;
  load: boolean;
}

/** A classify request: a task and its inputs. `id` is the idempotency key. */
export interface ClassifyRequest {
  id: string;
  taskId: string;
  inputs: EncodedInput[];
}

/** What the worker reports when it is ready. */
export interface PetsReady {
  model: ModelSummary;
  cost: CostSummary;
  tasks: TaskSummary[];
  memory: MemorySummary;
}

/** The protocol's types, for WorkerEngineClient and serveWorkerHost. */
export interface PetsProtocol {
  placement: { request: ClassifyRequest; attempt: number };
  item: ItemEvent<'result', { result: ClassifyResult }>;
  result: null;
  notice: { kind: 'memory'; memory: MemorySummary };
  admin: {
    'register-task': { args: RegisterTask; result: TaskSummary };
    'load-task': { args: string; result: TaskSummary };
    'unload-task': { args: string; result: TaskSummary };
    'delete-task': { args: string; result: TaskSummary };
    tasks: { args: null; result: { tasks: TaskSummary[]; memory: MemorySummary } };
    task: { args: string; result: { task: TaskSummary; memory: MemorySummary } };
    stats: { args: null; result: EngineStats };
  };
  ready: PetsReady;
}

/** The parameter file says it holds another PET type than the registration's `pet_type`. */
export class PetTypeMismatchError extends TesseraError {
  static override readonly kind = 'invalid' as const;
  readonly petType: string;
  constructor(source: string, declared: string, inFile: string) {
    super('TESSERA_PET_TYPE_MISMATCH', `${source}: the registration says pet_type ${JSON.stringify(declared)} but the parameter file holds a ${JSON.stringify(inFile)} task`);
    this.petType = declared;
  }
}
registerErrors(PetTypeMismatchError);
