/** Typed errors of @tessera/sim, on @tessera/core's TesseraError: each has a kind and a stable `code`. */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** A bad option or argument (a programming or configuration error). */
export class SimArgumentError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_SIM_INVALID_ARGUMENT', message, options);
  }
}

/** A least-squares fit has too few samples, or samples that do not determine the coefficients. */
export class LatencyFitError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_SIM_LATENCY_FIT', message, options);
  }
}

/** An event was scheduled before the virtual clock's present. */
export class EventOrderError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_SIM_EVENT_IN_THE_PAST', message, options);
  }
}

registerErrors(SimArgumentError, LatencyFitError, EventOrderError);
