/**
 * Trainable sets as masks over a model's weights. A spec picks which base tensors (by Hugging Face name) get a
 * gradient, or adds LoRA factors beside frozen Linears; everything else is frozen and gets no gradient buffer.
 * A {@link TrainParam} is one trainable f32 tensor with its gradient; the optimiser keeps its own state per param.
 */
import { SplitMix32, streamState } from '@tessera/core';
import { type Backend, Tensor, cast } from '@tessera/native';
import type { DecoderConfig, EncoderConfig } from '../config.js';
import { loraScaling, peftTargetMatches, loraRankFor, type LoraModuleWeights } from '../formats/peft-writer.js';
import type { LoraAdapterConfig } from '../formats/peft.js';
import type { LoraWeights } from '../hooks/lora-delta.js';
import {
  decoderLinearModules,
  decoderNormModules,
  decoderTensorShapes,
  decoderTopModules,
  encoderPrefix,
  encoderTensorShapes,
  encoderTopModules,
  peftLoraTensorNames,
} from '../models/names.js';
import type { ModelWeights } from '../models/weights.js';
import { TrainConfigError } from './errors.js';

/** LoRA on the Linears PEFT's `target_modules` selects (PEFT's LoraConfig fields, camelCased). */
export interface LoraSpec {
  kind: 'lora';
  /** Rank (default 8). */
  r?: number;
  /** lora_alpha (default 16). Scale = alpha / r, or alpha / √r with useRslora. */
  alpha?: number;
  /** PEFT target_modules: suffixes (a list) or one full-match regex (a string). Default: every Linear of the layers. */
  targetModules?: string[] | string;
  useRslora?: boolean;
  /** lora_dropout on the LoRA branch's input, training only (default 0). */
  dropout?: number;
  rankPattern?: Record<string, number>;
  alphaPattern?: Record<string, number>;
}

/**
 * Houlsby bottleneck adapters after attention.output.dense and output.dense of every encoder layer, plus the task's
 * own classifier and (by default) task LayerNorms, in PetS's PET file layout (`pet_type` adapter), or with `layers`
 * and `sites: ['attn_out']` HMI's (one adapter per upper layer, flat vectors from hmiAdapters()): the site output
 * H becomes H + act(H W_downᵀ + b_down) W_upᵀ + b_up before the residual and LayerNorm. The shared model is frozen
 * and never written: head and LayerNorms train as copies.
 */
export interface AdapterSpec {
  kind: 'adapter';
  /** Bottleneck m (default max(1, round(hidden / 12)), 64 at hidden 768). */
  bottleneck?: number;
  /** 'gelu' (erf, default) or 'gelu_tanh'. */
  activation?: 'gelu' | 'gelu_tanh';
  /** Train per-task copies of both LayerNorms of every layer (default true). */
  taskNorms?: boolean;
  /** Adapt layers [from, to) only (default all; HMI adapts the upper layers above its PLOT boundary). */
  layers?: { from: number; to: number };
  /** After which sites (default both, PetS's layout; HMI: ['attn_out'], one per layer). */
  sites?: readonly ('attn_out' | 'ffn_out')[];
}

/**
 * What trains. `full`: every tensor. `layers`: every tensor of layers [from, to). `head`: the decoder's LM head
 * (the tied embedding when the head is tied), the encoder's pooler and classifier. `bitfit` (encoder): every bias
 * (Linear and LayerNorm) and the classifier, as in BitFit. `lora`: LoRA factors beside frozen Linears (the base is
 * entirely frozen). `adapter` (encoder): see {@link AdapterSpec}.
 */
export type TrainableSpec =
  | { kind: 'full' }
  | { kind: 'layers'; from: number; to: number }
  | { kind: 'head' }
  | { kind: 'bitfit' }
  | LoraSpec
  | AdapterSpec;

/** The specs that select base tensors (no new parameters). */
export type BaseTensorSpec = Exclude<TrainableSpec, LoraSpec | AdapterSpec>;

/** One trainable f32 tensor and its gradient (same shape, accumulated into by the backward). */
export interface TrainParam {
  /** The HF tensor name of a base weight, or PEFT's name of a LoRA factor (`base_model.model.<module>.lora_A.weight`). */
  readonly name: string;
  /** The f32 master value, updated in place by the optimiser. */
  readonly value: Tensor;
  readonly grad: Tensor;
  /** Whether weight decay applies (matrices; not norm gains or biases, as the HF Trainer groups them). */
  readonly decay: boolean;
}

