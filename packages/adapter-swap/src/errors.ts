/**
 * The adapter cache's typed errors. Each carries the adapter's name in `adapter` (not `name`: that is the error
 * class's name) and a stable `code`, so a server can map them to HTTP statuses without parsing messages
 * (unknown → 404, exists / in use → 409, invalid name → 400, too large → 413 or 507).
 */
import { AdapterLoadError, type ErrorKind, InvalidArgumentError, registerErrors, TesseraError, UnknownAdapterError } from '@tessera/core';

/** A name that cannot be an adapter's: empty, too long, a path separator, `..`, NUL or another odd character. */
export class InvalidAdapterNameError extends InvalidArgumentError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly adapter: string;
  constructor(adapter: string, message: string) {
    super(message);
    this.adapter = adapter;
  }
}

/**
 * From @tessera/core, one class each across packages: UnknownAdapterError (`adapter` names the unregistered name)
 * and AdapterLoadError (a load failed for a reason the source did not report as an Error of its own: it threw a
 * non-Error value, or reported a byte size that is not a non-negative safe integer; errors the source throws pass
 * through unchanged, so an engine `ConfigError`, `TruncatedFileError`, ... stays itself). A scheduler fails the
 * requests waiting for an adapter whose load was rejected with the same AdapterLoadError.
 */
export { AdapterLoadError, UnknownAdapterError };

/** The name is registered already, with another directory. */
export class AdapterExistsError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  readonly adapter: string;
  readonly dir: string;
  constructor(adapter: string, dir: string, message: string) {
    super('TESSERA_ADAPTER_EXISTS', message);
    this.adapter = adapter;
    this.dir = dir;
  }
}

/** The adapter is pinned (a request is using it), so it cannot be unregistered now. */
export class AdapterInUseError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  readonly adapter: string;
  readonly pins: number;
  constructor(adapter: string, pins: number) {
    super('TESSERA_ADAPTER_IN_USE', `adapter ${JSON.stringify(adapter)} is pinned ${pins} time(s); unpin it before unregistering`);
    this.adapter = adapter;
    this.pins = pins;
  }
}

/** The adapter needs more device bytes than the whole device budget: it can never be resident. */
export class AdapterTooLargeError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  readonly adapter: string;
  readonly bytes: number;
  readonly budgetBytes: number;
  constructor(adapter: string, bytes: number, budgetBytes: number) {
    super('TESSERA_ADAPTER_TOO_LARGE', `adapter ${JSON.stringify(adapter)} needs ${bytes} device bytes but the whole device budget is ${budgetBytes}`);
    this.adapter = adapter;
    this.bytes = bytes;
    this.budgetBytes = budgetBytes;
  }
}

/** pin() of an adapter that is not resident on the device (call ensureResident first). */
export class AdapterNotResidentError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  readonly adapter: string;
  constructor(adapter: string, message: string) {
    super('TESSERA_ADAPTER_NOT_RESIDENT', message);
    this.adapter = adapter;
  }
}

/** unpin() of an adapter whose pin count is already zero. */
export class AdapterNotPinnedError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  readonly adapter: string;
  constructor(adapter: string) {
    super('TESSERA_ADAPTER_NOT_PINNED', `adapter ${JSON.stringify(adapter)} is not pinned (unpin without a matching pin)`);
    this.adapter = adapter;
  }
}

/** The cache was disposed: pending loads reject with this, and so does every later call. */
export class AdapterCacheDisposedError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(message = 'the adapter cache was disposed') {
    super('TESSERA_ADAPTER_CACHE_DISPOSED', message);
  }
}

registerErrors(InvalidAdapterNameError, AdapterExistsError, AdapterInUseError, AdapterTooLargeError, AdapterNotResidentError, AdapterNotPinnedError, AdapterCacheDisposedError);
