/**
 * ClusterEngine: the frontend's engine in cluster mode (`--role frontend`). A request goes to the Punica scheduler
 * as a BullMQ job; its tokens come back on its Redis stream from whichever worker serves it, through
 * @tessera/cluster's ClientStream (every token once, in order, across migrations and lost workers). To the
 * routes it looks like the single-machine EngineClient.
 *
 * Adapters are registered on the workers at their start (`--adapters`); the frontend serves the same directory's
 * names and reads their ranks from adapter_config.json. Loading adapters at run time is a single-machine feature.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import { type ClientStream, type HostLoad, type RedisClusterClient, type RedisOptions, connectClusterClient } from '@tessera/cluster';
import { readHfConfig, readLoraAdapterConfig } from '@tessera/engine';

import { type EngineClientEvents, EngineRequest } from '../engine/client.js';
import { EngineError, EngineUnavailableError } from '../engine/errors.js';
import type { GenerationEngine } from '../engine/generation-engine.js';
import type { AdapterStatus, EngineStats, ModelSummary, SubmitRequest } from '../engine/protocol.js';

export interface ClusterEngineOptions {
  redis: RedisOptions;
  modelDir: string;
  adapters: readonly { name: string; path: string }[];
}

/** The largest rank an adapter declares (r and its rank_pattern overrides). */
function declaredRank(dir: string): number {
  const c = readLoraAdapterConfig(dir);
  return Math.max(c.r, ...Object.values(c.rankPattern));
}

export class ClusterEngine extends EventEmitter<EngineClientEvents> implements GenerationEngine {
  readonly model: ModelSummary;
  readonly startupAdapters: readonly AdapterStatus[];
  private readonly client: RedisClusterClient;
  private readonly requests = new Map<string, EngineRequest>();
  private closed: Error | null = null;
  /** Σ steps over the workers at the previous stats() call (steps are reported as a delta, like EngineClient's). */
  private lastSteps: number | null = null;

  private constructor(client: RedisClusterClient, model: ModelSummary, adapters: AdapterStatus[]) {
    super();
    this.client = client;
    this.model = model;
    this.startupAdapters = adapters;
  }

  /** Connects to Redis (failing fast with RedisUnavailableError when it does not answer). */
  static async connect(options: ClusterEngineOptions): Promise<ClusterEngine> {
    const config = readHfConfig(options.modelDir);
    const adapters = options.adapters.map(({ name, path }) => ({ name, path, residency: 'disk' as const, rank: declaredRank(path), pins: 0 }));
    const client = await connectClusterClient(options.redis);
    const model: ModelSummary = {
      dir: options.modelDir,
      architecture: config.architecture,
      maxPositions: config.maxPositions,
      vocabSize: config.vocabSize,
      numLayers: config.numLayers,
      hiddenSize: config.hiddenSize,
      device: 'cluster',
      kvPages: 0,
    };
    return new ClusterEngine(client, model, adapters);
  }

  get healthy(): boolean {
    return this.closed === null;
  }

  get failure(): Error | null {
    return this.closed;
  }

  get inFlight(): number {
    return this.requests.size;
  }

  submit(request: SubmitRequest): EngineRequest {
    if (this.closed) throw this.closed;
    if (this.requests.has(request.id)) {
      throw new EngineError({ name: 'InvalidArgumentError', message: `request id ${request.id} is already in flight`, code: 'TESSERA_INVALID_ARGUMENT', adapter: null });
    }
    const handle = new EngineRequest(request, (id) => this.client.cancel(id));
    this.requests.set(request.id, handle);
    const stream = this.client.submit({ ...request, prompt: [...request.prompt] });
    void this.pump(handle, stream);
    return handle;
  }

