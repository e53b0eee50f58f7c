/**
 * The composition root. A request's path through the app:
 *
 *   server-kit     /v1/completions and /v1/chat/completions (OpenAI's schemas, chat template, SSE), /health, /metrics
 *   routes/        Punica's endpoints: /v1/models (adapters with lineage and residency), runtime adapter loading
 *     → openai/    model-name resolution (base, adapter, base:adapter), error wording, the model card schemas
 *       → PunicaHost (engine/protocol.ts): the host protocol's front side, served by
 *           the engine worker thread (server-kit's WorkerEngineClient ⇄ engine/worker.ts: model, KV cache,
 *           adapter cache, SGMV delta, EngineLoop), or, with `cluster`, the Punica scheduler and worker processes
 *           on Redis (cluster/frontend.ts)
 *
 * `buildServer` returns a ready fastify instance from server-kit's createTesseraServer (the engine is up; tests drive
 * it with `inject` or `listen`); `listen` adds the graceful shutdown: on SIGINT/SIGTERM stop accepting, let
 * in-flight requests and streams finish, then stop the engine worker.
 */
import { basename, resolve } from 'node:path';

import type { FastifyInstance } from 'fastify';

import type { RedisOptions } from '@tessera/cluster';
import { readHfConfig, TextTokenizer } from '@tessera/engine';
import { createTesseraServer, engineHealth, listenWithGrace, type ListenWithGraceOptions, ModelRegistry, openaiGenerationRoutes, type ServerBaseOptions, subdirectories } from '@tessera/server-kit';

import { connectClusterFrontend } from './cluster/frontend.js';
import { type PunicaHost, startWorkerHost } from './engine/protocol.js';
import { punicaMetrics } from './metrics.js';
import { punicaErrors, requestError } from './openai/errors.js';
import adapterRoutes, { adapterNameProblem } from './routes/adapters.js';
import modelRoutes from './routes/models.js';

export const MIB = 1024 * 1024;

declare module 'fastify' {
  interface FastifyInstance {
    /** The engine, over a worker thread or Redis. */
    engine: PunicaHost;
    /** The base model's name and the registered adapters. */
    models: ModelRegistry;
    /** The model's tokenizer, on the HTTP thread: prompts and limits are checked before anything reaches the engine (pure JS: this thread never loads the addon). */
    tokenizer: TextTokenizer;
  }
}

export interface ServerOptions extends ServerBaseOptions {
  /** A Hugging Face Llama-style model directory. */
  modelDir: string;
  /** The base model's id in the API (default: the directory's name). */
  modelName?: string | undefined;
  /** Adapters to register at start-up. */
  adapters?: readonly { name: string; path: string }[] | undefined;
  /** A directory whose subdirectories are PEFT adapters, registered at start-up under their directory names. */
  adaptersDir?: string | undefined;
  /** Most sequences per engine step (default 32). */
  maxBatch?: number | undefined;
  /** KV-cache size in MiB (default 64). */
  kvBudgetMiB?: number | undefined;
  /** Device memory for resident adapters in MiB (default 64). */
  adapterBudgetMiB?: number | undefined;
  /** Host cache of read adapters in MiB (default 256; 0 disables). */
  hostAdapterBudgetMiB?: number | undefined;
  /** CPU kernel threads of the engine (default: TESSERA_THREADS or all cores). */
  threads?: number | undefined;
  /** 'int8': the model's linear weights as Q8_0 int8, quantized at load (default 'f32': as stored). */
  weights?: 'f32' | 'int8' | undefined;
  /** Reuse the K/V of shared prompt prefixes within one base + adapter (default false). */
  prefixCache?: boolean | undefined;
  /** Admission across adapters: 'fcfs' (default) or 'vtc' (S-LoRA's virtual token counter). */
  fairness?: 'fcfs' | 'vtc' | undefined;
  /** Serve /v1/load_lora_adapter and /v1/unload_lora_adapter (default true). */
  adapterAdmin?: boolean | undefined;
  /** When set, runtime-loaded adapters must live inside this directory. */
  adapterRoot?: string | undefined;
  /**
   * Cluster frontend (`--role frontend`): no engine in this process; requests go through the Punica scheduler on
   * this Redis to the worker processes. Runtime adapter loading is off (workers register adapters at start).
   */
  cluster?: { redis: RedisOptions } | undefined;
}

