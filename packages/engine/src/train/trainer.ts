/**
 * The training loop: seeded batches of examples, gradient accumulation over micro-batches (the loss is the mean
 * over every counted token of the step, however it is split), clipping, AdamW with warm-up + cosine, evaluation
 * every N steps, and the result written where it is served from (a PEFT adapter directory for LoRA).
 */
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { writeLoraAdapter } from '../formats/peft-writer.js';
import { writeSafetensors, type SafetensorsEntry } from '../formats/safetensors.js';
import { TextTokenizer } from '../formats/tokenizer.js';
import type { DecoderModel } from '../models/decoder.js';
import type { EncoderModel } from '../models/encoder.js';
import { loadDecoder, loadEncoder } from '../models/load.js';
import {
  BatchSampler,
  type LmExample,
  type TrainDataset,
  type TrainRecord,
  datasetFromRecords,
  readJsonl,
  tokenizeCausalLm,
  tokenizeClassification,
  tokenizeMaskedLm,
} from './data.js';
import { loadCheckpoint, saveCheckpoint } from './checkpoint.js';
import { type LmBatch, TrainableDecoder } from './decoder.js';
import type { TrainableModel } from './trainable.js';
import { type EncoderBatch, type EncoderExample, TrainableEncoder } from './encoder.js';
import { TrainConfigError } from './errors.js';
import { AdamW, type ScheduleOptions, checkSchedule, learningRate } from './optim.js';
import { DEFAULT_DECODER_LORA_TARGETS, DEFAULT_ENCODER_LORA_TARGETS, type LoraSpec, type TrainableSpec, loraAdapterConfig } from './params.js';

export interface TrainerOptions {
  /** Optimiser steps to run. */
  steps: number;
  /** Examples per micro-batch (default 8). */
  batchSize?: number;
  /** Micro-batches per optimiser step (default 1). */
  gradAccum?: number;
  /** Peak learning rate (default 1e-3 for LoRA, 1e-4 otherwise). */
  lr?: number;
  warmupSteps?: number;
  schedule?: ScheduleOptions['schedule'];
  minLrRatio?: number;
  /** AdamW's decoupled weight decay on matrices (default 0). */
  weightDecay?: number;
  beta1?: number;
  beta2?: number;
  eps?: number;
  /** Clip the global gradient norm (default 1.0, as the HF Trainer; null: no clipping). */
  maxGradNorm?: number | null;
  /** Seeds the shuffling (and, through TrainableDecoder, LoRA's init and dropout). Default 0. */
  seed?: number;
  /** Evaluate on the eval examples every N steps (and after the last step); default 0: only at the end. */
  evalEvery?: number;
  /** Examples per evaluation batch (default batchSize). */
  evalBatchSize?: number;
  /** Called after every step. */
  onProgress?: (progress: TrainProgress) => void;
  /** Write a checkpoint (params + AdamW moments + loop position) every N steps into checkpointDir (default 0: never). */
  checkpointEvery?: number;
  /** Where checkpoints go, as `checkpoint-<step>.safetensors`. */
  checkpointDir?: string;
}

export interface TrainProgress {
  /** Steps done (1-based: the step just taken). */
  step: number;
  steps: number;
  /** Mean cross-entropy per counted target (token, or sequence for classification) of this step (before the update). */
  loss: number;
  /** Tokens whose loss counted in this step (sequences, for classification). */
  tokens: number;
  /** Input tokens the step's forwards ran over (every micro-batch, padding excluded): what tokens/s counts. */
  inputTokens: number;
  lr: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Mean eval loss per token, on steps that evaluated. */
  evalLoss?: number;
  elapsedMs: number;
}

export interface TrainResult {
  steps: number;
  /** The last step's training loss. */
  loss: number;
  /** The last evaluation's loss (when there were eval examples). */
  evalLoss?: number;
  history: TrainProgress[];
}

/** Non-padding tokens of a collated batch (every batch kind carries batch, seq and an optional key mask). */
function realTokens(batch: unknown): number {
  const b = batch as { batch?: number; seq?: number; mask?: Uint8Array };
  if (b.mask) {
    let n = 0;
    for (const m of b.mask) n += m;
    return n;
  }
  return (b.batch ?? 0) * (b.seq ?? 0);
}

