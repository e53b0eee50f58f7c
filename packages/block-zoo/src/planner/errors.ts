/**
 * The zoo's typed errors. Each names the bad value in its message and carries it in a field, so a server can map
 * them to statuses without parsing text (unknown → 404, conflict → 409, invalid → 400, capacity → 507).
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** A tensor id, block id, model or application the zoo does not hold. */
export class ZooNotFoundError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  readonly what: 'tensor' | 'block' | 'model' | 'application' | 'segment';
  readonly ref: string;
  constructor(what: ZooNotFoundError['what'], ref: string, message?: string) {
    super('TESSERA_ZOO_NOT_FOUND', message ?? `the zoo holds no ${what} ${JSON.stringify(ref)}`);
    this.what = what;
    this.ref = ref;
  }
}

/** A description the zoo cannot accept: a bad shape, a tensor outside the architecture, an out-of-range span, … */
export class ZooInvalidError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string) {
    super('TESSERA_ZOO_INVALID', message);
  }
}

/** A name is already taken by something else, or an entity is in use and cannot change now. */
export class ZooConflictError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  readonly ref: string;
  constructor(ref: string, message: string) {
    super('TESSERA_ZOO_CONFLICT', message);
    this.ref = ref;
  }
}

/** Bytes do not hash to the id they were stored under (a corrupt store), or two sides disagree on a tensor. */
export class ZooIntegrityError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  readonly ref: string;
  constructor(ref: string, message: string) {
    super('TESSERA_ZOO_INTEGRITY', message);
    this.ref = ref;
  }
}

/** Loading a block would exceed the device byte budget. Nothing was loaded. */
export class ZooBudgetError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  readonly needBytes: number;
  readonly freeBytes: number;
  constructor(needBytes: number, freeBytes: number, message: string) {
    super('TESSERA_ZOO_BUDGET', message);
    this.needBytes = needBytes;
    this.freeBytes = freeBytes;
  }
}

registerErrors(ZooNotFoundError, ZooInvalidError, ZooConflictError, ZooIntegrityError, ZooBudgetError);
