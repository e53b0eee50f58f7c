/** Coordinated batching (PetS, pets.md §4–§5): cost tables, the two DPs and the baselines, a profiler, online windows. */
export { CostTable, type CostTableInit, type CostTableJson } from './cost-table.js';
export { type AnalyticCostParams, type CostModel, analyticCostModel, tableCostModel } from './cost-model.js';
export {
  BATCHING_STRATEGIES, DEFAULT_FIXED_SIZE, DEFAULT_MAX_MACRO, DEFAULT_MAX_MINI,
  estimateCost, interTaskBatching, intraTaskBatching, planBatches,
} from './plan.js';
export {
  type CostProfilerTarget, DEFAULT_PROFILE_BATCHES, DEFAULT_PROFILE_LENGTHS, DEFAULT_PROFILE_PET_BATCHES,
  type ProfileOptions, profileCostTables,
} from './profiler.js';
export {
  BatchWindow, type BatchWindowErrorContext, type BatchWindowOptions, type BatchWindowStats, type WindowTimer, systemTimer,
} from './window.js';
export {
  BatchWindowClosedError, CostModelError, type CostModelErrorCode, PlanError, type PlanErrorCode,
} from './errors.js';
export type { BatchPlan, BatchingStrategy, CbQuery, CostEstimate, MacroBatch, MiniBatch, PlanOptions } from './types.js';
