/**
 * EngineHost: the one interface a server's routes talk to, whatever carries the host protocol. A request is
 * submitted with its idempotent id and comes back as one ordered {@link EventStream} (items by absolute index,
 * then one finish or error); `cancel(id)` drops it; named admin calls answer with the engine's typed errors.
 *
 *   WorkerEngineClient   the engine in a worker thread of this process (serveWorkerHost on the other side)
 *   StreamEngineHost     any transport that already yields EventStreams: Redis/BullMQ (@tessera/cluster's
 *                        connectClusterClient), an in-process engine, a test double
 *
 * So a front end does not know which one it talks to (ARCHITECTURE decision 3).
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';

import type { AdminCalls, AdminHandlers, EventStream, HostPlacement, ItemEvent, StreamOutput } from '@tessera/cluster';
import { InvalidArgumentError } from '@tessera/core';

import { EngineUnavailableError } from '../http/errors.js';

/** The types of one engine's protocol: what is placed, its items and result, its notices, admin calls and ready info. */
export interface EngineProtocol {
  placement: HostPlacement;
  item: ItemEvent;
  result: unknown;
  notice: unknown;
  admin: AdminCalls;
  ready: unknown;
}

export type ProtocolStream<P extends EngineProtocol> = EventStream<P['item'], P['result']>;

/** A request that ended, for metrics (times from performance.now(), ms). */
export interface RequestEnd<P extends EngineProtocol> {
  placement: P['placement'];
  /** Items delivered. */
  items: number;
  result: P['result'] | null;
  error: Error | null;
  submittedAt: number;
  firstItemAt: number | null;
  endedAt: number;
}

export interface EngineHostEvents<P extends EngineProtocol> {
  notice: [P['notice']];
  'request-end': [RequestEnd<P>];
  crash: [Error];
}

/** The front end's side of the host protocol. */
export interface EngineHost<P extends EngineProtocol> {
  /** What the engine reported when it became ready (the model, the start-up adapters or tasks…). */
  readonly ready: P['ready'];
  /** False once the engine crashed or was shut down. */
  readonly healthy: boolean;
  /** Why the engine is unavailable, or null while healthy. */
  readonly failure: Error | null;
  /** Requests submitted and not yet ended. */
  readonly inFlight: number;
  /** Submits a placement; its events arrive on the returned stream. Throws when the engine is down or the id is in flight. */
  submit(placement: P['placement']): ProtocolStream<P>;
  /** Asks the engine to drop a request; its stream ends with the engine's answer (e.g. a cancelled finish). */
  cancel(id: string): void;
  /** An admin call; rejects with the engine's typed error, or EngineUnavailableError. */
  call<K extends keyof P['admin'] & string>(name: K, args: P['admin'][K]['args']): Promise<P['admin'][K]['result']>;
  /** Stops the engine (or disconnects from it); the HTTP layer drains its requests first. */
  close(): Promise<void>;
  on(event: 'notice', listener: (notice: P['notice']) => void): this;
  on(event: 'request-end', listener: (end: RequestEnd<P>) => void): this;
  on(event: 'crash', listener: (err: Error) => void): this;
}

/** A request in flight, as both front ends track it. */
interface OpenRequest<P extends EngineProtocol> {
  stream: ProtocolStream<P>;
  placement: P['placement'];
  submittedAt: number;
  firstItemAt: number | null;
}

/**
 * What every front end of the host protocol keeps, whatever the transport: the requests in flight (a duplicate id
 * refused), 'request-end' with first-item and end times for metrics, and the failure state behind `healthy`.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- node:events types its event maps with any[]
export abstract class TrackedEngineHost<P extends EngineProtocol, E extends EngineHostEvents<P> & Record<keyof E, any[]> = EngineHostEvents<P>> extends EventEmitter<E> {
  protected readonly open = new Map<string, OpenRequest<P>>();
  protected failureReason: Error | null = null;

  /** False once the engine crashed or was shut down. */
  get healthy(): boolean {
    return this.failureReason === null;
  }

  /** Why the engine is unavailable, or null while healthy. */
  get failure(): Error | null {
    return this.failureReason;
  }

  /** Requests submitted and not yet ended. */
  get inFlight(): number {
    return this.open.size;
  }

  /** Refuses a submit while the engine is down or the id is in flight. */
  protected checkSubmit(placement: P['placement']): void {
    if (this.failureReason) throw this.failureReason;
    const { id } = placement.request;
    if (this.open.has(id)) throw new InvalidArgumentError(`request id ${id} is already in flight`);
  }

  protected track(placement: P['placement'], stream: ProtocolStream<P>): void {
    this.open.set(placement.request.id, { stream, placement, submittedAt: performance.now(), firstItemAt: null });
  }

  protected itemArrived(id: string): void {
    const open = this.open.get(id);
    if (open) open.firstItemAt ??= performance.now();
  }

  /** Ends a tracked request (failing its stream with `error` when given) and reports it. */
  protected ended(id: string, error?: Error): void {
    const open = this.open.get(id);
    if (!open) return;
    this.open.delete(id);
    if (error) open.stream.fail(error);
    const outcome = open.stream.outcome;
    const end: RequestEnd<P> = {
      placement: open.placement,
      items: open.stream.items.length,
      result: outcome?.type === 'finish' ? outcome.result : null,
      error: outcome?.type === 'error' ? outcome.error : null,
      submittedAt: open.submittedAt,
      firstItemAt: open.firstItemAt,
      endedAt: performance.now(),
    };
    (this as EventEmitter<EngineHostEvents<P>>).emit('request-end', end);
  }
}

/** What {@link StreamEngineHost} needs of a transport. */
export interface StreamTransport<P extends EngineProtocol> {
  ready: P['ready'];
  /** Sends the placement; the transport feeds the returned stream. */
  open(placement: P['placement']): ProtocolStream<P>;
  cancel(id: string): void;
  admin: AdminHandlers<P['admin']>;
  close(): Promise<void>;
}

/**
 * Tracks the request streams of a transport that yields them: in-flight requests, 'request-end' for metrics (first
 * item, end), duplicate ids refused, `healthy` until closed. Errors of the streams are the transport's (rebuilt
 * typed errors, e.g. RedisUnavailableError).
 */
export class StreamEngineHost<P extends EngineProtocol> extends TrackedEngineHost<P> implements EngineHost<P> {
  constructor(private readonly transport: StreamTransport<P>) {
    super();
  }

  get ready(): P['ready'] {
    return this.transport.ready;
  }

  submit(placement: P['placement']): ProtocolStream<P> {
    this.checkSubmit(placement);
    const stream = this.transport.open(placement);
    const { id } = placement.request;
    this.track(placement, stream);
    stream.observe((output: StreamOutput<P['item'], P['result']>) => {
      if (output.type === 'finish' || output.type === 'error') this.ended(id);
      else this.itemArrived(id);
    });
    return stream;
  }

  cancel(id: string): void {
    if (this.open.has(id)) this.transport.cancel(id);
  }

  async call<K extends keyof P['admin'] & string>(name: K, args: P['admin'][K]['args']): Promise<P['admin'][K]['result']> {
    if (this.failureReason) throw this.failureReason;
    const handler = this.transport.admin[name];
    if (!handler) throw new InvalidArgumentError(`no admin call named ${JSON.stringify(name)}`);
    return handler(args);
  }

  async close(): Promise<void> {
    if (this.failureReason) return;
    this.failureReason = new EngineUnavailableError('the engine was shut down');
    await this.transport.close();
  }
}