/** Runs optimiser steps over examples on a trainable model (causal LM on the decoder, classification on the encoder). */
export class Trainer<E = LmExample, B = LmBatch> {
  readonly trainable: TrainableModel<E, B>;
  readonly optimizer: AdamW;
  readonly examples: readonly E[];
  readonly evalExamples: readonly E[];
  readonly sampler: BatchSampler;
  readonly schedule: ScheduleOptions;
  readonly options: TrainerOptions;
  /** Steps taken. */
  step = 0;
  private readonly started = Date.now();

  constructor(trainable: TrainableModel<E, B>, examples: readonly E[], options: TrainerOptions, evalExamples: readonly E[] = []) {
    if (examples.length === 0) throw new TrainConfigError('Trainer: no training examples');
    this.trainable = trainable;
    this.examples = examples;
    this.evalExamples = evalExamples;
    this.options = options;
    const lora = (trainable.spec as { kind?: string }).kind === 'lora';
    this.schedule = {
      lr: options.lr ?? (lora ? 1e-3 : 1e-4),
      totalSteps: options.steps,
      warmupSteps: options.warmupSteps ?? 0,
      schedule: options.schedule ?? 'cosine',
      minLrRatio: options.minLrRatio ?? 0,
    };
    checkSchedule(this.schedule);
    const accum = options.gradAccum ?? 1;
    if (!Number.isInteger(accum) || accum < 1) throw new TrainConfigError(`gradAccum must be an integer >= 1, got ${accum}`);
    const clip = options.maxGradNorm === undefined ? 1 : options.maxGradNorm;
    if (clip !== null && !(clip > 0 && Number.isFinite(clip))) throw new TrainConfigError(`maxGradNorm must be a finite number > 0 or null, got ${clip}`);
    const every = options.evalEvery ?? 0;
    if (!Number.isInteger(every) || every < 0) throw new TrainConfigError(`evalEvery must be an integer >= 0, got ${every}`);
    this.sampler = new BatchSampler(examples.length, options.batchSize ?? 8, options.seed ?? 0);
    this.optimizer = new AdamW(trainable.params, { beta1: options.beta1, beta2: options.beta2, eps: options.eps, weightDecay: options.weightDecay });
  }

  /** One optimiser step: gradAccum micro-batches, clip, AdamW. */
  trainStep(): TrainProgress {
    const accum = this.options.gradAccum ?? 1;
    const batches = Array.from({ length: accum }, () => this.trainable.collate(this.sampler.next().map((i) => this.examples[i]!), 'train'));
    const tokens = batches.reduce((n, b) => n + this.trainable.countTargets(b), 0);
    const inputTokens = batches.reduce((n, b) => n + realTokens(b), 0);
    this.trainable.zeroGrad();
    let lossSum = 0;
    if (tokens > 0) for (const b of batches) lossSum += this.trainable.accumulateGradients(b, 1 / tokens).lossSum;
    const lr = learningRate(this.step + 1, this.schedule);
    const clip = this.options.maxGradNorm === undefined ? 1 : this.options.maxGradNorm;
    const { gradNorm } = this.optimizer.step(clip === null ? { lr } : { lr, maxGradNorm: clip });
    this.step++;
    const progress: TrainProgress = {
      step: this.step,
      steps: this.schedule.totalSteps,
      loss: tokens > 0 ? lossSum / tokens : Number.NaN,
      tokens,
      inputTokens,
      lr,
      gradNorm,
      elapsedMs: Date.now() - this.started,
    };
    const every = this.options.evalEvery ?? 0;
    if (this.evalExamples.length > 0 && ((every > 0 && this.step % every === 0) || this.step === this.schedule.totalSteps)) {
      progress.evalLoss = this.evaluate().loss;
    }
    return progress;
  }

  /** Mean loss per counted token over the eval examples, in order, without dropout. */
  evaluate(examples: readonly E[] = this.evalExamples): { loss: number; tokens: number } {
    const size = this.options.evalBatchSize ?? this.options.batchSize ?? 8;
    let sum = 0;
    let tokens = 0;
    for (let i = 0; i < examples.length; i += size) {
      const r = this.trainable.loss(this.trainable.collate(examples.slice(i, i + size), 'eval'));
      sum += r.lossSum;
      tokens += r.count;
    }
    return { loss: tokens > 0 ? sum / tokens : Number.NaN, tokens };
  }

