/**
 * EngineClient: the HTTP thread's handle on the engine worker thread. The model, KV cache, adapter cache and the
 * batcher's step loop live in the worker, so a forward pass never blocks the fastify event loop; this class turns
 * the worker's messages back into per-request async iterables and request/response admin calls.
 *
 *   const engine = await EngineClient.start({ modelDir, adapters: [{ name: 'sql', path: '/adapters/sql' }] });
 *   const req = engine.submit({ id: 'cmpl-1', adapter: 'sql', prompt, maxTokens: 32, sampling: {}, stop: [], ignoreEos: false });
 *   for await (const ev of req) if (ev.type === 'token') process.stdout.write(ev.text);
 *
 * Failure model: if the worker dies (an uncaught error, an abort, `terminate()`), every open request ends with
 * an {@link EngineUnavailableError} event, pending admin calls reject with it, `healthy` turns false and a
 * 'crash' event fires; later calls fail at once. There is no silent restart: the process is unhealthy until an
 * operator (or orchestrator watching /health) restarts it.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Worker } from 'node:worker_threads';

import { startWorker, watchWorker, workerEntry } from '@tessera/server-kit';

import { EngineError, EngineUnavailableError } from './errors.js';
import type { GenerationEngine } from './generation-engine.js';
import type {
  AdapterStatus,
  AdminCall,
  AdminResults,
  EngineEventMessage,
  EngineStats,
  FinishedResult,
  FromWorker,
  ModelSummary,
  SubmitRequest,
  ToWorker,
  WorkerInit,
} from './protocol.js';

export interface EngineOptions {
  /** A Hugging Face decoder directory (config.json, model.safetensors, tokenizer.json). */
  modelDir: string;
  /** Adapters registered before serving (validated: a malformed one fails start-up, naming it). */
  adapters?: readonly { name: string; path: string }[];
  /** Most sequences per engine step (default 32). */
  maxBatch?: number;
  /** Bytes of the paged KV cache (default 64 MiB). */
  kvBudgetBytes?: number;
  /** Bytes of device memory for resident adapters (default 64 MiB). */
  adapterBudgetBytes?: number;
  /** Bytes of the host cache of read adapters (default 256 MiB; 0 disables it). */
  hostAdapterBudgetBytes?: number;
  /** CPU kernel threads in the worker (default: TESSERA_THREADS or the core count). */
  threads?: number | null;
  /** How long close() waits for the worker to finish before terminating it (default 10 s). */
  shutdownTimeoutMs?: number;
}

export const MIB = 1024 * 1024;

export type EngineEvent =
  | { type: 'token'; token: number; text: string }
  | { type: 'finish'; result: FinishedResult }
  | { type: 'error'; error: Error };

/** What the client reports when a request ends, for metrics (times from performance.now(), ms). */
export interface RequestEnd {
  id: string;
  adapter: string | null;
  promptTokens: number;
  completionTokens: number;
  /** null when the request failed. */
  finishReason: FinishedResult['finishReason'] | null;
  error: Error | null;
  submittedAt: number;
  firstTokenAt: number | null;
  endedAt: number;
}

export interface EngineClientEvents {
  'request-end': [RequestEnd];
  'adapter-loaded': [{ name: string; seconds: number; bytes: number }];
  'adapter-load-failed': [{ name: string; error: Error }];
  'adapter-evicted': [{ name: string; tier: 'host' | 'device'; reason: string }];
  /** Every event batch, in worker order (tests and tracing). */
  events: [EngineEventMessage[]];
  crash: [Error];
}

