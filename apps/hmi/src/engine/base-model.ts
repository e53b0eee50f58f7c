/**
 * A root model for the demo and the tests: the project's generator (a seeded BERT-style encoder) plus a short
 * masked-LM pretraining of every layer on the general corpus — the platform's "PT" step (hmi.md §1.1).
 *
 * Why pretrain: a freshly initialised encoder (weights of std 0.02) is close to the identity at every position —
 * attention is near uniform and adds ~1 % to the residual — so its [CLS] row hardly depends on the other tokens,
 * and a tenant that trains only adapters and a head on top of it cannot learn anything (loss stays at ln C). A few
 * hundred MLM steps make the layers mix context, which is what HMI's frozen shared layers are assumed to do.
 */
import { join } from 'node:path';

import { encoderTensorShapes, generateModel, loadEncoder, type SafetensorsEntry, TextTokenizer, writeSafetensors } from '@tessera/engine';

import { furtherPretrain } from './training.js';

export interface BaseModelOptions {
  /** Model shape over the generator's tiny preset. */
  hiddenSize: number;
  numHeads: number;
  intermediateSize: number;
  numLayers: number;
  seed: number;
  /** Pretraining: texts of the general corpus, steps, batch size, learning rate. */
  corpus: readonly string[];
  steps: number;
  batchSize: number;
  lr: number;
}

export const DEFAULT_BASE: Omit<BaseModelOptions, 'corpus'> = { hiddenSize: 32, numHeads: 4, intermediateSize: 64, numLayers: 4, seed: 7, steps: 800, batchSize: 16, lr: 3e-3 };

/** Generates the model into `dir` and pretrains it in place (model.safetensors rewritten, f32). Returns the MLM loss. */
export async function prepareBaseModel(dir: string, o: BaseModelOptions): Promise<{ loss: number }> {
  generateModel(dir, { family: 'encoder', size: 'tiny', seed: o.seed, overrides: { hiddenSize: o.hiddenSize, numHeads: o.numHeads, intermediateSize: o.intermediateSize, numLayers: o.numLayers } });
  const tokenizer = TextTokenizer.fromDir(dir);
  const s = tokenizer.specialTokenIds;
  const special = [s.cls, s.sep, s.pad ?? 0].filter((x): x is number => x !== undefined);
  const corpus = o.corpus.map((t) => tokenizer.encode(t));
  const run = await furtherPretrain(
    { modelDir: dir, lowerLayers: o.numLayers, corpus, steps: o.steps, batchSize: o.batchSize, lr: o.lr, seed: o.seed, maskTokenId: tokenizer.tokenToId('[MASK]')!, specialTokenIds: special },
    { signal: new AbortController().signal, progress: async () => {} },
  );
  run.model.weights.dispose();
  const model = loadEncoder(dir);
  try {
    const entries: [string, SafetensorsEntry][] = [];
    for (const [name, shape] of encoderTensorShapes(model.config)) {
      entries.push([name, { dtype: 'f32', shape, data: run.lower.get(name) ?? model.weights.hostF32(name) }]);
    }
    writeSafetensors(join(dir, 'model.safetensors'), entries, { format: 'pt' });
  } finally {
    model.weights.dispose();
  }
  return { loss: run.loss };
}
