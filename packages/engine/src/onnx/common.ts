/** Pieces both ONNX exporters share: export shapes, the Linear layer, positions 0..seq-1 and the mask constant. */
import { InvalidArgumentError } from '@tessera/native';
import { ConfigError } from '../errors.js';
import { type CheckedWeights, transposeMatrix } from './host-weights.js';
import { attrInt, attrInts, type GraphBuilder, type OnnxDim } from './graph-builder.js';

/** Static dimensions for an export; an omitted one stays symbolic ('batch' / 'seq') and any size runs. */
export interface OnnxExportShape {
  batch?: number;
  seq?: number;
}

/** producer_name of every exported ModelProto. */
export const ONNX_PRODUCER = '@tessera/engine';

/** What errors name as the "file" when a config object (not a config.json on disk) is inconsistent. */
export const CONFIG_SOURCE = '<config>';

/**
 * torch.finfo(torch.float32).min, the additive bias Hugging Face puts on masked attention scores. A finite
 * value, not -inf: a row whose keys are all masked then gets uniform weights (as in HF) instead of NaN.
 */
export const F32_MIN = -3.4028234663852886e38;

export function exportDims(shape: OnnxExportShape, maxPositions: number, what: string): { batch: OnnxDim; seq: OnnxDim } {
  const { batch, seq } = shape;
  if (batch !== undefined && !(Number.isInteger(batch) && batch >= 1)) {
    throw new InvalidArgumentError(`${what}: static batch must be a positive integer, got ${batch}`);
  }
  if (seq !== undefined && !(Number.isInteger(seq) && seq >= 1 && seq <= maxPositions)) {
    throw new InvalidArgumentError(`${what}: static seq must be an integer in [1, ${maxPositions}] (max_position_embeddings), got ${seq}`);
  }
  return { batch: batch ?? 'batch', seq: seq ?? 'seq' };
}

export function requireConfig(ok: boolean, message: string): void {
  if (!ok) throw new ConfigError(CONFIG_SOURCE, message);
}

/**
 * y = x·Wᵀ (+ b) for the HF Linear `module` ([out, in] weight): MatMul against the weight stored transposed
 * ([in, out]) as an initializer, then Add for the bias. Works on any leading dims of x.
 */
export function linear(g: GraphBuilder, w: CheckedWeights, x: string, module: string, bias: boolean): string {
  const name = `${module}.weight`;
  const [outFeatures, inFeatures] = w.shape(name) as [number, number];
  const wT = g.f32(`${name}_t`, transposeMatrix(w.get(name), outFeatures, inFeatures), [inFeatures, outFeatures]);
  const y = g.op('MatMul', [x, wT]);
  if (!bias) return y;
  const b = g.f32(`${module}.bias`, w.get(`${module}.bias`), [outFeatures]);
  return g.op('Add', [y, b]);
}

/** Positions 0..seq-1 (int64 [seq]) where seq is dim 1 of `ids` [batch, seq], static or not. */
export function positionIds(g: GraphBuilder, ids: string): string {
  const shape = g.op('Shape', [ids]);
  const seqLen = g.op('Gather', [shape, g.constI64(1)], { axis: attrInt(0) }, 'seq_len');
  return g.op('Range', [g.constI64(0), seqLen, g.constI64(1)], {}, 'position_ids');
}

/** Heads split: [batch, seq, heads·headDim] → [batch, heads, seq, headDim]. */
export function splitHeads(g: GraphBuilder, x: string, heads: number, headDim: number): string {
  const r = g.op('Reshape', [x, g.constI64([0, 0, heads, headDim])]);
  return g.op('Transpose', [r], { perm: attrInts([0, 2, 1, 3]) });
}

/** Heads merged: [batch, heads, seq, headDim] → [batch, seq, heads·headDim]. */
export function mergeHeads(g: GraphBuilder, x: string, width: number): string {
  const t = g.op('Transpose', [x], { perm: attrInts([0, 2, 1, 3]) });
  return g.op('Reshape', [t, g.constI64([0, 0, width])]);
}
