/**
 * @tessera/batcher: continuous batching for multi-tenant decoders. Punica's policy (any adapter mix in one
 * forward, at most one prefill per step, adapters loaded on demand without stalling the batch, preemption by
 * recompute when the KV cache runs out) and the paper's two baselines (same-adapter continuous batching, static
 * same-adapter batches), all on an injected Clock. And PetS's coordinated batching for multi-task encoders
 * (./coordinated): α/β cost tables, the intra-/inter-task DPs and their baselines, a profiler, online windows.
 */
export { ContinuousBatcher, BATCH_POLICIES, DEFAULT_MAX_BATCH } from './batcher.js';
export { type Clock, systemClock } from './clock.js';
export { AdapterLoadError, BatcherStateError, type RequestValidationCode, RequestValidationError } from './errors.js';
export type {
  AdapterResidency,
  BatchPolicy,
  BatcherModel,
  BatcherFinishReason,
  BatcherRequest,
  BatcherStats,
  ContinuousBatcherOptions,
  FinishedRequest,
  KvExhaustionPolicy,
  RequestListener,
  StepReport,
} from './types.js';
export {
  type AnalyticCostParams,
  BATCHING_STRATEGIES,
  type BatchPlan,
  BatchWindow,
  BatchWindowClosedError,
  type BatchWindowErrorContext,
  type BatchWindowOptions,
  type BatchWindowStats,
  type BatchingStrategy,
  type CbPoolOptions,
  type CbQuery,
  type CostEstimate,
  type CostModel,
  CostModelError,
  type CostModelErrorCode,
  type CostProfilerTarget,
  CostTable,
  type CostTableInit,
  type CostTableJson,
  DEFAULT_FIXED_SIZE,
  DEFAULT_MAX_MACRO,
  DEFAULT_MAX_MINI,
  DEFAULT_PROFILE_BATCHES,
  DEFAULT_PROFILE_LENGTHS,
  DEFAULT_PROFILE_PET_BATCHES,
  type MacroBatch,
  type MiniBatch,
  PlanError,
  type PlanErrorCode,
  type PlanOptions,
  type ProfileOptions,
  type WindowTimer,
  analyticCostModel,
  assignPetTypes,
  cbTaskNames,
  estimateCost,
  generateCbPool,
  interTaskBatching,
  intraTaskBatching,
  planBatches,
  profileCostTables,
  systemTimer,
  tableCostModel,
} from './coordinated/index.js';
export * from './pipeline/index.js';
