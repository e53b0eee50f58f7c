/**
 * Loading a Hugging Face model directory (config.json + model.safetensors or a sharded index) into a model
 * family. The one loading path for tests, demos, apps and users.
 */
import { type Backend, getBackend } from '@tessera/native';
import type { ModelConfig } from '../config.js';
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

function familyError(dir: string, config: ModelConfig, want: string): ConfigError {
  return new ConfigError(dir, `${dir} holds a ${config.architecture}, not ${want}`);
}

function build(dir: string, config: ModelConfig, backend: Backend): EncoderModel | DecoderModel {
  return config.family === 'encoder'
    ? new EncoderModel(config, loadWeights(dir, encoderTensorShapes(config), backend))
    : new DecoderModel(config, loadWeights(dir, decoderTensorShapes(config), backend));
}

/** Loads a BERT-style encoder directory. */
export function loadEncoder(dir: string, options: LoadOptions = {}): EncoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'encoder') throw familyError(dir, config, 'an encoder');
  return build(dir, config, options.backend ?? getBackend()) as EncoderModel;
}

/** Loads a Llama-style decoder directory. */
export function loadDecoder(dir: string, options: LoadOptions = {}): DecoderModel {
  const config = readHfConfig(dir);
  if (config.family !== 'decoder') throw familyError(dir, config, 'a decoder');
  return build(dir, config, options.backend ?? getBackend()) as DecoderModel;
}

/** Loads whichever family config.json names (config.json is read once). */
export function loadModel(dir: string, options: LoadOptions = {}): EncoderModel | DecoderModel {
  return build(dir, readHfConfig(dir), options.backend ?? getBackend());
}