/** One submitted request: an async iterable of its events (single consumer), ending after finish or error. */
export class EngineRequest implements AsyncIterable<EngineEvent> {
  readonly id: string;
  readonly adapter: string | null;
  readonly promptTokens: number;
  readonly submittedAt: number;
  firstTokenAt: number | null = null;
  private readonly queue: EngineEvent[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private cancelRequested = false;
  private readonly onCancel: (id: string) => void;

  /** @internal created by {@link EngineClient.submit} */
  constructor(request: SubmitRequest, onCancel: (id: string) => void) {
    this.id = request.id;
    this.adapter = request.adapter;
    this.promptTokens = request.prompt.length;
    this.submittedAt = performance.now();
    this.onCancel = onCancel;
  }

  /** True once the finish or error event has been delivered to the queue. */
  get done(): boolean {
    return this.ended;
  }

  /** Asks the engine to drop the request (frees its KV pages); the stream then ends with finishReason 'cancelled'. Idempotent. */
  cancel(): void {
    if (this.ended || this.cancelRequested) return;
    this.cancelRequested = true;
    this.onCancel(this.id);
  }

  /** @internal */
  push(event: EngineEvent): void {
    if (this.ended) return;
    if (event.type === 'token' && this.firstTokenAt === null) this.firstTokenAt = performance.now();
    if (event.type !== 'token') this.ended = true;
    this.queue.push(event);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<EngineEvent> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        yield next;
        if (next.type !== 'token') return;
        continue;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Consumes the stream and resolves with the finished request (rejects with the request's error). */
  async result(): Promise<FinishedResult> {
    for await (const ev of this) {
      if (ev.type === 'finish') return ev.result;
      if (ev.type === 'error') throw ev.error;
    }
    throw new EngineUnavailableError(`request ${this.id} ended without a result`);
  }
}

/**
 * One engine worker per process. The native addon keeps JS-facing state in process-wide statics (its tensor
 * class's constructor reference), so a second JS environment loading it (a second worker, at the same time or
 * after the first one ended) corrupts memory. Until the addon keeps that state per environment, a second start
 * is refused with a clear error instead.
 */
let engineStarted = false;

interface PendingCall {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

export class EngineClient extends EventEmitter<EngineClientEvents> implements GenerationEngine {
  /** The loaded model, as the worker reported it. */
  readonly model: ModelSummary;
  /** The adapters registered at start-up, as the worker reported them. */
  readonly startupAdapters: readonly AdapterStatus[];
  private readonly worker: Worker;
  private readonly requests = new Map<string, EngineRequest>();
  private readonly calls = new Map<number, PendingCall>();
  private nextCallId = 1;
  private failureReason: Error | null = null;
  private closing: Promise<void> | null = null;
  private readonly exited: Promise<number>;
  private readonly shutdownTimeoutMs: number;

  private constructor(worker: Worker, ready: { model: ModelSummary; adapters: AdapterStatus[] }, exited: Promise<number>, shutdownTimeoutMs: number) {
    super();
    this.worker = worker;
    this.model = ready.model;
    this.startupAdapters = ready.adapters;
    this.exited = exited;
    this.shutdownTimeoutMs = shutdownTimeoutMs;
    worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    watchWorker(worker, exited, {
      closing: () => this.closing !== null,
      lost: (message, cause) => this.fail(new EngineUnavailableError(message, cause ? { cause } : undefined)),
    });
  }

  /** Starts the worker and resolves once the model is loaded and the start-up adapters are registered. */
  static async start(options: EngineOptions): Promise<EngineClient> {
    if (engineStarted) {
      throw new EngineUnavailableError(
        'an engine worker was already started in this process; the native addon supports one engine per process (run another process for another engine)',
      );
    }
    engineStarted = true;
    const init: WorkerInit = {
      modelDir: options.modelDir,
      adapters: [...(options.adapters ?? [])],
      maxBatch: options.maxBatch ?? 32,
      kvBudgetBytes: options.kvBudgetBytes ?? 64 * MIB,
      adapterBudgetBytes: options.adapterBudgetBytes ?? 64 * MIB,
      hostAdapterBudgetBytes: options.hostAdapterBudgetBytes ?? 256 * MIB,
      threads: options.threads ?? null,
    };
    const { worker, ready, exited } = await startWorker<FromWorker>(workerEntry(import.meta.url, { source: './worker.ts', built: './engine-worker.js' }), {
      workerData: init,
      name: 'tessera-engine',
      failed: (msg) => new EngineError(msg.error),
      unavailable: (message, opts) => new EngineUnavailableError(message, opts),
    });
    return new EngineClient(worker, { model: ready.model, adapters: ready.adapters }, exited, options.shutdownTimeoutMs ?? 10_000);
  }

  /** False once the worker crashed or was shut down. */
  get healthy(): boolean {
    return this.failureReason === null;
  }

  /** Why the engine is unavailable, or null while healthy. */
  get failure(): Error | null {
    return this.failureReason;
  }

  /** Requests submitted and not yet finished. */
  get inFlight(): number {
    return this.requests.size;
  }

  /** Submits a request. Throws {@link EngineUnavailableError} when the worker is down. */
  submit(request: SubmitRequest): EngineRequest {
    if (this.failureReason) throw this.failureReason;
    if (this.requests.has(request.id)) throw new EngineError({ name: 'InvalidArgumentError', message: `request id ${request.id} is already in flight`, code: 'TESSERA_INVALID_ARGUMENT', adapter: null });
    const handle = new EngineRequest(request, (id) => this.post({ type: 'cancel', id }));
    this.requests.set(request.id, handle);
    this.post({ type: 'submit', request });
    return handle;
  }

  /** Validates and registers an adapter directory in the engine (it is read from disk to check it, not made resident). */
  loadAdapter(name: string, path: string): Promise<AdapterStatus> {
    return this.call({ op: 'load-adapter', name, path });
  }

  /** Unregisters an adapter; waits for requests already using it to finish, then frees its memory. */
  async unloadAdapter(name: string): Promise<void> {
    await this.call({ op: 'unload-adapter', name });
  }

  /** Every registered adapter with its residency. */
  adapters(): Promise<AdapterStatus[]> {
    return this.call({ op: 'adapters' });
  }

  /** Queue, KV, adapter-cache and batch statistics (batch sizes since the previous call). */
  stats(): Promise<EngineStats> {
    return this.call({ op: 'stats' });
  }

  /**
   * Stops the worker: it finishes its current step, cancels whatever is still queued (the HTTP layer drains
   * requests before calling this), frees the model and caches, and exits. Terminates it after the timeout.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.failureReason) {
        const done = this.call({ op: 'shutdown' }).catch(() => undefined);
        await this.within(done, this.shutdownTimeoutMs);
        // Exit from the worker's own event loop (no native call in flight), then make sure it is gone.
        this.worker.postMessage({ type: 'exit', code: 0 } satisfies ToWorker);
        await this.within(this.exited, 1_000);
      }
      await this.worker.terminate();
      await this.exited;
    })();
    return this.closing;
  }

  /**
   * Kills the engine as a crash would: open requests fail with 503, /health turns unhealthy, nothing is cancelled
   * or freed in order. The worker exits at its next safe point (between two engine steps); one that does not
   * within `graceMs` (wedged in a kernel) is terminated. For watchdogs and tests.
   */
  async terminate(graceMs = 2_000): Promise<void> {
    if (!this.failureReason) this.worker.postMessage({ type: 'exit', code: 1 } satisfies ToWorker);
    await this.within(this.exited, graceMs);
    await this.worker.terminate();
    await this.exited;
  }

  /** Waits for `promise`, at most `ms`. */
  private async within(promise: Promise<unknown>, ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
  }

  private call<K extends AdminCall['op']>(call: Extract<AdminCall, { op: K }>): Promise<AdminResults[K]> {
    if (this.failureReason) return Promise.reject(this.failureReason);
    const callId = this.nextCallId++;
    return new Promise<AdminResults[K]>((resolve, reject) => {
      this.calls.set(callId, { resolve: resolve as (v: unknown) => void, reject });
      this.post({ type: 'admin', callId, call });
    });
  }

  private post(msg: ToWorker): void {
    if (this.failureReason) return;
    this.worker.postMessage(msg);
  }

  private onMessage(msg: FromWorker): void {
    switch (msg.type) {
      case 'events':
        this.emit('events', msg.events);
        for (const ev of msg.events) this.onEvent(ev);
        break;
      case 'reply': {
        const pending = this.calls.get(msg.callId);
        if (!pending) return;
        this.calls.delete(msg.callId);
        if (msg.ok) pending.resolve(msg.value);
        else pending.reject(new EngineError(msg.error));
        break;
      }
      case 'fatal':
        this.fail(new EngineUnavailableError(`the engine failed: ${msg.error.message}`, { cause: new EngineError(msg.error) }));
        break;
      default:
        break;
    }
  }

  private onEvent(ev: EngineEventMessage): void {
    switch (ev.kind) {
      case 'token':
        this.requests.get(ev.id)?.push({ type: 'token', token: ev.token, text: ev.text });
        break;
      case 'finish':
        this.end(ev.id, { type: 'finish', result: ev.result });
        break;
      case 'error':
        this.end(ev.id, { type: 'error', error: new EngineError(ev.error) });
        break;
      case 'adapter-loaded':
        this.emit('adapter-loaded', { name: ev.name, seconds: ev.seconds, bytes: ev.bytes });
        break;
      case 'adapter-load-failed':
        this.emit('adapter-load-failed', { name: ev.name, error: new EngineError(ev.error) });
        break;
      case 'adapter-evicted':
        this.emit('adapter-evicted', { name: ev.name, tier: ev.tier, reason: ev.reason });
        break;
      default:
        break;
    }
  }

  private end(id: string, event: Extract<EngineEvent, { type: 'finish' | 'error' }>): void {
    const handle = this.requests.get(id);
    if (!handle) return;
    this.requests.delete(id);
    handle.push(event);
    const result = event.type === 'finish' ? event.result : null;
    this.emit('request-end', {
      id,
      adapter: handle.adapter,
      promptTokens: result?.promptTokens ?? handle.promptTokens,
      completionTokens: result?.completionTokens ?? 0,
      finishReason: result?.finishReason ?? null,
      error: event.type === 'error' ? event.error : null,
      submittedAt: handle.submittedAt,
      firstTokenAt: handle.firstTokenAt,
      endedAt: performance.now(),
    });
  }

  private fail(err: Error): void {
    if (this.failureReason) return;
    this.failureReason = err;
    for (const id of [...this.requests.keys()]) this.end(id, { type: 'error', error: err });
    for (const pending of this.calls.values()) pending.reject(err);
    this.calls.clear();
    if (!this.closing) this.emit('crash', err);
  }
}