  /** Writes a checkpoint of the current state (see checkpoint.ts). */
  saveCheckpoint(path: string): void {
    saveCheckpoint(path, { trainable: this.trainable, optimizer: this.optimizer, sampler: this.sampler, step: this.step, seed: this.options.seed ?? 0 });
  }

  /** Continues from a checkpoint written by a trainer with the same model, trainable set, data and seed. */
  resume(path: string): void {
    this.step = loadCheckpoint(path, { trainable: this.trainable, optimizer: this.optimizer, sampler: this.sampler, seed: this.options.seed ?? 0 }).step;
  }

  /** Steps until `steps`; calls onProgress after each and checkpoints every checkpointEvery steps. */
  run(): TrainResult {
    const history: TrainProgress[] = [];
    const every = this.options.checkpointEvery ?? 0;
    if (every > 0 && !this.options.checkpointDir) throw new TrainConfigError('checkpointEvery needs checkpointDir');
    while (this.step < this.schedule.totalSteps) {
      const p = this.trainStep();
      history.push(p);
      if (every > 0 && this.step % every === 0) {
        mkdirSync(this.options.checkpointDir!, { recursive: true });
        this.saveCheckpoint(join(this.options.checkpointDir!, `checkpoint-${this.step}.safetensors`));
      }
      this.options.onProgress?.(p);
    }
    const last = history[history.length - 1];
    const result: TrainResult = { steps: this.step, loss: last?.loss ?? Number.NaN, history };
    const evalLoss = [...history].reverse().find((p) => p.evalLoss !== undefined)?.evalLoss;
    if (evalLoss !== undefined) result.evalLoss = evalLoss;
    return result;
  }

  dispose(): void {
    this.optimizer.dispose();
  }
}

export interface TrainOptions<M = DecoderModel> extends TrainerOptions {
  /** A model directory (config.json, weights, tokenizer.json), or a loaded model with its tokenizer. */
  model: string | { model: M; tokenizer: TextTokenizer; dir?: string };
  /**
   * A JSONL file or records. Causal LM (`train`): `{text}` (packed) or `{prompt, completion}` (loss on the
   * completion only). Classification (`trainClassifier`): `{text, label}`, label a name of the config's id2label or
   * an index.
   */
  data: string | readonly TrainRecord[];
  evalData?: string | readonly TrainRecord[];
  /** What trains (default LoRA with PEFT's defaults: every Linear of the decoder's layers, the encoder's query and value). */
  trainable?: TrainableSpec;
  /** Longest example / packed block in tokens (default the model's positions). */
  maxLength?: number;
  /** Pack `text` records into blocks of maxLength (default true; causal LM only). */
  pack?: boolean;
  /** Continue from this checkpoint file (same model, trainable set, data and seed). */
  resumeFrom?: string;
  /**
   * Where the result goes: LoRA writes a PEFT adapter directory (adapter_config.json + adapter_model.safetensors);
   * adapters (encoder) write `pet.safetensors`, a PetS PET file (pet_type adapter: adapters, head, task norms); other
   * sets write model.safetensors with every weight (f32) beside a copy of the model directory's config and
   * tokenizer files. Default: nothing is written.
   */
  out?: string;
}

export interface TrainRun<M = DecoderModel, T = TrainableDecoder> extends TrainResult {
  trainable: T;
  model: M;
  tokenizer: TextTokenizer;
  /** What `out` received. */
  written?: { dir: string; files: string[] };
  /** Frees the trainable set and, when the run loaded the model from a directory, the model. */
  dispose(): void;
}

/** The file an adapter set's PET parameters (PetS layout) are written to inside `out`. */
export const PET_FILE = 'pet.safetensors';
/** The file adapter sets in another placement (HMI's) are written to: the same tensor names, adapter_config metadata. */
export const ADAPTERS_FILE = 'adapters.safetensors';

const MODEL_DIR_FILES = ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json'];

type AnyTrainable = TrainableDecoder | TrainableEncoder;

