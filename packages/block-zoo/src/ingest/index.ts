/**
 * @tessera/block-zoo/ingest — models into the zoo, read unchanged through @tessera/engine's formats: HF Llama
 * directories (model.safetensors or sharded, config.json) and PEFT LoRA adapters (adapter_config.json +
 * adapter_model.safetensors). Every tensor is hashed over its raw bytes and put into the content-addressed store
 * (deduplicated), and the zoo partitions lazily (algorithm 5.1). Full fine-tunes are scored layer by layer with
 * the logit lens against their base, read back from the store. Fitted surrogates go into the store and the zoo
 * with storeSurrogate.
 */
import { join } from 'node:path';

import { type DecoderConfig, loadLoraAdapter, ModelTensors, readHfConfig, readLoraAdapterConfig, SafetensorsFile } from '@tessera/engine';
import { fromHalfBits } from '@tessera/native';
import { type CalibrationData, calibrationHash, checkNegativeControl, layerScores } from '../fit/equivalence.js';
import { mat, type Mat } from '../fit/linalg.js';
import { archSigOf, type LlamaWeights } from '../fit/llama.js';
import type { ArchSig } from '../planner/arch.js';
import { ZooInvalidError } from '../planner/errors.js';
import { tensorId as tensorIdOf } from '../planner/ids.js';
import type { TensorRef } from '../planner/manifest.js';
import type { BlockZoo, ModelDescription, ModelInfo, PeDescription } from '../planner/zoo.js';
import type { DiskTensorStore } from '../store/disk-store.js';

/** PEFT's weights file (the engine's peft.ts spells it too; not exported from its public entry). */
const PEFT_ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';

/** The zoo's architecture signature of a Llama config (fit/llama.ts holds it: the fits read checkpoints too). */
export { archSigOf };
export { storeSurrogate } from './surrogate.js';

interface HostTensorFile {
  names(): string[];
  info(name: string): { dtype: string; shape: number[] };
  readHost(name: string): ArrayBufferView;
}

/** Hashes (and, with a store, stores) every tensor of a file set. */
function hashTensors(files: HostTensorFile, names: readonly string[], store?: DiskTensorStore): TensorRef[] {
  return names.map((name) => {
    const info = files.info(name);
    const host = files.readHost(name);
    const bytes = new Uint8Array(host.buffer, host.byteOffset, host.byteLength);
    const desc = { dtype: info.dtype, shape: info.shape };
    const id = store ? store.put(desc, bytes).id : tensorIdOf(desc, bytes);
    return { name, id, dtype: info.dtype, shape: [...info.shape] };
  });
}

/** Reads an HF Llama directory into a model description (hashing every tensor; storing it when a store is given). */
export function describeHfLlama(dir: string, options: { id: string; store?: DiskTensorStore }): { description: ModelDescription; config: DecoderConfig } {
  const config = readHfConfig(dir);
  if (config.family !== 'decoder') throw new ZooInvalidError(`${dir} holds a ${config.family} (${config.architecture}); the zoo partitions Llama decoders`);
  const files = ModelTensors.open(dir);
  try {
    const names = files.names();
    const tensors = hashTensors(files, names, options.store);
    const embed = tensors.find((t) => t.name === 'model.embed_tokens.weight');
    if (!embed) throw new ZooInvalidError(`${dir} has no model.embed_tokens.weight`);
    return { description: { id: options.id, archSig: archSigOf(config, embed.dtype), tensors }, config };
  } finally {
    files.close();
  }
}

/**
 * Reads a PEFT LoRA adapter directory as a PE description of `base`. The adapter is validated against the base's
 * config by the engine's own PEFT loader (module names, ranks, shapes), then hashed tensor by tensor.
 */
export function describePeftLora(dir: string, options: { id: string; base: string; baseConfig: DecoderConfig; store?: DiskTensorStore }): PeDescription {
  const config = readLoraAdapterConfig(dir);
  const checked = loadLoraAdapter(dir, { base: options.baseConfig });
  try {
    if (checked.savedModules.size > 0) {
      throw new ZooInvalidError(`${dir}: modules_to_save (${[...checked.savedModules.keys()].join(', ')}) replace whole base tensors; ingest such a model as a full fine-tune`);
    }
    if (checked.biases.size > 0) {
      throw new ZooInvalidError(`${dir}: the adapter trains biases (bias = ${config.bias}); describe it as a LoRA plus a BitFit delta instead`);
    }
  } finally {
    checked.dispose();
  }
  const file = SafetensorsFile.open(join(dir, PEFT_ADAPTER_WEIGHTS_FILE));
  try {
    const tensors = hashTensors(file, file.names(), options.store);
    return {
      id: options.id,
      base: options.base,
      method: 'lora',
      config: {
        r: config.r,
        loraAlpha: config.loraAlpha,
        targetModules: typeof config.targetModules === 'string' ? config.targetModules : [...config.targetModules],
        useRslora: config.useRslora,
      },
      tensors,
    };
  } finally {
    file.close();
  }
}

