/**
 * Loading a Hugging Face model directory (config.json + model.safetensors or a sharded index) into a model
 * family. The one loading path for tests, demos, apps and users.
 */
import { type Backend, type ComputeMode, getBackend, InvalidArgumentError } from '@tessera/native';
import type { EncoderConfig, ModelConfig } from '../config.js';
import { ConfigError } from '../errors.js';
import { readHfConfig } from '../formats/hf-config.js';
import { ModelTensors } from '../formats/model-dir.js';
import { DecoderModel } from './decoder.js';
import { EncoderModel } from './encoder.js';
import { decoderTensorShapes, encoderLinearModules, encoderTensorShapes } from './names.js';
import { decoderInt8WeightNames, type WeightFormat } from './quantized.js';
import { ModelWeights } from './weights.js';

export interface LoadOptions {
  backend?: Backend;
  /**
   * 'int8': quantize the decoder's linear weights (and its LM head) to Q8_0 int8 at load (models/quantized.ts); the
   * decode GEMM then streams a quarter of the f32 bytes. CPU backend, decoder family only. Default 'f32': weights as
   * stored.
   */
  weights?: WeightFormat;
  /**
   * 'bf16': hold the linear weights as bf16 and run every linear layer in bf16 compute (activations rounded to bf16,
   * f32 sums; `@tessera/native` gemm's `compute`): about 2x the f32 GEMM rate on CPUs with AVX512-BF16 (`bench
   * gemm`), at the accuracy cost `test/bf16-compute.test.ts` states. CPU backend only; not with weights 'int8'. Default: the environment's
   * TESSERA_COMPUTE ('f32' or 'bf16'), else 'f32'.
   */
  compute?: ComputeMode;
}

function checkComputeOption(dir: string, options: LoadOptions, format: WeightFormat, backend: Backend): ComputeMode {
  const fromEnv = options.compute === undefined;
  const compute: unknown = fromEnv ? process.env.TESSERA_COMPUTE || 'f32' : options.compute;
  const source = fromEnv ? 'TESSERA_COMPUTE' : 'option compute';
  if (compute !== 'f32' && compute !== 'bf16') throw new InvalidArgumentError(`load ${dir}: ${source} must be 'f32' or 'bf16', got ${String(compute)}`);
  if (compute === 'bf16' && format === 'int8') {
    throw new InvalidArgumentError(`load ${dir}: ${source} 'bf16' and weights 'int8' exclude each other (int8 weights quantize the activations to int8)`);
  }
  if (compute === 'bf16' && backend.device !== 'cpu') {
    throw new InvalidArgumentError(`load ${dir}: ${source} 'bf16' is a CPU mode; the ${backend.device} backend computes in f32`);
  }
  return compute;
}

/** The linear weights of an encoder's layers (pooler and classifier stay as stored and compute in f32). */
function encoderLayerWeightNames(config: EncoderConfig): string[] {
  const names: string[] = [];
  for (let l = 0; l < config.numLayers; l++) for (const m of Object.values(encoderLinearModules(config, l))) names.push(`${m}.weight`);
  return names;
}

function checkWeightsOption(dir: string, config: ModelConfig, weights: unknown): WeightFormat {
  if (weights === undefined || weights === 'f32') return 'f32';
  if (weights !== 'int8') throw new InvalidArgumentError(`load ${dir}: option weights must be 'f32' or 'int8', got ${String(weights)}`);
  if (config.family !== 'decoder') {
    throw new InvalidArgumentError(`load ${dir}: weights 'int8' is implemented for the decoder family, not ${config.architecture}`);
  }
  return 'int8';
}

function loadWeights(dir: string, shapes: Map<string, number[]>, backend: Backend): ModelWeights {
  const tensors = ModelTensors.open(dir);
  try {
    return ModelWeights.load(tensors, shapes, backend);
  } finally {
    tensors.close();
  }
}

function familyError(dir: string, config: ModelConfig, want: string): ConfigError {
  return new ConfigError(dir, `${dir} holds a ${config.architecture}, not ${want}`);
}

function build(dir: string, config: ModelConfig, options: LoadOptions): EncoderModel | DecoderModel {
  const backend = options.backend ?? getBackend();
  const format = checkWeightsOption(dir, config, options.weights);
  const compute = checkComputeOption(dir, options, format, backend);
  const weights = loadWeights(dir, config.family === 'encoder' ? encoderTensorShapes(config) : decoderTensorShapes(config), backend);
  try {
    if (config.family === 'decoder' && format === 'int8') weights.quantizeInt8(decoderInt8WeightNames(config));
    if (compute === 'bf16') {
      // The decoder's bf16 set is its int8 set: every layer linear and the LM head.
      weights.toBf16(config.family === 'encoder' ? encoderLayerWeightNames(config) : decoderInt8WeightNames(config));
      weights.compute = 'bf16';
    }
  } catch (err) {
    weights.dispose();
    throw err;
  }
  return config.family === 'encoder' ? new EncoderModel(config, weights) : new DecoderModel(config, weights);
}

/** Loads a BERT-style encoder directory. */
export function loadEncoder(dir: string, options: LoadOptions = {}): EncoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'encoder') throw familyError(dir, config, 'an encoder');
  return build(dir, config, options) as EncoderModel;
}

/** Loads a Llama-style decoder directory. */
export function loadDecoder(dir: string, options: LoadOptions = {}): DecoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'decoder') throw familyError(dir, config, 'a decoder');
  return build(dir, config, options) as DecoderModel;
}

/** Loads whichever family config.json names (config.json is read once). */
export function loadModel(dir: string, options: LoadOptions = {}): EncoderModel | DecoderModel {
  return build(dir, readHfConfig(dir), options);
}
