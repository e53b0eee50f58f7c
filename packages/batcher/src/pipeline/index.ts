export { type PipelineExecutor, TaskBusyError, WindowPipeline, type WindowPipelineOptions } from './window-pipeline.js';
export { TaskGate, TaskGates } from './task-gate.js';
export {
  ANALYTIC_FLOPS_PER_MS,
  ANALYTIC_FORWARD_MS_PER_LAYER,
  ANALYTIC_PET_LAUNCH_MS,
  CostTablesError,
  type CostTablesJson,
  costTablesJson,
  type EncoderShape,
  PETS_MAX_MACRO,
  PETS_MAX_MINI,
  petsAnalyticCostParams,
  petsAnalyticModel,
  petsProfileGrid,
  profilePetsCostTables,
  petsTablesModel,
  petWorkPerLayer,
} from './pet-cost.js';
