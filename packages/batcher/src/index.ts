/**
 * @tessera/batcher: batching policies, pure TypeScript on @tessera/core (no engine, no native addon at run time).
 * The continuous-batching Scheduler for multi-tenant decoders: Punica's policy (any adapter mix in one forward, at
 * most one prefill per step, adapters loaded on demand without stalling the batch, preemption by recompute when
 * the KV pages run out) and the paper's two baselines (same-adapter continuous batching, static same-adapter
 * batches), on an injected Clock; each step it returns a StepPlan that a runner (the engine's StepRunner, the
 * simulator's latency model) executes. And PetS's coordinated batching for multi-task encoders (./coordinated):
 * α/β cost tables, the intra-/inter-task DPs and their baselines, a profiler, online windows.
 */
export { Scheduler, type SchedulerOptions, BATCH_POLICIES, DEFAULT_MAX_BATCH } from './scheduler.js';
export { DEFAULT_VTC_WEIGHTS, FAIRNESS_POLICIES, type FairnessPolicy, VirtualTokenCounter, type VtcWeights } from './serving/fairness.js';
export { pageKey, PrefixKeyChain, prefixRootKey } from './serving/prefix-keys.js';
export { type Clock, systemClock } from './clock.js';
export { AdapterLoadError, BatcherStateError, type RequestValidationCode, RequestValidationError } from './errors.js';
export type {
  AdapterResidency,
  BatchPolicy,
  BatcherFinishReason,
  BatcherRequest,
  BatcherStats,
  FinishedRequest,
  KvExhaustionPolicy,
  RequestListener,
  SchedulerEvent,
  SchedulerStats,
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
  estimateCost,
  interTaskBatching,
  intraTaskBatching,
  planBatches,
  profileCostTables,
  systemTimer,
  tableCostModel,
} from './coordinated/index.js';
export * from './pipeline/index.js';
