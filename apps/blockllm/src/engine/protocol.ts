/**
 * BlockLLM on the host protocol (@tessera/cluster): placements of a GenerateRequest in (its `adapter` field names
 * the application), token events with their attempt and absolute index out, then the FinishedResult; admin calls
 * for the zoo (ingest, listing) and the statistics. The front side is server-kit's WorkerEngineClient; the host
 * side is worker.ts: the zoo, its DevicePool and the ChainExecutor, driven by the step loop (step-loop.ts).
 */
import type { MigrationRates } from '@tessera/block-zoo';
import type { FinishedResult, HostEvent, Placement } from '@tessera/cluster';

import type { JobStatus, PlacementJob } from '../devices/control-plane.js';
import type { DeviceCounters, PlacementView, Provisioning } from '../devices/device-set.js';
import { type EngineHost, WorkerEngineClient, workerEntry } from '@tessera/server-kit';

/** What a POST to the ingest route asks: a directory by path, read unchanged. */
export interface IngestArgs {
  /** The application's id (its `model` name in the API). */
  id: string;
  /** A Hugging Face Llama directory (full fine-tune or foundation) or a PEFT LoRA directory. */
  path: string;
  /** Default: 'lora' when the directory has adapter_config.json, else 'full'. */
  kind?: 'lora' | 'full' | 'foundation' | undefined;
  /** The zoo model it fine-tunes (default: the served foundation). */
  base?: string | undefined;
}

export interface AppSummary {
  id: string;
  kind: 'foundation' | 'pe' | 'full';
  /** The PE method (lora, adapter, prefix, bitfit) for a PE fine-tune. */
  method: string | null;
  base: string | null;
  /** Block ids of its chain, in order, and their short labels (`attn(0)+lora`). */
  blocks: string[];
  labels: string[];
  /** Fraction of its parameters held in blocks other applications use too. */
  sharedFraction: number;
}

export interface BlockSummary {
  id: string;
  label: string;
  kind: string;
  bytes: number;
  /** Applications whose chains run it. */
  users: string[];
  resident: boolean;
}

export interface ZooListing {
  apps: AppSummary[];
  blocks: BlockSummary[];
  storage: MemorySplit;
}

/** Bytes of the zoo: what is stored once against what per-model provisioning would hold. */
export interface MemorySplit {
  uniqueBytes: number;
  logicalBytes: number;
  uniqueBlocks: number;
  /** Blocks in the chains of two or more applications. */
  sharedBlocks: number;
  /** Native bytes resident in the DevicePool now. */
  residentBytes: number;
}

/** Sampled by /metrics. Counters are cumulative. */
export interface EngineStats {
  running: number;
  waiting: number;
  steps: number;
  tokens: number;
  /** Block runs and the rows they carried; runs whose batch held rows of two or more applications. */
  blockRuns: number;
  blockRows: number;
  sharedBatches: number;
  /** Rows gathered into a new tensor between blocks (the rest ran on views). */
  copiedRows: number;
  kvExhausted: number;
  /** Executors replaced after an ingest re-partitioned a served chain. */
  rebuilds: number;
  memory: MemorySplit;
  /** Several devices (--devices > 1, or per-model provisioning): the cross-device counters and each device's state; null on one device. */
  devices: DeviceMetrics | null;
}

export interface DeviceMetrics extends DeviceCounters {
  perDevice: { id: string; budgetBytes: number; residentBytes: number; busyMs: number; upMs: number; instances: number }[];
}

export interface ModelSummary {
  /** The foundation's id in the zoo and its directory. */
  foundation: string;
  dir: string;
  maxPositions: number;
  vocabSize: number;
  device: string;
}

