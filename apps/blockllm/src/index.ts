/**
 * @tessera/blockllm: BlockLLM on one machine — an OpenAI-compatible server over many fine-tuned applications of one
 * foundation, served as chains of shared blocks (@tessera/block-zoo) with per-block batching.
 *
 *   import { buildServer, listen } from '@tessera/blockllm';
 *   const app = await buildServer({ modelDir: './my-llama', zooDir: './zoo' });
 *   await listen(app, { port: 8000 });
 */
export { buildServer, listen, type ListenOptions, type ServerOptions } from './server.js';
export { DEMO_SIZES, type DemoSize, defaultDemoDir, DEMO_MODEL_NAME, type Demo, ensureDemo, generateDemoFiles, populateDemoZoo, writeFullFineTune } from './demo.js';
export { type CliConfig, parseCli, USAGE, UsageError } from './config.js';
export type { AppSummary, BlockllmHost, BlockllmProtocol, BlockSummary, EngineStats, IngestArgs, MemorySplit, ModelSummary, WorkerInit, ZooListing } from './engine/protocol.js';
export { startWorkerHost } from './engine/protocol.js';
export { BlockllmRequestError, blockllmErrors } from './errors.js';
export { blockllmMetrics, quantile } from './metrics.js';
