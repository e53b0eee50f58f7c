/**
 * @tessera/sim: a deterministic discrete-event simulator for cluster-scale experiments on one machine. The real
 * policy objects (PunicaScheduler, ContinuousBatcher, ClientStream, PagedKvCache) run under a virtual clock; only
 * the GPUs' time is modelled (step latency from a fitted or paper-derived model, no math).
 *
 *   clock.ts              VirtualClock and the (time, insertion)-ordered EventQueue
 *   arrivals.ts           ramped Poisson arrivals, length distributions, adapter popularity, traces
 *   latency.ts            step-latency models: least-squares fit, Punica's Fig. 1, profiling a real decoder
 *   simulated-decoder.ts  a BatcherModel with the decoder's KV bookkeeping and deterministic tokens
 *   sim-gpu.ts            one virtual GPU (cache + batcher + HostEngine) stepping on the event queue
 *   sim-cluster.ts        GPUs behind the real PunicaScheduler, with a ClientStream per request
 *   cluster-sim.ts        Punica's Fig. 13: N GPUs, one hour, ramped load, zipf-1.5 popularity
 */
export { EventOrderError, LatencyFitError, SimArgumentError } from './errors.js';
export { type Random, exponential, mulberry32, standardNormal, substream, uniformInt } from './random.js';
export { EventQueue, VirtualClock } from './clock.js';
export {
  DEFAULT_LENGTHS,
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
  type ProfileDecoderOptions,
  type StepShape,
  fitLatencyModel,
  paperLatencyModel,
  profileDecoderSteps,
} from './latency.js';
export {
  SIMULATED_KV_SHAPE,
  SIMULATED_VOCAB,
  SimulatedDecoder,
  simulatedDecode,
  simulatedDecoderConfig,
  simulatedGeneration,
  simulatedNextToken,
  simulatedPrompt,
} from './simulated-decoder.js';
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
