/** Typed errors of the PLOT value file, on @tessera/core's TesseraError. */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** The header is not a PLOT value file header: bad magic, unknown version or dtype, a checksum mismatch, bad fields. */
export class PlotFileFormatError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super('TESSERA_PLOT_FILE_FORMAT', `${path}: not a valid PLOT value file: ${reason}`);
  }
}

/** The file's length is not what its header says: truncated (a copy cut short) or with trailing bytes. */
export class PlotFileSizeError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(
    readonly path: string,
    readonly expectedBytes: number,
    readonly actualBytes: number,
  ) {
    const what = actualBytes < expectedBytes ? 'truncated' : 'has trailing bytes';
    super('TESSERA_PLOT_FILE_SIZE', `${path}: ${what}: the header implies ${expectedBytes} bytes, the file has ${actualBytes}`);
  }
}

/**
 * The file is in a state that forbids the call: opened for reading before it was finalized, written after
 * finalize or close, a finished chunk reopened with another shape, a resume manifest for another build.
 */
export class PlotFileStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(
    readonly path: string,
    message: string,
  ) {
    super('TESSERA_PLOT_FILE_STATE', `${path}: ${message}`);
  }
}

registerErrors(PlotFileFormatError, PlotFileSizeError, PlotFileStateError);
