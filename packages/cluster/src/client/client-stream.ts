/**
 * ClientStream: one request's events as its client sees them, whatever path they took. Hosts deliver at least
 * once and a request may run on several hosts in turn (migration, a lost host), so the stream applies three rules:
 *
 *   1. attempts only move forward: an event of an attempt older than the newest one seen is dropped
 *      (a `placed` marker written by the scheduler fences the old attempt before the new one starts);
 *   2. a token is delivered only if its index is the next expected one (index < next: a duplicate, dropped);
 *   3. the first finish or error of the current attempt ends the stream; nothing follows it.
 *
 * So the client gets every token once, in order, with no gap, whether it came from the first host or the third.
 */
import { RemoteError } from '../errors.js';
import type { FinishedResult, StreamEvent } from '../types.js';

export type ClientEvent =
  | { type: 'token'; index: number; token: number; text: string }
  | { type: 'finish'; result: FinishedResult }
  | { type: 'error'; error: Error };

export class ClientStream implements AsyncIterable<ClientEvent> {
  readonly id: string;
  private currentAttempt = -1;
  private readonly tokens: number[] = [];
  private readonly queue: ClientEvent[] = [];
  private wake: (() => void) | null = null;
  private ended = false;
  /** Events dropped by rules 1 and 2 (duplicates and superseded attempts), for tests and metrics. */
  dropped = 0;

  constructor(id: string) {
    this.id = id;
  }

  /** The newest attempt seen (-1 before any). */
  get attempt(): number {
    return this.currentAttempt;
  }

  /** The tokens delivered so far, in order: what a new placement must continue after. */
  get delivered(): readonly number[] {
    return this.tokens;
  }

  /** True once the finish or error event is queued. */
  get done(): boolean {
    return this.ended;
  }

  /** Applies one event from a host or the scheduler; true if it produced a client event. */
  accept(event: StreamEvent): boolean {
    if (this.ended || event.id !== this.id) return this.drop();
    if (event.attempt < this.currentAttempt) return this.drop();
    this.currentAttempt = event.attempt;
    switch (event.kind) {
      case 'placed':
      case 'evicted':
        return false;
      case 'token':
        if (event.index !== this.tokens.length) return this.drop();
        this.tokens.push(event.token);
        this.push({ type: 'token', index: event.index, token: event.token, text: event.text });
        return true;
      case 'finish':
        this.push({ type: 'finish', result: event.result });
        return true;
      case 'error':
        this.push({ type: 'error', error: new RemoteError(event.error) });
        return true;
    }
  }

  /** Ends the stream with an error from this side (the cluster closed, the request was refused). */
  fail(error: Error): void {
    this.push({ type: 'error', error });
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ClientEvent> {
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

  /** Consumes the stream; resolves with the finished request, rejects with its error. */
  async result(): Promise<FinishedResult> {
    for await (const ev of this) {
      if (ev.type === 'finish') return ev.result;
      if (ev.type === 'error') throw ev.error;
    }
    throw new Error(`request ${this.id}: the stream ended without a result`);
  }

  private drop(): false {
    this.dropped++;
    return false;
  }

  private push(event: ClientEvent): void {
    if (this.ended) return;
    if (event.type !== 'token') this.ended = true;
    this.queue.push(event);
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}
