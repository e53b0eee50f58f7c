/**
 * @tessera/arlo: Arlo (ICPP '24) on one machine: a BERT-style encoder served by static-shape runtimes of several
 * lengths, with @tessera/length-scheduler's allocation and multi-level-queue dispatcher (fastify).
 *
 *   import { buildServer, listen } from '@tessera/arlo';
 *   const app = await buildServer({ modelDir: './my-bert', lengths: [64, 128, 256, 512] });
 *   await listen(app, { port: 8000 });
 */
export { buildServer, listen, type ServerOptions } from './server.js';
export { ArloService, type ArloServiceOptions, type InferResult, type ServiceTotals } from './service.js';
export { type CliConfig, parseCli, USAGE, UsageError } from './config.js';
export { DEMO_LENGTHS, DEMO_MODEL_NAME, defaultDemoDir, ensureDemo } from './demo.js';
export { arloMetrics } from './metrics.js';
export { connectClusterInstances, startClusterWorker, type ClusterInstancesOptions, type ClusterWorkerOptions } from './cluster/queues.js';
export * from './runtimes/index.js';
