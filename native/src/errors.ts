/**
 * Typed errors. Native failures arrive as JS errors with a `code`; {@link fromNative} maps them onto these
 * classes so callers can `instanceof`-check (e.g. budget exhaustion) without parsing messages.
 */
import { type ErrorKind, InvalidArgumentError, registerErrors, TesseraError } from '@tessera/core';

export { InvalidArgumentError, TesseraError };

/** An allocation would exceed the backend's byte budget. Nothing was allocated. */
export class BudgetExceededError extends TesseraError {
  static override readonly kind: ErrorKind = 'capacity';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_BUDGET_EXCEEDED', message, options);
  }
}

/** Operand shapes do not fit together. The message names every shape involved. */
export class ShapeMismatchError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_SHAPE_MISMATCH', message, options);
  }
}

/** An operand has a dtype the op does not accept. */
export class DTypeMismatchError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_DTYPE_MISMATCH', message, options);
  }
}

/** A tensor was used after `dispose()`. */
export class DisposedTensorError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_DISPOSED', message, options);
  }
}

/** Operands live on different backends (cpu vs cuda). */
export class DeviceMismatchError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string) {
    super('TESSERA_DEVICE_MISMATCH', message);
  }
}

/** The chosen backend has no kernel for this op. */
export class UnsupportedOpError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_UNSUPPORTED', message, options);
  }
}

/** The device failed (a CUDA error, an OS allocation failure). */
export class DeviceError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_DEVICE_ERROR', message, options);
  }
}

/** The addon has not been built; the message names the command that builds it. */
export class NativeBuildMissingError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_NATIVE_BUILD_MISSING', message, options);
  }
}

registerErrors(BudgetExceededError, ShapeMismatchError, DTypeMismatchError, DisposedTensorError, DeviceMismatchError, UnsupportedOpError, DeviceError, NativeBuildMissingError);

const byCode: Record<string, new (message: string, options?: { cause?: unknown }) => TesseraError> = {
  TESSERA_BUDGET_EXCEEDED: BudgetExceededError,
  TESSERA_SHAPE_MISMATCH: ShapeMismatchError,
  TESSERA_DTYPE_MISMATCH: DTypeMismatchError,
  TESSERA_DISPOSED: DisposedTensorError,
  TESSERA_UNSUPPORTED: UnsupportedOpError,
  TESSERA_INVALID_ARGUMENT: InvalidArgumentError,
  TESSERA_DEVICE_ERROR: DeviceError,
};

/** Converts an error thrown by the addon into its typed class (other errors pass through). */
export function fromNative(err: unknown): unknown {
  if (err instanceof TesseraError) return err;
  if (err instanceof Error) {
    const code = (err as Error & { code?: unknown }).code;
    const Ctor = typeof code === 'string' ? byCode[code] : undefined;
    if (Ctor) return new Ctor(err.message, { cause: err });
  }
  return err;
}

/** Runs a native call and rethrows its failure as a typed error. */
export function callNative<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw fromNative(err);
  }
}
