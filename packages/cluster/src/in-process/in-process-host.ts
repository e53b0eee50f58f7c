/**
 * InProcessEngineHost: an {@link EngineHost} that calls a {@link HostEngine} in this process, its events going
 * straight to a sink. It is the embedded host, and the core of a distributed host worker too (which feeds it from
 * its BullMQ queue and sinks events into Redis).
 *
 * Placements are idempotent, since jobs may be delivered more than once: an 'add' at or below the newest attempt
 * this host was given for that request is ignored (a redelivery, or a superseded placement arriving late), and a
 * newer attempt of a request still running here replaces it (the host was given up for lost, then came back).
 */
import { serializeError } from '../errors.js';
import type { EngineHost, HostEngine, HostEvent, HostLoad, Placement } from '../types.js';

/** Newest attempts remembered per request id for idempotency (oldest forgotten first). */
const REMEMBERED_REQUESTS = 100_000;

export class InProcessEngineHost implements EngineHost {
  readonly id: string;
  readonly engine: HostEngine;
  private readonly sink: (hostId: string, event: HostEvent) => void;
  /** Placements the engine holds: request id → attempt. */
  private readonly held = new Map<string, number>();
  /** Newest attempt given per request id, held or not (insertion order = age, for the bound). */
  private readonly given = new Map<string, number>();

  constructor(id: string, engine: HostEngine, sink: (hostId: string, event: HostEvent) => void) {
    this.id = id;
    this.engine = engine;
    this.sink = sink;
  }

  add(placement: Placement): void {
    const { id } = placement.request;
    const { attempt } = placement;
    const seen = this.given.get(id);
    if (seen !== undefined && seen >= attempt) return;
    this.given.delete(id);
    this.given.set(id, attempt);
    if (this.given.size > REMEMBERED_REQUESTS) this.given.delete(this.given.keys().next().value!);
    if (this.held.has(id)) this.engine.cancel(id);
    this.held.set(id, attempt);
    const emit = (event: HostEvent) => {
      if (event.kind !== 'token' && this.held.get(id) === event.attempt) this.held.delete(id);
      this.sink(this.id, event);
    };
    try {
      this.engine.submit(placement, emit);
    } catch (err) {
      // A request this engine cannot take (bad tokens, unknown adapter): the client gets the typed error.
      emit({ kind: 'error', id, attempt, error: serializeError(err) });
    }
  }

  cancel(id: string, attempt: number): void {
    if (this.held.get(id) !== attempt) return;
    this.engine.cancel(id);
  }

  /** Cancels every placement the engine holds (the host is leaving; the scheduler re-places them). */
  cancelAll(): void {
    for (const id of [...this.held.keys()]) this.engine.cancel(id);
    this.held.clear();
  }

  load(): HostLoad {
    return { hostId: this.id, ...this.engine.load() };
  }
}
