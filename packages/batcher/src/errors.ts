/**
 * The batcher's typed errors. `submit` throws RequestValidationError (nothing changes); a request whose adapter
 * cannot be loaded is failed through its listener's onError with AdapterLoadError; misuse of the loop itself
 * (a second run(), step() re-entered from a listener) throws BatcherStateError.
 */
import { TesseraError } from '@tessera/native';

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
  declare readonly code: RequestValidationCode;
  /** The id the request was submitted with (as given; may itself be the problem). */
  readonly requestId: unknown;
  constructor(code: RequestValidationCode, requestId: unknown, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.requestId = requestId;
  }
}

/** The adapter a request asked for could not be made resident; `cause` is the residency's error. */
export class AdapterLoadError extends TesseraError {
  readonly adapter: string;
  constructor(adapter: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_ADAPTER_LOAD_FAILED', message, options);
    this.adapter = adapter;
  }
}

/** The batcher was driven in a way it does not support (two run() loops, step() from inside a listener). */
export class BatcherStateError extends TesseraError {
  constructor(message: string) {
    super('TESSERA_BATCHER_STATE', message);
  }
}
