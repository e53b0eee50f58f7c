/**
 * EventStream: one request's events on the host protocol as its client sees them, whatever carried them (a
 * worker thread, Redis streams, a function call). Hosts may deliver at least once and a request may run on
 * several hosts in turn (migration, a lost host), so the stream applies three rules:
 *
 *   1. attempts only move forward: an event of an attempt older than the newest one seen is dropped
 *      (a fence, e.g. the scheduler's `placed` marker, moves the attempt before the new placement starts);
 *   2. an item is delivered only if its index is the next expected one (index < next: a duplicate, dropped);
 *   3. the first finish or error of the current attempt ends the stream; nothing follows it.
 *
 * So the client gets every item once, in order, with no gap. Errors arrive serialized and are rebuilt with core's
 * deserializeError (the registered class, or a RemoteError keeping kind, code and fields).
 */
import { deserializeError, type SerializedError } from '@tessera/core';

import type { FinishedResult, ItemEvent, ProtocolEvent, RequestEventBase, StreamEvent, TokenEvent } from '../types.js';

/** An item as the client receives it: the event without its routing fields, `kind` as `type`. */
export type DeliveredItem<Item extends ItemEvent> = Item extends unknown ? { type: Item['kind'] } & Omit<Item, 'kind' | 'id' | 'attempt'> : never;

/** What a client reads from an EventStream: items in order, then one finish or error. */
export type StreamOutput<Item extends ItemEvent, Result> = DeliveredItem<Item> | { type: 'finish'; result: Result } | { type: 'error'; error: Error };

/** `Other` are further events the stream accepts that only move the attempt forward (a fence, an eviction). */
export class EventStream<Item extends ItemEvent, Result, Other extends RequestEventBase = never> implements AsyncIterable<StreamOutput<Item, Result>> {
  readonly id: string;
  private currentAttempt = -1;
  private readonly received: DeliveredItem<Item>[] = [];
  private readonly queue: StreamOutput<Item, Result>[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  private ending: { type: 'finish'; result: Result } | { type: 'error'; error: Error } | null = null;
  private readonly revive: (error: SerializedError) => Error;
  private readonly observers: ((output: StreamOutput<Item, Result>) => void)[] = [];
  /** Events dropped by rules 1 and 2 (duplicates and superseded attempts), for tests and metrics. */
  dropped = 0;

  constructor(id: string, options: { revive?: (error: SerializedError) => Error } = {}) {
    this.id = id;
    this.revive = options.revive ?? deserializeError;
  }

  /** The newest attempt seen (-1 before any). */
  get attempt(): number {
    return this.currentAttempt;
  }

  /** The items delivered so far, in order. */
  get items(): readonly DeliveredItem<Item>[] {
    return this.received;
  }

  /** True once the finish or error is queued. */
  get done(): boolean {
    return this.ended;
  }

  /** The finish or error that ended the stream (null while open). */
  get outcome(): { type: 'finish'; result: Result } | { type: 'error'; error: Error } | null {
    return this.ending;
  }

  /**
   * Applies one event; true if it produced output. Events of other kinds than item / finish / error (a fence, an
   * eviction) only move the attempt forward.
   */
  accept(event: ProtocolEvent<Item, Result> | Other): boolean {
    if (this.ended || event.id !== this.id) return this.drop();
    if (event.attempt < this.currentAttempt) return this.drop();
    this.currentAttempt = event.attempt;
    const kind = (event as { kind: string }).kind;
    if (kind === 'finish') {
      this.push({ type: 'finish', result: (event as { result: Result }).result });
      return true;
    }
    if (kind === 'error') {
      this.push({ type: 'error', error: this.revive((event as { error: SerializedError }).error) });
      return true;
    }
    if (!('index' in event) || typeof event.index !== 'number') return false;
    if (event.index !== this.received.length) return this.drop();
    const { kind: type, id: _id, attempt: _attempt, ...rest } = event as Item;
    const item = { type, ...rest } as DeliveredItem<Item>;
    this.received.push(item);
    this.push(item);
    return true;
  }

  /** Ends the stream with an error from this side (the engine went away, the request was refused). */
  fail(error: Error): void {
    this.push({ type: 'error', error });
  }

  /** Ends the stream with a result from this side (a cancellation answered locally). */
  finish(result: Result): void {
    this.push({ type: 'finish', result });
  }

  /** Calls `observer` with every output from now on, as it is queued (metrics, tracing); earlier ones are not replayed. */
  observe(observer: (output: StreamOutput<Item, Result>) => void): void {
    this.observers.push(observer);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<StreamOutput<Item, Result>> {
    for (;;) {
      const next = this.queue.shift();
      if (next) {
        yield next;
        if (next.type === 'finish' || next.type === 'error') return;
        continue;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Consumes the stream; resolves with the result, rejects with the request's error. */
  async result(): Promise<Result> {
    for await (const ev of this) {
      if (ev.type === 'finish') return (ev as { result: Result }).result;
      if (ev.type === 'error') throw (ev as { error: Error }).error;
    }
    throw new Error(`request ${this.id}: the stream ended without a result`);
  }

  private drop(): false {
    this.dropped++;
    return false;
  }

  private push(event: StreamOutput<Item, Result>): void {
    if (this.ended) return;
    if (event.type === 'finish' || event.type === 'error') {
      this.ended = true;
      this.ending = event as { type: 'finish'; result: Result } | { type: 'error'; error: Error };
    }
    this.queue.push(event);
    for (const observer of this.observers) observer(event);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

/** Punica's stream: tokens, then the FinishedResult. */
export type TokenStream = EventStream<TokenEvent, FinishedResult, StreamEvent>;
