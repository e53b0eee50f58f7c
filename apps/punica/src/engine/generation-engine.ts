/**
 * What the HTTP side needs from an engine, whichever runs it: {@link EngineClient} (one engine in a worker thread
 * of this process, the default) or {@link ClusterEngine} (the cluster frontend: requests go through the Punica
 * scheduler on Redis to worker processes). Routes, metrics and health only see this interface.
 */
import type { EventEmitter } from 'node:events';

import type { EngineClientEvents, EngineRequest } from './client.js';
import type { AdapterStatus, EngineStats, ModelSummary, SubmitRequest } from './protocol.js';

export interface GenerationEngine extends EventEmitter<EngineClientEvents> {
  /** The model being served ('device' is 'cluster' behind a frontend). */
  readonly model: ModelSummary;
  /** The adapters registered at start-up. */
  readonly startupAdapters: readonly AdapterStatus[];
  /** False once the engine crashed or was shut down (cluster: Redis is unreachable). */
  readonly healthy: boolean;
  readonly failure: Error | null;
  /** Requests submitted and not yet finished. */
  readonly inFlight: number;
  submit(request: SubmitRequest): EngineRequest;
  loadAdapter(name: string, path: string): Promise<AdapterStatus>;
  unloadAdapter(name: string): Promise<void>;
  adapters(): Promise<AdapterStatus[]>;
  stats(): Promise<EngineStats>;
  close(): Promise<void>;
}
