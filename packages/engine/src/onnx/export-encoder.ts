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
 *
 * Optional extensions bake parameter-efficient tasks that cannot be merged into the weights into the graph, so a
 * task's whole model runs in onnxruntime as an independent oracle (pet-ops' equivalence tests): Houlsby adapters
 * after attention.output.dense / output.dense, prefix-tuning keys/values per layer, and a head of another width.
 */
import { InvalidArgumentError } from '@tessera/native';
import type { EncoderConfig } from '../config.js';
import { encoderLinearModules, encoderNormModules, encoderTensorShapes, encoderTopModules } from '../models/names.js';
import { exportDims, F32_MIN, linear, mergeHeads, ONNX_PRODUCER, type OnnxExportShape, positionIds, requireConfig, splitHeads } from './common.js';
import { attrFloat, attrInt, attrInts, GraphBuilder, ONNX_FLOAT } from './graph-builder.js';
import { CheckedWeights, type HostWeights, transposeMatrix } from './host-weights.js';

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

/** The linear sites an adapter can follow: attention.output.dense and output.dense (Houlsby placement). */
export type EncoderOnnxAdapterSite = 'attn_out' | 'ffn_out';

/**
 * A Houlsby adapter on a site's output y (before residual + LayerNorm): y + act(y·downᵀ + downBias)·upᵀ + upBias.
 * `down` is f32 [m, hidden] and `up` f32 [hidden, m], row-major (HF Linear's [out, in] convention).
 */
export interface EncoderOnnxAdapter {
  down: Float32Array;
  downBias: Float32Array;
  up: Float32Array;
  upBias: Float32Array;
  /** Bottleneck width. */
  m: number;
  /** 'gelu' (erf form, default) or 'gelu_tanh'. */
  act?: 'gelu' | 'gelu_tanh';
}

/**
 * One layer's prefix-tuning keys and values, already projected (post-bias): f32 [length, hidden] each, shared by
 * every sequence of the batch and attended to by every query before its own keys (never masked).
 */
export interface EncoderOnnxPrefix {
  key: Float32Array;
  value: Float32Array;
  length: number;
}

export interface EncoderOnnxExtensions {
  /** The adapter after `site` of `layer`, or null for none. */
  adapters?: (layer: number, site: EncoderOnnxAdapterSite) => EncoderOnnxAdapter | null;
  /** The prefix of `layer`, or null for none. */
  prefixes?: (layer: number) => EncoderOnnxPrefix | null;
  /** Width of the classifier (a task head); default config.numLabels. BertForSequenceClassification only. */
  numLabels?: number;
}

/**
 * ONNX ModelProto bytes of the encoder with these weights. Omitted dims in `shape` stay symbolic. Without
 * `extensions` (or with none that apply) the graph is exactly the plain model's.
 */
