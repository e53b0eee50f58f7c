/**
 * The manager's two training runs, on @tessera/engine's encoder trainer (hmi.md A6, A8):
 *
 * - **Domain further-pretraining** (ops a, b): masked-LM on the domain corpus, only the lower layers trainable
 *   (observation O1), on a private copy of the model; the result is the domain's lower-layer weights, from which
 *   its PLOT branch is computed. (The trainer runs the lower layers with full context, not in window mode as
 *   SkipBERT's FPT does; see the README's "Not there yet".)
 * - **Tenant fine-tuning** (ops c, d): bottleneck adapters after the attention sub-layer of every upper layer plus
 *   the classification head; everything shared stays frozen (O2). The upper layers must see what serving feeds
 *   them — the PLOT aggregate of the tenant's domain version, not the lower layers' full-context output — and the
 *   trainer always starts from embeddings. So training runs on a *surrogate* encoder: the upper layers alone, whose
 *   "embedding" of each training token is A3 exactly: its word row holds the token's tri-gram sum z (looked up on
 *   the tenant's version), its position and type tables are A3's post-merge embeddings and its embedding LayerNorm
 *   is A3's. Adapter j of the surrogate is then adapter j of the served upper layers.
 *
 * Both loops run one optimiser step per event-loop turn, report progress and stop at an aborted signal.
 */
import {
  type ClassificationExample,
  type EncoderConfig,
  EncoderModel,
  encoderLinearModules,
  encoderNormModules,
  encoderTopModules,
  loadEncoder,
  type MaskedLmExample,
  ModelWeights,
  TrainableEncoder,
  Trainer,
} from '@tessera/engine';

import type { PlotService, PlotSnapshot } from './plot.js';
import { yieldTurn } from './plot.js';
import type { TenantHead } from '../manager/tenant-store.js';

export interface TrainStep {
  signal: AbortSignal;
  /** Fraction of this run done, in [0, 1]. */
  progress: (fraction: number) => Promise<void>;
}

export interface TrainSettings {
  steps: number;
  batchSize: number;
  lr: number;
  seed: number;
}

/** Tensor names of layers [0, lowerLayers): what a domain owns. */
export function lowerLayerNames(model: EncoderModel, lowerLayers: number): string[] {
  const names: string[] = [];
  for (let l = 0; l < lowerLayers; l++) {
    for (const m of [...Object.values(encoderLinearModules(model.config, l)), ...Object.values(encoderNormModules(model.config, l))]) names.push(`${m}.weight`, `${m}.bias`);
  }
  return names;
}

export interface FurtherPretrainOptions extends TrainSettings {
  modelDir: string;
  lowerLayers: number;
  /** The domain's lower layers to continue from (an update); default the shared model's. */
  start?: ReadonlyMap<string, Float32Array>;
  /** Token ids of the corpus, one sequence per text. */
  corpus: readonly (readonly number[])[];
  maskTokenId: number;
  specialTokenIds: readonly number[];
}

/**
 * MLM on the corpus with layers [0, lowerLayers) trainable. Returns the trained model (the caller computes the
 * domain's values with it and disposes it), its lower-layer weights and the last loss.
 */
/** `steps` optimiser steps, one an event-loop turn, reporting progress; stops at an aborted signal. The last loss. */
async function runSteps(trainer: { step: number; trainStep(): { loss: number } }, steps: number, step: TrainStep): Promise<number> {
  let loss = Number.NaN;
  while (trainer.step < steps) {
    step.signal.throwIfAborted();
    loss = trainer.trainStep().loss;
    await step.progress(trainer.step / steps);
    await yieldTurn();
  }
  step.signal.throwIfAborted();
  return loss;
}

export async function furtherPretrain(o: FurtherPretrainOptions, step: TrainStep): Promise<{ model: EncoderModel; lower: Map<string, Float32Array>; loss: number }> {
  const model = loadEncoder(o.modelDir);
  let trainable: TrainableEncoder | null = null;
  let trainer: Trainer<MaskedLmExample, never> | null = null;
  try {
    if (o.start) for (const [name, data] of o.start) model.weights.get(name).write(data);
    trainable = new TrainableEncoder(model, { kind: 'layers', from: 0, to: o.lowerLayers }, {
      task: 'masked-lm', seed: o.seed, maskedLm: { maskTokenId: o.maskTokenId, specialTokenIds: o.specialTokenIds },
    });
    const examples: MaskedLmExample[] = o.corpus.map((ids, line) => ({ ids: [...ids], line: line + 1 }));
    trainer = new Trainer(trainable as never, examples, { steps: o.steps, batchSize: o.batchSize, lr: o.lr, seed: o.seed, warmupSteps: 0 }) as Trainer<MaskedLmExample, never>;
    const loss = await runSteps(trainer, o.steps, step);
    const lower = new Map(lowerLayerNames(model, o.lowerLayers).map((n) => [n, model.weights.hostF32(n)] as const));
    return { model, lower, loss };
  } catch (err) {
    model.weights.dispose();
    throw err;
  } finally {
    trainer?.dispose();
    trainable?.dispose();
  }
}

export interface FineTuneOptions extends TrainSettings {
  /** The shared model (read only). */
  model: EncoderModel;
  plot: PlotService;
  /** The tenant's version, acquired by the caller. */
  snapshot: PlotSnapshot;
  bottleneck: number;
  /** Labelled examples: token ids and a class index below `labels`. */
  examples: readonly { ids: readonly number[]; label: number }[];
  labels: number;
  /** The tenant's state to continue from (an update). */
  start?: { adapters: readonly Float32Array[]; head: TenantHead };
}

