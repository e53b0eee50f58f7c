/**
 * Punica on the host protocol (@tessera/cluster): placements of a GenerateRequest in, token events with their
 * attempt and absolute index out, then the FinishedResult; admin calls for the adapters and the statistics.
 * `PunicaHost` is the one interface the routes use; it is served by the engine worker thread of this process
 * ({@link startWorkerHost}: server-kit's WorkerEngineClient ⇄ worker.ts) or, as a cluster frontend, by the Punica
 * scheduler and worker processes on Redis (cluster/frontend.ts). The routes do not know which.
 */
import type { FinishedResult, HostSample, Placement, TokenEvent } from '@tessera/cluster';
import { type EngineHost, WorkerEngineClient, workerEntry } from '@tessera/server-kit';

export type { FinishedResult, GenerateRequest } from '@tessera/cluster';

export interface AdapterStatus {
  name: string;
  /** Absolute directory. */
  path: string;
  residency: 'disk' | 'host' | 'device';
  /** The adapter's LoRA rank (max over modules), read from adapter_config.json at registration. */
  rank: number;
  pins: number;
}

/** What /metrics needs from the engine, sampled when scraped: the loop's queues and steps, KV pages, the adapter cache. */
export interface EngineStats extends HostSample {
  kv: { usedPages: number; numPages: number };
  /** Prefix cache, in tokens: prefill inputs looked up, and those attached from cached pages. */
  prefix: { queries: number; hits: number };
  /** The adapter cache's counters and sizes (AdapterCache.stats()). */
  adapters: { registered: number; residentCount: number; residentBytes: number; deviceBudgetBytes: number; hostCount: number; hits: number; misses: number; loads: number; loadFailures: number; deviceEvictions: number; hostEvictions: number };
}

export interface ModelSummary {
  /** The model directory (absolute). */
  dir: string;
  architecture: string;
  maxPositions: number;
  vocabSize: number;
  /** Which backend runs the kernels: 'cpu', 'cuda', or 'cluster' behind a frontend. */
  device: string;
  kvPages: number;
}

/** The adapter cache's events (ordered with the token events of the same engine step). */
export type AdapterNotice =
  | { kind: 'adapter-load-start'; name: string; from: 'disk' | 'host' }
  | { kind: 'adapter-loaded'; name: string; seconds: number; bytes: number }
  | { kind: 'adapter-load-failed'; name: string; message: string }
  | { kind: 'adapter-evicted'; name: string; tier: 'host' | 'device'; reason: string };

export interface PunicaProtocol {
  placement: Placement;
  item: TokenEvent;
  result: FinishedResult;
  notice: AdapterNotice;
  admin: {
    /** Reads the adapter once (validating it against the model) and registers it; it becomes resident on first use. */
    'load-adapter': { args: { name: string; path: string }; result: AdapterStatus };
    /** Refuses new requests for it at once, lets the running ones finish, then frees it. */
    'unload-adapter': { args: string; result: null };
    adapters: { args: null; result: AdapterStatus[] };
    stats: { args: null; result: EngineStats };
  };
  ready: { model: ModelSummary; adapters: AdapterStatus[] };
}

/** What the routes, health and metrics use: the host protocol's front side, over a worker thread or Redis. */
export type PunicaHost = EngineHost<PunicaProtocol>;

/** workerData of the engine worker. */
export interface WorkerInit {
  modelDir: string;
  adapters: { name: string; path: string }[];
  maxBatch: number;
  kvBudgetBytes: number;
  adapterBudgetBytes: number;
  hostAdapterBudgetBytes: number;
  threads: number | null;
  weights?: 'f32' | 'int8' | undefined;
  prefixCache?: boolean | undefined;
  fairness?: 'fcfs' | 'vtc' | undefined;
}

/** Starts the engine worker; resolves once the model is loaded and the start-up adapters are registered. */
export function startWorkerHost(init: WorkerInit, options: { shutdownTimeoutMs?: number } = {}): Promise<WorkerEngineClient<PunicaProtocol>> {
  return WorkerEngineClient.start<PunicaProtocol>({
    entry: workerEntry(import.meta.url, { source: './worker.ts', built: './engine-worker.js' }),
    workerData: init,
    name: 'tessera-engine',
    // Until the native addon keeps its JS-facing state per environment, a second engine (at the same time or after
    // the first one ended) would corrupt memory: it is refused instead.
    oncePerProcess: 'the native addon supports one engine per process (run another process for another engine)',
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
  });
}
