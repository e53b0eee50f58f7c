/**
 * Loading a Hugging Face model directory (config.json + model.safetensors or a sharded index) into a model
 * family. The one loading path for tests, demos, apps and users.
 */
import { type Backend, getBackend, InvalidArgumentError } from '@tessera/native';
import type { ModelConfig } from '../config.js';
import { ConfigError } from '../errors.js';
import { readHfConfig } from '../formats/hf-config.js';
import { ModelTensors } from '../formats/model-dir.js';
import { DecoderModel } from './decoder.js';
import { EncoderModel } from './encoder.js';
import { decoderTensorShapes, encoderTensorShapes } from './names.js';
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
  if (config.family === 'encoder') return new EncoderModel(config, loadWeights(dir, encoderTensorShapes(config), backend));
  const weights = loadWeights(dir, decoderTensorShapes(config), backend);
  if (format === 'int8') {
    try {
      weights.quantizeInt8(decoderInt8WeightNames(config));
    } catch (err) {
      weights.dispose();
      throw err;
    }
  }
  return new DecoderModel(config, weights);
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
