/**
 * @tessera/length-scheduler: Arlo's length scheduling (ICPP '24), pure TypeScript on @tessera/core. Several
 * static-shape runtimes of one model at different max lengths ("polymorphing"), an allocation program deciding how
 * many instances run each, and a multi-level-queue dispatcher choosing the instance of each request. No tensor is
 * touched here: the runtimes are the caller's, and time comes from an injected Clock, so the same objects run in
 * a server and under @tessera/sim's virtual clock.
 */
export {
  LengthSchedulerArgumentError,
  RequestTooLongError,
  NoServingInstanceError,
  UnknownInstanceError,
  InstanceStateError,
  AllocationInfeasibleError,
  ReplacementFloorError,
} from './errors.js';
export {
  type LatencyPoint,
  type ChooseLengthsOptions,
  type ChosenLengths,
  checkRuntimeLengths,
  idealRuntimeIndex,
  uniformLengths,
  chooseRuntimeLengths,
} from './lengths.js';
export {
  type LatencyAtLoad,
  type RuntimeProfile,
  type LatencyModelName,
  type Md1Options,
  type LoadLatencyPoint,
  type RuntimeProfileInit,
  type MeasureRun,
  type ProfilerOptions,
  type MeasuredRuntimeProfile,
  type LatencyCurveOptions,
  md1Latency,
  batchArrivalLatency,
  tableLatency,
  makeRuntimeProfile,
  profileRuntimes,
  profileLatencyCurve,
  quantileSorted,
} from './profile.js';
export { type LengthPrior, type LengthEstimatorOptions, type LengthSnapshot, LengthEstimator, priorFromLengths } from './estimator.js';
export {
  type AllocationProblem,
  type AllocationResult,
  type AllocationSolver,
  type AllocationEvaluation,
  type PreparedProblem,
  type SolveOptions,
  type SolverName,
  prepareProblem,
  evaluateAllocation,
  loadCost,
  greedyAllocation,
  localSearch,
  dpAllocation,
  GreedySolver,
  DpSolver,
  EvenSolver,
  SingleRuntimeSolver,
  ProportionalSolver,
} from './allocation.js';
export { type HighsSolverOptions, type AutoSolverOptions, HighsSolver, AutoSolver, loadHighsSolver } from './highs.js';
export {
  type InstanceState,
  type InstanceView,
  type DispatchPolicy,
  type DispatcherOptions,
  type DispatcherStats,
  MultiLevelDispatcher,
} from './dispatcher.js';
export {
  type ReplacementInstance,
  type ReplacementMove,
  type ReplacementOptions,
  type ReplacementPlan,
  planReplacement,
  ReplacementRun,
} from './replacement.js';
export {
  type ScaleDecision,
  type TargetTrackingOptions,
  type HeadroomOptions,
  TargetTrackingScaler,
  HeadroomScaler,
  leastBusy,
} from './autoscaler.js';
export { type AllocationDecision, type RuntimeSchedulerOptions, RuntimeScheduler } from './runtime-scheduler.js';
export { type SchemeName, type SchedulingPolicy, type PolicyOptions, SCHEMES, schedulingPolicy, paddedLength } from './policies.js';
