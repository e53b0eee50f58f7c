/**
 * The batcher's typed errors. `submit` throws RequestValidationError (nothing changes); a request whose adapter
 * cannot be loaded fails with @tessera/core's AdapterLoadError (re-exported here); misuse of the step itself
 * (plan() re-entered from an event handler, complete() without a plan, a second run loop) throws BatcherStateError.
 */
import { AdapterLoadError, type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

export { AdapterLoadError };

/** Why `submit` refused a request; a server maps every code to a 400-class answer. */
export type RequestValidationCode =
  /** Another queued or running request has this id. */
  | 'TESSERA_DUPLICATE_REQUEST'
  /** The prompt has no tokens. */
  | 'TESSERA_EMPTY_PROMPT'
  /** A prompt token is not an integer in [0, vocabSize). */
  | 'TESSERA_TOKEN_OUT_OF_VOCAB'
  /** maxTokens is not an integer >= 1. */
  | 'TESSERA_INVALID_MAX_TOKENS'
  /** prompt + maxTokens exceeds the model's maxPositions. */
  | 'TESSERA_CONTEXT_TOO_LONG'
  /** The request could not complete even with the whole KV cache to itself. */
  | 'TESSERA_KV_TOO_SMALL'
  /** Anything else malformed: id, adapter name, sampling parameters, stop strings. */
  | 'TESSERA_INVALID_REQUEST';

export class RequestValidationError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  declare readonly code: RequestValidationCode;
  /** The id the request was submitted with (as given; may itself be the problem). */
  readonly requestId: unknown;
  constructor(code: RequestValidationCode, requestId: unknown, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.requestId = requestId;
  }
}

/** The batcher was driven in a way it does not support (two run() loops, step() from inside a listener). */
export class BatcherStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string) {
    super('TESSERA_BATCHER_STATE', message);
  }
}

registerErrors(RequestValidationError, BatcherStateError);
