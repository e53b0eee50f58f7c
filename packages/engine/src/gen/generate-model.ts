/**
 * Writes a complete Hugging Face model directory with seeded random weights: config.json, model.safetensors,
 * tokenizer.json + tokenizer_config.json + special_tokens_map.json, and generation_config.json for the decoder.
 * The same (family, size, seed, dtype, sharpen, overrides) gives the same bytes on every machine.
 */
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { toHalfBits } from '@tessera/native';

import type { DecoderConfig, EncoderConfig, ModelConfig } from '../config.js';
import { toHfConfigJson } from '../formats/hf-config.js';
import { type SafetensorsEntry, writeSafetensors } from '../formats/safetensors.js';
import { decoderNormModules, decoderTopModules, encoderNormModules, encoderTopModules } from '../models/names.js';
import { presetConfig, tensorShapes, type ModelSize, type WeightDtype, WEIGHT_DTYPES } from './presets.js';
import { checkSeed, uniformWithStd } from './rng.js';
import {
  buildByteLevelBpeTokenizer,
  buildWordPieceTokenizer,
  type ByteLevelBpeTokenizer,
  type WordPieceTokenizer,
  writeTokenizerFiles,
} from './tokenizer-builders.js';

/** Standard deviation of every random tensor: Hugging Face's `initializer_range` for BERT and Llama. */
export const INIT_STD = 0.02;

interface CommonModelOptions {
  /** 'tiny' (tests) or 'mini' (benchmarks); default 'tiny'. */
  size?: ModelSize;
  /** Unsigned 32-bit seed; default 0. */
  seed?: number;
  /** Weight dtype; default 'f32'. f16 / bf16 round each f32 value to nearest even. */
  dtype?: WeightDtype;
  /**
   * Multiplies the final logits, so a random model's next-token or class distribution is not near uniform;
   * default 1. Decoder: model.norm.weight is filled with `sharpen` (the final RMSNorm's gain scales the LM
   * head's input, tied or not). Encoder: classifier.weight and classifier.bias are multiplied by `sharpen`.
   */
  sharpen?: number;
  /** Called after each tensor is generated (the CLI shows it as progress). */
  onProgress?: (progress: { tensor: string; done: number; total: number }) => void;
}

export interface GenerateEncoderOptions extends CommonModelOptions {
  family: 'encoder';
  /** Replaces preset fields. `vocabSize` resizes the tokenizer to match; `padTokenId` must stay 0 ([PAD]). */
  overrides?: Partial<Omit<EncoderConfig, 'family'>>;
}

export interface GenerateDecoderOptions extends CommonModelOptions {
  family: 'decoder';
  /** Replaces preset fields. `vocabSize` resizes the tokenizer to match; bos/eos are its last two ids. */
  overrides?: Partial<Omit<DecoderConfig, 'family'>>;
}

export type GenerateModelOptions = GenerateEncoderOptions | GenerateDecoderOptions;

interface GeneratedModelFiles {
  dir: string;
  /** Size of model.safetensors in bytes. */
  bytes: number;
  /** The files written, relative to `dir`. */
  files: string[];
}

export interface GeneratedEncoder extends GeneratedModelFiles {
  config: EncoderConfig;
  tokenizer: WordPieceTokenizer;
}

export interface GeneratedDecoder extends GeneratedModelFiles {
  config: DecoderConfig;
  tokenizer: ByteLevelBpeTokenizer;
}

export type GeneratedModel = GeneratedEncoder | GeneratedDecoder;

/** How one tensor is filled. */
type TensorInit = { kind: 'uniform'; std: number; scale: number } | { kind: 'constant'; value: number };

const HF_TORCH_DTYPE: Record<WeightDtype, string> = { f32: 'float32', f16: 'float16', bf16: 'bfloat16' };

