/**
 * Prefix-tuning [EXT] (pets.md §2.6): per layer, p extra keys and values in the projected (post-bias) key/value
 * space, attended to by every query of the task's sequences before their own keys. Not an MVM term: the engine
 * asks `attentionPrefix(layer)` before each sequence's attention.
 */
import type { AttentionPrefix, EncoderConfig } from '@tessera/engine';
import type { PetConfig, PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, emptyBody } from './base.js';
import { prefixCost } from './cost.js';
import { selfAttentionModule } from './modules.js';
import { checkPositiveInteger, hostF32 } from './validate.js';

export function prefixTensorNames(config: EncoderConfig, layer: number): { key: string; value: string } {
  const self = selfAttentionModule(config, layer);
  return { key: `${self}.prefix.key`, value: `${self}.prefix.value` };
}

export class PrefixOperator extends BasePetOperator {
  readonly type = 'prefix' as const;
  readonly hooks: PetHooks = { input: [], output: [], epilogue: [], attention: true };

  protected override checkConfig(_config: EncoderConfig, pet: PetConfig): void {
    checkPositiveInteger(this.type, 'prefixLength', pet.prefixLength);
  }

  protected bodyLayout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[] {
    const p = pet.prefixLength!;
    const specs: PetTensorSpec[] = [];
    for (let l = 0; l < config.numLayers; l++) {
      const n = prefixTensorNames(config, l);
      specs.push(
        { name: n.key, dtype: 'f32', shape: [p, config.hiddenSize], description: `prefix keys of layer ${l} (projected key space, all heads)` },
        { name: n.value, dtype: 'f32', shape: [p, config.hiddenSize], description: `prefix values of layer ${l} (projected value space, all heads)` },
      );
    }
    return specs;
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    const p = params.config.prefixLength!;
    const h = shared.config.hiddenSize;
    const prefixes = new Map<number, AttentionPrefix>();
    for (let l = 0; l < shared.config.numLayers; l++) {
      const n = prefixTensorNames(shared.config, l);
      prefixes.set(l, { key: device.put(hostF32(params, n.key), [p, h]), value: device.put(hostF32(params, n.value), [p, h]) });
      body.cost.push((tokens) => prefixCost(tokens, p, h));
    }
    body.prefixes = prefixes;
    return body;
  }
}
