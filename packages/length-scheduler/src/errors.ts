/**
 * Typed errors of @tessera/length-scheduler, on @tessera/core's TesseraError: each has a kind and a stable `code`.
 * Overload is not an error here: the allocation relaxes its lower bounds and reports `overloaded: true` (arlo.md
 * §6.2), and the dispatcher sends a request to its ideal runtime when every candidate is congested (Algorithm 1).
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** A bad option or argument: the message names the value and why it is wrong. */
export class LengthSchedulerArgumentError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_LENGTH_SCHEDULER_INVALID_ARGUMENT', message, options);
  }
}

/** A request is longer than the longest runtime and the policy is to reject such requests (not to truncate). */
export class RequestTooLongError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly length: number,
    readonly maxLength: number,
  ) {
    super('TESSERA_REQUEST_TOO_LONG', `request of ${length} tokens is longer than the longest runtime (${maxLength})`);
  }
}

/** No serving instance can take the request: every runtime with max length ≥ its length has no active instance. */
export class NoServingInstanceError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(
    readonly length: number,
    message?: string,
  ) {
    super('TESSERA_NO_SERVING_INSTANCE', message ?? `no active instance of any runtime can serve a request of ${length} tokens`);
  }
}

/** An instance id given to the dispatcher is not registered. */
export class UnknownInstanceError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly instanceId: string) {
    super('TESSERA_UNKNOWN_INSTANCE', `no instance "${instanceId}"`);
  }
}

/** The instance exists but its state forbids the call (added twice, completed with nothing outstanding, …). */
export class InstanceStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(
    readonly instanceId: string,
    message: string,
  ) {
    super('TESSERA_INSTANCE_STATE', message);
  }
}

/**
 * The allocation cannot exist at all: fewer than one instance to allocate (the longest runtime needs one, Eq. 7).
 * Lower bounds that exceed the instances are not this error: they are relaxed and reported as overload.
 */
export class AllocationInfeasibleError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  constructor(
    readonly instances: number,
    message?: string,
  ) {
    super('TESSERA_ALLOCATION_INFEASIBLE', message ?? `cannot allocate ${instances} instances: the longest runtime needs at least one`);
  }
}

/** A replacement plan cannot keep the required number of instances serving (the floor) while it swaps any. */
export class ReplacementFloorError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  constructor(
    readonly serving: number,
    readonly floor: number,
  ) {
    super('TESSERA_REPLACEMENT_FLOOR', `cannot swap any instance: ${serving} serving instances and a floor of ${floor} leave no room`);
  }
}

registerErrors(
  LengthSchedulerArgumentError,
  RequestTooLongError,
  NoServingInstanceError,
  UnknownInstanceError,
  InstanceStateError,
  AllocationInfeasibleError,
  ReplacementFloorError,
);