/** The adapters in `dir`: one per subdirectory (hidden ones skipped), named after it, in name order. */
export function discoverAdapters(dir: string): { name: string; path: string }[] {
  return subdirectories(dir).map((a) => {
    const problem = adapterNameProblem(a.name);
    if (problem) throw new Error(`adapter directory ${a.path}: its name ${problem}`);
    return a;
  });
}

export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const adapters = [...(options.adapters ?? []), ...(options.adaptersDir ? discoverAdapters(options.adaptersDir) : [])];
  // Names are checked before the engine starts: a bad one is a configuration error, not a worker failure.
  const seen = new Set<string>();
  for (const a of adapters) {
    const problem = adapterNameProblem(a.name);
    if (problem) throw new Error(`adapter name ${JSON.stringify(a.name)} (${a.path}) ${problem}`);
    if (seen.has(a.name)) throw new Error(`adapter name ${JSON.stringify(a.name)} is given twice`);
    seen.add(a.name);
  }
  const maxBatch = options.maxBatch ?? 32;
  const modelDir = resolve(options.modelDir);
  const config = readHfConfig(modelDir);
  if (config.family !== 'decoder') throw new Error(`${modelDir} holds a ${config.architecture}; the Punica server serves decoder (causal LM) models`);
  const tokenizer = TextTokenizer.fromDir(modelDir);
  const name = options.modelName ?? basename(modelDir);

  return createTesseraServer<PunicaHost>({
    name: 'tessera-punica',
    logger: options.logger,
    errors: punicaErrors,
    async engine(app) {
      let engine: PunicaHost;
      if (options.cluster) {
        app.log.info({ model: modelDir, adapters: adapters.length }, 'connecting to the cluster scheduler on Redis');
        engine = await connectClusterFrontend({ redis: options.cluster.redis, modelDir, adapters });
      } else {
        app.log.info({ model: modelDir, adapters: adapters.length }, 'starting the engine worker');
        const init = {
          modelDir,
          adapters,
          maxBatch,
          kvBudgetBytes: (options.kvBudgetMiB ?? 64) * MIB,
          adapterBudgetBytes: (options.adapterBudgetMiB ?? 64) * MIB,
          hostAdapterBudgetBytes: (options.hostAdapterBudgetMiB ?? 256) * MIB,
          threads: options.threads ?? null,
          weights: options.weights,
          prefixCache: options.prefixCache,
          fairness: options.fairness,
        };
        engine = await startWorkerHost(init, options.engineShutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.engineShutdownTimeoutMs } : {});
      }
      app.log.info({ device: engine.ready.model.device, kvPages: engine.ready.model.kvPages }, 'engine ready');
      engine.on('crash', (err) => app.log.error({ err }, 'the engine worker crashed; /health reports unhealthy'));
      return engine;
    },
    // Answered on the HTTP thread from the host's state, so it stays fast while the engine computes.
    health: (engine) => engineHealth(engine, { model: name, device: engine.ready.model.device }),
    metrics: (registry, engine) => punicaMetrics(registry, engine, { model: name, maxLora: maxBatch }),
    async routes(app, engine) {
      const now = Math.floor(Date.now() / 1000);
      const models = new ModelRegistry({ name, root: modelDir, maxModelLen: config.maxPositions, created: now });
      // In the order they were given (the worker registers them concurrently).
      const started = new Map(engine.ready.adapters.map((a) => [a.name, a]));
      for (const { name: adapter } of adapters) {
        const a = started.get(adapter);
        if (a) models.add({ name: a.name, path: a.path, rank: a.rank, created: now });
      }
      app.decorate('models', models);
      app.decorate('tokenizer', tokenizer);
      await app.register(openaiGenerationRoutes, {
        backend: {
          resolve: (model) => models.resolve(model),
          tokenizer,
          contextLength: config.maxPositions,
          vocabSize: config.vocabSize,
          submit: (request) => engine.submit({ request, attempt: 0, generated: [] }),
          cancel: (id) => engine.cancel(id),
          requestError,
          errors: punicaErrors,
        },
      });
      await app.register(modelRoutes);
      if ((options.adapterAdmin ?? true) && !options.cluster) await app.register(adapterRoutes, { adapterRoot: options.adapterRoot });
    },
  });
}

export type ListenOptions = Partial<ListenWithGraceOptions>;

/** Listens (default 127.0.0.1:8000) with server-kit's graceful shutdown; resolves with the address. */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  return listenWithGrace(app, { host: '127.0.0.1', port: 8000, ...options });
}