/** The shared body of train / trainClassifier: load, tokenize (all data checked before a step), train, write. */
function runTraining<M extends DecoderModel | EncoderModel, T extends AnyTrainable, E, B>(
  options: TrainOptions<M>,
  load: (dir: string) => M,
  prepare: (model: M, tokenizer: TextTokenizer, data: TrainDataset, maxLength: number) => E[],
  makeTrainable: (model: M, spec: TrainableSpec) => T & TrainableModel<E, B>,
  taskType: string,
): TrainRun<M, T> {
  const owned = typeof options.model === 'string';
  const dir = typeof options.model === 'string' ? options.model : options.model.dir;
  const model = typeof options.model === 'string' ? load(options.model) : options.model.model;
  let trainable: (T & TrainableModel<E, B>) | null = null;
  let trainer: Trainer<E, B> | null = null;
  try {
    const tokenizer = typeof options.model === 'string' ? TextTokenizer.fromDir(options.model) : options.model.tokenizer;
    const maxLength = options.maxLength ?? model.config.maxPositions;
    if (!Number.isInteger(maxLength) || maxLength < 2 || maxLength > model.config.maxPositions) {
      throw new TrainConfigError(`maxLength must be an integer in [2, ${model.config.maxPositions}] (the model's positions), got ${maxLength}`);
    }
    const read = (d: string | readonly TrainRecord[]) => (typeof d === 'string' ? readJsonl(d) : datasetFromRecords(d));
    const examples = prepare(model, tokenizer, read(options.data), maxLength);
    const evalExamples = options.evalData ? prepare(model, tokenizer, read(options.evalData), maxLength) : [];
    const spec: TrainableSpec = options.trainable ?? { kind: 'lora' };
    trainable = makeTrainable(model, spec);
    trainer = new Trainer<E, B>(trainable, examples, options, evalExamples);
    if (options.resumeFrom) trainer.resume(options.resumeFrom);
    const result = trainer.run();
    const t = trainable;
    const run: TrainRun<M, T> = {
      ...result,
      trainable: t,
      model,
      tokenizer,
      dispose: () => {
        t.dispose();
        if (owned) model.dispose();
      },
    };
    if (options.out) run.written = writeResult(options.out, t, spec, dir ?? null, taskType);
    trainer.dispose();
    return run;
  } catch (err) {
    trainer?.dispose();
    trainable?.dispose();
    if (owned) model.dispose();
    throw err;
  }
}

/**
 * Causal-LM training of a Llama-style decoder: loads the model and data, tokenizes (throwing TrainDataError on
 * the first bad record, before any step), trains and writes `out`. Synchronous: every step is native work on
 * this thread.
 */
export function train(options: TrainOptions): TrainRun {
  return runTraining<DecoderModel, TrainableDecoder, LmExample, LmBatch>(
    options,
    (dir) => loadDecoder(dir),
    (model, tokenizer, data, maxLength) =>
      tokenizeCausalLm(data, tokenizer, { maxLength, eosTokenId: tokenizer.specialTokenIds.eos ?? model.config.eosTokenIds[0] ?? null, pack: options.pack ?? true }),
    (model, spec) => new TrainableDecoder(model, spec, { seed: options.seed ?? 0 }),
    'CAUSAL_LM',
  );
}

/** Sequence-classification training of a BertForSequenceClassification (`{text, label}` records), as {@link train}. */
export function trainClassifier(options: TrainOptions<EncoderModel>): TrainRun<EncoderModel, TrainableEncoder> {
  return runTraining<EncoderModel, TrainableEncoder, EncoderExample, EncoderBatch>(
    options,
    (dir) => loadEncoder(dir),
    (model, tokenizer, data, maxLength) => tokenizeClassification(data, tokenizer, { labels: model.config.labels, maxLength }),
    (model, spec) => new TrainableEncoder(model, spec, { seed: options.seed ?? 0 }),
    'SEQ_CLS',
  );
}

export interface TrainMaskedLmOptions extends TrainOptions<EncoderModel> {
  /** Share of tokens selected for prediction (default 0.15; 80 % [MASK], 10 % random, 10 % kept). */
  mlmProbability?: number;
}

/**
 * Masked-LM training of a BERT body on `{text}` records (continued pre-training), with a fresh BertForMaskedLM
 * head (its decoder tied to the word embeddings). Masks are drawn per training batch from the seeded stream;
 * evaluation batches get fixed masks. Default trainable set: full. `out` (non-LoRA) receives the body's tensors
 * and the head's (`cls.predictions.*`).
 */
