/**
 * Typed errors for every Tessera package, and their trip across a worker thread or Redis.
 *
 * Each error has a `kind` (what went wrong, in the terms a caller acts on: a bad request, a missing thing, a full
 * store, a busy engine) and a stable `code` (which error exactly, for programs and logs). Servers map `kind` to an
 * HTTP status in one place (server-kit); libraries never think about HTTP.
 *
 * A class states its kind once, as a static field, so a test can walk every exported class and check its mapping
 * without constructing it:
 *
 *   export class TaskNotFoundError extends TesseraError {
 *     static override readonly kind = 'not_found';
 *     constructor(readonly taskId: string) { super('TESSERA_TASK_NOT_FOUND', `no task "${taskId}"`); }
 *   }
 *   registerErrors(TaskNotFoundError);
 *
 * `serializeError` keeps the class name, kind, code, message and the error's own JSON-safe fields (`taskId`
 * above); `deserializeError` rebuilds an instance of the registered class (so `instanceof` holds on the far side)
 * or, for a class this side never loaded, a {@link RemoteError} with the same kind, code and fields.
 */

/** What went wrong, in the terms a caller acts on. */
export type ErrorKind =
  /** The request or argument is wrong; retrying it unchanged fails again. */
  | 'invalid'
  /** A named thing (adapter, task, model, sequence) does not exist. */
  | 'not_found'
  /** The thing exists but is in a state that forbids the call (already registered, in use, being loaded). */
  | 'conflict'
  /** A store or budget is full (device bytes, KV pages, registered tenants). */
  | 'capacity'
  /** Something this call needs is not answering or is busy (an engine worker, Redis); a retry may succeed. */
  | 'unavailable'
  /** A bug or an unexpected failure. */
  | 'internal';

export const ERROR_KINDS: readonly ErrorKind[] = ['invalid', 'not_found', 'conflict', 'capacity', 'unavailable', 'internal'];

export interface TesseraErrorOptions {
  cause?: unknown;
  /** Overrides the class's kind for this instance (e.g. a capacity error that is transient here: 'unavailable'). */
  kind?: ErrorKind;
}

export class TesseraError extends Error {
  /** The kind of every instance of this class, unless the constructor was given another. */
  static readonly kind: ErrorKind = 'internal';
  readonly kind: ErrorKind;
  readonly code: string;

  constructor(code: string, message: string, options?: TesseraErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.kind = options?.kind ?? (new.target as typeof TesseraError).kind;
  }
}

/** A JSON value that survives structured clone and JSON alike. */
export type ErrorField = string | number | boolean | null | readonly ErrorField[] | { readonly [key: string]: ErrorField };

/** An error flattened for postMessage or a Redis payload. */
export interface SerializedError {
  name: string;
  message: string;
  kind: ErrorKind;
  /** The stable code, or null for an error that is not a TesseraError and carried none. */
  code: string | null;
  /** The error's own fields (e.g. `adapter`, `taskId`, `budgetBytes`), JSON-safe ones only. */
  fields: Record<string, ErrorField>;
  stack?: string;
}

type ErrorClass = abstract new (...args: never[]) => Error;

const registry = new Map<string, ErrorClass>();

/**
 * Makes classes rebuildable by {@link deserializeError}. Each package registers its error classes where it defines
 * them; a name registered twice by different classes is a bug and throws.
 */
export function registerErrors(...classes: ErrorClass[]): void {
  for (const cls of classes) {
    const prior = registry.get(cls.name);
    if (prior !== undefined && prior !== cls) throw new Error(`registerErrors: two error classes are named ${cls.name}`);
    registry.set(cls.name, cls);
  }
}

/** The registered class of that name, if any (for tests and diagnostics). */
export function registeredError(name: string): ErrorClass | undefined {
  return registry.get(name);
}

const RESERVED = new Set(['name', 'message', 'stack', 'cause', 'kind', 'code']);

function toField(value: unknown, depth: number): ErrorField | undefined {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : undefined;
  if (depth >= 3) return undefined;
  if (Array.isArray(value)) {
    const out: ErrorField[] = [];
    for (const v of value) {
      const f = toField(v, depth + 1);
      if (f === undefined) return undefined;
      out.push(f);
    }
    return out;
  }
  if (typeof value === 'object' && Object.getPrototypeOf(value) === Object.prototype) {
    const out: Record<string, ErrorField> = {};
    for (const [k, v] of Object.entries(value)) {
      const f = toField(v, depth + 1);
      if (f !== undefined) out[k] = f;
    }
    return out;
  }
  return undefined;
}

/** The kind of any thrown value: a TesseraError's own, a RemoteError's carried one, else 'internal'. */
export function errorKind(err: unknown): ErrorKind {
  if (err instanceof TesseraError) return err.kind;
  return 'internal';
}

export function serializeError(err: unknown): SerializedError {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err), kind: 'internal', code: null, fields: {} };
  const fields: Record<string, ErrorField> = err instanceof RemoteError ? { ...err.fields } : {};
  if (!(err instanceof RemoteError)) for (const [key, value] of Object.entries(err)) {
    if (RESERVED.has(key)) continue;
    const f = toField(value, 0);
    if (f !== undefined) fields[key] = f;
  }
  const name = err instanceof RemoteError ? err.remoteName : err.name;
  const code = (err as { code?: unknown }).code;
  return {
    name,
    message: err.message,
    kind: errorKind(err),
    code: typeof code === 'string' ? code : null,
    fields,
    ...(err.stack === undefined ? {} : { stack: err.stack }),
  };
}

/**
 * Rebuilds an error serialized on the far side of a thread or Redis. A registered class gets an instance of itself
 * (made without running its constructor, whose arguments differ from class to class) with every field restored;
 * anything else becomes a {@link RemoteError} that keeps the name, kind, code and fields.
 */
export function deserializeError(s: SerializedError): Error {
  const cls = registry.get(s.name);
  if (cls === undefined) return new RemoteError(s);
  const err = Object.create(cls.prototype as object) as Error & Record<string, unknown>;
  const define = (key: string, value: unknown): void => {
    Object.defineProperty(err, key, { value, writable: true, configurable: true, enumerable: key !== 'message' && key !== 'stack' });
  };
  define('message', s.message);
  if (s.stack !== undefined) define('stack', s.stack);
  if (cls.prototype instanceof TesseraError || (cls as unknown) === TesseraError) {
    define('name', s.name);
    define('kind', s.kind);
    define('code', s.code ?? 'TESSERA_REMOTE_ERROR');
  } else if (s.code !== null) {
    define('code', s.code);
  }
  for (const [key, value] of Object.entries(s.fields)) define(key, value);
  return err;
}

/** An error from another thread or process whose class this side has not loaded: same kind, code and fields. */
export class RemoteError extends TesseraError {
  /** The class name on the side that threw it. */
  readonly remoteName: string;
  readonly fields: Record<string, ErrorField>;

  constructor(s: SerializedError) {
    super(s.code ?? 'TESSERA_REMOTE_ERROR', s.message, { kind: s.kind });
    this.remoteName = s.name;
    this.fields = s.fields;
    if (s.stack !== undefined) this.stack = s.stack;
  }
}

/** A bad argument or option: the message says which and why. */
export class InvalidArgumentError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: TesseraErrorOptions) {
    super('TESSERA_INVALID_ARGUMENT', message, options);
  }
}

registerErrors(TesseraError, RemoteError, InvalidArgumentError);
