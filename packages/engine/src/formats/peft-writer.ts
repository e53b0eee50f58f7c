/**
 * Writes a PEFT LoRA adapter directory: adapter_config.json (keys as PEFT saves them) and
 * adapter_model.safetensors with `base_model.model.<module>.lora_A.weight` [r, in] and `….lora_B.weight` [out, r]
 * in f32. Also PEFT's name-matching rules (target_modules, rank_pattern / alpha_pattern), which the writer checks
 * every module against so it never writes an adapter PEFT would load differently.
 */
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { peftLoraTensorNames } from '../models/names.js';
import { type LoraAdapterConfig, toPeftConfigJson } from './peft.js';
import { type SafetensorsEntry, writeSafetensors } from './safetensors.js';

/** One adapted Linear: A is [rank, inFeatures] and B is [outFeatures, rank], row-major. */
export interface LoraModuleWeights {
  /** The base model's module name, e.g. 'model.layers.0.self_attn.q_proj'. */
  module: string;
  rank: number;
  inFeatures: number;
  outFeatures: number;
  a: Float32Array;
  b: Float32Array;
}

function compileRegex(source: string, what: string): RegExp {
  try {
    return new RegExp(source);
  } catch (err) {
    throw new RangeError(`${what}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Whether PEFT adapts `module` given `target_modules`: a list matches a module named exactly like an entry or
 * ending with '.' + entry; a string is a regex that must match the whole module name (Python's re.fullmatch).
 */
export function peftTargetMatches(targetModules: string[] | string, module: string): boolean {
  if (typeof targetModules === 'string') return compileRegex(`^(?:${targetModules})$`, `target_modules regex "${targetModules}"`).test(module);
  return targetModules.some((t) => module === t || module.endsWith(`.${t}`));
}

/**
 * The rank_pattern / alpha_pattern key PEFT applies to `module`: the first key k (in insertion order) for which
 * Python's `re.match(rf"(^|.*\.){k}$", module)` succeeds, or undefined.
 */
export function peftPatternKey(patterns: Readonly<Record<string, number>>, module: string): string | undefined {
  for (const key of Object.keys(patterns)) {
    // re.match anchors only the start of the whole pattern, so wrap it in ^(?:…) rather than anchoring k alone.
    if (compileRegex(`^(?:(^|.*\\.)${key}$)`, `pattern key "${key}"`).test(module)) return key;
  }
  return undefined;
}

/** The rank PEFT gives `module`: its rank_pattern entry, else r. */
export function loraRankFor(config: Pick<LoraAdapterConfig, 'r' | 'rankPattern'>, module: string): number {
  const key = peftPatternKey(config.rankPattern, module);
  return key === undefined ? config.r : config.rankPattern[key]!;
}

/** The alpha PEFT gives `module`: its alpha_pattern entry, else lora_alpha. */
export function loraAlphaFor(config: Pick<LoraAdapterConfig, 'loraAlpha' | 'alphaPattern'>, module: string): number {
  const key = peftPatternKey(config.alphaPattern, module);
  return key === undefined ? config.loraAlpha : config.alphaPattern[key]!;
}

/** The factor PEFT multiplies B·A by: alpha / r, or alpha / √r with use_rslora. */
export function loraScaling(config: Pick<LoraAdapterConfig, 'r' | 'rankPattern' | 'loraAlpha' | 'alphaPattern' | 'useRslora'>, module: string): number {
  const rank = loraRankFor(config, module);
  const alpha = loraAlphaFor(config, module);
  return config.useRslora ? alpha / Math.sqrt(rank) : alpha / rank;
}

function checkConfig(config: LoraAdapterConfig): void {
  const positiveInt = (v: number) => Number.isInteger(v) && v > 0;
  if (!positiveInt(config.r)) throw new RangeError(`LoRA r must be a positive integer, got ${config.r}`);
  if (!Number.isFinite(config.loraAlpha)) throw new RangeError(`lora_alpha must be finite, got ${config.loraAlpha}`);
  for (const [key, rank] of Object.entries(config.rankPattern)) {
    if (!positiveInt(rank)) throw new RangeError(`rank_pattern["${key}"] must be a positive integer, got ${rank}`);
  }
  for (const [key, alpha] of Object.entries(config.alphaPattern)) {
    if (!Number.isFinite(alpha)) throw new RangeError(`alpha_pattern["${key}"] must be finite, got ${alpha}`);
  }
  if (config.targetModules.length === 0) {
    throw new RangeError('target_modules is empty');
  }
}

/**
 * Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors. Throws a RangeError naming the module
 * when a module is not matched by target_modules, appears twice, has a rank other than the one rank_pattern / r
 * gives it, or has A / B of the wrong length. Returns the safetensors file's size in bytes.
 */
export function writeLoraAdapter(dir: string, config: LoraAdapterConfig, modules: Iterable<LoraModuleWeights>): { bytes: number; modules: number } {
  checkConfig(config);
  const entries: Array<[string, SafetensorsEntry]> = [];
  const seen = new Set<string>();
  for (const m of modules) {
    if (seen.has(m.module)) throw new RangeError(`writeLoraAdapter: module ${m.module} appears twice`);
    seen.add(m.module);
    if (!peftTargetMatches(config.targetModules, m.module)) {
      throw new RangeError(`writeLoraAdapter: module ${m.module} is not matched by target_modules ${JSON.stringify(config.targetModules)}`);
    }
    const rank = loraRankFor(config, m.module);
    if (m.rank !== rank) throw new RangeError(`writeLoraAdapter: module ${m.module} has rank ${m.rank}, but r / rank_pattern give it ${rank}`);
    for (const [field, v] of [['inFeatures', m.inFeatures], ['outFeatures', m.outFeatures]] as const) {
      if (!Number.isInteger(v) || v <= 0) throw new RangeError(`writeLoraAdapter: module ${m.module} ${field} must be a positive integer, got ${v}`);
    }
    if (m.a.length !== rank * m.inFeatures) {
      throw new RangeError(`writeLoraAdapter: ${m.module} lora_A must be [${rank}, ${m.inFeatures}] = ${rank * m.inFeatures} values, got ${m.a.length}`);
    }
    if (m.b.length !== m.outFeatures * rank) {
      throw new RangeError(`writeLoraAdapter: ${m.module} lora_B must be [${m.outFeatures}, ${rank}] = ${m.outFeatures * rank} values, got ${m.b.length}`);
    }
    const names = peftLoraTensorNames(m.module);
    entries.push([names.a, { dtype: 'f32', shape: [rank, m.inFeatures], data: m.a }]);
    entries.push([names.b, { dtype: 'f32', shape: [m.outFeatures, rank], data: m.b }]);
  }
  if (seen.size === 0) throw new RangeError('writeLoraAdapter: no modules to write');
  mkdirSync(dir, { recursive: true });
  const weightsPath = join(dir, 'adapter_model.safetensors');
  writeSafetensors(weightsPath, entries, { format: 'pt' });
  writeFileSync(join(dir, 'adapter_config.json'), `${JSON.stringify(toPeftConfigJson(config), null, 2)}\n`);
  return { bytes: statSync(weightsPath).size, modules: seen.size };
}
