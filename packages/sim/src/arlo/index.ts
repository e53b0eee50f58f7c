/**
 * The Arlo simulator (issue 16, arlo.md §9-H, §10): @tessera/length-scheduler's Runtime Scheduler, Request
 * Scheduler, estimator and replacement under virtual time, over Stable / Bursty Twitter-like traces, with the
 * paper's latency profiles and an injectable dynamic-shape penalty.
 */
export {
  type ArloLatencyProfile,
  type DynamicPenalty,
  type DynamicPenaltySpec,
  type GpuPenaltyOptions,
  type MeasuredRun,
  type PaperModel,
  PAPER_OVERHEAD_MS,
  PAPER_STAIRCASE_STEP,
  cpuLatencyProfile,
  gpuDynamicPenalty,
  measuredLatencyProfile,
  noDynamicPenalty,
  paperLatencyProfile,
  resolveDynamicPenalty,
} from './profiles.js';
export {
  type ArloTrace,
  type ArloTraceKind,
  type ArloTraceOptions,
  type BurstOptions,
  type RateInterval,
  type TwitterLengthOptions,
  generateArloTrace,
  twitterLengthSample,
} from './trace.js';
export {
  type AllocationRecord,
  type ArloRequestLog,
  type ArloSimulationOptions,
  type ArloSimulationResult,
  type ArloTimelineSample,
  type LatencySummary,
  type RuntimeSummary,
  runArloSimulation,
} from './simulator.js';
