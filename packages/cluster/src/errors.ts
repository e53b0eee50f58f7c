/** Typed errors of @tessera/cluster: each has a stable `code` for callers and HTTP layers to map. */

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

/** An error that crossed a process or thread boundary, rebuilt with its name, code and adapter. */
export class RemoteError extends ClusterError {
  readonly remoteName: string;
  readonly adapter: string | null;
  constructor(serialized: { name: string; message: string; code: string | null; adapter: string | null }) {
    super(serialized.code ?? 'TESSERA_REMOTE_ERROR', serialized.message);
    this.name = 'RemoteError';
    this.remoteName = serialized.name;
    this.adapter = serialized.adapter;
  }
}

export function serializeError(err: unknown): { name: string; message: string; code: string | null; adapter: string | null } {
  if (err instanceof Error) {
    const e = err as Error & { code?: unknown; adapter?: unknown; remoteName?: unknown };
    return {
      name: typeof e.remoteName === 'string' ? e.remoteName : e.name,
      message: e.message,
      code: typeof e.code === 'string' ? e.code : null,
      adapter: typeof e.adapter === 'string' ? e.adapter : null,
    };
  }
  return { name: 'Error', message: String(err), code: null, adapter: null };
}
