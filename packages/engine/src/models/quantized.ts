/**
 * Int8 (Q8_0) weights for the decoder: which weights `weights: 'int8'` quantizes at load, and the two ops the decoder
 * applies weights with, dispatching on the weight's format so the model code stays the same for f32/f16/bf16 and Q8_0:
 *   - {@link linear}: native `linear` for float weights, `q8Linear` (int8 GEMM, activations quantized per row in
 *     blocks of 32) for a Q8_0 weight;
 *   - {@link embedding}: native `embedding` for a float table, a row gather of the Q8_0 blocks then their
 *     dequantization for a Q8_0 table (the tied LM head of the mini decoder is the embedding table).
 * LoRA and other linear-site deltas are unaffected: they run after the base linear on its f32 output (hook-runner),
 * in f32, on top of the int8 product.
 */
import {
  embedding as floatEmbedding,
  gatherRows,
  isQ8Weight,
  linear as floatLinear,
  type LinearOptions,
  q8Dequantize,
  q8Linear,
  Q8_BLOCK,
  type Tensor,
} from '@tessera/native';
import type { DecoderConfig } from '../config.js';
import { decoderLinearModules, decoderTopModules } from './names.js';

/** How a model's weights are held: as stored (f32/f16/bf16), or Q8_0 int8 for the linear weights. */
export type WeightFormat = 'f32' | 'int8';

/** x @ weightᵀ + bias over a float or Q8_0 weight (see the module notes). */
export function linear(x: Tensor, weight: Tensor, bias?: Tensor, options: LinearOptions = {}): Tensor {
  return isQ8Weight(weight) ? q8Linear(x, weight, bias, options) : floatLinear(x, weight, bias, options);
}

/** Rows of a float or Q8_0 embedding table (ids i32 [n]; out f32 [n, dim]). */
export function embedding(table: Tensor, ids: Tensor, options: { out?: Tensor } = {}): Tensor {
  if (!isQ8Weight(table)) return floatEmbedding(table, ids, options);
  const rows = gatherRows(table, ids);
  try {
    return q8Dequantize(rows, options);
  } finally {
    rows.dispose();
  }
}

/**
 * The decoder weights `weights: 'int8'` quantizes: every layer's q/k/v/o/gate/up/down weight, and the LM head (the
 * embedding table when it is tied to it, which the embedding lookup then reads as Q8_0 too, as llama.cpp's
 * token_embd; an untied embedding table stays as stored). Weights whose in-features are not a multiple of 32 stay as
 * stored (Q8_0 blocks are 32 wide).
 */
export function decoderInt8WeightNames(config: DecoderConfig): string[] {
  const names: string[] = [];
  for (let l = 0; l < config.numLayers; l++) {
    for (const module of Object.values(decoderLinearModules(l))) names.push(`${module}.weight`);
  }
  names.push(`${config.tieWordEmbeddings ? decoderTopModules.embedTokens : decoderTopModules.lmHead}.weight`);
  return names;
}

/** Whether a [n, k] weight can be held as Q8_0. */
export function q8Compatible(shape: readonly number[]): boolean {
  return shape.length === 2 && shape[1]! % Q8_BLOCK === 0;
}