export function generateModel(dir: string, options: GenerateEncoderOptions): GeneratedEncoder;
export function generateModel(dir: string, options: GenerateDecoderOptions): GeneratedDecoder;
export function generateModel(dir: string, options: GenerateModelOptions): GeneratedModel;
export function generateModel(dir: string, options: GenerateModelOptions): GeneratedModel {
  const size = options.size ?? 'tiny';
  const seed = checkSeed(options.seed ?? 0);
  const dtype = options.dtype ?? 'f32';
  const sharpen = options.sharpen ?? 1;
  if (!WEIGHT_DTYPES.includes(dtype)) throw new RangeError(`dtype must be one of ${WEIGHT_DTYPES.join(', ')}, got ${String(dtype)}`);
  if (!Number.isFinite(sharpen) || sharpen <= 0) throw new RangeError(`sharpen must be a finite number > 0, got ${sharpen}`);

  const config = options.family === 'encoder' ? resolveEncoderConfig(size, options.overrides ?? {}) : resolveDecoderConfig(size, options.overrides ?? {});
  const tokenizer = config.family === 'encoder'
    ? buildWordPieceTokenizer(config.vocabSize, { modelMaxLength: config.maxPositions })
    : buildByteLevelBpeTokenizer(config.vocabSize, { modelMaxLength: config.maxPositions });
  const inits = config.family === 'encoder' ? encoderInits(config, sharpen) : decoderInits(config, sharpen);

  mkdirSync(dir, { recursive: true });
  const shapes = tensorShapes(config);
  const entries: Array<[string, SafetensorsEntry]> = [];
  let done = 0;
  for (const [name, shape] of shapes) {
    const numel = shape.reduce((a, b) => a * b, 1);
    const values = fillTensor(numel, seed, name, inits.get(name) ?? { kind: 'uniform', std: INIT_STD, scale: 1 });
    entries.push([name, dtype === 'f32' ? { dtype, shape, data: values } : { dtype, shape, data: toHalfBits(values, dtype) }]);
    options.onProgress?.({ tensor: name, done: ++done, total: shapes.size });
  }
  const weightsPath = join(dir, 'model.safetensors');
  writeSafetensors(weightsPath, entries, { format: 'pt' });

  const files = ['config.json', 'model.safetensors'];
  writeJson(join(dir, 'config.json'), { ...toHfConfigJson(config), torch_dtype: HF_TORCH_DTYPE[dtype] });
  if (config.family === 'decoder') {
    writeJson(join(dir, 'generation_config.json'), {
      _from_model_config: true,
      bos_token_id: config.bosTokenId,
      eos_token_id: config.eosTokenIds.length === 1 ? config.eosTokenIds[0] : config.eosTokenIds,
    });
    files.push('generation_config.json');
  }
  writeTokenizerFiles(dir, tokenizer);
  files.push(...Object.keys(tokenizer.files));
  return { dir, config, bytes: statSync(weightsPath).size, tokenizer, files } as GeneratedModel;
}

function writeJson(path: string, json: unknown): void {
  writeFileSync(path, `${JSON.stringify(json, null, 2)}\n`);
}

function fillTensor(numel: number, seed: number, name: string, init: TensorInit): Float32Array {
  if (init.kind === 'constant') return new Float32Array(numel).fill(init.value);
  const values = uniformWithStd(numel, seed, name, init.std);
  if (init.scale !== 1) for (let i = 0; i < numel; i++) values[i] = values[i]! * init.scale;
  return values;
}

/** Norm gains are 1, norm biases small uniform, everything else (embeddings, Linear weights and biases) uniform with {@link INIT_STD}. */
function encoderInits(config: EncoderConfig, sharpen: number): Map<string, TensorInit> {
  const inits = new Map<string, TensorInit>();
  const top = encoderTopModules(config);
  const norms: string[] = [top.embeddingsNorm];
  for (let i = 0; i < config.numLayers; i++) norms.push(...Object.values(encoderNormModules(config, i)));
  for (const norm of norms) inits.set(`${norm}.weight`, { kind: 'constant', value: 1 });
  if (config.architecture === 'BertForSequenceClassification') {
    // Scaling both the weight and the bias multiplies the logits exactly.
    inits.set(`${top.classifier}.weight`, { kind: 'uniform', std: INIT_STD, scale: sharpen });
    inits.set(`${top.classifier}.bias`, { kind: 'uniform', std: INIT_STD, scale: sharpen });
  } else if (sharpen !== 1) {
    throw new RangeError(`sharpen scales the classifier's logits, but a ${config.architecture} has no classifier (got sharpen ${sharpen})`);
  }
  return inits;
}

/** RMSNorm gains are 1 except the final norm's, which is `sharpen`; every other tensor is uniform with {@link INIT_STD}. */
function decoderInits(config: DecoderConfig, sharpen: number): Map<string, TensorInit> {
  const inits = new Map<string, TensorInit>();
  for (let i = 0; i < config.numLayers; i++) {
    for (const norm of Object.values(decoderNormModules(i))) inits.set(`${norm}.weight`, { kind: 'constant', value: 1 });
  }
  inits.set(`${decoderTopModules.finalNorm}.weight`, { kind: 'constant', value: sharpen });
  return inits;
}

