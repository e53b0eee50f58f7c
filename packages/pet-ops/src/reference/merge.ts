/**
 * The merged per-task model (pets.md §9 behaviour 5): the dense weights a plain BERT with the task's head computes,
 * for the test oracle (the float64 reference here, onnxruntime elsewhere) and the SeqS baseline (one full copy
 * per task).
 *   maskbert  W ⊙ M                 diff   W + δ, b + b_t, task LayerNorms
 *   bitfit    b_t, task LayerNorms   lora   W + s·B·A
 *   standard  the shared weights     every type: the task's classifier
 * Adapters and prefixes do not merge into a plain BERT; they come back as `extensions` (the shapes the ONNX
 * exporter's EncoderOnnxExtensions take).
 */
import { type EncoderConfig, encoderTensorShapes } from '@tessera/engine';
import { PetShapeError } from '../errors.js';
import { adapterModules, adapterTensorNames } from '../operators/adapter.js';
import { isConfigValidating } from '../operators/base.js';
import { diffTensorNames } from '../operators/diff.js';
import { loraModules, loraScale, loraTensorNames } from '../operators/lora.js';
import { maskTensorName } from '../operators/maskbert.js';
import { headTensorNames, linearModules, normModules } from '../operators/modules.js';
import { prefixTensorNames } from '../operators/prefix.js';
import { hostF32, hostI32, hostU8, maskBit, maskRowBytes } from '../operators/validate.js';
import { defaultPetRegistry } from '../registry.js';
import type { PetParams } from '../types.js';

/** A Houlsby adapter after attention.output.dense or output.dense: y + act(y·downᵀ + downBias)·upᵀ + upBias. */
export interface MergedAdapter {
  /** f32 [m, hidden] */
  down: Float32Array;
  downBias: Float32Array;
  /** f32 [hidden, m] */
  up: Float32Array;
  upBias: Float32Array;
  /** Bottleneck width. */
  m: number;
  act: 'gelu' | 'gelu_tanh';
}

/** One layer's prefix keys and values, f32 [length, hidden] each (projected, post-bias space). */
export interface MergedPrefix {
  key: Float32Array;
  value: Float32Array;
  length: number;
}

export type AdapterSite = 'attn_out' | 'ffn_out';

export interface MergedPetExtensions {
  /** By {@link adapterKey}(layer, site). */
  adapters?: Map<string, MergedAdapter>;
  /** By layer. */
  prefixes?: Map<number, MergedPrefix>;
}

export interface MergedPetModel {
  /** The shared config with the task's labels (numLabels = the head's width). */
  config: EncoderConfig;
  /** Every tensor of `config` by HF name, f32, HF shapes (Linear [out, in]). */
  weights: Map<string, Float32Array>;
  extensions: MergedPetExtensions;
}

export function adapterKey(layer: number, site: AdapterSite): string {
  return `${layer}:${site}`;
}

/**
 * Merges a task into a copy of the shared weights. `sharedHost` holds every tensor of the shared config (by HF
 * name, f32). The parameters are validated first (as at registration).
 */
