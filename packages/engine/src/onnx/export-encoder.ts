/**
 * BERT-style encoder → ONNX (opset 17), following Hugging Face BertModel / BertForSequenceClassification
 * exactly (eval mode: no dropout):
 *
 *   embeddings = LayerNorm(word[ids] + position[0..seq-1] + token_type[types])
 *   per layer:  a = LayerNorm(x + attention.output.dense(softmax(q·kᵀ/√d + mask)·v))
 *               x = LayerNorm(a + output.dense(gelu(intermediate.dense(a))))
 *   pooler:     tanh(pooler.dense(x[:, 0]))        classifier: classifier(pooler)   (classification only)
 *
 * Inputs  input_ids, attention_mask, token_type_ids: int64 [batch, seq] (1 = real token, 0 = padding).
 * Outputs last_hidden_state f32 [batch, seq, hidden]; with the head also pooler_output f32 [batch, hidden] and
 *         logits f32 [batch, numLabels].
 */
import type { EncoderConfig } from '../config.js';
import { encoderLinearModules, encoderNormModules, encoderTensorShapes, encoderTopModules } from '../models/names.js';
import { exportDims, F32_MIN, linear, mergeHeads, ONNX_PRODUCER, type OnnxExportShape, positionIds, requireConfig, splitHeads } from './common.js';
import { attrFloat, attrInt, attrInts, GraphBuilder, ONNX_FLOAT } from './graph-builder.js';
import { CheckedWeights, type HostWeights } from './host-weights.js';

function checkEncoderConfig(c: EncoderConfig): void {
  requireConfig(c.family === 'encoder', `exportEncoderOnnx: config.family is ${String(c.family)}, want 'encoder'`);
  requireConfig(
    c.hiddenSize % c.numHeads === 0,
    `encoder: hidden_size ${c.hiddenSize} is not a multiple of num_attention_heads ${c.numHeads}`,
  );
  requireConfig(c.layerNormEps > 0, `encoder: layer_norm_eps must be > 0, got ${c.layerNormEps}`);
  if (c.architecture === 'BertForSequenceClassification') {
    requireConfig(c.numLabels >= 1, `encoder: BertForSequenceClassification needs num_labels >= 1, got ${c.numLabels}`);
  }
}