/** LoRA factors of one Linear: Δy = scale · (dropout(x) Aᵀ) Bᵀ with A [r, in], B [out, r]. */
export interface LoraParams {
  readonly module: string;
  readonly r: number;
  readonly alpha: number;
  readonly scale: number;
  readonly a: TrainParam;
  readonly b: TrainParam;
}

/** The decoder Linears LoRA can target, in forward order per layer. */
export const DECODER_LINEAR_SITES = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;

export const DEFAULT_DECODER_LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

/** The encoder Linears LoRA can target, by hook-site slice, in forward order per layer. */
export const ENCODER_LINEAR_SITES = ['query', 'key', 'value', 'attn_out', 'ffn_in', 'ffn_out'] as const;

/** PEFT's default target_modules for BERT. */
export const DEFAULT_ENCODER_LORA_TARGETS = ['query', 'value'];

function checkLayerRange(from: number, to: number, numLayers: number): void {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from >= to || to > numLayers) {
    throw new TrainConfigError(`trainable layers [${from}, ${to}) are not a non-empty range within [0, ${numLayers})`);
  }
}

/** The base tensors a non-LoRA spec trains on the encoder, in checkpoint order. */
export function encoderTrainableNames(config: EncoderConfig, spec: BaseTensorSpec): string[] {
  const all = [...encoderTensorShapes(config).keys()];
  const top = encoderTopModules(config);
  const classifier = config.architecture === 'BertForSequenceClassification';
  switch (spec.kind) {
    case 'full':
      return all;
    case 'head':
      if (!classifier) throw new TrainConfigError(`a ${config.architecture} has no head to train`);
      return all.filter((n) => n.startsWith(`${top.pooler}.`) || n.startsWith(`${top.classifier}.`));
    case 'bitfit':
      return all.filter((n) => n.endsWith('.bias') || n === `${top.classifier}.weight`);
    case 'layers': {
      checkLayerRange(spec.from, spec.to, config.numLayers);
      const prefixes = Array.from({ length: spec.to - spec.from }, (_, i) => `${encoderPrefix(config)}encoder.layer.${spec.from + i}.`);
      return all.filter((n) => prefixes.some((p) => n.startsWith(p)));
    }
  }
}

/** The LoRA spec with PEFT's defaults filled in, as the adapter_config.json it will be written as. */
export function loraAdapterConfig(spec: LoraSpec, targets: string[] | string, baseModel: string | null, taskType: string): LoraAdapterConfig {
  return {
    r: spec.r ?? 8,
    loraAlpha: spec.alpha ?? 16,
    targetModules: targets,
    fanInFanOut: false,
    bias: 'none',
    rankPattern: spec.rankPattern ?? {},
    alphaPattern: spec.alphaPattern ?? {},
    useRslora: spec.useRslora ?? false,
    baseModelNameOrPath: baseModel,
    taskType,
    modulesToSave: null,
  };
}

/** The base tensors a non-LoRA spec trains, in checkpoint order. */
export function decoderTrainableNames(config: DecoderConfig, spec: BaseTensorSpec): string[] {
  const all = [...decoderTensorShapes(config).keys()];
  switch (spec.kind) {
    case 'full':
      return all;
    case 'head':
      return [config.tieWordEmbeddings ? `${decoderTopModules.embedTokens}.weight` : `${decoderTopModules.lmHead}.weight`];
    case 'bitfit':
      throw new TrainConfigError('BitFit trains biases, and the Llama-style decoder has none');
    case 'layers': {
      const { from, to } = spec;
      checkLayerRange(from, to, config.numLayers);
      const names: string[] = [];
      for (let l = from; l < to; l++) {
        for (const m of Object.values(decoderLinearModules(l))) names.push(`${m}.weight`);
        for (const m of Object.values(decoderNormModules(l))) names.push(`${m}.weight`);
      }
      return all.filter((n) => names.includes(n));
    }
  }
}

const zeros = (shape: readonly number[], backend: Backend) => Tensor.zeros(shape, 'f32', backend);

