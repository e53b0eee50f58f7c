/**
 * InProcessEngineHost: the embedded {@link EngineHost}. The scheduler's add/cancel are direct calls into a
 * {@link HostEngine} in this process, and the engine's events go straight to a sink; no Redis involved.
 * Placements are idempotent: a repeated (id, attempt) or an older attempt is ignored.
 */
import { serializeError } from '../errors.js';
import type { EngineHost, HostEngine, HostEvent, HostLoad, Placement } from '../types.js';

export class InProcessEngineHost implements EngineHost {
  readonly id: string;
  readonly engine: HostEngine;
  private readonly sink: (hostId: string, event: HostEvent) => void;
  /** The newest attempt this host was given, per request id (what makes add idempotent). */
  private readonly attempts = new Map<string, number>();

  constructor(id: string, engine: HostEngine, sink: (hostId: string, event: HostEvent) => void) {
    this.id = id;
    this.engine = engine;
    this.sink = sink;
  }

  add(placement: Placement): void {
    const { id } = placement.request;
    const seen = this.attempts.get(id);
    if (seen !== undefined && seen >= placement.attempt) return;
    this.attempts.set(id, placement.attempt);
    const emit = (event: HostEvent) => {
      if (event.kind !== 'token' && this.attempts.get(id) === event.attempt) this.attempts.delete(id);
      this.sink(this.id, event);
    };
    try {
      this.engine.submit(placement, emit);
    } catch (err) {
      // A request this engine cannot take (bad tokens, unknown adapter): the client gets the typed error.
      emit({ kind: 'error', id, attempt: placement.attempt, error: serializeError(err) });
    }
  }

  cancel(id: string, attempt: number): void {
    if (this.attempts.get(id) !== attempt) return;
    this.engine.cancel(id);
  }

  load(): HostLoad {
    return { hostId: this.id, ...this.engine.load() };
  }
}
