/**
 * Llama-style decoder → ONNX (opset 17), following Hugging Face LlamaForCausalLM exactly (one full forward over
 * positions 0..seq-1, no KV cache):
 *
 *   x = embed_tokens[ids]
 *   per layer:  x = x + o_proj(attention(RoPE(q_proj(n)), RoPE(k_proj(n)), v_proj(n)))    n = RMSNorm(x)
 *               x = x + down_proj(silu(gate_proj(n)) · up_proj(n))                        n = RMSNorm(x)
 *   logits = lm_head(RMSNorm(x))        (lm_head = embed_tokensᵀ when tie_word_embeddings)
 *
 * RMSNorm(x) = x · 1/√(mean(x²) + eps) · w. RoPE uses HF's rotate_half convention (dimension d pairs with
 * d + headDim/2) and inv_freq_i = θ^(-2i/headDim); its cos/sin tables are computed in double and rounded to
 * f32 once. Attention is causal with grouped KV heads: kv head j serves query heads j·g … j·g+g−1,
 * g = numHeads / numKvHeads.
 *
 * Input  input_ids int64 [batch, seq]. There is no attention_mask input: with right padding a real token at
 *        position t only attends to positions ≤ t, which are all real, so its logits are exact without one
 *        (rows past a sequence's length are garbage and are to be ignored). Left padding is not supported.
 * Output logits f32 [batch, seq, vocab].
 */
import type { DecoderConfig } from '../config.js';
import { decoderLinearModules, decoderNormModules, decoderTensorShapes, decoderTopModules } from '../models/names.js';
import { exportDims, F32_MIN, linear, mergeHeads, ONNX_PRODUCER, type OnnxExportShape, positionIds, requireConfig, splitHeads } from './common.js';
import { attrInt, attrInts, GraphBuilder } from './graph-builder.js';
import { CheckedWeights, type HostWeights, transposeMatrix } from './host-weights.js';

function checkDecoderConfig(c: DecoderConfig): void {
  requireConfig(c.family === 'decoder', `exportDecoderOnnx: config.family is ${String(c.family)}, want 'decoder'`);
  requireConfig(
    c.numKvHeads >= 1 && c.numHeads % c.numKvHeads === 0,
    `decoder: num_attention_heads ${c.numHeads} is not a multiple of num_key_value_heads ${c.numKvHeads}`,
  );
  requireConfig(c.headDim >= 2 && c.headDim % 2 === 0, `decoder: head_dim must be even for RoPE, got ${c.headDim}`);
  requireConfig(c.rmsNormEps > 0, `decoder: rms_norm_eps must be > 0, got ${c.rmsNormEps}`);
  requireConfig(c.ropeTheta > 0, `decoder: rope_theta must be > 0, got ${c.ropeTheta}`);
}

/**
 * RoPE tables [rows, headDim]: cos/sin of p · θ^(-2i/headDim) at column i and i + headDim/2 (HF concatenates
 * the frequencies with themselves), computed in double, rounded to f32.
 */
export function ropeTables(rows: number, headDim: number, theta: number): { cos: Float32Array; sin: Float32Array } {
  const half = headDim / 2;
  const cos = new Float32Array(rows * headDim);
  const sin = new Float32Array(rows * headDim);
  for (let p = 0; p < rows; p++) {
    for (let i = 0; i < half; i++) {
      const angle = p * Math.pow(theta, (-2 * i) / headDim);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      cos[p * headDim + i] = c;
      cos[p * headDim + half + i] = c;
      sin[p * headDim + i] = s;
      sin[p * headDim + half + i] = s;
    }
  }
  return { cos, sin };
}

