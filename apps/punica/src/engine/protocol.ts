/**
 * The message protocol between the HTTP thread ({@link EngineClient}) and the engine worker thread. Everything
 * crossing the boundary is structured-clone data (no classes, no functions): errors travel as
 * {@link SerializedError} and are rebuilt on the other side. The same messages would serve a worker process fed
 * by a queue (ARCHITECTURE decision 3): submit, stream tokens/results, cancel, admin.
 *
 *   main → worker   submit, cancel, admin { load-adapter | unload-adapter | adapters | stats | shutdown }
 *   worker → main   ready | init-failed, events [token | finish | error | adapter], reply, fatal
 *
 * Per-request and adapter events are sent in batches (one `events` message per engine step), in the order they
 * happened, so the client observes a single ordered stream: a token that the worker produced while an adapter
 * was loading arrives between that adapter's `load-start` and `loaded` events.
 */

/** A generation request as the engine sees it: tokens in, sampling and stopping as the batcher takes them. */
export interface SubmitRequest {
  /** Unique per request (the HTTP layer's completion id). */
  id: string;
  /** A registered adapter's name, or null for the base model. */
  adapter: string | null;
  /** Prompt token ids (BOS included when the tokenizer's template adds it). */
  prompt: number[];
  /** Most tokens to generate (EOS included). */
  maxTokens: number;
  sampling: { temperature?: number; topK?: number; topP?: number; seed?: number };
  stop: string[];
  ignoreEos: boolean;
}

/** Why a request ended, as the batcher reports it. */
export type EngineFinishReason = 'eos' | 'stop' | 'length' | 'cancelled';

export interface FinishedResult {
  id: string;
  tokens: number[];
  text: string;
  finishReason: EngineFinishReason;
  promptTokens: number;
  completionTokens: number;
}

/** An Error flattened for postMessage: the class name, the typed error code, and the adapter it names, if any. */
export interface SerializedError {
  name: string;
  message: string;
  code: string | null;
  adapter: string | null;
}

export type Residency = 'disk' | 'host' | 'device';

export interface AdapterStatus {
  name: string;
  /** Absolute directory. */
  path: string;
  residency: Residency;
  /** The adapter's LoRA rank (max over modules), read from adapter_config.json at registration. */
  rank: number;
  pins: number;
}

/** What /metrics needs from the worker, sampled when scraped. */
export interface EngineStats {
  running: number;
  waiting: number;
  /** Distinct adapters (null = base model omitted) of running / waiting requests. */
  runningAdapters: string[];
  waitingAdapters: string[];
  kv: { usedPages: number; numPages: number; sequences: number; bytesPerPage: number };
  adapters: {
    registered: number;
    residentCount: number;
    residentBytes: number;
    deviceBudgetBytes: number;
    hostCount: number;
    hostBytes: number;
    hits: number;
    misses: number;
    loads: number;
    loadFailures: number;
    deviceEvictions: number;
    hostEvictions: number;
  };
  /** Engine steps and the rows (sequences) of each step since the previous stats call (drained). */
  steps: number;
  batchSizes: number[];
  preemptions: number;
}

export interface ModelSummary {
  /** The model directory (absolute). */
  dir: string;
  architecture: string;
  maxPositions: number;
  vocabSize: number;
  numLayers: number;
  hiddenSize: number;
  /** Which backend runs the kernels: 'cpu' or 'cuda'. */
  device: string;
  /** KV pages and page size in tokens. */
  kvPages: number;
}

/** workerData of the engine worker. */
export interface WorkerInit {
  modelDir: string;
  adapters: { name: string; path: string }[];
  maxBatch: number;
  kvBudgetBytes: number;
  adapterBudgetBytes: number;
  hostAdapterBudgetBytes: number;
  threads: number | null;
  /** The module to run, for the dev bootstrap (worker-dev.mjs): the TypeScript worker's URL. */
  entry?: string;
}

// main → worker

export type AdminCall =
  | { op: 'load-adapter'; name: string; path: string }
  | { op: 'unload-adapter'; name: string }
  | { op: 'adapters' }
  | { op: 'stats' }
  | { op: 'shutdown' };

export interface AdminResults {
  'load-adapter': AdapterStatus;
  'unload-adapter': null;
  adapters: AdapterStatus[];
  stats: EngineStats;
  shutdown: null;
}

export type ToWorker =
  | { type: 'submit'; request: SubmitRequest }
  | { type: 'cancel'; id: string }
  | { type: 'admin'; callId: number; call: AdminCall }
  /** Exit now with `code`, abandoning everything (EngineClient.terminate: a crash at a safe point). */
  | { type: 'exit'; code: number };

// worker → main

export type EngineEventMessage =
  | { kind: 'token'; id: string; token: number; text: string }
  | { kind: 'finish'; id: string; result: FinishedResult }
  | { kind: 'error'; id: string; error: SerializedError }
  | { kind: 'adapter-load-start'; name: string; from: 'disk' | 'host' }
  | { kind: 'adapter-loaded'; name: string; seconds: number; bytes: number }
  | { kind: 'adapter-load-failed'; name: string; error: SerializedError }
  | { kind: 'adapter-evicted'; name: string; tier: 'host' | 'device'; reason: string };

export type FromWorker =
  | { type: 'ready'; model: ModelSummary; adapters: AdapterStatus[] }
  | { type: 'init-failed'; error: SerializedError }
  | { type: 'events'; events: EngineEventMessage[] }
  | { type: 'reply'; callId: number; ok: true; value: unknown }
  | { type: 'reply'; callId: number; ok: false; error: SerializedError }
  | { type: 'fatal'; error: SerializedError }
  | { type: 'closed' };

export function serializeError(err: unknown): SerializedError {
  if (err instanceof Error) {
    const e = err as Error & { code?: unknown; adapter?: unknown };
    return {
      name: e.name,
      message: e.message,
      code: typeof e.code === 'string' ? e.code : null,
      adapter: typeof e.adapter === 'string' ? e.adapter : null,
    };
  }
  return { name: 'Error', message: String(err), code: null, adapter: null };
}
