/**
 * @tessera/sim: a deterministic discrete-event simulator for cluster-scale experiments on one machine. The real
 * policy objects (PunicaScheduler, the batcher's Scheduler, ClientStream, the KV page allocator) run under a
 * virtual clock; only the GPUs' time is modelled (step latency from a fitted or paper-derived model, no math).
 * No engine and no native addon: measuring real steps for a fitted model is the bench package's job.
 *
 *   clock.ts              VirtualClock and the (time, insertion)-ordered EventQueue
 *   arrivals.ts           ramped Poisson arrivals, length distributions, adapter popularity, traces
 *   latency.ts            step-latency models: least-squares fit, Punica's Fig. 1
 *   simulated-runner.ts   a step runner with deterministic tokens (executes the Scheduler's plans, no math)
 *   sim-gpu.ts            one virtual GPU (Scheduler + page allocator + runner + HostEngine) on the event queue
 *   sim-cluster.ts        GPUs behind the real PunicaScheduler, with a ClientStream per request
 *   cluster-sim.ts        Punica's Fig. 13: N GPUs, one hour, ramped load, zipf-1.5 popularity
 *   arlo/                 Arlo (length scheduling): @tessera/length-scheduler's objects over Stable / Bursty traces
 *   blockllm/             BlockLLM: PM / PS / BlockLLM on 12 simulated GPUs, @tessera/block-zoo's serving core driven
 */
export { EventOrderError, LatencyFitError, SimArgumentError } from './errors.js';
export { type Random, exponential, mulberry32, standardNormal, substream, uniformInt } from './random.js';
export { EventQueue, VirtualClock } from './clock.js';
export {
  DEFAULT_LENGTHS,
  DEFAULT_ZIPF_ALPHA,
  DEFAULT_POPULARITY,
  type LengthDistribution,
  type Popularity,
  type RampProfile,
  type RampProfileOptions,
  type RateProfile,
  type TraceOptions,
  type TraceRequest,
  adapterName,
  constantProfile,
  drawLengths,
  expectedArrivals,
  generateTrace,
  maxSequenceLength,
  poissonArrivals,
  popularitySampler,
  rampProfile,
  rateProfile,
} from './arrivals.js';
export {
  type LatencyFit,
  type LatencyModel,
  type LatencySample,
  LinearLatencyModel,
  type LinearLatencyCoefficients,
  MIN_STEP_MS,
  type StepShape,
  fitLatencyModel,
  paperLatencyModel,
} from './latency.js';
export {
  SIMULATED_VOCAB,
  SimulatedRunner,
  simulatedDecode,
  simulatedGeneration,
  simulatedNextToken,
  simulatedPrompt,
} from './simulated-runner.js';
export { type IdlePeriod, SimGpu, type SimGpuOptions } from './sim-gpu.js';
export { type ClientOutcome, SimCluster, type SimClusterOptions } from './sim-cluster.js';
export {
  type ClusterSimulationOptions,
  type ClusterSimulationResult,
  type ClusterTotals,
  DEFAULT_KV_TOKENS_PER_GPU,
  DEFAULT_PEAK_PER_GPU_PER_SEC,
  type GpuSummary,
  type TimelineSample,
  clusterSimulationPreset,
  runClusterSimulation,
} from './cluster-sim.js';
export {
  type AllocationRecord,
  type ArloLatencyProfile,
  type ArloRequestLog,
  type ArloSimulationOptions,
  type ArloSimulationResult,
  type ArloTimelineSample,
  type ArloTrace,
  type ArloTraceKind,
  type ArloTraceOptions,
  type BurstOptions,
  type DynamicPenalty,
  type DynamicPenaltySpec,
  type GpuPenaltyOptions,
  type LatencySummary,
  type MeasuredRun,
  type PaperModel,
  type RateInterval,
  type RuntimeSummary,
  type TwitterLengthOptions,
  PAPER_OVERHEAD_MS,
  PAPER_STAIRCASE_STEP,
  cpuLatencyProfile,
  generateArloTrace,
  gpuDynamicPenalty,
  measuredLatencyProfile,
  noDynamicPenalty,
  paperLatencyProfile,
  resolveDynamicPenalty,
  runArloSimulation,
  twitterLengthSample,
} from './arlo/index.js';
export {
  A100_80G,
  appMix,
  type AppMixOptions,
  BLOCKLLM_ABLATIONS,
  BLOCKLLM_FULL,
  blockLayers,
  type BlockllmFeatures,
  type BlockllmPolicy,
  type BlockllmRequest,
  type BlockllmSimOptions,
  type BlockllmSimResult,
  blockllmTopology,
  type BlockllmWorkload,
  type BlockllmWorkloadOptions,
  blockProfile,
  buildSimZoo,
  CHATGLM_6B,
  type ClusterOptions,
  DEFAULT_FOUNDATIONS,
  type GpuModel,
  LLAMA_13B_SIM,
  LLAMA_7B_SIM,
  llamaTensors,
  type RequestRecord,
  runBlockllmSimulation,
  type SimApp,
  type SimAppKind,
  type SimFoundation,
  type SimZoo,
  type SimZooOptions,
  type StepTrace,
  sumBytes,
  sumProfiles,
  syntheticWorkload,
} from './blockllm/index.js';
