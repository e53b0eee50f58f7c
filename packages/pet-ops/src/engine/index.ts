/**
 * The PET inference engine (PIE) and its scheduling:
 *
 *   pet-engine.ts           PetEngine: macro-batches of many tasks in one shared forward, per-task heads, timing;
 *                           α/β profiling runs and petsCostProfilerTarget (for @tessera/batcher's profiler)
 *   operator-scheduling.ts  Algorithm 2 (streams by operational intensity), the dynamic stream count
 *   reference-run.ts        one task's merged model in onnxruntime: the numerics oracle and a SeqS baseline
 */
export {
  type PetEngineOptions,
  type PetMacroBatchInput,
  type PetMiniBatchInput,
  type PetQuery,
  type PetQueryResult,
  type PetRunTiming,
  type PetSchedulingOptions,
  PetEngine,
  petsCostProfilerTarget,
} from './pet-engine.js';
export {
  DEFAULT_STREAM_THRESHOLDS,
  SCHEDULING_MODES,
  type SchedulingMode,
  type StreamThresholds,
  assignStreams,
  dynamicStreamCount,
  intensityOf,
  medianOf,
} from './operator-scheduling.js';
export { PetTaskOnnxModel, exportPetTaskOnnx, sharedHostWeights } from './reference-run.js';
