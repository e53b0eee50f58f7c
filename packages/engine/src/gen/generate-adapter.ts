/**
 * Seeded PEFT LoRA adapters for a base model config: any rank, alpha, target set, rank_pattern / alpha_pattern.
 *
 * PEFT initialises A with kaiming-uniform (bound 1/√in) and B with zeros, which makes a fresh adapter a no-op.
 * A generated adapter must visibly change the model, so B is random as well (uniform with standard deviation
 * `bStd`). The default makes ‖ΔW‖ about the size of the base weights for the tiny presets: greedy tokens of the
 * tiny decoder change, logits stay finite (see test/gen.test.ts).
 */
import type { ModelConfig } from '../config.js';
import type { LoraAdapterConfig } from '../formats/peft.js';
import { type LoraModuleWeights, loraAlphaFor, loraRankFor, loraScaling, peftTargetMatches, writeLoraAdapter } from '../formats/peft-writer.js';
import { decoderLinearModules, encoderLinearModules, peftLoraTensorNames } from '../models/names.js';
import { tensorShapes } from './presets.js';
import { checkSeed, fillUniform, uniformWithStd } from './rng.js';

/** Default standard deviation of B's entries. */
export const DEFAULT_LORA_B_STD = 0.05;

/** Default targets: attention query and value projections, as in the LoRA paper and most PEFT recipes. */
export const DEFAULT_LORA_TARGETS: Readonly<Record<ModelConfig['family'], readonly string[]>> = {
  encoder: ['query', 'value'],
  decoder: ['q_proj', 'v_proj'],
};

export interface GenerateLoraAdapterOptions {
  /** The base model's config (module names and Linear shapes come from it). */
  base: ModelConfig;
  /** r; default 8. */
  rank?: number;
  /** lora_alpha; default 16. */
  alpha?: number;
  /** target_modules: name suffixes (default {@link DEFAULT_LORA_TARGETS}) or a full-match regex string. */
  targets?: readonly string[] | string;
  /** Unsigned 32-bit seed; default 0. Each tensor's values come from (seed, its PEFT tensor name). */
  seed?: number;
  rankPattern?: Record<string, number>;
  alphaPattern?: Record<string, number>;
  /** Standard deviation of B; default {@link DEFAULT_LORA_B_STD}. 0 gives PEFT's no-op initialisation. */
  bStd?: number;
  useRslora?: boolean;
  /** base_model_name_or_path; default null. */
  baseModelNameOrPath?: string | null;
}

export interface GeneratedLoraModule {
  module: string;
  rank: number;
  alpha: number;
  /** alpha / rank (alpha / √rank with use_rslora). */
  scaling: number;
  inFeatures: number;
  outFeatures: number;
}

export interface GeneratedLoraAdapter {
  dir: string;
  config: LoraAdapterConfig;
  modules: GeneratedLoraModule[];
  /** Size of adapter_model.safetensors in bytes. */
  bytes: number;
}

/** A Linear a LoRA can wrap: its module name and [out, in] from the base's shape map. */
export interface LinearModule {
  module: string;
  inFeatures: number;
  outFeatures: number;
}

/**
 * The base model's Linears that carry hook sites, layer by layer: the encoder's query, key, value,
 * attention.output.dense, intermediate.dense, output.dense; the decoder's q/k/v/o/gate/up/down projections.
 * (The pooler, classifier and LM head are not LoRA targets here: the engine adapts per-layer sites only.)
 */
export function loraCandidateModules(config: ModelConfig): LinearModule[] {
  const shapes = tensorShapes(config);
  const modules: LinearModule[] = [];
  for (let i = 0; i < config.numLayers; i++) {
    const names = config.family === 'encoder' ? Object.values(encoderLinearModules(config, i)) : Object.values(decoderLinearModules(i));
    for (const module of names) {
      const shape = shapes.get(`${module}.weight`);
      if (shape?.length !== 2) throw new Error(`shape map has no 2-D weight for Linear ${module}`);
      modules.push({ module, outFeatures: shape[0]!, inFeatures: shape[1]! });
    }
  }
  return modules;
}

/** Writes adapter_config.json and adapter_model.safetensors for `options.base` into `dir`. */
export function generateLoraAdapter(dir: string, options: GenerateLoraAdapterOptions): GeneratedLoraAdapter {
  const { base } = options;
  const seed = checkSeed(options.seed ?? 0);
  const bStd = options.bStd ?? DEFAULT_LORA_B_STD;
  if (!Number.isFinite(bStd) || bStd < 0) throw new RangeError(`bStd must be a finite number >= 0, got ${bStd}`);
  const targets = typeof options.targets === 'string' ? options.targets : [...(options.targets ?? DEFAULT_LORA_TARGETS[base.family])];
  const config: LoraAdapterConfig = {
    r: options.rank ?? 8,
    loraAlpha: options.alpha ?? 16,
    targetModules: targets,
    fanInFanOut: false,
    bias: 'none',
    rankPattern: { ...(options.rankPattern ?? {}) },
    alphaPattern: { ...(options.alphaPattern ?? {}) },
    useRslora: options.useRslora ?? false,
    baseModelNameOrPath: options.baseModelNameOrPath ?? null,
    taskType: base.family === 'decoder' ? 'CAUSAL_LM' : 'SEQ_CLS',
    modulesToSave: null,
  };

  const candidates = loraCandidateModules(base);
  const chosen = candidates.filter((c) => peftTargetMatches(targets, c.module));
  if (typeof targets !== 'string') {
    // PEFT refuses targets that match nothing; so do we, naming the ones that missed.
    const missing = targets.filter((t) => !candidates.some((c) => peftTargetMatches([t], c.module)));
    if (missing.length > 0) {
      const known = [...new Set(candidates.map((c) => c.module.slice(c.module.lastIndexOf('.') + 1)))];
      throw new RangeError(`LoRA targets ${missing.join(', ')} match no ${base.family} Linear (module names end in ${known.join(', ')})`);
    }
  }
  if (chosen.length === 0) throw new RangeError(`LoRA target_modules ${JSON.stringify(targets)} match no ${base.family} Linear`);

  const weights: LoraModuleWeights[] = chosen.map(({ module, inFeatures, outFeatures }) => {
    const rank = loraRankFor(config, module);
    const names = peftLoraTensorNames(module);
    // kaiming_uniform_(a=√5), PEFT's A initialisation: bound = 1/√in.
    const a = fillUniform(new Float32Array(rank * inFeatures), seed, names.a, 1 / Math.sqrt(inFeatures));
    const b = uniformWithStd(outFeatures * rank, seed, names.b, bStd);
    return { module, rank, inFeatures, outFeatures, a, b };
  });
  const { bytes } = writeLoraAdapter(dir, config, weights);
  return {
    dir,
    config,
    bytes,
    modules: weights.map(({ module, rank, inFeatures, outFeatures }) => ({
      module,
      rank,
      alpha: loraAlphaFor(config, module),
      scaling: loraScaling(config, module),
      inFeatures,
      outFeatures,
    })),
  };
}
