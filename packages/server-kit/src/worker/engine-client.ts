/**
 * WorkerEngineClient: the front side of the host protocol's worker-thread transport (the host side is
 * @tessera/cluster's serveWorkerHost). The engine runs in a worker thread, so a forward pass never blocks the
 * HTTP event loop; this class turns the worker's messages back into one ordered {@link EventStream} per request,
 * promise-returning admin calls, and notices.
 *
 *   const engine = await WorkerEngineClient.start<MyProtocol>({ entry, workerData, name: 'tessera-x-engine' });
 *   const stream = engine.submit({ request: { id: 'r1', … }, attempt: 0 });
 *   for await (const ev of stream) …                           // items in index order, then finish or error
 *   const stats = await engine.call('stats', null);
 *
 * Failure model: if the worker dies (an uncaught error, an abort, `terminate()`), every open stream ends with an
 * {@link EngineUnavailableError} (503), pending admin calls reject with it, `healthy` turns false and a 'crash'
 * event fires; later calls fail at once. There is no silent restart: /health reports unhealthy until an operator
 * (or an orchestrator) restarts the process.
 */
import type { Worker } from 'node:worker_threads';

import { EventStream, type FromWorkerHost, type HostMessage, type ProtocolEvent, type ToWorkerHost } from '@tessera/cluster';
import { deserializeError } from '@tessera/core';

import { type EngineHostEvents, type EngineProtocol, type ProtocolStream, TrackedEngineHost } from '../host/engine-host.js';
import { EngineUnavailableError } from '../http/errors.js';
import { startWorker, watchWorker, type WorkerEntry } from './start.js';

export interface WorkerEngineEvents<P extends EngineProtocol> extends EngineHostEvents<P> {
  /** Every batch of request events and notices, in worker order (tests and tracing). */
  events: [HostMessage<ProtocolEvent<P['item'], P['result']>, P['notice']>[]];
}

export interface WorkerEngineOptions {
  entry: WorkerEntry;
  workerData: object;
  /** The thread's name. */
  name: string;
  /** Start-up progress lines from the worker. */
  onProgress?: (line: string) => void;
  /** How long close() waits for the worker's shutdown before terminating it (default 10 s). */
  shutdownTimeoutMs?: number;
  /**
   * Set when the worker loads something a process may load only once (the native addon keeps JS-facing state in
   * process-wide statics): a second such start in this process is refused with EngineUnavailableError naming it.
   */
  oncePerProcess?: string;
}

/** Whether a worker with `oncePerProcess` was started in this process. */
let startedOnce = false;

export type { EngineProtocol, ProtocolStream, RequestEnd } from '../host/engine-host.js';

/** The worker-thread {@link EngineHost} (assignable to it for a concrete protocol). */
export class WorkerEngineClient<P extends EngineProtocol> extends TrackedEngineHost<P, WorkerEngineEvents<P>> {
  /** What the worker reported when it became ready. */
  readonly ready: P['ready'];
  private readonly worker: Worker;
  private readonly calls = new Map<number, { resolve: (value: unknown) => void; reject: (err: Error) => void }>();
  private nextCallId = 1;
  private closing: Promise<void> | null = null;
  private readonly exited: Promise<number>;
  private readonly shutdownTimeoutMs: number;

  private constructor(worker: Worker, ready: P['ready'], exited: Promise<number>, shutdownTimeoutMs: number) {
    super();
    this.worker = worker;
    this.ready = ready;
    this.exited = exited;
    this.shutdownTimeoutMs = shutdownTimeoutMs;
    worker.on('message', (msg: FromWorkerHost<ProtocolEvent<P['item'], P['result']>, P['notice'], P['ready']>) => this.onMessage(msg));
    watchWorker(worker, exited, {
      closing: () => this.closing !== null,
      lost: (message, cause) => this.fail(new EngineUnavailableError(message, cause ? { cause } : undefined)),
    });
  }

  /** Starts the worker; resolves once it is ready (its start-up failure rejects, rebuilt as the typed error). */
  static async start<P extends EngineProtocol>(options: WorkerEngineOptions): Promise<WorkerEngineClient<P>> {
    if (options.oncePerProcess !== undefined) {
      if (startedOnce) throw new EngineUnavailableError(`an engine worker was already started in this process; ${options.oncePerProcess}`);
      startedOnce = true;
    }
    type Msg = FromWorkerHost<unknown, unknown, P['ready']>;
    const { worker, ready, exited } = await startWorker<Msg>(options.entry, {
      workerData: options.workerData,
      name: options.name,
      onMessage: (msg) => {
        if (msg.type === 'progress') options.onProgress?.(msg.line);
      },
      failed: (msg) => deserializeError(msg.error),
      unavailable: (message, opts) => new EngineUnavailableError(message, opts),
    });
    return new WorkerEngineClient<P>(worker, ready.info, exited, options.shutdownTimeoutMs ?? 10_000);
  }