export interface BlockllmProtocol {
  placement: Placement;
  item: Extract<HostEvent, { kind: 'token' }>;
  result: FinishedResult;
  notice: never;
  admin: {
    ingest: { args: IngestArgs; result: AppSummary };
    zoo: { args: null; result: ZooListing };
    stats: { args: null; result: EngineStats };
    /**
     * Greedy tokens (exactly maxTokens, EOS not special) of one application run alone on a fresh executor: the
     * reference the tests check served tokens against. `blocks`: run these blocks (zoo ids, covering the model from
     * the token ids to the logits) as the application's chain instead of its own: the reference of an adaptively
     * served route, an equivalent segment in place of some of the chain's blocks.
     */
    alone: { args: { app: string; prompt: number[]; maxTokens: number; blocks?: string[] }; result: number[] };
    /** The same run's last-token logits at every step (the bit-exact reference for a served request's logprobs). */
    aloneLogits: { args: { app: string; prompt: number[]; maxTokens: number }; result: Float32Array[] };
    /** Where every block instance lives, each application's chain across the devices, and the control plane. */
    placement: { args: null; result: PlacementStatus };
    /** Checks a placement job against the placement now (a bad one is refused with its 4xx error) and queues it. */
    placementSubmit: { args: PlacementJob; result: JobStatus };
    placementJob: { args: { id: string }; result: JobStatus };
  };
  ready: { model: ModelSummary; apps: AppSummary[] };
}

export type BlockllmHost = EngineHost<BlockllmProtocol>;

export interface PlacementStatus extends PlacementView {
  transport: 'in-process' | 'bullmq';
  /** The latest placement jobs, newest first. */
  jobs: JobStatus[];
}

/** workerData of the engine worker. */
export interface WorkerInit {
  /** The DiskTensorStore directory (the zoo snapshot `zoo.json` beside it is loaded when present). */
  zooDir: string;
  /** The foundation's HF directory: ingested as `foundation` unless the zoo has it. */
  foundationDir: string;
  foundation: string;
  maxBatch: number;
  /** Cohorts of running sequences with a step each in flight (several devices; one device steps one). */
  cohorts: number;
  /** KV pages of each block's own cache. */
  kvPages: number;
  threads: number | null;
  /** The demo's files: its fine-tunes are ingested when the zoo is created (demo.ts). */
  demoRoot: string | null;
  /** Ingest paths must lie inside it when set. */
  ingestRoot: string | null;
  /** Engine devices (worker threads), each with its own byte budget; 1 runs every block in this worker, as before. */
  devices: number;
  /** Parameter bytes each device holds (default: 1.5 × the served blocks' bytes / devices, so chains spread). */
  deviceBytes: number | null;
  /** 'blocks' (BlockLLM) or 'per-model' (each application's model on its own; the baseline). */
  provisioning: Provisioning;
  placementPolicy: 'locality' | 'frag-min';
  /** Scale-out: a replica for an instance routed more than 0.8 × this many sequences (default maxBatch; 0: off). */
  scaleOutQueue: number | null;
  /** Adaptive serving: routes may run equivalent segments of other weight sets (several devices, BlockLLM provisioning). */
  adaptive: boolean;
  /** Variant batching on the devices: a fused PE block's rows batch with its base block's. */
  variantBatching: boolean;
  /** Cohort homes: a cohort's new sequences route on its home device first (DeviceSetOptions.cohortHomes). */
  cohortHomes: boolean;
  /** maxQueueLen of algorithm 5.4: a first hop leaves an instance routed this many sequences for an equivalent one (null: no bound). */
  maxQueueLen: number | null;
  /** How a migrate job moves K/V: overlapped front recompute and back copy (rates measured unless pinned), or copy only. */
  kvMigration: { mode: 'copy' | 'overlapped'; rates: Partial<MigrationRates> | null };
  /** Speculation on surrogates (several devices, BlockLLM provisioning); null: off. */
  speculation: { acceptCosine: number; fraction: number } | null;
  /** The control plane on BullMQ/Redis (else in-process). */
  redis: { url: string; prefix: string } | null;
}

/** Starts the engine worker; resolves once the zoo is loaded. */
export function startWorkerHost(init: WorkerInit, options: { shutdownTimeoutMs?: number; onProgress?: (line: string) => void } = {}): Promise<WorkerEngineClient<BlockllmProtocol>> {
  return WorkerEngineClient.start<BlockllmProtocol>({
    entry: workerEntry(import.meta.url, { source: './worker.ts', built: './engine-worker.js' }),
    workerData: init,
    name: 'tessera-blockllm-engine',
    ...(options.shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.shutdownTimeoutMs } : {}),
    ...(options.onProgress ? { onProgress: options.onProgress } : {}),
  });
}