export function mergePetIntoWeights(sharedHost: ReadonlyMap<string, Float32Array>, config: EncoderConfig, params: PetParams): MergedPetModel {
  const op = defaultPetRegistry().get(params.type);
  if (isConfigValidating(op)) op.validateForConfig(config, params);
  const pet = params.config;
  const merged: EncoderConfig = { ...config, numLabels: pet.labels.length, labels: [...pet.labels] };
  const weights = new Map<string, Float32Array>();
  const head = headTensorNames(config);
  for (const [name, shape] of encoderTensorShapes(merged)) {
    if (name === head.weight || name === head.bias) {
      weights.set(name, Float32Array.from(hostF32(params, name)));
      continue;
    }
    const src = sharedHost.get(name);
    const numel = shape.reduce((a, b) => a * b, 1);
    if (!src || src.length !== numel) throw new PetShapeError(name, `a shared f32 tensor of ${numel} elements ([${shape.join(', ')}])`, src ? `${src.length} elements` : 'no such tensor');
    weights.set(name, Float32Array.from(src));
  }
  const taskNorms = () => {
    for (const n of normModules(config)) {
      for (const part of ['weight', 'bias'] as const) {
        const name = `${n.module}.${part}`;
        if (params.tensors.has(name)) weights.set(name, Float32Array.from(hostF32(params, name)));
      }
    }
  };
  const extensions: MergedPetExtensions = {};

  switch (params.type) {
    case 'standard':
      break;
    case 'diff':
      for (const m of linearModules(config)) {
        const n = diffTensorNames(m.module);
        const w = weights.get(`${m.module}.weight`)!;
        const b = weights.get(`${m.module}.bias`)!;
        const indptr = hostI32(params, n.indptr);
        const indices = hostI32(params, n.indices);
        const values = hostF32(params, n.values);
        for (let o = 0; o < m.outFeatures; o++) {
          for (let e = indptr[o]!; e < indptr[o + 1]!; e++) w[o * m.inFeatures + indices[e]!] = w[o * m.inFeatures + indices[e]!]! + values[e]!;
        }
        const bt = hostF32(params, n.biasDiff);
        for (let o = 0; o < m.outFeatures; o++) b[o] = b[o]! + bt[o]!;
      }
      taskNorms();
      break;
    case 'maskbert':
      for (const m of linearModules(config)) {
        const w = weights.get(`${m.module}.weight`)!;
        const mask = hostU8(params, maskTensorName(m.module));
        const rowBytes = maskRowBytes(m.inFeatures);
        for (let o = 0; o < m.outFeatures; o++) {
          for (let i = 0; i < m.inFeatures; i++) if (maskBit(mask, o * rowBytes, i) === 0) w[o * m.inFeatures + i] = 0;
        }
      }
      break;
    case 'bitfit':
      for (const m of linearModules(config)) weights.set(`${m.module}.bias`, Float32Array.from(hostF32(params, `${m.module}.bias`)));
      taskNorms();
      break;
    case 'lora': {
      const r = pet.rank!;
      const s = loraScale(pet);
      for (const m of loraModules(config, pet)) {
        const n = loraTensorNames(m.module);
        const a = hostF32(params, n.a); // [r, in]
        const b = hostF32(params, n.b); // [out, r]
        const w = weights.get(`${m.module}.weight`)!;
        for (let o = 0; o < m.outFeatures; o++) {
          for (let i = 0; i < m.inFeatures; i++) {
            let acc = 0;
            for (let j = 0; j < r; j++) acc += b[o * r + j]! * a[j * m.inFeatures + i]!;
            w[o * m.inFeatures + i] = w[o * m.inFeatures + i]! + s * acc;
          }
        }
      }
      break;
    }
    case 'adapter': {
      const adapters = new Map<string, MergedAdapter>();
      for (const mod of adapterModules(config)) {
        const n = adapterTensorNames(mod.module);
        adapters.set(adapterKey(mod.layer, mod.slice as AdapterSite), {
          down: Float32Array.from(hostF32(params, n.down)),
          downBias: Float32Array.from(hostF32(params, n.downBias)),
          up: Float32Array.from(hostF32(params, n.up)),
          upBias: Float32Array.from(hostF32(params, n.upBias)),
          m: pet.bottleneck!,
          act: pet.activation ?? 'gelu',
        });
      }
      extensions.adapters = adapters;
      taskNorms();
      break;
    }
    case 'prefix': {
      const prefixes = new Map<number, MergedPrefix>();
      for (let l = 0; l < config.numLayers; l++) {
        const n = prefixTensorNames(config, l);
        prefixes.set(l, { key: Float32Array.from(hostF32(params, n.key)), value: Float32Array.from(hostF32(params, n.value)), length: pet.prefixLength! });
      }
      extensions.prefixes = prefixes;
      break;
    }
  }
  return { config: merged, weights, extensions };
}