export function trainMaskedLm(options: TrainMaskedLmOptions): TrainRun<EncoderModel, TrainableEncoder> {
  let tokenizerRef: TextTokenizer | null = null;
  return runTraining<EncoderModel, TrainableEncoder, EncoderExample, EncoderBatch>(
    { ...options, trainable: options.trainable ?? { kind: 'full' } },
    (dir) => loadEncoder(dir),
    (_model, tokenizer, data, maxLength) => {
      tokenizerRef = tokenizer;
      return tokenizeMaskedLm(data, tokenizer, { maxLength });
    },
    (model, spec) => {
      const tok = tokenizerRef!;
      const maskTokenId = tok.tokenToId('[MASK]');
      if (maskTokenId === undefined) throw new TrainConfigError(`${tok.path}: the tokenizer has no [MASK] token, which masked LM needs`);
      const ids = tok.specialTokenIds;
      const specialTokenIds = [ids.cls, ids.sep, ids.pad, ids.bos, ids.eos, ids.unk, maskTokenId].filter((x): x is number => x !== undefined);
      const maskedLm = { maskTokenId, specialTokenIds, probability: options.mlmProbability ?? 0.15 };
      return new TrainableEncoder(model, spec, { seed: options.seed ?? 0, task: 'masked-lm', maskedLm });
    },
    'FEATURE_EXTRACTION',
  );
}

function writeResult(out: string, trainable: AnyTrainable, spec: TrainableSpec, modelDir: string | null, taskType: string): { dir: string; files: string[] } {
  if (spec.kind === 'lora') {
    const targets = spec.targetModules ?? (trainable instanceof TrainableEncoder ? DEFAULT_ENCODER_LORA_TARGETS : DEFAULT_DECODER_LORA_TARGETS);
    writeLoraAdapter(out, loraAdapterConfig(spec, targets, modelDir, taskType), trainable.loraModuleWeights());
    return { dir: out, files: ['adapter_config.json', 'adapter_model.safetensors'] };
  }
  if (spec.kind === 'adapter') {
    if (!(trainable instanceof TrainableEncoder)) throw new TrainConfigError('adapter sets are encoder PETs');
    mkdirSync(out, { recursive: true });
    if (trainable.petsLayout) {
      trainable.writePetFile(join(out, PET_FILE));
      return { dir: out, files: [PET_FILE] };
    }
    // Another placement (e.g. HMI's upper layers, after attention only): the same tensor names, no PET metadata.
    const cfg = trainable.adapterConfig!;
    writeSafetensors(join(out, ADAPTERS_FILE), trainable.params.map((p) => [p.name, { dtype: 'f32', shape: p.value.shape, data: p.value.toArray() as Float32Array }] as [string, SafetensorsEntry]),
      { format: 'pt', adapter_config: JSON.stringify({ bottleneck: cfg.bottleneck, activation: cfg.activation, layers: [cfg.from, cfg.to], sites: cfg.sites, labels: trainable.config.labels }) });
    return { dir: out, files: [ADAPTERS_FILE] };
  }
  const weights = trainable.model.weights;
  mkdirSync(out, { recursive: true });
  const entries: Array<[string, SafetensorsEntry]> = [];
  for (const name of weights.tensors.keys()) entries.push([name, { dtype: 'f32', shape: weights.get(name).shape, data: weights.hostF32(name) }]);
  if (trainable instanceof TrainableEncoder) {
    for (const p of trainable.headParams()) entries.push([p.name, { dtype: 'f32', shape: p.value.shape, data: p.value.toArray() as Float32Array }]);
  }
  writeSafetensors(join(out, 'model.safetensors'), entries, { format: 'pt' });
  const files = ['model.safetensors'];
  if (modelDir) {
    for (const f of MODEL_DIR_FILES) {
      if (!existsSync(join(modelDir, f))) continue;
      copyFileSync(join(modelDir, f), join(out, f));
      files.push(f);
    }
  }
  return { dir: out, files };
}

export interface TrainLoraOptions extends Omit<TrainOptions, 'trainable'> {
  /** LoRA settings (PEFT's LoraConfig fields): r (8), alpha (16), targetModules (every Linear), useRslora, dropout. */
  lora?: Omit<LoraSpec, 'kind'>;
}

/** {@link train} with a LoRA trainable set; `out` receives a PEFT adapter directory the server can hot-load. */
export function trainLora(options: TrainLoraOptions): TrainRun {
  const { lora, ...rest } = options;
  return train({ ...rest, trainable: { kind: 'lora', ...lora } });
}