  /** Submits a placement; its events arrive on the returned stream. Throws when the engine is down or the id is in flight. */
  submit(placement: P['placement'], transfer: ArrayBuffer[] = []): ProtocolStream<P> {
    this.checkSubmit(placement);
    const stream: ProtocolStream<P> = new EventStream(placement.request.id);
    this.track(placement, stream);
    this.post({ type: 'submit', placement }, transfer);
    return stream;
  }

  /** Asks the engine to drop a request; its stream ends with the engine's answer (e.g. a cancelled finish). */
  cancel(id: string): void {
    if (this.open.has(id)) this.post({ type: 'cancel', id });
  }

  /** An admin call; rejects with the worker's typed error (rebuilt) or EngineUnavailableError. */
  call<K extends keyof P['admin'] & string>(name: K, args: P['admin'][K]['args'], transfer: ArrayBuffer[] = []): Promise<P['admin'][K]['result']> {
    return this.request((callId) => ({ type: 'admin', callId, name, args }), transfer) as Promise<P['admin'][K]['result']>;
  }

  /**
   * Stops the worker: the host's shutdown runs (it answers or cancels what it holds and frees the engine), then
   * the worker exits. The HTTP layer drains requests before calling this. Terminates the worker after the timeout.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.failureReason) {
        await within(
          this.request((callId) => ({ type: 'shutdown', callId })).catch(() => undefined),
          this.shutdownTimeoutMs,
        );
        // Exit from the worker's own event loop (no native call in flight), then make sure it is gone.
        this.worker.postMessage({ type: 'exit', code: 0 } satisfies ToWorkerHost<never>);
        await within(this.exited, 1_000);
      }
      await this.worker.terminate();
      await this.exited;
    })();
    return this.closing;
  }

  /**
   * Kills the engine as a crash would: open requests fail with 503, /health turns unhealthy. The worker exits at
   * its next safe point (between two engine steps); one that does not within `graceMs` is terminated.
   */
  async terminate(graceMs = 2_000): Promise<void> {
    if (!this.failureReason) this.worker.postMessage({ type: 'exit', code: 1 } satisfies ToWorkerHost<never>);
    await within(this.exited, graceMs);
    await this.worker.terminate();
    await this.exited;
  }

  private request(message: (callId: number) => ToWorkerHost<P['placement']>, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.failureReason) return Promise.reject(this.failureReason);
    const callId = this.nextCallId++;
    return new Promise((resolve, reject) => {
      this.calls.set(callId, { resolve, reject });
      this.post(message(callId), transfer);
    });
  }

  private post(msg: ToWorkerHost<P['placement']>, transfer: ArrayBuffer[] = []): void {
    if (this.failureReason) return;
    this.worker.postMessage(msg, transfer);
  }

  private onMessage(msg: FromWorkerHost<ProtocolEvent<P['item'], P['result']>, P['notice'], P['ready']>): void {
    switch (msg.type) {
      case 'events':
        this.emit('events', msg.events);
        for (const m of msg.events) {
          if ('notice' in m) this.emit('notice', m.notice);
          else this.onEvent(m.event);
        }
        break;
      case 'reply': {
        const pending = this.calls.get(msg.callId);
        if (!pending) return;
        this.calls.delete(msg.callId);
        if (msg.ok) pending.resolve(msg.value);
        else pending.reject(deserializeError(msg.error));
        break;
      }
      case 'fatal':
        this.fail(new EngineUnavailableError(`the engine failed: ${msg.error.message}`, { cause: deserializeError(msg.error) }));
        break;
      default:
        break;
    }
  }

  private onEvent(event: ProtocolEvent<P['item'], P['result']>): void {
    const open = this.open.get(event.id);
    if (!open || !open.stream.accept(event)) return;
    if (event.kind !== 'finish' && event.kind !== 'error') this.itemArrived(event.id);
    if (open.stream.done) this.ended(event.id);
  }

  private fail(err: Error): void {
    if (this.failureReason) return;
    this.failureReason = err;
    for (const id of [...this.open.keys()]) this.ended(id, err);
    for (const pending of this.calls.values()) pending.reject(err);
    this.calls.clear();
    if (!this.closing) this.emit('crash', err);
  }
}

/** Waits for `promise`, at most `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
