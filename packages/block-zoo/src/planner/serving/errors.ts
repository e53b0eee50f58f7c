/**
 * The serving core's typed errors. Each names the bad value; a server maps the kind to a status (invalid → 400,
 * not_found → 404, conflict → 409, capacity → 507).
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** An argument the policy cannot accept: a negative size, an unknown option, a malformed plan. */
export class ServingInvalidError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string) {
    super('TESSERA_SERVING_INVALID', message);
  }
}

/** A request, instance, device, tag or KV entry the policy does not know. */
export class ServingNotFoundError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  readonly what: 'request' | 'instance' | 'device' | 'block' | 'kv' | 'tag' | 'plan';
  readonly ref: string;
  constructor(what: ServingNotFoundError['what'], ref: string, message?: string) {
    super('TESSERA_SERVING_NOT_FOUND', message ?? `no ${what} ${JSON.stringify(ref)}`);
    this.what = what;
    this.ref = ref;
  }
}

/** The call is out of order for the object's state (a second plan while a batch runs, a duplicate request). */
export class ServingStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(message: string) {
    super('TESSERA_SERVING_STATE', message);
  }
}

/** Something cannot fit at all: a request larger than an instance's memory bound, a block larger than every device. */
export class ServingCapacityError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  readonly needBytes: number;
  readonly limitBytes: number;
  constructor(needBytes: number, limitBytes: number, message: string) {
    super('TESSERA_SERVING_CAPACITY', message);
    this.needBytes = needBytes;
    this.limitBytes = limitBytes;
  }
}

registerErrors(ServingInvalidError, ServingNotFoundError, ServingStateError, ServingCapacityError);

/** Throws unless `value` is a finite number ≥ 0. */
export function checkNonNegative(value: number, what: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) throw new ServingInvalidError(`${what} must be a finite number ≥ 0, got ${value}`);
  return value;
}

/** Throws unless `value` is a finite number > 0. */
export function checkPositive(value: number, what: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw new ServingInvalidError(`${what} must be a finite number > 0, got ${value}`);
  return value;
}

/** Throws unless `value` is an integer ≥ min. */
export function checkInteger(value: number, what: string, min = 0): number {
  if (!Number.isSafeInteger(value) || value < min) throw new ServingInvalidError(`${what} must be an integer ≥ ${min}, got ${value}`);
  return value;
}