/** Fine-tunes adapters + head on the PLOT surrogate (see the file comment). Returns the tenant's new state. */
export async function fineTuneTenant(o: FineTuneOptions, step: TrainStep): Promise<{ adapters: Float32Array[]; head: TenantHead; loss: number; accuracy: number }> {
  const { model, plot, lowerLayers } = { ...o, lowerLayers: o.plot.lowerLayers };
  const base = model.config;
  const H = base.hiddenSize;
  const upper = base.numLayers - lowerLayers;
  // Surrogate vocabulary: id 0 is padding, then one id per training token.
  let tokens = 0;
  for (const e of o.examples) tokens += e.ids.length;
  const word = new Float32Array((1 + tokens) * H);
  const examples: ClassificationExample[] = [];
  let next = 1;
  o.examples.forEach((e, i) => {
    word.set(plot.preNorm(o.snapshot, e.ids), next * H);
    examples.push({ ids: Array.from({ length: e.ids.length }, (_, t) => next + t), label: e.label, line: i + 1 });
    next += e.ids.length;
  });
  const config: EncoderConfig = { ...base, numLayers: upper, vocabSize: 1 + tokens };
  const top = encoderTopModules(base);
  const host = new Map<string, { data: Float32Array; shape: readonly number[] }>();
  const p = plot.post.host;
  host.set(`${top.wordEmbeddings}.weight`, { data: word, shape: [1 + tokens, H] });
  host.set(`${top.positionEmbeddings}.weight`, { data: p.posEmb, shape: [base.maxPositions, H] });
  host.set(`${top.tokenTypeEmbeddings}.weight`, { data: p.typeEmb, shape: [base.typeVocabSize, H] });
  host.set(`${top.embeddingsNorm}.weight`, { data: p.gamma, shape: [H] });
  host.set(`${top.embeddingsNorm}.bias`, { data: p.beta, shape: [H] });
  for (let l = 0; l < upper; l++) {
    const from = [...Object.values(encoderLinearModules(base, lowerLayers + l)), ...Object.values(encoderNormModules(base, lowerLayers + l))];
    const to = [...Object.values(encoderLinearModules(base, l)), ...Object.values(encoderNormModules(base, l))];
    from.forEach((m, i) => {
      for (const part of ['weight', 'bias']) {
        const t = model.weights.get(`${m}.${part}`);
        host.set(`${to[i]}.${part}`, { data: model.weights.hostF32(`${m}.${part}`), shape: t.shape });
      }
    });
  }
  for (const m of [top.pooler, top.classifier]) {
    for (const part of ['weight', 'bias']) host.set(`${m}.${part}`, { data: model.weights.hostF32(`${m}.${part}`), shape: model.weights.get(`${m}.${part}`).shape });
  }
  const surrogate = new EncoderModel(config, ModelWeights.fromHost(host, model.backend));
  let trainable: TrainableEncoder | null = null;
  let trainer: Trainer<ClassificationExample, never> | null = null;
  try {
    trainable = new TrainableEncoder(surrogate, {
      kind: 'adapter', bottleneck: o.bottleneck, activation: 'gelu', taskNorms: false, layers: { from: 0, to: upper }, sites: ['attn_out'],
    }, { task: 'classification', seed: o.seed });
    const byName = new Map(trainable.params.map((q) => [q.name, q.value]));
    if (o.start) {
      for (let l = 0; l < upper; l++) {
        const a = trainable.adapters.get(encoderLinearModules(config, l).attn_out)!;
        const v = o.start.adapters[l]!;
        const m = o.bottleneck;
        a.down.value.write(v.subarray(0, m * H));
        a.downBias.value.write(v.subarray(m * H, m * H + m));
        a.up.value.write(v.subarray(m * H + m, 2 * m * H + m));
        a.upBias.value.write(v.subarray(2 * m * H + m));
      }
      const w = byName.get(`${top.classifier}.weight`)!.toArray() as Float32Array;
      const b = byName.get(`${top.classifier}.bias`)!.toArray() as Float32Array;
      w.set(o.start.head.weight);
      b.set(o.start.head.bias);
      byName.get(`${top.classifier}.weight`)!.write(w);
      byName.get(`${top.classifier}.bias`)!.write(b);
    }
    trainer = new Trainer(trainable as never, examples, { steps: o.steps, batchSize: o.batchSize, lr: o.lr, seed: o.seed, warmupSteps: 0 }) as Trainer<ClassificationExample, never>;
    const loss = await runSteps(trainer, o.steps, step);
    // Training accuracy on the surrogate (what the served model computes, up to rounding).
    let correct = 0;
    for (let i = 0; i < examples.length; i += 32) {
      const chunk = examples.slice(i, i + 32);
      const logits = trainable.logits(trainable.collate(chunk as never, 'eval') as never);
      const C = base.numLabels;
      chunk.forEach((e, r) => {
        let best = 0;
        for (let c = 1; c < o.labels; c++) if (logits[r * C + c]! > logits[r * C + best]!) best = c;
        if (best === e.label) correct++;
      });
    }
    const adapters = trainable.hmiAdapters().map((a) => a.data);
    const weight = (byName.get(`${top.classifier}.weight`)!.toArray() as Float32Array).slice(0, o.labels * H);
    const bias = (byName.get(`${top.classifier}.bias`)!.toArray() as Float32Array).slice(0, o.labels);
    return { adapters, head: { weight, bias }, loss, accuracy: correct / Math.max(1, examples.length) };
  } finally {
    trainer?.dispose();
    trainable?.dispose();
    surrogate.weights.dispose();
  }
}
