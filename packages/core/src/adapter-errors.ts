/**
 * Adapter errors every layer shares: the engine's deltas, the adapter cache, the scheduler and the servers all
 * speak of the same two failures, so each is one class (one `instanceof`, one code, one HTTP status).
 */
import { type ErrorKind, registerErrors, TesseraError } from './errors.js';

/**
 * A tenant/adapter name nobody registered or loaded: a SegmentLayout key a delta cannot resolve, a name an adapter
 * cache does not know. One class for every package, so servers map it to one 404 (never a silent base model).
 */
export class UnknownAdapterError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  readonly adapter: string;
  constructor(adapter: string, message = `unknown adapter ${JSON.stringify(adapter)}`, options?: { cause?: unknown }) {
    super('TESSERA_UNKNOWN_ADAPTER', message, options);
    this.adapter = adapter;
  }
}

/**
 * An adapter could not be made resident: a scheduler fails the requests waiting for it with this (`cause` is the
 * loader's error), and the adapter cache wraps a source failure that was not an Error of its own.
 */
export class AdapterLoadError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  readonly adapter: string;
  constructor(adapter: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_ADAPTER_LOAD_FAILED', message, options);
    this.adapter = adapter;
  }
}

registerErrors(UnknownAdapterError, AdapterLoadError);
