/**
 * Adapters (Houlsby): after attention.output.dense and output.dense of every layer, on the site output
 * H = X·W + b (the paper's formula; the artifact drops b): Y = H + act(H·W_downᵀ + b_down)·W_upᵀ + b_up, then
 * residual + LayerNorm (the task's when it has one). Bottleneck m (paper: 64 at hidden 768).
 */
import type { EncoderConfig } from '@tessera/engine';
import { PetConfigError } from '../errors.js';
import type { PetConfig, PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, checkNormPairs, emptyBody, loadTaskNorms, normModuleNames, taskNormSpecs } from './base.js';
import { adapterCost } from './cost.js';
import { type LinearModuleInfo, linearModules } from './modules.js';
import { checkPositiveInteger, hostF32 } from './validate.js';

export const ADAPTER_ACTIVATIONS = ['gelu', 'gelu_tanh', 'relu'] as const;

export function adapterTensorNames(module: string): { down: string; downBias: string; up: string; upBias: string } {
  return {
    down: `${module}.adapter.down.weight`,
    downBias: `${module}.adapter.down.bias`,
    up: `${module}.adapter.up.weight`,
    upBias: `${module}.adapter.up.bias`,
  };
}

/** The modules adapters follow: attention.output.dense and output.dense of every layer. */
export function adapterModules(config: EncoderConfig): LinearModuleInfo[] {
  return linearModules(config).filter((m) => m.slice === 'attn_out' || m.slice === 'ffn_out');
}

export class AdapterOperator extends BasePetOperator {
  readonly type = 'adapter' as const;
  readonly hooks: PetHooks = { input: [], output: ['attn_out', 'ffn_out'], epilogue: ['attn_ln', 'ffn_ln'], attention: false };

  protected override checkConfig(_config: EncoderConfig, pet: PetConfig): void {
    checkPositiveInteger(this.type, 'bottleneck', pet.bottleneck);
    if (pet.activation !== undefined && !ADAPTER_ACTIVATIONS.includes(pet.activation)) {
      throw new PetConfigError(`adapter task: config.activation must be one of ${ADAPTER_ACTIVATIONS.join(', ')}, got ${JSON.stringify(pet.activation)}`);
    }
  }

  protected bodyLayout(config: EncoderConfig, pet: PetConfig): PetTensorSpec[] {
    const m = pet.bottleneck!;
    const h = config.hiddenSize;
    const specs: PetTensorSpec[] = adapterModules(config).flatMap((mod) => {
      const n = adapterTensorNames(mod.module);
      return [
        { name: n.down, dtype: 'f32' as const, shape: [m, h], description: `W_down [bottleneck, hidden] after ${mod.module}` },
        { name: n.downBias, dtype: 'f32' as const, shape: [m], description: 'b_down' },
        { name: n.up, dtype: 'f32' as const, shape: [h, m], description: 'W_up [hidden, bottleneck]' },
        { name: n.upBias, dtype: 'f32' as const, shape: [h], description: 'b_up' },
      ];
    });
    return [...specs, ...taskNormSpecs(config, true)];
  }

  protected override checkContents(config: EncoderConfig, params: PetParams): void {
    checkNormPairs(params, normModuleNames(config));
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    const m = params.config.bottleneck!;
    const h = shared.config.hiddenSize;
    const act = params.config.activation ?? 'gelu';
    for (const mod of adapterModules(shared.config)) {
      const n = adapterTensorNames(mod.module);
      body.linear.set(mod.module, {
        adapter: {
          down: device.put(hostF32(params, n.down), [m, h]),
          downBias: device.put(hostF32(params, n.downBias), [m]),
          up: device.put(hostF32(params, n.up), [h, m]),
          upBias: device.put(hostF32(params, n.upBias), [h]),
          act,
        },
      });
      body.cost.push((tokens) => adapterCost(tokens, h, m));
    }
    loadTaskNorms(shared.config, params, device, body);
    return body;
  }
}