  private async pump(handle: EngineRequest, stream: ClientStream): Promise<void> {
    let error: Error | null = null;
    let result = null;
    try {
      for await (const ev of stream) {
        if (ev.type === 'token') handle.push({ type: 'token', token: ev.token, text: ev.text });
        else if (ev.type === 'finish') result = ev.result;
        else {
          // Rebuilt by the stream (its registered class, or a RemoteError with the same code and adapter).
          const e = ev.error as Error & { code?: unknown; adapter?: unknown; remoteName?: unknown };
          error = new EngineError({ name: typeof e.remoteName === 'string' ? e.remoteName : e.name, message: e.message, code: typeof e.code === 'string' ? e.code : null, adapter: typeof e.adapter === 'string' ? e.adapter : null });
        }
      }
    } catch (err) {
      error = err instanceof Error ? err : new Error(String(err));
    }
    this.requests.delete(handle.id);
    if (result) handle.push({ type: 'finish', result });
    else handle.push({ type: 'error', error: error ?? new EngineUnavailableError(`request ${handle.id} ended without a result`) });
    this.emit('request-end', {
      id: handle.id,
      adapter: handle.adapter,
      promptTokens: result?.promptTokens ?? handle.promptTokens,
      completionTokens: result?.completionTokens ?? 0,
      finishReason: result?.finishReason ?? null,
      error: result ? null : error,
      submittedAt: handle.submittedAt,
      firstTokenAt: handle.firstTokenAt,
      endedAt: performance.now(),
    });
  }

  loadAdapter(): Promise<AdapterStatus> {
    return Promise.reject(unsupported('loading adapters at run time'));
  }

  unloadAdapter(): Promise<void> {
    return Promise.reject(unsupported('unloading adapters at run time'));
  }

  /** The start-up adapters; 'device' when resident on any live worker. */
  async adapters(): Promise<AdapterStatus[]> {
    const hosts = await this.hosts();
    const resident = new Set(hosts.flatMap((h) => h.residentAdapters));
    return this.startupAdapters.map((a) => ({ ...a, residency: resident.has(a.name) ? 'device' : 'disk' }));
  }

  /** Live workers' load reports summed (KV pages over all workers; batch sizes are not sampled here). */
  async stats(): Promise<EngineStats> {
    const hosts = await this.hosts();
    const sum = (f: (h: HostLoad) => number) => hosts.reduce((s, h) => s + f(h), 0);
    const totalSteps = sum((h) => h.steps);
    // A worker that left takes its count with it: never report a negative delta.
    const steps = this.lastSteps === null ? totalSteps : Math.max(0, totalSteps - this.lastSteps);
    this.lastSteps = totalSteps;
    const resident = new Set(hosts.flatMap((h) => h.residentAdapters));
    return {
      running: sum((h) => h.requests.length),
      waiting: 0,
      runningAdapters: [],
      waitingAdapters: [],
      kv: { usedPages: sum((h) => Math.max(0, h.kvPages - h.freeKvPages)), numPages: sum((h) => h.kvPages), sequences: sum((h) => h.requests.length), bytesPerPage: 0 },
      adapters: {
        registered: this.startupAdapters.length,
        residentCount: resident.size,
        residentBytes: 0,
        deviceBudgetBytes: 0,
        hostCount: 0,
        hostBytes: 0,
        hits: 0,
        misses: 0,
        loads: 0,
        loadFailures: 0,
        deviceEvictions: 0,
        hostEvictions: 0,
      },
      steps,
      batchSizes: [],
      preemptions: 0,
    };
  }

  /** The live workers' last load reports. */
  async hosts(): Promise<HostLoad[]> {
    if (this.closed) throw this.closed;
    return this.client.hosts();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = new EngineUnavailableError('the cluster frontend was shut down');
    for (const handle of this.requests.values()) handle.cancel();
    await this.client.close();
  }
}

function unsupported(what: string): EngineError {
  return new EngineError({
    name: 'ClusterUnsupportedError',
    message: `${what} is not supported in cluster mode; register adapters on the workers with --adapters`,
    code: 'TESSERA_CLUSTER_UNSUPPORTED',
    adapter: null,
  });
}
