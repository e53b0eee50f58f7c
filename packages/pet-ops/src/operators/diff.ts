/**
 * Diff-Pruning (Guo et al.): Y = X·(W + δ_t) + (b + b_t). δ_t is ~99.5% sparse and stored as CSR by output row
 * (HF orientation [out, in]); at each Linear the task adds x·δ_tᵀ (SpMM on the site input) and b_t (the engine's
 * output already holds x·Wᵀ + b, so adding b_t gives b + b_t). Optional task LayerNorms (the artifact loads them).
 */
import type { EncoderConfig } from '@tessera/engine';
import type { PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, checkNormPairs, emptyBody, loadTaskNorms, normModuleNames, taskNormSpecs } from './base.js';
import { biasCost, csrCost } from './cost.js';
import { linearModules } from './modules.js';
import { checkCsr, hostF32, hostI32 } from './validate.js';

/** Tensor names of one module's sparse difference. */
export function diffTensorNames(module: string): { indptr: string; indices: string; values: string; biasDiff: string } {
  return { indptr: `${module}.delta.indptr`, indices: `${module}.delta.indices`, values: `${module}.delta.values`, biasDiff: `${module}.bias_diff` };
}

export class DiffOperator extends BasePetOperator {
  readonly type = 'diff' as const;
  readonly hooks: PetHooks = {
    input: ['qkv', 'attn_out', 'ffn_in', 'ffn_out'],
    output: [],
    epilogue: ['qkv', 'attn_out', 'ffn_in', 'ffn_out', 'attn_ln', 'ffn_ln'],
    attention: false,
  };

  protected bodyLayout(config: EncoderConfig): PetTensorSpec[] {
    const specs: PetTensorSpec[] = [];
    for (const m of linearModules(config)) {
      const n = diffTensorNames(m.module);
      specs.push(
        { name: n.indptr, dtype: 'i32', shape: [m.outFeatures + 1], description: `row pointers of δ [${m.outFeatures}, ${m.inFeatures}] (CSR by output row)` },
        { name: n.indices, dtype: 'i32', shape: [-1], description: 'input-feature index of each non-zero, strictly increasing within a row' },
        { name: n.values, dtype: 'f32', shape: [-1], description: 'value of each non-zero of δ' },
        { name: n.biasDiff, dtype: 'f32', shape: [m.outFeatures], description: 'b_t, added to the shared bias' },
      );
    }
    return [...specs, ...taskNormSpecs(config, true)];
  }

  protected override checkContents(config: EncoderConfig, params: PetParams): void {
    for (const m of linearModules(config)) {
      const n = diffTensorNames(m.module);
      checkCsr(n, hostI32(params, n.indptr), hostI32(params, n.indices), hostF32(params, n.values), m.outFeatures, m.inFeatures);
    }
    checkNormPairs(params, normModuleNames(config));
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    for (const m of linearModules(shared.config)) {
      const n = diffTensorNames(m.module);
      const indices = hostI32(params, n.indices);
      const nnz = indices.length;
      body.linear.set(m.module, {
        // An empty δ adds nothing: no SpMM launch for it.
        ...(nnz === 0 ? {} : {
          csr: {
            indptr: device.put(hostI32(params, n.indptr), [m.outFeatures + 1]),
            indices: device.put(indices, [nnz]),
            values: device.put(hostF32(params, n.values), [nnz]),
            nnz,
          },
        }),
        bias: device.put(hostF32(params, n.biasDiff), [m.outFeatures]),
      });
      if (nnz > 0) body.cost.push((tokens) => csrCost(tokens, nnz, m.inFeatures, m.outFeatures));
      body.cost.push((tokens) => biasCost(tokens, m.outFeatures));
    }
    loadTaskNorms(shared.config, params, device, body);
    return body;
  }
}
