/**
 * The engine plugin: starts the engine worker (or, as a cluster frontend, connects to the scheduler on Redis), and
 * decorates the app with what the routes need:
 *   app.engine          a GenerationEngine: EngineClient, or ClusterEngine in cluster mode
 *   app.models          ModelRegistry (the base model's name and the registered adapters)
 *   app.tokenizer       the model's tokenizer, on the HTTP thread (prompt tokens and limits are checked before
 *                       anything reaches the engine; it is pure JS, so the HTTP thread never loads the addon)
 *   app.modelInfo       context length and vocabulary size
 *   app.generationDeps  the bundle the generation routes pass around
 * Its onClose hook stops the worker. Fastify runs it after the HTTP server has stopped accepting connections
 * and drained the in-flight requests (streams included), so no request loses its engine mid-way.
 */
import { basename, resolve } from 'node:path';

import { readHfConfig, TextTokenizer } from '@tessera/engine';

import type { RedisOptions } from '@tessera/cluster';

import { definePlugin } from '@tessera/server-kit';

import { ClusterEngine } from '../cluster/cluster-engine.js';
import { EngineClient, type EngineOptions } from '../engine/client.js';
import type { GenerationEngine } from '../engine/generation-engine.js';
import type { GenerationDeps } from '../openai/generation.js';
import { ModelRegistry } from '../openai/model-registry.js';

export interface EnginePluginOptions {
  modelDir: string;
  /** The id clients use for the base model (default: the model directory's name). */
  modelName?: string;
  /** Adapters registered at start-up. */
  adapters: { name: string; path: string }[];
  engine: Omit<EngineOptions, 'modelDir' | 'adapters'>;
  /** Cluster frontend: requests go to the scheduler on this Redis instead of an engine in this process. */
  cluster?: { redis: RedisOptions } | undefined;
}

export interface ModelInfo {
  name: string;
  contextLength: number;
  vocabSize: number;
  device: string;
}

declare module 'fastify' {
  interface FastifyInstance {
    engine: GenerationEngine;
    models: ModelRegistry;
    tokenizer: TextTokenizer;
    modelInfo: ModelInfo;
    generationDeps: GenerationDeps;
  }
}

export const enginePlugin = definePlugin<EnginePluginOptions>(
  async (app, options) => {
    const modelDir = resolve(options.modelDir);
    const config = readHfConfig(modelDir);
    if (config.family !== 'decoder') throw new Error(`${modelDir} holds a ${config.architecture}; the Punica server serves decoder (causal LM) models`);
    const tokenizer = TextTokenizer.fromDir(modelDir);
    const name = options.modelName ?? basename(modelDir);

    let engine: GenerationEngine;
    if (options.cluster) {
      app.log.info({ model: modelDir, adapters: options.adapters.length }, 'connecting to the cluster scheduler on Redis');
      engine = await ClusterEngine.connect({ redis: options.cluster.redis, modelDir, adapters: options.adapters });
      app.log.info('cluster frontend ready');
    } else {
      app.log.info({ model: modelDir, adapters: options.adapters.length }, 'starting the engine worker');
      engine = await EngineClient.start({ ...options.engine, modelDir, adapters: options.adapters });
      app.log.info({ device: engine.model.device, kvPages: engine.model.kvPages }, 'engine ready');
    }

    const now = Math.floor(Date.now() / 1000);
    const models = new ModelRegistry({ name, root: modelDir, maxModelLen: config.maxPositions, created: now });
    // In the order they were given (the worker registers them concurrently).
    const started = new Map(engine.startupAdapters.map((a) => [a.name, a]));
    for (const { name: adapter } of options.adapters) {
      const a = started.get(adapter);
      if (a) models.add({ name: a.name, path: a.path, rank: a.rank, created: now });
    }

    const modelInfo: ModelInfo = { name, contextLength: config.maxPositions, vocabSize: config.vocabSize, device: engine.model.device };
    engine.on('crash', (err) => app.log.error({ err }, 'the engine worker crashed; /health reports unhealthy'));

    app.decorate('engine', engine);
    app.decorate('models', models);
    app.decorate('tokenizer', tokenizer);
    app.decorate('modelInfo', modelInfo);
    app.decorate('generationDeps', { engine, registry: models, contextLength: modelInfo.contextLength, vocabSize: modelInfo.vocabSize });
    app.addHook('onClose', async () => {
      app.log.info('stopping the engine worker');
      await engine.close();
    });
  },
  { name: 'tessera-punica-engine' },
);
