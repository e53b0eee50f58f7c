/** Small random models for engine tests: configs plus seeded host weights, built from the HF name/shape maps. */
import { randomFloats } from '@tessera/test-utils';
import type { DecoderConfig, EncoderConfig } from '../../src/config.js';
import { decoderTensorShapes, encoderTensorShapes } from '../../src/models/names.js';
import { ModelWeights } from '../../src/models/weights.js';

export type HostArrays = Map<string, { data: Float32Array; shape: number[] }>;

export function tinyEncoderConfig(overrides: Partial<EncoderConfig> = {}): EncoderConfig {
  return {
    family: 'encoder',
    architecture: 'BertForSequenceClassification',
    vocabSize: 61,
    hiddenSize: 48,
    numLayers: 3,
    numHeads: 4,
    intermediateSize: 96,
    maxPositions: 64,
    typeVocabSize: 2,
    layerNormEps: 1e-12,
    hiddenAct: 'gelu',
    padTokenId: 0,
    numLabels: 3,
    labels: ['a', 'b', 'c'],
    ...overrides,
  };
}

export function tinyDecoderConfig(overrides: Partial<DecoderConfig> = {}): DecoderConfig {
  return {
    family: 'decoder',
    architecture: 'LlamaForCausalLM',
    vocabSize: 67,
    hiddenSize: 48,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    headDim: 12,
    intermediateSize: 80,
    maxPositions: 128,
    rmsNormEps: 1e-6,
    ropeTheta: 10000,
    tieWordEmbeddings: false,
    bosTokenId: 1,
    eosTokenIds: [2],
    ...overrides,
  };
}

/**
 * Seeded weights: matrices uniform in ±0.15 (enough signal to carry through a few layers), norm weights 1 ± 0.1,
 * biases ±0.05, so every parameter matters and a wrong wiring shows up.
 */
export function randomHostWeights(shapes: Map<string, number[]>, seed: number): HostArrays {
  const out: HostArrays = new Map();
  let s = seed;
  for (const [name, shape] of shapes) {
    const n = shape.reduce((a, b) => a * b, 1);
    s += 1;
    let data: Float32Array;
    if (shape.length === 1 && /(LayerNorm|norm|layernorm)\.weight$/.test(name)) data = randomFloats(n, s, 0.9, 1.1);
    else if (shape.length === 1) data = randomFloats(n, s, -0.05, 0.05);
    else data = randomFloats(n, s, -0.15, 0.15);
    out.set(name, { data, shape });
  }
  return out;
}

export function randomEncoder(config: EncoderConfig, seed = 1): { host: HostArrays; weights: () => ModelWeights } {
  const host = randomHostWeights(encoderTensorShapes(config), seed);
  return { host, weights: () => ModelWeights.fromHost(host) };
}

export function randomDecoder(config: DecoderConfig, seed = 1): { host: HostArrays; weights: () => ModelWeights } {
  const host = randomHostWeights(decoderTensorShapes(config), seed);
  return { host, weights: () => ModelWeights.fromHost(host) };
}

export function randomIds(n: number, vocab: number, seed: number, first = 0): number[] {
  const f = randomFloats(n, seed, 0, 1);
  return Array.from(f, (u) => first + Math.min(vocab - first - 1, Math.floor(u * (vocab - first))));
}
