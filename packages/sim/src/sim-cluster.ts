/**
 * SimCluster: N simulated GPUs behind the REAL PunicaScheduler on one event queue, wired as InProcessCluster
 * wires its hosts: an InProcessEngineHost per GPU, and per request a ClientStream that sees the scheduler's
 * `placed` fence and every host event before the scheduler does. Requests are submitted at the queue's current
 * virtual time; `queue.run(…)` moves the world forward. {@link runClusterSimulation} drives one with a trace; tests
 * drive one by hand.
 */
import {
  ClientStream,
  type FinishedResult,
  type GenerateRequest,
  type HostEvent,
  InProcessEngineHost,
  PunicaScheduler,
  deserializeError,
} from '@tessera/cluster';
import { EventQueue } from './clock.js';
import { SimArgumentError } from './errors.js';
import type { LatencyModel } from './latency.js';
import { SimGpu } from './sim-gpu.js';

export interface SimClusterOptions {
  /** How many GPUs (ids gpu-0 … gpu-(n−1), zero-padded to one width so string order = number order), or their ids. */
  gpus: number | readonly string[];
  latency: LatencyModel;
  /** KV budget per GPU in tokens, or one per GPU. */
  kvTokensPerGpu: number | readonly number[];
  /** Batch cap of the GPUs and the scheduler (default 32). */
  maxBatch?: number;
  /** Longest sequence the simulated models accept (default 2^20). */
  maxPositions?: number;
  /** Scheduler: lightly loaded below this fraction of the cap (default 0.5). */
  lightlyLoadedFraction?: number;
  /** Scheduler: idle this long → releasable (default 60,000 ms). */
  idleReleaseMs?: number;
  /** Default: a new queue at t = 0. */
  queue?: EventQueue;
}

/** How a request's stream ended, as its client saw it. */
export type ClientOutcome = { kind: 'finish'; result: FinishedResult } | { kind: 'error'; error: Error };

export class SimCluster {
  readonly queue: EventQueue;
  readonly scheduler: PunicaScheduler;
  readonly gpus: readonly SimGpu[];
  /** Called once per request when its stream ends (the stream holds every token it delivered, in order). */
  onClientDone: ((stream: ClientStream, outcome: ClientOutcome) => void) | null = null;
  private readonly streams = new Map<string, ClientStream>();

  constructor(options: SimClusterOptions) {
    this.queue = options.queue ?? new EventQueue();
    const maxBatch = options.maxBatch ?? 32;
    const ids =
      typeof options.gpus === 'number'
        ? Array.from({ length: options.gpus }, (_, g) => `gpu-${String(g).padStart(String(Math.max(0, (options.gpus as number) - 1)).length, '0')}`)
        : [...options.gpus];
    if (ids.length === 0) throw new SimArgumentError('SimCluster: needs at least one GPU');
    if (new Set(ids).size !== ids.length) throw new SimArgumentError(`SimCluster: GPU ids must be unique, got ${ids.join(', ')}`);
    const kv = options.kvTokensPerGpu;
    if (typeof kv !== 'number' && kv.length !== ids.length) throw new SimArgumentError(`SimCluster: ${kv.length} KV budgets for ${ids.length} GPUs`);
    this.scheduler = new PunicaScheduler({
      clock: this.queue.clock,
      maxBatch,
      ...(options.lightlyLoadedFraction === undefined ? {} : { lightlyLoadedFraction: options.lightlyLoadedFraction }),
      ...(options.idleReleaseMs === undefined ? {} : { idleReleaseMs: options.idleReleaseMs }),
    });
    // The fence: a stream learns of a new attempt before that attempt's host can emit anything.
    this.scheduler.on('placed', ({ id, hostId, attempt, generated }) => {
      this.streams.get(id)?.accept({ kind: 'placed', id, attempt, hostId, generated });
    });
    this.scheduler.on('done', ({ id }) => this.streams.delete(id));
    const onHostEvent = (hostId: string, event: HostEvent) => this.onHostEvent(hostId, event);
    this.gpus = ids.map((id, g) => {
      const gpu = new SimGpu({
        id,
        queue: this.queue,
        latency: options.latency,
        kvTokens: typeof kv === 'number' ? kv : kv[g]!,
        maxBatch,
        ...(options.maxPositions === undefined ? {} : { maxPositions: options.maxPositions }),
      });
      this.scheduler.addHost(new InProcessEngineHost(id, gpu, onHostEvent));
      return gpu;
    });
  }

  gpu(id: string): SimGpu | undefined {
    return this.gpus.find((g) => g.id === id);
  }

  /** Submits a request now (virtual time); its events go to the returned stream. */
  submit(request: GenerateRequest): ClientStream {
    const existing = this.streams.get(request.id);
    if (existing) return existing;
    const stream = new ClientStream(request.id);
    this.streams.set(request.id, stream);
    this.scheduler.submit(request);
    return stream;
  }

  /** Frees the GPUs' KV pools. */
  dispose(): void {
    for (const g of this.gpus) g.dispose();
  }

  private onHostEvent(hostId: string, event: HostEvent): void {
    const stream = this.streams.get(event.id);
    if (stream && stream.accept(event) && this.onClientDone) {
      if (event.kind === 'finish') this.onClientDone(stream, { kind: 'finish', result: event.result });
      else if (event.kind === 'error') this.onClientDone(stream, { kind: 'error', error: deserializeError(event.error) });
    }
    this.scheduler.onHostEvent(hostId, event);
  }
}