/**
 * Makes the named base weights trainable: each becomes f32 (a f16 / bf16 weight is replaced in `weights` by an f32
 * master copy, so the model's own forward reads the trained values) and gets a zeroed gradient.
 */
export function baseParams(weights: ModelWeights, names: readonly string[]): TrainParam[] {
  return names.map((name) => {
    let value = weights.get(name);
    if (value.dtype !== 'f32') {
      const f = cast(value, 'f32');
      value.dispose();
      weights.tensors.set(name, f);
      value = f;
    }
    return { name, value, grad: zeros(value.shape, weights.backend), decay: value.rank >= 2 };
  });
}

/**
 * LoRA factors for every targeted Linear, initialised as PEFT does: A Kaiming-uniform (bound 1/√in, from a
 * seeded stream per module), B zero, so the adapted model starts equal to the base.
 */
export function createLoraParams(
  modules: readonly { module: string; inFeatures: number; outFeatures: number }[],
  spec: LoraSpec,
  seed: number,
  backend: Backend,
  defaultTargets: string[] = DEFAULT_DECODER_LORA_TARGETS,
): Map<string, LoraParams> {
  const targets = spec.targetModules ?? defaultTargets;
  const config = loraAdapterConfig(spec, targets, null, '');
  if (!Number.isInteger(config.r) || config.r <= 0) throw new TrainConfigError(`LoRA r must be a positive integer, got ${config.r}`);
  const dropout = spec.dropout ?? 0;
  if (!(dropout >= 0 && dropout < 1)) throw new TrainConfigError(`LoRA dropout must be in [0, 1), got ${dropout}`);
  const out = new Map<string, LoraParams>();
  for (const { module, inFeatures, outFeatures } of modules) {
    if (!peftTargetMatches(targets, module)) continue;
    const r = loraRankFor(config, module);
    const scale = loraScaling(config, module);
    const alpha = config.useRslora ? scale * Math.sqrt(r) : scale * r;
    const names = peftLoraTensorNames(module);
    const rng = new SplitMix32(streamState(seed, names.a));
    const bound = 1 / Math.sqrt(inFeatures);
    const aHost = new Float32Array(r * inFeatures);
    for (let i = 0; i < aHost.length; i++) aHost[i] = (rng.nextFloat() * 2 - 1) * bound;
    const a = Tensor.from(aHost, [r, inFeatures], { backend });
    const b = zeros([outFeatures, r], backend);
    out.set(module, {
      module, r, alpha, scale,
      a: { name: names.a, value: a, grad: zeros(a.shape, backend), decay: true },
      b: { name: names.b, value: b, grad: zeros(b.shape, backend), decay: true },
    });
  }
  if (out.size === 0) {
    throw new TrainConfigError(`LoRA target_modules ${JSON.stringify(targets)} match none of the model's Linears (e.g. ${modules[0]?.module ?? '-'})`);
  }
  return out;
}

/** The LoRA factors as LoraDelta serves them (the live tensors: serving sees every optimiser step). */
export function loraWeightsOf(name: string, lora: ReadonlyMap<string, LoraParams>): LoraWeights {
  return { name, modules: new Map([...lora].map(([m, p]) => [m, { a: p.a.value, b: p.b.value, scale: p.scale }])) };
}

/** The LoRA factors as host arrays for writeLoraAdapter. */
export function loraModuleWeightsOf(lora: ReadonlyMap<string, LoraParams>): LoraModuleWeights[] {
  return [...lora.values()].map((p) => ({
    module: p.module,
    rank: p.r,
    inFeatures: p.a.value.shape[1]!,
    outFeatures: p.b.value.shape[0]!,
    a: p.a.value.toArray() as Float32Array,
    b: p.b.value.toArray() as Float32Array,
  }));
}

/** Zeroes every gradient (before the first micro-batch of a step). */
export function zeroGrads(params: readonly TrainParam[]): void {
  for (const p of params) p.grad.write(new Float32Array(p.grad.numel));
}

/** Frees gradients, and the values of params the caller owns (LoRA factors). */
export function disposeParams(params: readonly TrainParam[], values: boolean): void {
  for (const p of params) {
    p.grad.dispose();
    if (values) p.value.dispose();
  }
}
