/**
 * Typed errors of @tessera/cluster, on @tessera/core's TesseraError: each has a kind (what a caller acts on) and a
 * stable `code`, and is registered so it crosses a thread or Redis as itself.
 */
import {
  RemoteError as CoreRemoteError,
  deserializeError as coreDeserializeError,
  type ErrorField,
  type ErrorKind,
  registerErrors,
  type SerializedError as CoreSerializedError,
  serializeError as coreSerializeError,
  TesseraError,
  type TesseraErrorOptions,
} from '@tessera/core';

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
 * An error as a host event carries it: @tessera/core's SerializedError (class name, kind, code, fields) plus the
 * adapter it names, if any, at the top level (what the host protocol's older readers look at).
 */
export type HostSerializedError = CoreSerializedError & { adapter: string | null };

/** @tessera/core's serializeError, plus `adapter` at the top level. */
export function serializeError(err: unknown): HostSerializedError {
  const s = coreSerializeError(err);
  const adapter = s.fields['adapter'];
  return { ...s, adapter: typeof adapter === 'string' ? adapter : null };
}

/** The legacy transport shape (name, message, code, adapter) or core's; both rebuild. */
type AnySerializedError = { name: string; message: string; code: string | null; adapter?: string | null } & Partial<
  Pick<CoreSerializedError, 'kind' | 'fields' | 'stack'>
>;

/**
 * An error from another thread or process whose class this side has not loaded: same name, kind, code and
 * fields (core's RemoteError), with the adapter it names at the top level.
 */
export class RemoteError extends CoreRemoteError {
  readonly adapter: string | null;
  constructor(serialized: AnySerializedError) {
    const fields: Record<string, ErrorField> = { ...(serialized.fields ?? {}) };
    if (typeof serialized.adapter === 'string' && fields['adapter'] === undefined) fields['adapter'] = serialized.adapter;
    super({
      name: serialized.name,
      message: serialized.message,
      kind: serialized.kind ?? 'internal',
      code: serialized.code,
      fields,
      ...(serialized.stack === undefined ? {} : { stack: serialized.stack }),
    });
    const adapter = fields['adapter'];
    this.adapter = typeof adapter === 'string' ? adapter : null;
  }
}

/**
 * Rebuilds a host event's error: an instance of its registered class when this side loaded it (core's
 * deserializeError), else a {@link RemoteError} with the same name, kind, code and fields.
 */
export function deserializeError(serialized: AnySerializedError): Error {
  if (serialized.kind !== undefined && serialized.fields !== undefined) {
    const err = coreDeserializeError(serialized as CoreSerializedError);
    if (!(err instanceof CoreRemoteError)) return err;
  }
  return new RemoteError(serialized);
}
