/** Typed errors of the training module. */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/**
 * A training data file or record is unusable: not JSON, wrong fields, an empty prompt or completion, too long for
 * the model. `path` names the file ('<memory>' for records passed in), `line` the 1-based JSONL line (0: none).
 * Thrown while the data is read and tokenized, before any step runs.
 */
export class TrainDataError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly path: string;
  readonly line: number;
  constructor(path: string, line: number, message: string, options?: { cause?: unknown }) {
    super('TESSERA_TRAIN_DATA', message, options);
    this.path = path;
    this.line = line;
  }
}

/** A trainable set or trainer option does not fit the model (a layer range outside it, a target that matches nothing, …). */
export class TrainConfigError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_TRAIN_CONFIG', message, options);
  }
}

registerErrors(TrainDataError, TrainConfigError);
