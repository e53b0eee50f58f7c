/**
 * Typed errors of @tessera/cluster, on @tessera/core's TesseraError: each has a kind (what a caller acts on) and a
 * stable `code`, and is registered so it crosses a thread or Redis as itself.
 */
import { RemoteError as CoreRemoteError, type ErrorKind, registerErrors, TesseraError, type TesseraErrorOptions } from '@tessera/core';

export class ClusterError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(code: string, message: string, options?: TesseraErrorOptions) {
    super(code, message, options);
  }
}

/** A bad option or argument (a programming or configuration error). */
export class ClusterArgumentError extends ClusterError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: TesseraErrorOptions) {
    super('TESSERA_CLUSTER_INVALID_ARGUMENT', message, options);
  }
}

/** Redis did not answer at start-up (fail fast), or a call needed it and it stayed away past the deadline. */
export class RedisUnavailableError extends ClusterError {
  static override readonly kind: ErrorKind = 'unavailable';
  readonly url: string;
  constructor(url: string, message: string, options?: TesseraErrorOptions) {
    super('TESSERA_REDIS_UNAVAILABLE', message, options);
    this.url = url;
  }
}

registerErrors(ClusterError, ClusterArgumentError, RedisUnavailableError);

/**
 * An error that crossed a process or thread boundary and whose class this side has not loaded: core's RemoteError
 * (same kind, code and fields), with the adapter it names, if any.
 */
export class RemoteError extends CoreRemoteError {
  get adapter(): string | null {
    const a = this.fields['adapter'];
    return typeof a === 'string' ? a : null;
  }
}

/** Errors cross as core's serialized form (class name, kind, code, own fields). */
export { deserializeError, serializeError } from '@tessera/core';
