/**
 * @tessera/punica: an OpenAI-compatible multi-LoRA server (Punica on one machine) on fastify.
 *
 *   import { buildServer, listen } from '@tessera/punica';
 *   const app = await buildServer({ modelDir: './my-llama', adaptersDir: './adapters' });
 *   await listen(app, { port: 8000 });
 */
export { buildServer, discoverAdapters, listen, type ListenOptions, type ServerOptions } from './server.js';
export { defaultDemoDir, DEMO_ADAPTERS, DEMO_MODEL_NAME, type Demo, ensureDemo } from './demo.js';
export { type CliConfig, parseCli, USAGE, UsageError } from './config.js';
export { EngineClient, type EngineEvent, type EngineOptions, EngineRequest, type RequestEnd } from './engine/client.js';
export { EngineError, EngineUnavailableError } from './engine/errors.js';
export type { AdapterStatus, EngineStats, FinishedResult, ModelSummary, SubmitRequest } from './engine/protocol.js';
export { ApiError, type OpenAiErrorBody } from './openai/errors.js';
export { renderChat } from './openai/chat-template.js';
export { ModelRegistry } from './openai/model-registry.js';
export { PunicaMetrics } from './plugins/metrics.js';
