/**
 * @tessera/pet-ops: PetS's unified PET operators over one shared encoder. This file is the whole public surface.
 *
 *   types.ts      the contracts: PET types, parameter files, the shared model, loaded tasks, the operator interface
 *   errors.ts     PetOpsError and its subclasses (each with its kind and code)
 *   registry.ts   PetRegistry: PET type → operator; defaultPetRegistry() holds all seven types
 *   operators/    one operator per PET type: layout, validation, load (device tensors → PetOps), analytic cost;
 *                 adapter-stack.ts: HMI's batched adapter over vBERT's flat per-tenant layout (same kernel)
 *   formats/      PET parameter files (safetensors + tessera-pet metadata), in memory and on disk
 *   gen/          seeded synthetic tasks (generatePetParams, generatePetTasks)
 *   reference/    the merged per-task model, a float64 BERT forward and a host interpreter of PetOps (test oracles)
 *   tasks/        TaskManager (register / load / unload, memory accounting), maxTasks (Table 5), loadUntilFull
 *   engine/       the PET inference engine (PIE): macro-batches, operator scheduling (Algorithm 2), heads, α/β
 *                 profiling targets, and one task's merged model in onnxruntime (the numerics oracle, SeqS baseline)
 *   host/         PetsHost: the engine side of a PetS server (TaskManager + PetEngine, task admin from parameter
 *                 bytes, the executor a batching loop drives, stats, profiling tasks), its records, the demo
 */
export {
  type HostTensor,
  type LinearSiteContext,
  type LoadedPet,
  type NormSiteContext,
  PET_TYPES,
  type PetConfig,
  type PetHooks,
  type PetOperator,
  type PetParams,
  type PetTensorSpec,
  type PetType,
  type SharedModel,
} from './types.js';
export {
  defaultPetRegistry,
  PetRegistry,
} from './registry.js';
export {
  DeviceBudgetError,
  PetConfigError,
  PetFormatError,
  PetOpsError,
  PetShapeError,
  PetTypeMismatchError,
  TaskStateError,
  UnknownPetTypeError,
  UnknownSharedModelError,
  UnknownTaskError,
} from './errors.js';
export {
  ADAPTER_ACTIVATIONS,
  adapterModules,
  AdapterOperator,
  adapterTensorNames,
} from './operators/adapter.js';
export {
  BitFitOperator,
} from './operators/bitfit.js';
export {
  DiffOperator,
  diffTensorNames,
} from './operators/diff.js';
export {
  MaskBertOperator,
  maskedOutCsr,
  maskTensorName,
} from './operators/maskbert.js';
export {
  DEFAULT_PET_LORA_TARGETS,
  loraModules,
  LoraOperator,
  loraScale,
  loraTargets,
  loraTensorNames,
} from './operators/lora.js';
export {
  PrefixOperator,
  prefixTensorNames,
} from './operators/prefix.js';
export {
  StandardOperator,
} from './operators/standard.js';
export {
  ALLOCATION_GRANULE,
  allocationBytes,
  BasePetOperator,
  type ConfigValidatingOperator,
  type DeviceAdapter,
  type DeviceCsr,
  type DeviceLayerNorm,
  DeviceTensors,
  headSpecs,
  isConfigValidating,
  type LinearModuleOps,
  LoadedPetTask,
  type PetBody,
  taskNormSpecs,
} from './operators/base.js';
export {
  adapterCost,
  biasCost,
  csrCost,
  layerNormCost,
  loraCost,
  type OpCost,
  prefixCost,
} from './operators/cost.js';
export {
  headTensorNames,
  LINEAR_SLICES,
  type LinearModuleInfo,
  linearModules,
  type LinearSlice,
  type NormModuleInfo,
  normModules,
  selfAttentionModule,
  siteOfSlice,
} from './operators/modules.js';
export {
  checkCsr,
  maskBit,
  maskRowBytes,
} from './operators/validate.js';
export {
  PET_FORMAT,
  PET_FORMAT_VERSION,
  petConfigJson,
  petMetadata,
  readPetParams,
  readPetParamsFile,
  writePetParams,
  writePetParamsFile,
} from './formats/pet-file.js';
export {
  DEFAULT_DIFF_DENSITY,
  DEFAULT_LORA_RANK,
  DEFAULT_MASK_ZEROS,
  DEFAULT_PREFIX_LENGTH,
  type GeneratedPetTask,
  type GeneratePetOptions,
  generatePetParams,
  generatePetTasks,
  PAPER_PET_TYPES,
} from './gen/generate.js';
export {
  PetRng,
  samplePositions,
  uniformValues,
} from './gen/rng.js';
export {
  adapterKey,
  type AdapterSite,
  type MergedAdapter,
  type MergedPetExtensions,
  type MergedPetModel,
  type MergedPrefix,
  mergePetIntoWeights,
} from './reference/merge.js';
export {
  erf,
  geluErfRef,
  geluTanhRef,
  referenceEncoderForward,
  type ReferenceOutput,
  type ReferenceSequence,
} from './reference/forward.js';
export {
  petRowIndices,
  referencePetOp,
  referencePetSiteRun,
} from './reference/pet-ops.js';
export {
  SharedEncoder,
  type SharedModelSource,
} from './tasks/shared-model.js';
export {
  type TaskInfo,
  TaskManager,
  type TaskManagerMemory,
  type TaskManagerOptions,
} from './tasks/task-manager.js';
export {
  countTasks,
  type Footprint,
  type FootprintOptions,
  loadUntilFull,
  type LoadUntilFullResult,
  maxTasks,
  type MaxTasksOptions,
  type MaxTasksResult,
  measureFootprint,
  seededSharedWeights,
  TABLE5_BATCH,
  TABLE5_STEP,
} from './tasks/capacity.js';
export {
  PetEngine,
  type PetEngineOptions,
  type PetMacroBatchInput,
  type PetMiniBatchInput,
  type PetQuery,
  type PetQueryResult,
  type PetRunTiming,
  type PetSchedulingOptions,
  petsCostProfilerTarget,
} from './engine/pet-engine.js';
export {
  assignStreams,
  DEFAULT_STREAM_THRESHOLDS,
  dynamicStreamCount,
  intensityOf,
  medianOf,
  SCHEDULING_MODES,
  type SchedulingMode,
  type StreamThresholds,
} from './engine/operator-scheduling.js';
export {
  exportPetTaskOnnx,
  PetTaskOnnxModel,
  sharedHostWeights,
} from './engine/reference-run.js';
export type {
  ClassifyResult,
  EncodedInput,
  MacroBatchRecord,
  MemorySummary,
  ModelSummary,
  PetsHostOptions,
  PetsHostStats,
  PlanRecord,
  RegisterTask,
  StartupTask,
  TaskState,
  TaskSummary,
} from './host/types.js';
export {
  type PetsExecutor,
  PetsHost,
  type PetsMacroBatch,
  type PetsProfileTarget,
  type TaskPipeline,
  taskSummary,
} from './host/pets-host.js';
export {
  ensurePetsDemo,
  type PetsDemo,
  PETS_DEMO_MODEL_NAME,
  PETS_DEMO_TASKS,
  PETS_DEMO_VERSION,
} from './host/demo.js';
export {
  PLAN_STRATEGIES,
  PetsHostMetrics,
} from './host/metrics.js';
export {
  AdapterStackBuffer,
  type AdapterStackApplyOptions,
  type AdapterStackSegment,
  type AdapterStackShape,
  adapterStackNumel,
} from './operators/adapter-stack.js';
