/**
 * Typed errors of the host adapter store. An unknown id is core's `UnknownAdapterError` (kind not_found), as in
 * the adapter cache.
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

export type AdapterFileProblem = 'magic' | 'version' | 'checksum' | 'length';

/**
 * A file that is not a valid adapter file of this format: another magic (a foreign file), another format version,
 * a checksum that does not match (corruption), or a length other than the header implies (truncated or padded).
 */
export class AdapterFileError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  readonly file: string;
  readonly problem: AdapterFileProblem;
  constructor(file: string, problem: AdapterFileProblem, message: string) {
    super(`TESSERA_ADAPTER_FILE_${problem.toUpperCase()}`, message);
    this.file = file;
    this.problem = problem;
  }
}

/**
 * Arrays or a file of another shape than the store's (hidden, bottleneck, layers), or a head that does not fit
 * its label count. `adapter` names the id or the file.
 */
export class AdapterShapeError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly adapter: string;
  readonly expected: { hidden: number; bottleneck: number; layers: number };
  readonly found: { hidden: number; bottleneck: number; layers: number } | null;
  constructor(adapter: string, message: string, expected: { hidden: number; bottleneck: number; layers: number }, found: { hidden: number; bottleneck: number; layers: number } | null = null) {
    super('TESSERA_ADAPTER_SHAPE_MISMATCH', message);
    this.adapter = adapter;
    this.expected = { hidden: expected.hidden, bottleneck: expected.bottleneck, layers: expected.layers };
    this.found = found;
  }
}

registerErrors(AdapterFileError, AdapterShapeError);
