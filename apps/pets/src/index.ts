/**
 * @tessera/pets: PetS on one machine, a fastify server that serves many parameter-efficient tasks (Adapter,
 * MaskBert, Diff-Pruning, BitFit, LoRA, prefix-tuning) of one shared encoder, batching their queries together.
 *
 *   import { buildServer, listen } from '@tessera/pets';
 *   const app = await buildServer({ modelDir: './bert-base', paramsRoot: './tasks' });
 *   await listen(app, { port: 8001 });
 */
export { buildServer, listen, type ListenOptions, type ModelInfo, type ServerOptions } from './server.js';
export { defaultDemoDir, DEMO_MODEL_NAME, DEMO_TASKS, type Demo, ensureDemo } from './demo.js';
export { type CliConfig, DEFAULTS, LAYOUTS, parseCli, SCHEDULINGS, STRATEGIES, USAGE, UsageError } from './config.js';
export { type EngineOptions, MIB, PetsEngineClient } from './engine/client.js';
export type {
  ClassifyResult,
  CostSummary,
  EncodedInput,
  EngineStats,
  MacroBatchRecord,
  MemorySummary,
  ModelSummary,
  PetsProtocol,
  PlanRecord,
  RegisterTask,
  StartupTask,
  TaskSummary,
} from './engine/protocol.js';
export { ApiError, petsErrors } from './api/errors.js';
export { encodeClassifyInputs, type InputLimits, softmax } from './api/inputs.js';
export { PetsHostMetrics as PetsMetrics } from '@tessera/pet-ops';
