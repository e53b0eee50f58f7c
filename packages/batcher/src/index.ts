/**
 * @tessera/batcher: continuous batching for multi-tenant decoders. Punica's policy (any adapter mix in one
 * forward, at most one prefill per step, adapters loaded on demand without stalling the batch, preemption by
 * recompute when the KV cache runs out) and the paper's two baselines (same-adapter continuous batching, static
 * same-adapter batches), all on an injected Clock.
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