/** ONNX ModelProto bytes of the decoder with these weights. Omitted dims in `shape` stay symbolic. */
export function exportDecoderOnnx(config: DecoderConfig, weights: HostWeights, shape: OnnxExportShape = {}): Uint8Array {
  checkDecoderConfig(config);
  const { batch, seq } = exportDims(shape, config.maxPositions, 'exportDecoderOnnx');
  const w = new CheckedWeights(weights, decoderTensorShapes(config));
  const g = new GraphBuilder(`tessera_${config.architecture}`);
  const { hiddenSize: h, numHeads, numKvHeads, headDim, vocabSize } = config;
  const group = numHeads / numKvHeads;

  const rmsNorm = (x: string, module: string): string => {
    const meanSquare = g.op('ReduceMean', [g.op('Mul', [x, x])], { axes: attrInts([-1]), keepdims: attrInt(1) });
    const invRms = g.op('Reciprocal', [g.op('Sqrt', [g.op('Add', [meanSquare, g.scalarF32(config.rmsNormEps)])])]);
    return g.op('Mul', [g.op('Mul', [x, invRms]), g.f32(`${module}.weight`, w.get(`${module}.weight`), [h])]);
  };

  const ids = g.input('input_ids', 'int64', [batch, seq]);
  const embedName = `${decoderTopModules.embedTokens}.weight`;
  const embed = w.get(embedName);
  let x = g.op('Gather', [g.f32(embedName, embed, [vocabSize, h]), ids], { axis: attrInt(0) });

  // Positions, their RoPE rows [seq, headDim] (broadcast over batch and heads), and the causal mask [seq, seq].
  // A static seq only ever reads rows 0..seq-1, so the tables shrink to those.
  const positions = positionIds(g, ids);
  const tableRows = typeof seq === 'number' ? seq : config.maxPositions;
  const tables = ropeTables(tableRows, headDim, config.ropeTheta);
  const cos = g.op('Gather', [g.f32('rope_cos', tables.cos, [tableRows, headDim]), positions], { axis: attrInt(0) });
  const sin = g.op('Gather', [g.f32('rope_sin', tables.sin, [tableRows, headDim]), positions], { axis: attrInt(0) });
  const future = g.op('Greater', [g.op('Unsqueeze', [positions, g.constI64([0])]), g.op('Unsqueeze', [positions, g.constI64([1])])]);
  const causalBias = g.op('Where', [future, g.scalarF32(F32_MIN), g.scalarF32(0)], {}, 'causal_mask_bias');

  // q·cos + rotate_half(q)·sin, rotate_half([a, b]) = [-b, a] over the last axis.
  const rope = (t: string): string => {
    const [a, b] = g.opMulti('Split', [t], 2, { axis: attrInt(-1) }) as [string, string];
    const rotated = g.op('Concat', [g.op('Neg', [b]), a], { axis: attrInt(-1) });
    return g.op('Add', [g.op('Mul', [t, cos]), g.op('Mul', [rotated, sin])]);
  };
  // HF repeat_kv: [b, nkv, s, d] → [b, nkv, g, s, d] → [b, nkv·g, s, d], so kv head j serves heads j·g … j·g+g−1.
  const repeatKv = (t: string): string => {
    if (group === 1) return t;
    const expanded = g.op('Expand', [g.op('Unsqueeze', [t, g.constI64([2])]), g.constI64([1, 1, group, 1, 1])]);
    return g.op('Reshape', [expanded, g.constI64([0, numHeads, -1, headDim])]);
  };

  const scale = g.scalarF32(1 / Math.sqrt(headDim));
  for (let i = 0; i < config.numLayers; i++) {
    const lin = decoderLinearModules(i);
    const norm = decoderNormModules(i);

    const n1 = rmsNorm(x, norm.input_norm);
    const q = rope(splitHeads(g, linear(g, w, n1, lin.q, false), numHeads, headDim)); // [b, nh, s, d]
    const k = repeatKv(rope(splitHeads(g, linear(g, w, n1, lin.k, false), numKvHeads, headDim)));
    const v = repeatKv(splitHeads(g, linear(g, w, n1, lin.v, false), numKvHeads, headDim));
    const kT = g.op('Transpose', [k], { perm: attrInts([0, 1, 3, 2]) });
    const scores = g.op('Add', [g.op('Mul', [g.op('MatMul', [q, kT]), scale]), causalBias]);
    const probs = g.op('Softmax', [scores], { axis: attrInt(-1) });
    const context = mergeHeads(g, g.op('MatMul', [probs, v]), numHeads * headDim);
    x = g.op('Add', [x, linear(g, w, context, lin.o, false)]);

    const n2 = rmsNorm(x, norm.post_attn_norm);
    const gate = linear(g, w, n2, lin.gate, false);
    const silu = g.op('Mul', [gate, g.op('Sigmoid', [gate])]);
    const up = linear(g, w, n2, lin.up, false);
    x = g.op('Add', [x, linear(g, w, g.op('Mul', [silu, up]), lin.down, false)]);
  }

  const final = rmsNorm(x, decoderTopModules.finalNorm);
  const logits = config.tieWordEmbeddings
    ? g.op('MatMul', [final, g.f32(`${embedName}_t`, transposeMatrix(embed, vocabSize, h), [h, vocabSize])])
    : linear(g, w, final, decoderTopModules.lmHead, false);
  g.op('Identity', [logits], {}, 'logits');
  g.output('logits', 'float32', [batch, seq, vocabSize]);

  return g.encode({
    producer: ONNX_PRODUCER,
    docString:
      `${config.architecture}: ${config.numLayers} layers, hidden ${h}, ${numHeads} heads / ${numKvHeads} kv heads of ${headDim}` +
      `${config.tieWordEmbeddings ? ', tied embeddings' : ''}`,
    metadata: { family: 'decoder', architecture: config.architecture },
  });
}