function checkPositiveInt(value: number, field: string): void {
  if (!Number.isInteger(value) || value <= 0) throw new RangeError(`${field} must be a positive integer, got ${value}`);
}

/** The preset with overrides applied and made consistent (labels ↔ numLabels), validated. */
export function resolveEncoderConfig(size: ModelSize, overrides: Partial<Omit<EncoderConfig, 'family'>>): EncoderConfig {
  const config: EncoderConfig = { ...presetConfig('encoder', size), ...overrides, family: 'encoder' };
  if (config.architecture === 'BertModel') {
    if ((overrides.numLabels ?? 0) !== 0 || (overrides.labels?.length ?? 0) !== 0) throw new RangeError('a BertModel has no classifier: numLabels and labels must be 0 / empty');
    config.numLabels = 0;
    config.labels = [];
  } else if (overrides.labels !== undefined && overrides.numLabels === undefined) {
    config.numLabels = overrides.labels.length;
  } else if (overrides.numLabels !== undefined && overrides.labels === undefined) {
    config.labels = Array.from({ length: overrides.numLabels }, (_, i) => `LABEL_${i}`);
  }
  for (const field of ['vocabSize', 'hiddenSize', 'numLayers', 'numHeads', 'intermediateSize', 'maxPositions', 'typeVocabSize'] as const) {
    checkPositiveInt(config[field], field);
  }
  if (config.architecture === 'BertForSequenceClassification') checkPositiveInt(config.numLabels, 'numLabels');
  if (config.labels.length !== config.numLabels) throw new RangeError(`labels has ${config.labels.length} entries but numLabels is ${config.numLabels}`);
  if (config.hiddenSize % config.numHeads !== 0) throw new RangeError(`hiddenSize ${config.hiddenSize} is not divisible by numHeads ${config.numHeads}`);
  if (config.padTokenId !== 0) throw new RangeError(`padTokenId must be 0, the generated tokenizer's [PAD], got ${config.padTokenId}`);
  if (!(config.layerNormEps > 0)) throw new RangeError(`layerNormEps must be > 0, got ${config.layerNormEps}`);
  return config;
}

/** The preset with overrides applied (head_dim follows hidden/heads unless given; bos/eos follow the vocabulary), validated. */
export function resolveDecoderConfig(size: ModelSize, overrides: Partial<Omit<DecoderConfig, 'family'>>): DecoderConfig {
  const config: DecoderConfig = { ...presetConfig('decoder', size), ...overrides, family: 'decoder' };
  if (overrides.headDim === undefined && (overrides.hiddenSize !== undefined || overrides.numHeads !== undefined)) {
    config.headDim = config.hiddenSize / config.numHeads;
  }
  if (overrides.numKvHeads === undefined && overrides.numHeads !== undefined) {
    config.numKvHeads = Math.min(config.numKvHeads, config.numHeads);
  }
  for (const field of ['vocabSize', 'hiddenSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'intermediateSize', 'maxPositions'] as const) {
    checkPositiveInt(config[field], `${field}${field === 'headDim' ? ' (hiddenSize / numHeads unless given)' : ''}`);
  }
  if (config.numHeads % config.numKvHeads !== 0) throw new RangeError(`numHeads ${config.numHeads} is not a multiple of numKvHeads ${config.numKvHeads}`);
  if (config.headDim % 2 !== 0) throw new RangeError(`headDim must be even for rotary embeddings, got ${config.headDim}`);
  const bos = config.vocabSize - 2;
  const eos = config.vocabSize - 1;
  if (overrides.bosTokenId !== undefined && overrides.bosTokenId !== bos) throw new RangeError(`bosTokenId must be ${bos} (the tokenizer's <|begin_of_text|>), got ${overrides.bosTokenId}`);
  if (overrides.eosTokenIds !== undefined && (overrides.eosTokenIds.length !== 1 || overrides.eosTokenIds[0] !== eos)) {
    throw new RangeError(`eosTokenIds must be [${eos}] (the tokenizer's <|end_of_text|>), got [${overrides.eosTokenIds.join(', ')}]`);
  }
  config.bosTokenId = bos;
  config.eosTokenIds = [eos];
  if (!(config.rmsNormEps > 0)) throw new RangeError(`rmsNormEps must be > 0, got ${config.rmsNormEps}`);
  if (!(config.ropeTheta > 0)) throw new RangeError(`ropeTheta must be > 0, got ${config.ropeTheta}`);
  return config;
}
