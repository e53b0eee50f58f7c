/**
 * The engine plugin: starts the engine worker and decorates the app with what the routes need:
 *   app.engine       PetsEngineClient (the worker: shared model, task manager, PET engine, batch window)
 *   app.tokenizer    the shared model's tokenizer, on the HTTP thread (inputs are tokenized and their limits checked
 *                    before anything reaches the engine; it is pure JS, so this thread never loads the addon)
 *   app.modelInfo    the shared model's tag, limits, device and the PET types the engine runs
 *   app.inputLimits  what a classify request may hold
 * Its onClose hook stops the worker. Fastify runs it after the HTTP server stopped accepting connections and
 * drained the in-flight requests, so no request loses its engine mid-way.
 */
import { resolve } from 'node:path';

import { readHfConfig, TextTokenizer } from '@tessera/engine';

import { definePlugin } from '@tessera/server-kit';

import type { InputLimits } from '../api/inputs.js';
import { type EngineOptions, PetsEngineClient } from '../engine/client.js';

export interface EnginePluginOptions {
  engine: EngineOptions;
  /** --max-input-tokens (default: the model's max positions). */
  maxInputTokens: number | undefined;
  maxBatchInputs: number;
}

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
    engine: PetsEngineClient;
    tokenizer: TextTokenizer;
    modelInfo: ModelInfo;
    inputLimits: InputLimits;
  }
}

export const enginePlugin = definePlugin<EnginePluginOptions>(
  async (app, options) => {
    const modelDir = resolve(options.engine.modelDir);
    // Checked here, before a worker starts: a decoder or a missing file is a configuration error with a clear message.
    const config = readHfConfig(modelDir);
    if (config.family !== 'encoder') throw new Error(`${modelDir} holds a ${config.architecture}; PetS serves BERT-style encoders (the shared model of its tasks)`);
    const tokenizer = TextTokenizer.fromDir(modelDir);

    app.log.info({ model: modelDir, tag: options.engine.tag }, 'starting the engine worker');
    const engine = await PetsEngineClient.start({ ...options.engine, modelDir });
    app.log.info({ device: engine.model.device, cost: engine.cost.source, tasks: engine.startupTasks.length }, 'engine ready');
    engine.on('crash', (err) => app.log.error({ err }, 'the engine worker crashed; /health reports unhealthy'));

    app.decorate('engine', engine);
    app.decorate('tokenizer', tokenizer);
    app.decorate('modelInfo', {
      tag: engine.model.tag,
      dir: modelDir,
      maxPositions: config.maxPositions,
      typeVocabSize: config.typeVocabSize,
      device: engine.model.device,
      petTypes: engine.model.petTypes,
    });
    app.decorate('inputLimits', {
      maxPositions: config.maxPositions,
      maxInputTokens: options.maxInputTokens ?? config.maxPositions,
      maxBatchInputs: options.maxBatchInputs,
      typeVocabSize: config.typeVocabSize,
    });
    app.addHook('onClose', async () => {
      app.log.info('stopping the engine worker');
      await engine.close();
    });
  },
  { name: 'tessera-pets-engine' },
);
