/**
 * Model sizes for the generator: "tiny" for tests (a few hundred kB, generated in milliseconds) and "mini" for
 * benchmarks (f32 weights of 50–200 MB, larger than any CPU's last-level cache, so a forward pass streams its
 * weights from memory as a real model's does).
 */
import { type DType, dtypeSize } from '@tessera/native';

import type { DecoderConfig, EncoderConfig, ModelConfig } from '../config.js';
import { decoderTensorShapes, encoderTensorShapes } from '../models/names.js';

export type ModelFamily = 'encoder' | 'decoder';
export type ModelSize = 'tiny' | 'mini';
/** Weight dtypes the generator writes. */
export type WeightDtype = 'f32' | 'f16' | 'bf16';

export const MODEL_FAMILIES: readonly ModelFamily[] = ['encoder', 'decoder'];
export const MODEL_SIZES: readonly ModelSize[] = ['tiny', 'mini'];
export const WEIGHT_DTYPES: readonly WeightDtype[] = ['f32', 'f16', 'bf16'];

/** Vocabulary sizes; the generated tokenizers come out at exactly these sizes (see tokenizer-builders.ts). */
export const PRESET_VOCAB_SIZE: Readonly<Record<ModelSize, number>> = { tiny: 1024, mini: 8192 };

/** The sentiment-style labels of the generated classifier. */
export const ENCODER_LABELS = ['negative', 'neutral', 'positive'] as const;

/**
 * BertForSequenceClassification. tiny: hidden 64, 2 layers, 4 heads, FFN 128, 128 positions, 3 labels.
 * mini: hidden 512, 8 layers, 8 heads, FFN 2048, 512 positions, vocab 8192: 29,941,763 parameters,
 * 119,767,052 bytes in f32.
 */
export function encoderPreset(size: ModelSize): EncoderConfig {
  const common = {
    family: 'encoder',
    architecture: 'BertForSequenceClassification',
    vocabSize: PRESET_VOCAB_SIZE[size],
    typeVocabSize: 2,
    layerNormEps: 1e-12,
    hiddenAct: 'gelu',
    padTokenId: 0,
    numLabels: ENCODER_LABELS.length,
  } as const;
  if (size === 'tiny') {
    return { ...common, labels: [...ENCODER_LABELS], hiddenSize: 64, numLayers: 2, numHeads: 4, intermediateSize: 128, maxPositions: 128 };
  }
  return { ...common, labels: [...ENCODER_LABELS], hiddenSize: 512, numLayers: 8, numHeads: 8, intermediateSize: 2048, maxPositions: 512 };
}

/**
 * LlamaForCausalLM with grouped-query attention. bos/eos are the tokenizer's last two ids.
 * tiny: hidden 64, 2 layers, 4 heads over 2 KV heads, head_dim 16, FFN 176, 256 positions, untied LM head.
 * mini: hidden 768, 6 layers, 12 heads over 4 KV heads, head_dim 64, FFN 2048 (8/3 · hidden, Llama's ratio),
 * 1024 positions, vocab 8192, LM head tied to the embeddings (as in Llama 3.2 1B): 44,050,176 parameters,
 * 176,200,704 bytes in f32. (Untied, the same shape is 201.4 MB, just over the 200 MB ceiling.)
 */
export function decoderPreset(size: ModelSize): DecoderConfig {
  const vocabSize = PRESET_VOCAB_SIZE[size];
  const common = {
    family: 'decoder',
    architecture: 'LlamaForCausalLM',
    vocabSize,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    bosTokenId: vocabSize - 2,
  } as const;
  if (size === 'tiny') {
    return { ...common, eosTokenIds: [vocabSize - 1], hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, headDim: 16, intermediateSize: 176, maxPositions: 256, tieWordEmbeddings: false };
  }
  return { ...common, eosTokenIds: [vocabSize - 1], hiddenSize: 768, numLayers: 6, numHeads: 12, numKvHeads: 4, headDim: 64, intermediateSize: 2048, maxPositions: 1024, tieWordEmbeddings: true };
}

export function presetConfig(family: 'encoder', size: ModelSize): EncoderConfig;
export function presetConfig(family: 'decoder', size: ModelSize): DecoderConfig;
export function presetConfig(family: ModelFamily, size: ModelSize): ModelConfig;
export function presetConfig(family: ModelFamily, size: ModelSize): ModelConfig {
  return family === 'encoder' ? encoderPreset(size) : decoderPreset(size);
}

/** Every tensor of the config's checkpoint with its shape (the names.ts shape map of its family). */
export function tensorShapes(config: ModelConfig): Map<string, number[]> {
  return config.family === 'encoder' ? encoderTensorShapes(config) : decoderTensorShapes(config);
}

/** Parameters in the config's checkpoint. */
export function parameterCount(config: ModelConfig): number {
  let n = 0;
  for (const shape of tensorShapes(config).values()) n += shape.reduce((a, b) => a * b, 1);
  return n;
}

/** Bytes of tensor data in the config's checkpoint at this dtype (the safetensors file adds its header). */
export function weightBytes(config: ModelConfig, dtype: WeightDtype | DType = 'f32'): number {
  return parameterCount(config) * dtypeSize(dtype);
}
