/**
 * @tessera/core: what every Tessera package shares, with no runtime dependencies of its own. Policy packages
 * (batcher, adapter-swap, cluster's scheduler, sim, …) depend on this and never on the native addon or the engine.
 */
export { type Clock, systemClock } from './clock.js';
export { type Random, mulberry32, fnv1a32, substream, checkSeed, streamState, SplitMix32 } from './random.js';
export type { FinishReason } from './finish-reason.js';
export {
  TesseraError,
  type TesseraErrorOptions,
  type ErrorKind,
  ERROR_KINDS,
  type ErrorField,
  type SerializedError,
  registerErrors,
  registeredError,
  serializeError,
  deserializeError,
  errorKind,
  RemoteError,
  InvalidArgumentError,
} from './errors.js';
export {
  KV_PAGE_SIZE,
  type KvSequenceId,
  pagesForLength,
  KvCacheExhaustedError,
  KvPageAllocator,
  type KvPageAllocatorOptions,
  type KvPageStats,
} from './kv-pages.js';
export { UnknownAdapterError, AdapterLoadError } from './adapter-errors.js';
export type {
  PlannedRowKind,
  PlannedSequence,
  StepSegment,
  KvReservation,
  StepPlan,
  StopReason,
  RowResult,
  StepOutcome,
  StepSamplingParams,
  RunnerRequest,
  ModelLimits,
  StepExecutor,
  TokenLogprobs,
} from './step-plan.js';
export { MAX_TOP_LOGPROBS } from './step-plan.js';
