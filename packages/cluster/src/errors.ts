/** Typed errors of @tessera/cluster: each has a stable `code` for callers and HTTP layers to map. */
import { RemoteError as CoreRemoteError } from '@tessera/core';

export class ClusterError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'ClusterError';
    this.code = code;
  }
}

/** A bad option or argument (a programming or configuration error). */
export class ClusterArgumentError extends ClusterError {
  constructor(message: string, options?: ErrorOptions) {
    super('TESSERA_CLUSTER_INVALID_ARGUMENT', message, options);
    this.name = 'ClusterArgumentError';
  }
}

/** Redis did not answer at start-up (fail fast), or a call needed it and it stayed away past the deadline. */
export class RedisUnavailableError extends ClusterError {
  readonly url: string;
  constructor(url: string, message: string, options?: ErrorOptions) {
    super('TESSERA_REDIS_UNAVAILABLE', message, options);
    this.name = 'RedisUnavailableError';
    this.url = url;
  }
}

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
export { serializeError } from '@tessera/core';
