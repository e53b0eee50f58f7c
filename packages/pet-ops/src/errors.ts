/**
 * The typed errors of @tessera/pet-ops. Every bad PET file, mismatched tensor, unknown id or exhausted budget ends
 * in one of these, so callers can `instanceof`-check and servers can map `code` to a status.
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';
import type { BudgetExceededError } from '@tessera/native';

/** Base class: every pet-ops failure carries a stable `code` string. */
export class PetOpsError extends TesseraError {}

/** A PET type the registry does not know. `known` lists the registered ones. */
export class UnknownPetTypeError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly petType: string;
  readonly known: readonly string[];
  constructor(petType: string, known: readonly string[]) {
    super('TESSERA_PET_UNKNOWN_TYPE', `unknown PET type ${JSON.stringify(petType)} (registered: ${known.join(', ') || 'none'})`);
    this.petType = petType;
    this.known = known;
  }
}

/** A tensor of a task's parameters does not fit the shared model: missing, unknown, wrong dtype, shape or contents. */
export class PetShapeError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  /** The offending tensor's name (or the config field, for a head whose width disagrees with the labels). */
  readonly tensor: string;
  readonly expected: string;
  readonly got: string;
  constructor(tensor: string, expected: string, got: string, detail?: string) {
    super('TESSERA_PET_SHAPE', `${tensor}: expected ${expected}, got ${got}${detail ? ` (${detail})` : ''}`);
    this.tensor = tensor;
    this.expected = expected;
    this.got = got;
  }
}

/** A task's hyperparameters (pet_config) are invalid: empty labels, a non-positive rank, a type mismatch, … */
export class PetConfigError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_PET_CONFIG', message, options);
  }
}

/** A PET parameter file is malformed: bad header, missing or wrong metadata, unsupported dtype, truncated data. */
export class PetFormatError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  /** The file (or '<bytes>' for an in-memory buffer). */
  readonly source: string;
  constructor(source: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_PET_FORMAT', `${source}: ${message}`, options);
    this.source = source;
  }
}

/** No task with this id is registered. */
export class UnknownTaskError extends PetOpsError {
  static override readonly kind: ErrorKind = 'not_found';
  readonly taskId: string;
  constructor(taskId: string) {
    super('TESSERA_PET_UNKNOWN_TASK', `no task with id ${JSON.stringify(taskId)} is registered`);
    this.taskId = taskId;
  }
}

/** No shared model with this tag was added. */
export class UnknownSharedModelError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly tag: string;
  constructor(tag: string, known: readonly string[]) {
    super('TESSERA_PET_UNKNOWN_SHARED_MODEL', `no shared model tagged ${JSON.stringify(tag)} (added: ${known.join(', ') || 'none'})`);
    this.tag = tag;
  }
}

/** The operation does not fit the task's (or shared model's) state: a duplicate id, a task that is not loaded, … */
export class TaskStateError extends PetOpsError {
  static override readonly kind: ErrorKind = 'conflict';
  constructor(message: string) {
    super('TESSERA_PET_TASK_STATE', message);
  }
}

/**
 * Loading did not fit the device byte budget (the native allocator's, or the TaskManager's own cap). Nothing the
 * failed call loaded stays loaded. `requestedBytes` is what the failing allocation (or task) asked for, when known.
 */
export class DeviceBudgetError extends PetOpsError {
  static override readonly kind: ErrorKind = 'capacity';
  readonly requestedBytes: number | null;
  readonly freeBytes: number;
  readonly budgetBytes: number;
  constructor(what: string, requestedBytes: number | null, freeBytes: number, budgetBytes: number, options?: { cause?: unknown }) {
    super(
      'TESSERA_PET_DEVICE_BUDGET',
      `${what}: ${requestedBytes === null ? 'an allocation' : `${requestedBytes} bytes`} did not fit the device budget ` +
        `(${Math.max(0, freeBytes)} of ${budgetBytes} bytes free)`,
      options,
    );
    this.requestedBytes = requestedBytes;
    this.freeBytes = freeBytes;
    this.budgetBytes = budgetBytes;
  }

  /** Wraps the native allocator's error; its message names the bytes asked ("cannot allocate N bytes: U of B …"). */
  static fromNative(what: string, err: BudgetExceededError): DeviceBudgetError {
    const m = /cannot allocate (\d+) bytes: (\d+) of (\d+) budget bytes in use/.exec(err.message);
    if (!m) return new DeviceBudgetError(what, null, 0, 0, { cause: err });
    const inUse = Number(m[2]);
    const budget = Number(m[3]);
    return new DeviceBudgetError(what, Number(m[1]), budget - inUse, budget, { cause: err });
  }
}

/** A parameter file holds another PET type than its registration declares. */
export class PetTypeMismatchError extends PetOpsError {
  static override readonly kind: ErrorKind = 'invalid';
  /** The declared type. */
  readonly petType: string;
  constructor(source: string, declared: string, inFile: string) {
    super('TESSERA_PET_TYPE_MISMATCH', `${source}: the registration says pet_type ${JSON.stringify(declared)} but the parameter file holds a ${JSON.stringify(inFile)} task`);
    this.petType = declared;
  }
}

registerErrors(PetOpsError, UnknownPetTypeError, PetShapeError, PetConfigError, PetFormatError, UnknownTaskError, UnknownSharedModelError, TaskStateError, DeviceBudgetError, PetTypeMismatchError);