/** ONNX ModelProto bytes of the encoder with these weights. Omitted dims in `shape` stay symbolic. */
export function exportEncoderOnnx(config: EncoderConfig, weights: HostWeights, shape: OnnxExportShape = {}): Uint8Array {
  checkEncoderConfig(config);
  const { batch, seq } = exportDims(shape, config.maxPositions, 'exportEncoderOnnx');
  const w = new CheckedWeights(weights, encoderTensorShapes(config));
  const g = new GraphBuilder(`tessera_${config.architecture}`);
  const h = config.hiddenSize;
  const eps = config.layerNormEps;

  const layerNorm = (x: string, module: string): string =>
    g.op('LayerNormalization', [x, g.f32(`${module}.weight`, w.get(`${module}.weight`), [h]), g.f32(`${module}.bias`, w.get(`${module}.bias`), [h])], {
      axis: attrInt(-1),
      epsilon: attrFloat(eps),
    });
  const table = (module: string): string => {
    const name = `${module}.weight`;
    return g.f32(name, w.get(name), w.shape(name));
  };

  const ids = g.input('input_ids', 'int64', [batch, seq]);
  const mask = g.input('attention_mask', 'int64', [batch, seq]);
  const types = g.input('token_type_ids', 'int64', [batch, seq]);

  // Embeddings.
  const top = encoderTopModules(config);
  const word = g.op('Gather', [table(top.wordEmbeddings), ids], { axis: attrInt(0) });
  const position = g.op('Gather', [table(top.positionEmbeddings), positionIds(g, ids)], { axis: attrInt(0) }); // [seq, h]
  const tokenType = g.op('Gather', [table(top.tokenTypeEmbeddings), types], { axis: attrInt(0) });
  let x = layerNorm(g.op('Add', [g.op('Add', [word, tokenType]), position]), top.embeddingsNorm);

  // HF's extended mask: (1 - mask) · finfo.min, as [batch, 1, 1, seq] so it broadcasts over heads and queries.
  const maskF = g.op('Cast', [mask], { to: attrInt(ONNX_FLOAT) });
  const maskBias = g.op('Mul', [g.op('Sub', [g.scalarF32(1), maskF]), g.scalarF32(F32_MIN)]);
  const maskBias4 = g.op('Unsqueeze', [maskBias, g.constI64([1, 2])], {}, 'attention_mask_bias');

  const heads = config.numHeads;
  const headDim = h / heads;
  const scale = g.scalarF32(1 / Math.sqrt(headDim));
  for (let i = 0; i < config.numLayers; i++) {
    const lin = encoderLinearModules(config, i);
    const ln = encoderNormModules(config, i);

    const q = splitHeads(g, linear(g, w, x, lin.query, true), heads, headDim); // [b, nh, s, d]
    const kT = g.op('Transpose', [g.op('Reshape', [linear(g, w, x, lin.key, true), g.constI64([0, 0, heads, headDim])])], {
      perm: attrInts([0, 2, 3, 1]),
    }); // [b, nh, d, s]
    const v = splitHeads(g, linear(g, w, x, lin.value, true), heads, headDim);
    const scores = g.op('Add', [g.op('Mul', [g.op('MatMul', [q, kT]), scale]), maskBias4]);
    const probs = g.op('Softmax', [scores], { axis: attrInt(-1) });
    const context = mergeHeads(g, g.op('MatMul', [probs, v]), h);
    const attn = layerNorm(g.op('Add', [linear(g, w, context, lin.attn_out, true), x]), ln.attn_ln);

    const inner = gelu(g, linear(g, w, attn, lin.ffn_in, true), config.hiddenAct);
    x = layerNorm(g.op('Add', [linear(g, w, inner, lin.ffn_out, true), attn]), ln.ffn_ln);
  }
  g.op('Identity', [x], {}, 'last_hidden_state');
  g.output('last_hidden_state', 'float32', [batch, seq, h]);

  if (config.architecture === 'BertForSequenceClassification') {
    const first = g.op('Gather', [x, g.constI64(0)], { axis: attrInt(1) }); // h[:, 0] → [b, h]
    const pooled = g.op('Tanh', [linear(g, w, first, top.pooler, true)], {}, 'pooler_output');
    g.output(pooled, 'float32', [batch, h]);
    const logits = linear(g, w, pooled, top.classifier, true);
    g.op('Identity', [logits], {}, 'logits');
    g.output('logits', 'float32', [batch, config.numLabels]);
  }

  return g.encode({
    producer: ONNX_PRODUCER,
    docString: `${config.architecture}: ${config.numLayers} layers, hidden ${h}, ${heads} heads, ${config.hiddenAct}`,
    metadata: { family: 'encoder', architecture: config.architecture, pad_token_id: String(config.padTokenId) },
  });
}

/** HF's activations: 'gelu' is the exact erf form; 'gelu_new' / 'gelu_pytorch_tanh' the tanh approximation. */
function gelu(g: GraphBuilder, x: string, act: EncoderConfig['hiddenAct']): string {
  const half = g.scalarF32(0.5);
  const one = g.scalarF32(1);
  if (act === 'gelu') {
    // 0.5 · x · (1 + erf(x / √2))
    const e = g.op('Erf', [g.op('Div', [x, g.scalarF32(Math.SQRT2)])]);
    return g.op('Mul', [g.op('Mul', [x, half]), g.op('Add', [e, one])]);
  }
  // 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))
  const x3 = g.op('Mul', [g.op('Mul', [x, x]), x]);
  const inner = g.op('Mul', [g.op('Add', [x, g.op('Mul', [x3, g.scalarF32(0.044715)])]), g.scalarF32(Math.sqrt(2 / Math.PI))]);
  return g.op('Mul', [g.op('Mul', [x, half]), g.op('Add', [g.op('Tanh', [inner]), one])]);
}
