/**
 * The message protocol between the HTTP thread ({@link PetsEngineClient}) and the engine worker thread. Everything
 * crossing the boundary is structured-clone data (no classes, no functions): errors travel as
 * {@link SerializedError} and are rebuilt on the HTTP side as {@link EngineError}s that keep the class name, the
 * typed code and the details the HTTP layer reports (task id, PET type, tensor name).
 *
 *   main → worker   classify (token ids of one request's inputs), admin { register-task | load-task | unload-task |
 *                   delete-task | tasks | task | stats | shutdown }, exit
 *   worker → main   progress (start-up lines) | ready | init-failed, classified | classify-failed, reply, fatal,
 *                   memory (after every change of the task set or of what is loaded, so /health never waits on a batch)
 *
 * A parameter file travels as bytes (an upload, or a file the HTTP thread read inside --params-root), transferred,
 * not copied: the worker never opens a path a client named.
 */

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

/** An Error flattened for postMessage: the class name, the typed code, and the details the HTTP layer reports. */
export interface SerializedError {
  name: string;
  message: string;
  code: string | null;
  details: ErrorDetails;
}

/** Fields typed errors carry (pet-ops and engine errors), kept when present so the HTTP body can name them. */
export interface ErrorDetails {
  task?: string;
  petType?: string;
  knownPetTypes?: string[];
  tensor?: string;
  sharedModel?: string;
  budgetBytes?: number;
  requestedBytes?: number;
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

// main → worker

export type AdminCall =
  | ({ op: 'register-task' } & RegisterTask)
  | { op: 'load-task'; id: string }
  | { op: 'unload-task'; id: string }
  | { op: 'delete-task'; id: string }
  | { op: 'tasks' }
  | { op: 'task'; id: string }
  | { op: 'stats' }
  | { op: 'shutdown' };

export interface AdminResults {
  'register-task': TaskSummary;
  'load-task': TaskSummary;
  'unload-task': TaskSummary;
  'delete-task': TaskSummary;
  tasks: { tasks: TaskSummary[]; memory: MemorySummary };
  task: { task: TaskSummary; memory: MemorySummary };
  stats: EngineStats;
  shutdown: null;
}

export type ToWorker =
  | { type: 'classify'; id: number; taskId: string; inputs: EncodedInput[] }
  | { type: 'admin'; callId: number; call: AdminCall }
  /** Exit now with `code`, abandoning everything (PetsEngineClient.terminate: a crash at a safe point). */
  | { type: 'exit'; code: number };

// worker → main

export type FromWorker =
  | { type: 'progress'; line: string }
  | { type: 'ready'; model: ModelSummary; cost: CostSummary; tasks: TaskSummary[]; memory: MemorySummary }
  | { type: 'memory'; memory: MemorySummary }
  | { type: 'init-failed'; error: SerializedError }
  | { type: 'classified'; id: number; results: ClassifyResult[] }
  | { type: 'classify-failed'; id: number; error: SerializedError }
  | { type: 'reply'; callId: number; ok: true; value: unknown }
  | { type: 'reply'; callId: number; ok: false; error: SerializedError }
  | { type: 'fatal'; error: SerializedError };

/**
 * Where each detail is found on the typed errors (pet-ops' errors name their fields after what they hold: `taskId`,
 * `tag`, `known`; this app's own errors use the detail names): detail → the error fields that may carry it.
 */
const DETAIL_SOURCES: readonly [keyof ErrorDetails, readonly string[]][] = [
  ['task', ['task', 'taskId']],
  ['petType', ['petType']],
  ['knownPetTypes', ['knownPetTypes', 'known']],
  ['tensor', ['tensor']],
  ['sharedModel', ['sharedModel', 'tag']],
  ['budgetBytes', ['budgetBytes']],
  ['requestedBytes', ['requestedBytes']],
];

/** Flattens an error for postMessage, keeping its typed code and the detail fields listed in {@link ErrorDetails}. */
export function serializeError(err: unknown): SerializedError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err), code: null, details: {} };
  const e = err as Error & Record<string, unknown>;
  const details: Record<string, unknown> = {};
  for (const [detail, fields] of DETAIL_SOURCES) {
    for (const field of fields) {
      const v = e[field];
      if (typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v))) details[detail] = v;
      else if (Array.isArray(v) && v.every((x) => typeof x === 'string')) details[detail] = [...v];
      else continue;
      break;
    }
  }
  return { name: e.name, message: e.message, code: typeof e.code === 'string' ? e.code : null, details: details as ErrorDetails };
}
