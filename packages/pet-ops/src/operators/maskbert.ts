/**
 * MaskBert (Zhao et al.): Y = X·(M_t ⊙ W) + b with a binary mask M_t (≈5% zeros). Stored as the bit-packed mask
 * only (u8 [out, ceil(in/8)], LSB-first, bit 1 keeps the weight: ≈3% of the weights' bytes). At load the mask
 * becomes S_t = W ⊙ M̄_t as CSR (values gathered from the shared W), applied with scale −1, since
 * M ⊙ W = W − W ⊙ M̄ (pets.md ambiguity 10). Shared bias and LayerNorms; the task keeps its own head (the paper
 * freezes MaskBert's head, but a task needs its own label set, so ours stores one).
 */
import type { EncoderConfig } from '@tessera/engine';
import type { PetHooks, PetParams, PetTensorSpec, SharedModel } from '../types.js';
import { BasePetOperator, type DeviceTensors, type PetBody, emptyBody } from './base.js';
import { csrCost } from './cost.js';
import { linearModules } from './modules.js';
import { checkMaskPadding, hostU8, maskBit, maskRowBytes } from './validate.js';

export function maskTensorName(module: string): string {
  return `${module}.mask`;
}

/**
 * S = W ⊙ M̄ as CSR over [out, in]: the shared weights at the masked-out positions. `weight` is the shared
 * W [out, in] row-major.
 */
export function maskedOutCsr(mask: Uint8Array, weight: Float32Array, outFeatures: number, inFeatures: number): { indptr: Int32Array; indices: Int32Array; values: Float32Array } {
  const rowBytes = maskRowBytes(inFeatures);
  const indptr = new Int32Array(outFeatures + 1);
  let nnz = 0;
  for (let o = 0; o < outFeatures; o++) {
    for (let i = 0; i < inFeatures; i++) if (maskBit(mask, o * rowBytes, i) === 0) nnz++;
    indptr[o + 1] = nnz;
  }
  const indices = new Int32Array(nnz);
  const values = new Float32Array(nnz);
  let e = 0;
  for (let o = 0; o < outFeatures; o++) {
    for (let i = 0; i < inFeatures; i++) {
      if (maskBit(mask, o * rowBytes, i) === 0) {
        indices[e] = i;
        values[e] = weight[o * inFeatures + i]!;
        e++;
      }
    }
  }
  return { indptr, indices, values };
}

export class MaskBertOperator extends BasePetOperator {
  readonly type = 'maskbert' as const;
  readonly hooks: PetHooks = { input: ['qkv', 'attn_out', 'ffn_in', 'ffn_out'], output: [], epilogue: [], attention: false };

  protected bodyLayout(config: EncoderConfig): PetTensorSpec[] {
    return linearModules(config).map((m) => ({
      name: maskTensorName(m.module),
      dtype: 'u8' as const,
      shape: [m.outFeatures, maskRowBytes(m.inFeatures)],
      description: `bit-packed mask of ${m.module}.weight [${m.outFeatures}, ${m.inFeatures}]: bit i of row o is byte ⌊i/8⌋ bit i mod 8 (LSB-first); 1 keeps the weight`,
    }));
  }

  protected override checkContents(config: EncoderConfig, params: PetParams): void {
    for (const m of linearModules(config)) checkMaskPadding(maskTensorName(m.module), hostU8(params, maskTensorName(m.module)), m.outFeatures, m.inFeatures);
  }

  protected build(shared: SharedModel, params: PetParams, device: DeviceTensors): PetBody {
    const body = emptyBody();
    for (const m of linearModules(shared.config)) {
      const csr = maskedOutCsr(hostU8(params, maskTensorName(m.module)), shared.hostWeight(`${m.module}.weight`), m.outFeatures, m.inFeatures);
      const nnz = csr.indices.length;
      if (nnz === 0) continue; // a mask that keeps everything: the shared layer as is
      body.linear.set(m.module, {
        csr: {
          indptr: device.put(csr.indptr, [m.outFeatures + 1]),
          indices: device.put(csr.indices, [nnz]),
          values: device.put(csr.values, [nnz]),
          nnz,
          scale: -1,
        },
      });
      body.cost.push((tokens) => csrCost(tokens, nnz, m.inFeatures, m.outFeatures));
    }
    return body;
  }
}
