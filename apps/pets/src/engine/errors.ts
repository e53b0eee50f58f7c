/**
 * Errors the engine client raises on the HTTP side. A failure inside the worker arrives as an {@link EngineError}
 * that keeps the original class name, typed-error code (e.g. `UnknownTaskError`, `TESSERA_UNKNOWN_TASK`) and
 * details (task, PET type, tensor), so the routes map it to an HTTP status without parsing messages.
 */
import type { ErrorDetails, SerializedError } from './protocol.js';

/** A request or admin call failed inside the engine worker. */
export class EngineError extends Error {
  /** The typed error code of the original error (`TESSERA_*`), or null for an untyped failure. */
  readonly code: string | null;
  /** The original error's class name. */
  readonly remoteName: string;
  readonly details: ErrorDetails;

  constructor(error: SerializedError) {
    super(error.message);
    this.name = 'EngineError';
    this.code = error.code;
    this.remoteName = error.name;
    this.details = error.details;
  }
}

/** The engine worker is not running (it crashed, failed to start, or was shut down). */
export class EngineUnavailableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'EngineUnavailableError';
  }
}
