/**
 * The composition root. A request's path through the app (PetS's pipeline, pets.md §3.1, Fig. 4):
 *
 *   routes/        HTTP endpoints: tasks (Task Register / Loader), classify, health, metrics
 *     → api/       schemas, preprocessing (tokenize, check limits), errors and their HTTP statuses
 *       → engine/  PetsEngineClient (this thread) ⇄ protocol ⇄ worker.ts (engine thread: TaskManager, the batch
 *                  window and its coordinated-batching planner, PetEngine running macro-batches)
 *   plugins/       cross-cutting: the engine and its decorators, metrics, error bodies, graceful close
 *
 * `buildServer` returns a ready fastify instance (the engine worker is up, the start-up tasks are registered; tests
 * drive it with `inject` or `listen`); `listen` adds the graceful shutdown: on SIGINT/SIGTERM stop accepting, let
 * in-flight requests finish, then stop the engine worker.
 */
import { readFileSync } from 'node:fs';
import { basename, resolve } from 'node:path';

import multipart from '@fastify/multipart';
import type { FastifyInstance } from 'fastify';

import { readHfConfig, TextTokenizer } from '@tessera/engine';
import { createTesseraServer, engineHealth, listenWithGrace, type ListenWithGraceOptions, realDirectory, type ServerBaseOptions } from '@tessera/server-kit';

import { petsErrors } from './api/errors.js';
import type { InputLimits } from './api/inputs.js';
import { DEFAULTS, type ServingOptions } from './config.js';
import { MIB, PetsEngineClient } from './engine/client.js';
import type { StartupTask, WorkerInit } from './engine/protocol.js';
import { petsMetrics } from './plugins/metrics.js';
import classifyRoutes from './routes/classify.js';
import taskRoutes from './routes/tasks.js';

export interface ModelInfo {
  tag: string;
  dir: string;
  maxPositions: number;
  typeVocabSize: number;
  device: string;
  petTypes: readonly string[];
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine worker: shared model, task manager, PET engine, batch window. */
    engine: PetsEngineClient;
    /** The shared model's tokenizer, on the HTTP thread (pure JS: this thread never loads the addon). */
    tokenizer: TextTokenizer;
    modelInfo: ModelInfo;
    inputLimits: InputLimits;
  }
}

export interface ServerOptions extends Partial<{ [K in keyof ServingOptions]: ServingOptions[K] | undefined }>, ServerBaseOptions {
  /** A Hugging Face BERT-style encoder directory: the shared model. */
  modelDir: string;
  /** Tasks registered (and possibly loaded) at start-up, from parameter files on disk. */
  startupTasks?: readonly StartupTask[] | undefined;
  /** Start-up progress lines (profiling); default: none. */
  onProgress?: ((line: string) => void) | undefined;
}

/** The cost model the worker will use: tables read here (a bad file fails start-up naming it), profiling, or analytic. */
function costOption(options: ServerOptions): WorkerInit['cost'] {
  if (options.costTables !== undefined && options.profile) throw new Error('costTables and profile exclude each other');
  if (options.costTables !== undefined) {
    const file = resolve(options.costTables);
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new Error(`cost tables ${file}: ${(err as Error).message}`);
    }
    return { kind: 'tables', file, json };
  }
  if (options.profile) return { kind: 'profile', out: options.profileOut === undefined ? null : resolve(options.profileOut) };
  return { kind: 'analytic' };
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const modelDir = resolve(options.modelDir);
  const maxParamsBytes = Math.round((options.maxParamsMiB ?? DEFAULTS.maxParamsMiB) * MIB);
  const paramsRoot = options.paramsRoot === undefined ? null : realDirectory(options.paramsRoot, '--params-root');
  // Checked before a worker starts: a decoder or a missing file is a configuration error with a clear message.
  const config = readHfConfig(modelDir);
  if (config.family !== 'encoder') throw new Error(`${modelDir} holds a ${config.architecture}; PetS serves BERT-style encoders (the shared model of its tasks)`);
  const tokenizer = TextTokenizer.fromDir(modelDir);
  const cost = costOption(options);
  let petTypes: readonly string[] = [];

  return createTesseraServer<PetsEngineClient>({
    name: 'tessera-pets',
    logger: options.logger,
    errors: petsErrors({ knownPetTypes: () => petTypes, maxParamsBytes }),
    async setup(app) {
      // One file (the parameters) and one small field (the metadata) per registration; anything bigger is refused.
      await app.register(multipart, { limits: { fileSize: maxParamsBytes, files: 1, fields: 4, fieldSize: 64 * 1024, parts: 8 } });
    },
    async engine(app) {
      app.log.info({ model: modelDir }, 'starting the engine worker');
      const engine = await PetsEngineClient.start({
        modelDir,
        tag: options.tag ?? basename(modelDir),
        budgetBytes: Math.round((options.budgetMiB ?? DEFAULTS.budgetMiB) * MIB),
        strategy: options.strategy ?? DEFAULTS.strategy,
        layout: options.layout ?? DEFAULTS.layout,
        scheduling: { mode: options.scheduling ?? DEFAULTS.scheduling, streams: options.streams ?? DEFAULTS.streams },
        windowMs: options.windowMs ?? DEFAULTS.windowMs,
        windowQueries: options.windowQueries ?? DEFAULTS.windowQueries,
        cost,
        threads: options.threads ?? null,
        startupTasks: (options.startupTasks ?? []).map((t) => ({ ...t, path: resolve(t.path) })),
        ...(options.onProgress ? { onProgress: options.onProgress } : {}),
        ...(options.engineShutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.engineShutdownTimeoutMs } : {}),
      });
      app.log.info({ device: engine.model.device, cost: engine.cost.source, tasks: engine.startupTasks.length }, 'engine ready');
      engine.client.on('crash', (err) => app.log.error({ err }, 'the engine worker crashed; /health reports unhealthy'));
      petTypes = engine.model.petTypes;
      return engine;
    },
    // Answered on the HTTP thread from the client's state (the worker reports every change of its tasks).
    health: (engine) =>
      engineHealth(engine, {
        ready: engine.healthy,
        shared_model: engine.model.tag,
        device: engine.model.device,
        tasks_registered: engine.memory.registeredTasks,
        tasks_loaded: engine.memory.loadedTasks,
      }),
    metrics: (registry, engine) => petsMetrics(registry, engine),
    async routes(app, engine) {
      app.decorate('tokenizer', tokenizer);
      app.decorate('modelInfo', { tag: engine.model.tag, dir: modelDir, maxPositions: config.maxPositions, typeVocabSize: config.typeVocabSize, device: engine.model.device, petTypes: engine.model.petTypes });
      app.decorate('inputLimits', {
        maxPositions: config.maxPositions,
        maxInputTokens: options.maxInputTokens ?? config.maxPositions,
        maxBatchInputs: options.maxBatchInputs ?? DEFAULTS.maxBatchInputs,
        typeVocabSize: config.typeVocabSize,
      });
      await app.register(taskRoutes, { paramsRoot, maxParamsBytes });
      await app.register(classifyRoutes);
    },
  });
}

export type ListenOptions = Partial<ListenWithGraceOptions>;

/**
 * Listens (default 127.0.0.1:8001) with server-kit's graceful shutdown: on SIGINT or SIGTERM, in-flight requests
 * finish, then the engine worker stops. Resolves with the address.
 */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  const { host = DEFAULTS.host, port = DEFAULTS.port, graceMs } = options;
  return listenWithGrace(app, { host, port, ...(graceMs === undefined ? {} : { graceMs }) });
}
