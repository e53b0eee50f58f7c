/**
 * @tessera/pets: PetS on one machine, a fastify server that serves many parameter-efficient tasks (Adapter,
 * MaskBert, Diff-Pruning, BitFit, LoRA, prefix-tuning) of one shared encoder, batching their queries together.
 *
 *   import { buildServer, listen } from '@tessera/pets';
 *   const app = await buildServer({ modelDir: './bert-base', paramsRoot: './tasks' });
 *   await listen(app, { port: 8001 });
 */
export { buildServer, listen, type ListenOptions, type ServerOptions } from './server.js';
export { defaultDemoDir, DEMO_MODEL_NAME, DEMO_TASKS, type Demo, ensureDemo } from './demo.js';
export { type CliConfig, DEFAULTS, LAYOUTS, parseCli, SCHEDULINGS, STRATEGIES, USAGE, UsageError } from './config.js';
export { type ClassifyEnd, type EngineOptions, PetsEngineClient } from './engine/client.js';
export { EngineError, EngineUnavailableError } from './engine/errors.js';
export type {
  ClassifyResult,
  CostSummary,
  EncodedInput,
  EngineStats,
  MacroBatchRecord,
  MemorySummary,
  ModelSummary,
  PlanRecord,
  RegisterTask,
  StartupTask,
  TaskSummary,
} from './engine/protocol.js';
export { ApiError, type ApiErrorBody, toApiError } from './api/errors.js';
export { encodeClassifyInputs, type InputLimits, softmax } from './api/inputs.js';
export { PetsMetrics } from './plugins/metrics.js';
export {
  ANALYTIC_FLOPS_PER_MS,
  ANALYTIC_FORWARD_MS_PER_LAYER,
  ANALYTIC_PET_LAUNCH_MS,
  analyticCostParams,
  costTablesJson,
  type CostTablesJson,
  MAX_MACRO,
  MAX_MINI,
  tablesModel,
} from './engine/cost.js';
