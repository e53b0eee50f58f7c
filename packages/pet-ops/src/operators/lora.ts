/**
 * LoRA [EXT] (pets.md §2.6): Y = X·W + b + s·(X·A_tᵀ)·B_tᵀ with s = alpha / rank, on the modules `targetModules`
 * names (PEFT semantics: a module matches an entry when its name is the entry or ends in '.' + entry). Tensors
 * use PEFT's names without PEFT's 'base_model.model.' prefix, so a PEFT adapter_model.safetensors converts by
 * dropping that prefix. Loaded into sgmv-kernel's layout (LoraWeightSet): the engine runs every LoRA segment of a
 * site in one SGMV shrink/expand pair, so `linearOps` emits nothing for LoRA.
 */
import { type EncoderConfig, matchesTargetModules } from '@tessera/engine';
import { type HostLoraProjection, type HostLoraWeights, LoraWeightSet } from '@tessera/sgmv-kernel';
import { PetConfigError } from '../errors.js';
import type { PetConfig, PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, emptyBody } from './base.js';
import { loraCost } from './cost.js';
import { type LinearModuleInfo, linearModules } from './modules.js';
import { checkPositiveInteger, hostF32 } from './validate.js';

/** Default LoRA targets: the query and value projections (the LoRA paper's choice). */
export const DEFAULT_PET_LORA_TARGETS: readonly string[] = ['query', 'value'];

export function loraTensorNames(module: string): { a: string; b: string } {
  return { a: `${module}.lora_A.weight`, b: `${module}.lora_B.weight` };
}

export function loraTargets(pet: PetConfig): readonly string[] {
  return pet.targetModules ?? DEFAULT_PET_LORA_TARGETS;
}

/** scale = alpha / rank (alpha defaults to rank: scale 1). */
export function loraScale(pet: PetConfig): number {
  return (pet.alpha ?? pet.rank!) / pet.rank!;
}

/** The Linear modules a LoRA task adapts. */
export function loraModules(config: EncoderConfig, pet: PetConfig): LinearModuleInfo[] {
  const targets = { targetModules: [...loraTargets(pet)] };
  return linearModules(config).filter((m) => matchesTargetModules(targets, m.module));
}

export class LoraOperator extends BasePetOperator {
  readonly type = 'lora' as const;
  readonly hooks: PetHooks = { input: ['qkv', 'attn_out', 'ffn_in', 'ffn_out'], output: [], epilogue: [], attention: false };

  protected override checkConfig(config: EncoderConfig, pet: PetConfig): void {
    checkPositiveInteger(this.type, 'rank', pet.rank);
    if (pet.alpha !== undefined && !(typeof pet.alpha === 'number' && Number.isFinite(pet.alpha))) {
      throw new PetConfigError(`lora task: config.alpha must be a finite number, got ${JSON.stringify(pet.alpha)}`);
    }
    const targets = loraTargets(pet) as unknown;
    if (!Array.isArray(targets) || targets.length === 0 || !targets.every((t) => typeof t === 'string' && t !== '')) {
      throw new PetConfigError(`lora task: config.targetModules must be a non-empty list of module names, got ${JSON.stringify(targets)}`);
    }
    const all = linearModules(config);
    for (const t of targets as string[]) {
      if (!all.some((m) => matchesTargetModules({ targetModules: [t] }, m.module))) {
        throw new PetConfigError(`lora task: config.targetModules entry ${JSON.stringify(t)} matches no Linear module of the shared model (e.g. ${all[0]?.module})`);
      }
    }
  }

  protected bodyLayout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[] {
    const r = pet.rank!;
    return loraModules(config, pet).flatMap((m) => {
      const n = loraTensorNames(m.module);
      return [
        { name: n.a, dtype: 'f32' as const, shape: [r, m.inFeatures], description: `lora_A [rank, in] of ${m.module}` },
        { name: n.b, dtype: 'f32' as const, shape: [m.outFeatures, r], description: `lora_B [out, rank] of ${m.module}` },
      ];
    });
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    const pet = params.config;
    const r = pet.rank!;
    const s = loraScale(pet);
    const L = shared.config.numLayers;
    // SGMV layout per slice: A [L, r, in] as stored, B [L, r, out] = (lora_B)ᵀ · s; untargeted layers stay zero.
    const projections = new Map<string, HostLoraProjection>();
    for (const m of loraModules(shared.config, pet)) {
      let p = projections.get(m.slice);
      if (!p) {
        p = { a: new Float32Array(L * r * m.inFeatures), b: new Float32Array(L * r * m.outFeatures), r, inFeatures: m.inFeatures, outFeatures: m.outFeatures };
        projections.set(m.slice, p);
      }
      const n = loraTensorNames(m.module);
      p.a.set(hostF32(params, n.a), m.layer * r * m.inFeatures);
      const b = hostF32(params, n.b);
      const bo = m.layer * r * m.outFeatures;
      for (let j = 0; j < r; j++) for (let o = 0; o < m.outFeatures; o++) p.b[bo + j * m.outFeatures + o] = b[o * r + j]! * s;
      body.cost.push((tokens) => loraCost(tokens, r, m.inFeatures, m.outFeatures));
    }
    let nbytes = 0;
    for (const p of projections.values()) nbytes += p.a.byteLength + p.b.byteLength;
    const host: HostLoraWeights = { name: 'lora', rank: r, numLayers: L, projections, nbytes };
    body.lora = LoraWeightSet.upload(host, device.backend);
    return body;
  }
}
