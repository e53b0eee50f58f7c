/**
 * @tessera/punica: an OpenAI-compatible multi-LoRA server (Punica on one machine) on fastify.
 *
 *   import { buildServer, listen } from '@tessera/punica';
 *   const app = await buildServer({ modelDir: './my-llama', adaptersDir: './adapters' });
 *   await listen(app, { port: 8000 });
 */
export { buildServer, discoverAdapters, listen, type ListenOptions, MIB, type ServerOptions } from './server.js';
export { defaultDemoDir, DEMO_ADAPTERS, DEMO_MODEL_NAME, type Demo, ensureDemo } from './demo.js';
export { type CliConfig, parseCli, USAGE, UsageError } from './config.js';
export { type AdapterNotice, type AdapterStatus, type EngineStats, type ModelSummary, type PunicaHost, type PunicaProtocol, startWorkerHost, type WorkerInit } from './engine/protocol.js';
export { connectClusterFrontend } from './cluster/frontend.js';
export { punicaErrors, requestError } from './openai/errors.js';
export { punicaMetrics } from './metrics.js';
