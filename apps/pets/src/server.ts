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
import { readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, resolve } from 'node:path';

import multipart from '@fastify/multipart';
import { type TypeBoxTypeProvider, TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';

import { gracefulClose, listenWithGrace } from '@tessera/server-kit';

import { DEFAULTS, type LayoutOption, type SchedulingOption, type StrategyOption } from './config.js';
import { MIB } from './engine/client.js';
import type { StartupTask, WorkerInit } from './engine/protocol.js';
import { enginePlugin } from './plugins/engine.js';
import { errorsPlugin } from './plugins/errors.js';
import { metricsPlugin } from './plugins/metrics.js';
import classifyRoutes from './routes/classify.js';
import healthRoutes from './routes/health.js';
import metricsRoutes from './routes/metrics.js';
import taskRoutes from './routes/tasks.js';

export interface ServerOptions {
  /** A Hugging Face BERT-style encoder directory: the shared model. */
  modelDir: string;
  /** The shared model's tag in the API (default: the directory's name). */
  tag?: string | undefined;
  /** `POST /v1/tasks {"path": …}` reads parameter files only inside this directory (default: path registration off). */
  paramsRoot?: string | undefined;
  /** The largest parameter file accepted, in MiB (default 64; fractions allowed). */
  maxParamsMiB?: number | undefined;
  /** Device memory for the shared model plus the loaded tasks, in MiB (default 1024; fractions allowed). */
  budgetMiB?: number | undefined;
  /** Batching strategy of each window (default 'auto'). */
  strategy?: StrategyOption | undefined;
  /** Batch layout in the engine (default 'padded', as PetS's dense batches). */
  layout?: LayoutOption | undefined;
  /** PET operator scheduling (default 'intensity': Algorithm 2). */
  scheduling?: SchedulingOption | undefined;
  /** PET operator streams (default 'dynamic'). */
  streams?: number | 'dynamic' | undefined;
  /** The batch window: closes `windowMs` after its first query, or at `windowQueries` queries (defaults 10, 128). */
  windowMs?: number | undefined;
  windowQueries?: number | undefined;
  /** Profiled α/β tables (a JSON file as --profile writes it) instead of the analytic cost model. */
  costTables?: string | undefined;
  /** Profile α/β tables at start-up (and write them to `profileOut` when given). */
  profile?: boolean | undefined;
  profileOut?: string | undefined;
  /** Longest input in tokens (default: the model's max positions). */
  maxInputTokens?: number | undefined;
  /** Most texts in one classify request (default 64). */
  maxBatchInputs?: number | undefined;
  /** CPU kernel threads of the engine (default: TESSERA_THREADS or all cores). */
  threads?: number | undefined;
  /** Tasks registered (and possibly loaded) at start-up, from parameter files on disk. */
  startupTasks?: readonly StartupTask[] | undefined;
  /** fastify's logger option (default: off). */
  logger?: FastifyServerOptions['logger'];
  /** Start-up progress lines (profiling); default: none. */
  onProgress?: ((line: string) => void) | undefined;
  /** How long closing waits for the engine worker to stop before terminating it (default 10 s). */
  engineShutdownTimeoutMs?: number | undefined;
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
  let paramsRoot: string | null = null;
  if (options.paramsRoot !== undefined) {
    paramsRoot = realpathSync(resolve(options.paramsRoot));
    if (!statSync(paramsRoot).isDirectory()) throw new Error(`--params-root ${paramsRoot} is not a directory`);
  }

  // pluginTimeout 0: the engine plugin loads the model (and with --profile measures cost tables) before it resolves;
  // that takes as long as the model and the machine make it, and a worker that fails rejects the start on its own.
  const app = Fastify({ logger: options.logger ?? false, forceCloseConnections: 'idle', pluginTimeout: 0 })
    .withTypeProvider<TypeBoxTypeProvider>()
    .setValidatorCompiler(TypeBoxValidatorCompiler);

  await app.register(gracefulClose({ name: 'tessera-pets-graceful-close' }));
  await app.register(errorsPlugin, { maxParamsBytes });
  // One file (the parameters) and one small field (the metadata) per registration; anything bigger is refused.
  await app.register(multipart, { limits: { fileSize: maxParamsBytes, files: 1, fields: 4, fieldSize: 64 * 1024, parts: 8 } });
  await app.register(enginePlugin, {
    engine: {
      modelDir,
      tag: options.tag ?? basename(modelDir),
      budgetBytes: Math.round((options.budgetMiB ?? DEFAULTS.budgetMiB) * MIB),
      strategy: options.strategy ?? DEFAULTS.strategy,
      layout: options.layout ?? DEFAULTS.layout,
      scheduling: { mode: options.scheduling ?? DEFAULTS.scheduling, streams: options.streams ?? DEFAULTS.streams },
      windowMs: options.windowMs ?? DEFAULTS.windowMs,
      windowQueries: options.windowQueries ?? DEFAULTS.windowQueries,
      cost: costOption(options),
      threads: options.threads ?? null,
      startupTasks: (options.startupTasks ?? []).map((t) => ({ ...t, path: resolve(t.path) })),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      ...(options.engineShutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.engineShutdownTimeoutMs } : {}),
    },
    maxInputTokens: options.maxInputTokens,
    maxBatchInputs: options.maxBatchInputs ?? DEFAULTS.maxBatchInputs,
  });
  await app.register(metricsPlugin);

  await app.register(taskRoutes, { paramsRoot, maxParamsBytes });
  await app.register(classifyRoutes);
  await app.register(healthRoutes);
  await app.register(metricsRoutes);

  await app.ready();
  return app;
}

export interface ListenOptions {
  host?: string;
  port?: number;
  /** How long a signal-triggered shutdown may take before the process exits anyway (default 30 s). */
  graceMs?: number;
}

/**
 * Listens and installs the graceful shutdown (close-with-grace): on SIGINT, SIGTERM or an uncaught error, stop
 * accepting connections, let in-flight requests finish, then stop the engine worker; exit when done or after
 * `graceMs`. A second signal exits at once. Resolves with the address.
 */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  return listenWithGrace(app, { host: options.host ?? DEFAULTS.host, port: options.port ?? DEFAULTS.port, ...(options.graceMs === undefined ? {} : { graceMs: options.graceMs }) });
}