export function exportEncoderOnnx(
  baseConfig: EncoderConfig,
  weights: HostWeights,
  shape: OnnxExportShape = {},
  extensions: EncoderOnnxExtensions = {},
): Uint8Array {
  checkEncoderConfig(baseConfig);
  let config = baseConfig;
  if (extensions.numLabels !== undefined) {
    const n = extensions.numLabels;
    requireConfig(
      baseConfig.architecture === 'BertForSequenceClassification',
      `exportEncoderOnnx: extensions.numLabels needs a BertForSequenceClassification (with pooler), got ${baseConfig.architecture}`,
    );
    if (!(Number.isInteger(n) && n >= 1)) throw new InvalidArgumentError(`exportEncoderOnnx: extensions.numLabels must be a positive integer, got ${n}`);
    config = { ...baseConfig, numLabels: n };
  }
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
    const prefix = extensions.prefixes?.(i) ?? null;
    const context = mergeHeads(g, prefix ? prefixedContext(g, q, scores, v, prefix, i, h, heads, scale) : g.op('MatMul', [g.op('Softmax', [scores], { axis: attrInt(-1) }), v]), h);
    const attnOut = adapter(g, linear(g, w, context, lin.attn_out, true), extensions.adapters?.(i, 'attn_out') ?? null, `${lin.attn_out}.adapter`, h);
    const attn = layerNorm(g.op('Add', [attnOut, x]), ln.attn_ln);

    const inner = gelu(g, linear(g, w, attn, lin.ffn_in, true), config.hiddenAct);
    const ffnOut = adapter(g, linear(g, w, inner, lin.ffn_out, true), extensions.adapters?.(i, 'ffn_out') ?? null, `${lin.ffn_out}.adapter`, h);
    x = layerNorm(g.op('Add', [ffnOut, attn]), ln.ffn_ln);
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

/**
 * y + act(y·downᵀ + downBias)·upᵀ + upBias on y [.., hidden], or y itself when there is no adapter. The weights are
 * stored transposed ([hidden, m] and [m, hidden]) so each product is one MatMul.
 */
function adapter(g: GraphBuilder, y: string, a: EncoderOnnxAdapter | null, name: string, hidden: number): string {
  if (a === null) return y;
  const m = a.m;
  if (!(Number.isInteger(m) && m >= 1)) throw new InvalidArgumentError(`exportEncoderOnnx: adapter ${name} has bottleneck m = ${m}, not a positive integer`);
  const expect = (field: string, data: Float32Array, n: number, dims: string) => {
    if (!(data instanceof Float32Array) || data.length !== n) {
      throw new InvalidArgumentError(`exportEncoderOnnx: adapter ${name}.${field} has ${data?.length} elements, expected ${dims} = ${n}`);
    }
  };
  expect('down', a.down, m * hidden, `[${m}, ${hidden}]`);
  expect('downBias', a.downBias, m, `[${m}]`);
  expect('up', a.up, hidden * m, `[${hidden}, ${m}]`);
  expect('upBias', a.upBias, hidden, `[${hidden}]`);
  const downT = g.f32(`${name}.down_t`, transposeMatrix(a.down, m, hidden), [hidden, m]);
  const upT = g.f32(`${name}.up_t`, transposeMatrix(a.up, hidden, m), [m, hidden]);
  const hiddenAct = gelu(g, g.op('Add', [g.op('MatMul', [y, downT]), g.f32(`${name}.down_bias`, a.downBias, [m])]), a.act === 'gelu_tanh' ? 'gelu_new' : 'gelu');
  return g.op('Add', [y, g.op('Add', [g.op('MatMul', [hiddenAct, upT]), g.f32(`${name}.up_bias`, a.upBias, [hidden])])]);
}

/**
 * Attention context over [prefix; own keys] for q [b, nh, s, d], the own (scaled, masked) scores [b, nh, s, s] and
 * v [b, nh, s, d]. The prefix is shared by the batch, so its scores q·P_Kᵀ come from one broadcast MatMul against
 * P_K as [nh, d, p] (no per-batch copy); softmax runs over the concatenated [p + s] scores, and the probabilities
 * are split again to weight P_V [nh, p, d] and v. Prefix positions carry no mask bias: every query sees them.
 */
function prefixedContext(g: GraphBuilder, q: string, scores: string, v: string, prefix: EncoderOnnxPrefix, layer: number, hidden: number, heads: number, scale: string): string {
  const p = prefix.length;
  const name = `prefix.layer.${layer}`;
  if (!(Number.isInteger(p) && p >= 1)) throw new InvalidArgumentError(`exportEncoderOnnx: ${name} has length ${p}, not a positive integer`);
  for (const [field, data] of [['key', prefix.key], ['value', prefix.value]] as const) {
    if (!(data instanceof Float32Array) || data.length !== p * hidden) {
      throw new InvalidArgumentError(`exportEncoderOnnx: ${name}.${field} has ${data?.length} elements, expected [${p}, ${hidden}] = ${p * hidden}`);
    }
  }
  const headDim = hidden / heads;
  // [p, hidden] → [p, nh, d] → keys [nh, d, p], values [nh, p, d].
  const pk = g.op('Transpose', [g.op('Reshape', [g.f32(`${name}.key`, prefix.key, [p, hidden]), g.constI64([p, heads, headDim])])], { perm: attrInts([1, 2, 0]) });
  const pv = g.op('Transpose', [g.op('Reshape', [g.f32(`${name}.value`, prefix.value, [p, hidden]), g.constI64([p, heads, headDim])])], { perm: attrInts([1, 0, 2]) });
  const prefixScores = g.op('Mul', [g.op('MatMul', [q, pk]), scale]); // [b, nh, s, p]
  const probs = g.op('Softmax', [g.op('Concat', [prefixScores, scores], { axis: attrInt(-1) })], { axis: attrInt(-1) });
  const axis = g.constI64([3]);
  const prefixProbs = g.op('Slice', [probs, g.constI64([0]), g.constI64([p]), axis]);
  const ownProbs = g.op('Slice', [probs, g.constI64([p]), g.constI64([Number.MAX_SAFE_INTEGER]), axis]);
  return g.op('Add', [g.op('MatMul', [prefixProbs, pv]), g.op('MatMul', [ownProbs, v])]);
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
