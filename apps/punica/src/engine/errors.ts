/**
 * Errors the engine client raises on the HTTP side. A failure inside the worker arrives as an
 * {@link EngineError} that keeps the original class name and typed-error code (e.g. `UnknownAdapterError`,
 * `TESSERA_CONFIG`), so the routes can map it to an HTTP status without parsing messages.
 */
import type { SerializedError } from './protocol.js';

/** A request or admin call failed inside the engine worker. */
export class EngineError extends Error {
  /** The typed error code of the original error (`TESSERA_*`), or null for an untyped failure. */
  readonly code: string | null;
  /** The adapter the original error names, if any. */
  readonly adapter: string | null;
  /** The original error's class name. */
  readonly remoteName: string;

  constructor(error: SerializedError) {
    super(error.message);
    this.name = 'EngineError';
    this.code = error.code;
    this.adapter = error.adapter;
    this.remoteName = error.name;
  }
}

/** The engine worker is not running (it crashed, failed to start, or was shut down). */
export class EngineUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EngineUnavailableError';
  }
}
