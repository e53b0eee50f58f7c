/**
 * Typed errors of @tessera/plot-store, on @tessera/core's TesseraError: each has a kind and a stable `code`.
 * A key that is simply not in a table is not an error: lookups back off (A2) and end at the zero row.
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** A bad option or argument: the message names the value and why it is wrong. */
export class PlotStoreArgumentError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_PLOT_INVALID_ARGUMENT', message, options);
  }
}

/** A token id that a key cannot hold: not an integer, negative, or not below the codec's vocabulary size. */
export class TokenIdOutOfRangeError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly tokenId: number,
    readonly vocabSize: number,
  ) {
    super('TESSERA_PLOT_TOKEN_OUT_OF_RANGE', `token id ${tokenId} is outside the vocabulary [0, ${vocabSize})`);
  }
}

/**
 * A key that no table may store: the all-PAD separator (it always reads the zero row), a key whose centre (encoder)
 * or last slot (causal) is PAD, which no sequence produces, or a packed key with bits outside the three id fields.
 */
export class ReservedKeyError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly key: string,
    reason: string,
  ) {
    super('TESSERA_PLOT_RESERVED_KEY', `key ${key} cannot be stored: ${reason}`);
  }
}

/** Row 0 is the reserved all-zero row: it is never mapped to a key, retained, released or written. */
export class ReservedRowError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(readonly row: number, what: string) {
    super('TESSERA_PLOT_RESERVED_ROW', `row ${row}: ${what}`);
  }
}

/** A row id that the value store has not handed out (or has already freed). */
export class UnknownRowError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly row: number) {
    super('TESSERA_PLOT_UNKNOWN_ROW', `row ${row} is not a live row of this value store`);
  }
}

/** A version id the tree does not hold (never created, or already collected). */
export class UnknownVersionError extends TesseraError {
  static override readonly kind: ErrorKind = 'not_found';
  constructor(readonly version: string) {
    super('TESSERA_PLOT_UNKNOWN_VERSION', `no PLOT version "${version}"`);
  }
}

/** The version exists but its state forbids the call (deleting the root, pinning a superseded version, a name taken twice…). */
export class VersionStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(
    readonly version: string,
    message: string,
  ) {
    super('TESSERA_PLOT_VERSION_STATE', message);
  }
}

/** A domain corpus below the tree's minimum size (manager op a/b: hmi.md §1.11, §5 item 8). */
export class CorpusTooSmallError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly tokens: number,
    readonly minTokens: number,
  ) {
    super('TESSERA_PLOT_CORPUS_TOO_SMALL', `a domain corpus of ${tokens} tokens is below the minimum of ${minTokens}`);
  }
}

registerErrors(
  PlotStoreArgumentError,
  TokenIdOutOfRangeError,
  ReservedKeyError,
  ReservedRowError,
  UnknownRowError,
  UnknownVersionError,
  VersionStateError,
  CorpusTooSmallError,
);
