/**
 * Loading a Hugging Face model directory (config.json + model.safetensors or a sharded index) into a model
 * family. The one loading path for tests, demos, apps and users.
 */
import { type Backend, getBackend } from '@tessera/native';
import { ConfigError } from '../errors.js';
import { readHfConfig } from '../formats/hf-config.js';
import { ModelTensors } from '../formats/model-dir.js';
import { DecoderModel } from './decoder.js';
import { EncoderModel } from './encoder.js';
import { decoderTensorShapes, encoderTensorShapes } from './names.js';
import { ModelWeights } from './weights.js';

export interface LoadOptions {
  backend?: Backend;
}

function loadWeights(dir: string, shapes: Map<string, number[]>, backend: Backend): ModelWeights {
  const tensors = ModelTensors.open(dir);
  try {
    return ModelWeights.load(tensors, shapes, backend);
  } finally {
    tensors.close();
  }
}

/** Loads a BERT-style encoder directory. */
export function loadEncoder(dir: string, options: LoadOptions = {}): EncoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'encoder') throw new ConfigError(dir, `${dir} holds a ${config.architecture}, not an encoder`);
  const backend = options.backend ?? getBackend();
  return new EncoderModel(config, loadWeights(dir, encoderTensorShapes(config), backend));
}

/** Loads a Llama-style decoder directory. */
export function loadDecoder(dir: string, options: LoadOptions = {}): DecoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'decoder') throw new ConfigError(dir, `${dir} holds a ${config.architecture}, not a decoder`);
  const backend = options.backend ?? getBackend();
  return new DecoderModel(config, loadWeights(dir, decoderTensorShapes(config), backend));
}

/** Loads whichever family config.json names. */
export function loadModel(dir: string, options: LoadOptions = {}): EncoderModel | DecoderModel {
  const config = readHfConfig(dir);
  return config.family === 'encoder' ? loadEncoder(dir, options) : loadDecoder(dir, options);
}