/** A foundation directory into the store and the zoo. */
export function ingestFoundation(zoo: BlockZoo, store: DiskTensorStore, dir: string, options: { id: string }): ModelInfo {
  return zoo.addFoundation(describeHfLlama(dir, { id: options.id, store }).description);
}

/** A PEFT LoRA adapter of a zoo model into the store and the zoo. */
export function ingestLora(zoo: BlockZoo, store: DiskTensorStore, dir: string, options: { id: string; base: string }): ModelInfo {
  const base = zoo.model(options.base);
  const baseConfig = decoderConfigOf(base.archSig);
  return zoo.addPeFineTune(describePeftLora(dir, { id: options.id, base: options.base, baseConfig, store }));
}

/**
 * A full fine-tune directory against its base in the zoo: stored, scored layer by layer with the logit lens on
 * `calibration` (base weights read back from the store), and partitioned. With `negativeControl` (an unrelated
 * model directory of the same vocabulary), the §8.1 rule runs first: the control must score below the threshold.
 */
export function ingestFullFineTune(
  zoo: BlockZoo,
  store: DiskTensorStore,
  dir: string,
  options: { id: string; base: string; calibration: CalibrationData; mode?: 'cumulative' | 'substitution'; negativeControl?: LlamaWeights },
): { info: ModelInfo; scores: number[] } {
  const { description } = describeHfLlama(dir, { id: options.id, store });
  const base = weightsFromStore(zoo, store, options.base);
  const model = weightsOf(description, store);
  if (options.negativeControl) checkNegativeControl(base, options.negativeControl, options.calibration, zoo.threshold);
  const scores = layerScores(base, model, options.calibration, options.mode === undefined ? {} : { mode: options.mode });
  const info = zoo.addFullFineTune({ ...description, base: options.base }, scores, {
    method: `logit-lens-cosine/${options.mode ?? 'cumulative'}`,
    datasetHash: calibrationHash(options.calibration),
  });
  return { info, scores };
}

/** The engine config a zoo architecture signature stands for (what the PEFT loader validates against). */
export function decoderConfigOf(a: ArchSig): DecoderConfig {
  return {
    family: 'decoder',
    architecture: 'LlamaForCausalLM',
    vocabSize: a.vocabSize,
    hiddenSize: a.hiddenSize,
    numLayers: a.numLayers,
    numHeads: a.numHeads,
    numKvHeads: a.numKvHeads,
    headDim: a.headDim,
    intermediateSize: a.intermediateSize,
    maxPositions: 1 << 20,
    rmsNormEps: a.rmsNormEps,
    ropeTheta: a.ropeTheta,
    tieWordEmbeddings: a.tieWordEmbeddings,
    bosTokenId: a.vocabSize - 2,
    eosTokenIds: [a.vocabSize - 1],
  };
}

function toMat(dtype: string, shape: readonly number[], bytes: Uint8Array, name: string): Mat {
  let values: Float32Array;
  if (dtype === 'f32') values = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  else if (dtype === 'f16' || dtype === 'bf16') values = fromHalfBits(new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2), dtype);
  else throw new ZooInvalidError(`tensor ${name} is ${dtype}; the fits read f32, f16 and bf16`);
  return shape.length === 1 ? mat(1, shape[0]!, values) : mat(shape[0]!, shape.slice(1).reduce((a, b) => a * b, 1), values);
}

/** A description's weights as float64, read back from the store. */
function weightsOf(desc: ModelDescription, store: DiskTensorStore): LlamaWeights {
  const tensors = new Map<string, Mat>();
  for (const t of desc.tensors) {
    const { dtype, shape, bytes } = store.read(t.id);
    tensors.set(t.name, toMat(dtype, shape, bytes, t.name));
  }
  return { arch: desc.archSig, tensors };
}

/** A foundation's or full fine-tune's float64 weights, rebuilt from its chain's tensors in the store. */
export function weightsFromStore(zoo: BlockZoo, store: DiskTensorStore, model: string): LlamaWeights {
  const info = zoo.model(model);
  if (info.kind === 'pe') throw new ZooInvalidError(`${model} is a PE fine-tune; its weights are its base's plus a delta`);
  const refs = new Map<string, TensorRef>();
  for (const b of zoo.chain(model).blocks) for (const t of b.tensors) refs.set(t.name, t);
  return weightsOf({ id: model, archSig: info.archSig, tensors: [...refs.values()] }, store);
}
