export { SharedEncoder, type SharedModelSource } from './shared-model.js';
export { type TaskInfo, TaskManager, type TaskManagerMemory, type TaskManagerOptions } from './task-manager.js';
export {
  type Footprint,
  type FootprintOptions,
  type LoadUntilFullResult,
  type MaxTasksOptions,
  type MaxTasksResult,
  TABLE5_BATCH,
  TABLE5_STEP,
  countTasks,
  loadUntilFull,
  maxTasks,
  measureFootprint,
  seededSharedWeights,
} from './capacity.js';
