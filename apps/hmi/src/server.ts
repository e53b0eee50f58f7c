/**
 * The composition root. A request's path through the app (HMI's three components, hmi.md §4):
 *
 *   routes/        HTTP: manage (domains, tenants, jobs: the Manager) and classify (the Dispatcher)
 *   manager/       operations a–e as jobs (jobs/: in-process or BullMQ), the tenant store with exact bytes
 *   policy/        the dispatcher (A11): pure bookkeeping, no tensors
 *   engine/        the PLOT service (plot-store), training (engine's trainer), the pipelined runner (A12:
 *                  adapter-swap's LayerwisePipeline over pet-ops' AdapterStackBuffer and the staged encoder)
 *
 * `buildServer` returns a ready fastify instance (model loaded, root PLOT built, job worker running; tests drive it
 * with `inject` or `listen`); `listen` adds the graceful shutdown.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

import { readHfConfig } from '@tessera/engine';
import { setThreads } from '@tessera/native';
import { createTesseraServer, engineHealth, errorReply, listenWithGrace, type ListenWithGraceOptions, type ServerBaseOptions } from '@tessera/server-kit';
import type { FastifyInstance } from 'fastify';

import { DEFAULTS, type PipelineOption } from './config.js';
import { HmiEngine } from './engine/hmi-engine.js';
import { hmiErrors } from './errors.js';
import { BullJobQueue } from './jobs/bullmq.js';
import { InProcessJobQueue } from './jobs/in-process.js';
import type { JobError, JobQueue } from './jobs/queue.js';
import { hmiMetrics } from './metrics.js';
import classifyRoutes from './routes/classify.js';
import manageRoutes from './routes/manage.js';

declare module 'fastify' {
  interface FastifyInstance {
    engine: HmiEngine;
    hmiLimits: { maxInputs: number };
  }
}

export interface ServerOptions extends ServerBaseOptions {
  /** A Hugging Face BERT-style encoder directory: the root model. */
  modelDir: string;
  lowerLayers?: number | undefined;
  generalCorpus?: readonly string[] | undefined;
  alpha?: number | undefined;
  minCorpusTokens?: number | undefined;
  bottleneck?: number | undefined;
  fptSteps?: number | undefined;
  ftSteps?: number | undefined;
  fptLr?: number | undefined;
  ftLr?: number | undefined;
  /** BullMQ on this Redis (default: jobs in-process). */
  redis?: { url: string; prefix: string } | undefined;
  maxBatch?: number | undefined;
  slots?: number | undefined;
  /** Tenants kept on the device between batches (the device LRU; default 0). */
  deviceCache?: number | undefined;
  pipeline?: PipelineOption | undefined;
  maxInputs?: number | undefined;
  threads?: number | undefined;
  /** The directory of tenant files; tenants persisted there come back at start. Default: a scratch directory removed at close. */
  tenantsDir?: string | undefined;
  /** Host LRU budget of the tenants' adapters and heads, in bytes (default unlimited). */
  hostBudgetBytes?: number | undefined;
}

/** A job failure in the API's words: the error's message and public code. */
export function describeJobError(err: unknown): JobError {
  const r = errorReply(err, hmiErrors());
  return { message: err instanceof Error ? err.message : String(err), code: r.code };
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const modelDir = resolve(options.modelDir);
  const config = readHfConfig(modelDir);
  if (config.family !== 'encoder') throw new Error(`${modelDir} holds a ${config.architecture}; HMI serves BERT-style encoders`);
  if (options.threads !== undefined) setThreads(options.threads);
  const lowerLayers = options.lowerLayers ?? Math.floor(config.numLayers / 2);
  const bottleneck = options.bottleneck ?? Math.max(1, Math.round(config.hiddenSize / 8));
  const batch = DEFAULTS.trainBatch;

  return createTesseraServer<HmiEngine>({
    name: 'tessera-hmi',
    logger: options.logger,
    errors: hmiErrors(),
    async engine(app) {
      const queue: JobQueue = options.redis ? await BullJobQueue.connect(options.redis, describeJobError) : new InProcessJobQueue(describeJobError);
      const scratch = options.tenantsDir === undefined;
      const tenantsDir = scratch ? mkdtempSync(join(tmpdir(), 'tessera-hmi-tenants-')) : resolve(options.tenantsDir!);
      app.log.info({ model: modelDir, jobs: queue.mode, tenants_dir: tenantsDir }, 'starting the HMI engine');
      try {
        return await HmiEngine.start({
          modelDir, lowerLayers, bottleneck, queue,
          generalCorpus: options.generalCorpus ?? [],
          alpha: options.alpha ?? DEFAULTS.alpha,
          minCorpusTokens: options.minCorpusTokens ?? DEFAULTS.minCorpusTokens,
          fpt: { steps: options.fptSteps ?? DEFAULTS.fptSteps, batchSize: batch, lr: options.fptLr ?? DEFAULTS.fptLr, seed: 1 },
          ft: { steps: options.ftSteps ?? DEFAULTS.ftSteps, batchSize: batch, lr: options.ftLr ?? DEFAULTS.ftLr, seed: 1 },
          maxBatch: options.maxBatch ?? DEFAULTS.maxBatch,
          slots: options.slots ?? DEFAULTS.slots,
          deviceCache: options.deviceCache ?? DEFAULTS.deviceCache,
          pipeline: options.pipeline ?? DEFAULTS.pipeline,
          tenantsDir, hostBudgetBytes: options.hostBudgetBytes, durableTenants: !scratch, removeTenantsDir: scratch,
        });
      } catch (err) {
        await queue.close();
        if (scratch) rmSync(tenantsDir, { recursive: true, force: true });
        throw err;
      }
    },
    health: (engine) =>
      engineHealth(engine, {
        model: modelDir,
        lower_layers: engine.plot.lowerLayers,
        upper_layers: engine.runner.upperLayers,
        jobs: engine.queue.mode,
        domains: engine.manager.domains.size,
        tenants: engine.tenants.size,
        dormant_tenants: engine.tenants.dormantRecords().length,
        tenants_dir: engine.tenants.files.dir,
      }),
    metrics: (registry, engine) => hmiMetrics(registry, engine),
    async routes(app) {
      app.decorate('hmiLimits', { maxInputs: options.maxInputs ?? DEFAULTS.maxInputs });
      await app.register(manageRoutes);
      await app.register(classifyRoutes);
    },
  });
}

export type ListenOptions = Partial<ListenWithGraceOptions>;

/** Listens (default 127.0.0.1:8002) with server-kit's graceful shutdown. Resolves with the address. */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  return listenWithGrace(app, { host: options.host ?? DEFAULTS.host, port: options.port ?? DEFAULTS.port, ...options });
}
