/**
 * The composition root. A request's path through the app:
 *
 *   routes/           HTTP endpoints (completions, chat, models, adapters, health, metrics)
 *     → openai/       schemas, the chat template, model-name resolution, the shared generation path, SSE
 *       → engine/     EngineClient (this thread) ⇄ protocol ⇄ worker.ts (engine thread: model, KV cache,
 *                     adapter cache, SGMV delta, continuous batcher)
 *   plugins/          cross-cutting: the engine and its decorators, metrics, OpenAI-style errors
 *
 * `buildServer` returns a ready fastify instance (the engine worker is up; tests drive it with `inject` or
 * `listen`); `listen` adds the graceful shutdown: on SIGINT/SIGTERM stop accepting, let in-flight requests and
 * streams finish, then stop the engine worker.
 */
import { readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { type TypeBoxTypeProvider, TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, type FastifyServerOptions } from 'fastify';

import type { RedisOptions } from '@tessera/cluster';

import { gracefulClose, listenWithGrace } from '@tessera/server-kit';

import { MIB } from './engine/client.js';
import { enginePlugin } from './plugins/engine.js';
import { errorsPlugin } from './plugins/errors.js';
import { metricsPlugin } from './plugins/metrics.js';
import adapterRoutes, { adapterNameProblem } from './routes/adapters.js';
import chatCompletionRoutes from './routes/chat-completions.js';
import completionRoutes from './routes/completions.js';
import healthRoutes from './routes/health.js';
import metricsRoutes from './routes/metrics.js';
import modelRoutes from './routes/models.js';

export interface ServerOptions {
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
  /** Serve /v1/load_lora_adapter and /v1/unload_lora_adapter (default true). */
  adapterAdmin?: boolean | undefined;
  /** When set, runtime-loaded adapters must live inside this directory. */
  adapterRoot?: string | undefined;
  /** fastify's logger option (default: off). */
  logger?: FastifyServerOptions['logger'];
  /** How long closing waits for the engine worker to stop before terminating it (default 10 s). */
  engineShutdownTimeoutMs?: number | undefined;
  /**
   * Cluster frontend (`--role frontend`): no engine in this process; requests go through the Punica scheduler on
   * this Redis to the worker processes. Runtime adapter loading is off (workers register adapters at start).
   */
  cluster?: { redis: RedisOptions } | undefined;
}

/** The adapters in `dir`: one per subdirectory (hidden ones skipped), named after it, in name order. */
export function discoverAdapters(dir: string): { name: string; path: string }[] {
  const root = resolve(dir);
  return readdirSync(root, { withFileTypes: true })
    .filter((d) => !d.name.startsWith('.') && (d.isDirectory() || (d.isSymbolicLink() && statSync(join(root, d.name)).isDirectory())))
    .map((d) => {
      const problem = adapterNameProblem(d.name);
      if (problem) throw new Error(`adapter directory ${join(root, d.name)}: its name ${problem}`);
      return { name: d.name, path: join(root, d.name) };
    })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
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

  // pluginTimeout 0: the engine plugin loads the model and the start-up adapters before it resolves; that takes as
  // long as the model and the machine make it, and a worker that fails rejects the start on its own.
  const app = Fastify({ logger: options.logger ?? false, forceCloseConnections: 'idle', pluginTimeout: 0 })
    .withTypeProvider<TypeBoxTypeProvider>()
    .setValidatorCompiler(TypeBoxValidatorCompiler);

  await app.register(gracefulClose({ name: 'tessera-punica-graceful-close' }));
  await app.register(errorsPlugin);
  await app.register(enginePlugin, {
    modelDir: options.modelDir,
    ...(options.modelName !== undefined ? { modelName: options.modelName } : {}),
    adapters,
    engine: {
      maxBatch,
      kvBudgetBytes: (options.kvBudgetMiB ?? 64) * MIB,
      adapterBudgetBytes: (options.adapterBudgetMiB ?? 64) * MIB,
      hostAdapterBudgetBytes: (options.hostAdapterBudgetMiB ?? 256) * MIB,
      threads: options.threads ?? null,
      ...(options.engineShutdownTimeoutMs !== undefined ? { shutdownTimeoutMs: options.engineShutdownTimeoutMs } : {}),
    },
    cluster: options.cluster,
  });
  await app.register(metricsPlugin, { maxLora: maxBatch });

  await app.register(completionRoutes);
  await app.register(chatCompletionRoutes);
  await app.register(modelRoutes);
  if ((options.adapterAdmin ?? true) && !options.cluster) await app.register(adapterRoutes, { adapterRoot: options.adapterRoot });
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
 * accepting connections, let in-flight requests and streams finish, then stop the engine worker; exit when done
 * or after `graceMs`. A second signal exits at once. Resolves with the address.
 */
export async function listen(app: FastifyInstance, options: ListenOptions = {}): Promise<string> {
  return listenWithGrace(app, { host: options.host ?? '127.0.0.1', port: options.port ?? 8000, ...(options.graceMs === undefined ? {} : { graceMs: options.graceMs }) });
}
