/**
 * BitFit (Ben Zaken et al.): Y = X·W + b_t. The task stores every Linear's bias under the shared tensor's own name
 * (`<module>.bias`, replacing it) and, optionally, task LayerNorms. At load the op's vector is b_t − b (the
 * engine's output already holds x·Wᵀ + b), so at run time BitFit is one bias add per site.
 */
import type { EncoderConfig } from '@tessera/engine';
import type { PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, checkNormPairs, emptyBody, loadTaskNorms, normModuleNames, taskNormSpecs } from './base.js';
import { biasCost } from './cost.js';
import { linearModules } from './modules.js';
import { hostF32 } from './validate.js';

export class BitFitOperator extends BasePetOperator {
  readonly type = 'bitfit' as const;
  readonly hooks: PetHooks = { input: [], output: [], epilogue: ['qkv', 'attn_out', 'ffn_in', 'ffn_out', 'attn_ln', 'ffn_ln'], attention: false };

  protected bodyLayout(config: EncoderConfig): PetTensorSpec[] {
    const biases: PetTensorSpec[] = linearModules(config).map((m) => ({
      name: `${m.module}.bias`,
      dtype: 'f32' as const,
      shape: [m.outFeatures],
      description: `b_t of ${m.module}: replaces the shared bias`,
    }));
    return [...biases, ...taskNormSpecs(config, true)];
  }

  protected override checkContents(config: EncoderConfig, params: PetParams): void {
    checkNormPairs(params, normModuleNames(config));
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    for (const m of linearModules(shared.config)) {
      const taskBias = hostF32(params, `${m.module}.bias`);
      const sharedBias = shared.hostWeight(`${m.module}.bias`);
      const delta = new Float32Array(m.outFeatures);
      for (let o = 0; o < m.outFeatures; o++) delta[o] = taskBias[o]! - sharedBias[o]!;
      body.linear.set(m.module, { bias: device.put(delta, [m.outFeatures]) });
      body.cost.push((tokens) => biasCost(tokens, m.outFeatures));
    }
    loadTaskNorms(shared.config, params, device, body);
    return body;
  }
}
