/**
 * Typed errors of coordinated batching (PetS). Everything here extends `@tessera/native`'s TesseraError, so a
 * caller can switch on `code` (or `instanceof`) instead of parsing messages.
 */
import { TesseraError } from '@tessera/core';

export type CostModelErrorCode =
  /** A CostTable's grid, values or cap are malformed (constructor or fromJSON). */
  | 'TESSERA_INVALID_COST_TABLE'
  /** lookup() / alpha() / beta() got a NaN or negative batch or length. */
  | 'TESSERA_INVALID_COST_LOOKUP'
  /** The cost model has no β for this PET type. */
  | 'TESSERA_PET_UNKNOWN_TYPE'
  /** analyticCostModel parameters are malformed, or a cost model returned NaN. */
  | 'TESSERA_INVALID_COST_MODEL'
  /** profileCostTables options are malformed (grids, repeats, warm-up, caps). */
  | 'TESSERA_INVALID_PROFILE_OPTIONS';

/** A cost table or cost model cannot be built or asked. */
export class CostModelError extends TesseraError {
  static override readonly kind = 'invalid' as const;
  declare readonly code: CostModelErrorCode;
  constructor(code: CostModelErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

export type PlanErrorCode =
  /** A query's id, task, length or arrival is malformed (length must be an integer >= 1). */
  | 'TESSERA_INVALID_QUERY'
  /** Two queries of one plan share an id. */
  | 'TESSERA_DUPLICATE_QUERY'
  /** petTypeOf(task) threw (the task is not registered); `cause` is its error. */
  | 'TESSERA_UNKNOWN_TASK'
  /** A PlanOptions / BatchWindowOptions field is malformed (strategy, caps, fixedSize, ...). */
  | 'TESSERA_INVALID_PLAN_OPTIONS'
  /** Mini-batches passed to interTaskBatching are malformed (empty, mixed tasks, wrong maxLength). */
  | 'TESSERA_INVALID_MINI_BATCH'
  /** The cost model prices every way to batch some queries at +∞ (caps too small for the tables). */
  | 'TESSERA_PLAN_INFEASIBLE'
  /** A BatchWindow's plan function returned batches that do not hold each window query exactly once. */
  | 'TESSERA_PLAN_MISMATCH';

/** planBatches (or one of its steps) cannot produce a plan for these queries and options. */
export class PlanError extends TesseraError {
  static override readonly kind = 'invalid' as const;
  declare readonly code: PlanErrorCode;
  constructor(code: PlanErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

/** A BatchWindow was used after close(). */
export class BatchWindowClosedError extends TesseraError {
  static override readonly kind = 'unavailable' as const;
  declare readonly code: 'TESSERA_WINDOW_CLOSED';
  constructor(message: string) {
    super('TESSERA_WINDOW_CLOSED', message);
  }
}
