/**
 * A float64 Llama forward over host weights, for the zoo's offline measurements: hidden states after every layer
 * (the logit lens reads them), the residual after each attention (surrogate recovery fits against it), and the
 * attention contexts (head pruning refits o_proj on them). Same maths as the engine's decoder (pre-RMSNorm, RoPE
 * in the rotate-half layout, causal grouped-query attention, SwiGLU); test/llama-reference.test.ts checks it
 * against DecoderModel on a generated model. Head counts are read from each layer's weight shapes, so a pruned
 * layer (fewer heads, fewer FFN channels) runs through the same code.
 */
import { fromHalfBits } from '@tessera/native';
import { type DecoderConfig, ModelTensors, readHfConfig } from '@tessera/engine';

import type { ArchSig } from '../planner/arch.js';
import { ZooInvalidError } from '../planner/errors.js';
import { type Mat, mat, matmulT } from './linalg.js';

/** The zoo's architecture signature of a Llama config (dtype: the checkpoint's weight dtype). */
export function archSigOf(config: DecoderConfig, dtype: string): ArchSig {
  return {
    architecture: 'LlamaForCausalLM',
    vocabSize: config.vocabSize,
    hiddenSize: config.hiddenSize,
    numLayers: config.numLayers,
    numHeads: config.numHeads,
    numKvHeads: config.numKvHeads,
    headDim: config.headDim,
    intermediateSize: config.intermediateSize,
    rmsNormEps: config.rmsNormEps,
    ropeTheta: config.ropeTheta,
    tieWordEmbeddings: config.tieWordEmbeddings,
    dtype,
  };
}

export interface LlamaWeights {
  arch: ArchSig;
  /** Every tensor by checkpoint name, as float64 (1-D tensors as 1×n). */
  tensors: Map<string, Mat>;
}

export function weight(w: LlamaWeights, name: string): Mat {
  const t = w.tensors.get(name);
  if (!t) throw new ZooInvalidError(`the model has no tensor ${name}`);
  return t;
}

const lname = (l: number) => ({
  q: `model.layers.${l}.self_attn.q_proj.weight`,
  k: `model.layers.${l}.self_attn.k_proj.weight`,
  v: `model.layers.${l}.self_attn.v_proj.weight`,
  o: `model.layers.${l}.self_attn.o_proj.weight`,
  gate: `model.layers.${l}.mlp.gate_proj.weight`,
  up: `model.layers.${l}.mlp.up_proj.weight`,
  down: `model.layers.${l}.mlp.down_proj.weight`,
  inputNorm: `model.layers.${l}.input_layernorm.weight`,
  postNorm: `model.layers.${l}.post_attention_layernorm.weight`,
});
export const llamaLayerNames = lname;

/** Reads an HF Llama directory into float64 host weights (f16 / bf16 widened exactly). */
export function loadLlamaWeights(dir: string): LlamaWeights {
  const config = readHfConfig(dir);
  if (config.family !== 'decoder') throw new ZooInvalidError(`${dir} holds a ${config.family}, not a Llama decoder`);
  const files = ModelTensors.open(dir);
  try {
    const tensors = new Map<string, Mat>();
    let dtype = 'f32';
    for (const name of files.names()) {
      const info = files.info(name);
      const host = files.readHost(name);
      let values: ArrayLike<number>;
      if (info.dtype === 'f16' || info.dtype === 'bf16') values = fromHalfBits(host as Uint16Array, info.dtype);
      else if (info.dtype === 'f32') values = host as Float32Array;
      else throw new ZooInvalidError(`${dir}: tensor ${name} is ${info.dtype}; the fits read f32, f16 and bf16 weights`);
      if (name === 'model.embed_tokens.weight') dtype = info.dtype;
      const shape = info.shape.length === 1 ? [1, info.shape[0]!] : info.shape;
      tensors.set(name, mat(shape[0]!, shape[1]!, values));
    }
    const arch = archSigOf(config, dtype);
    return { arch, tensors };
  } finally {
    files.close();
  }
}

/** RMSNorm of every row, times the gain. */
export function rmsNorm(x: Mat, gain: Mat, eps: number): Mat {
  const out = mat(x.rows, x.cols);
  for (let i = 0; i < x.rows; i++) {
    let ss = 0;
    for (let j = 0; j < x.cols; j++) ss += x.data[i * x.cols + j]! ** 2;
    const inv = 1 / Math.sqrt(ss / x.cols + eps);
    for (let j = 0; j < x.cols; j++) out.data[i * x.cols + j] = x.data[i * x.cols + j]! * inv * gain.data[j]!;
  }
  return out;
}

function addInPlace(a: Mat, b: Mat): Mat {
  for (let i = 0; i < a.data.length; i++) a.data[i]! += b.data[i]!;
  return a;
}

/** Rotate-half RoPE on [T, heads·hd] in place, position of row t = t. */
function rope(x: Mat, headDim: number, theta: number): void {
  const heads = x.cols / headDim;
  const half = headDim / 2;
  for (let t = 0; t < x.rows; t++) {
    for (let i = 0; i < half; i++) {
      const angle = t * theta ** ((-2 * i) / headDim);
      const c = Math.cos(angle);
      const s = Math.sin(angle);
      for (let h = 0; h < heads; h++) {
        const o = t * x.cols + h * headDim;
        const a = x.data[o + i]!;
        const b = x.data[o + i + half]!;
        x.data[o + i] = a * c - b * s;
        x.data[o + i + half] = b * c + a * s;
      }
    }
  }
}

/** Token embeddings [T, d]. */
export function embed(w: LlamaWeights, tokens: readonly number[]): Mat {
  const e = weight(w, 'model.embed_tokens.weight');
  const out = mat(tokens.length, e.cols);
  tokens.forEach((tok, t) => {
    if (!Number.isInteger(tok) || tok < 0 || tok >= e.rows) throw new ZooInvalidError(`token ${tok} is outside the vocabulary [0, ${e.rows})`);
    out.data.set(e.data.subarray(tok * e.cols, (tok + 1) * e.cols), t * e.cols);
  });
  return out;
}

export interface LayerTrace {
  /** The residual after attention (input + attention output). */
  mid: Mat;
  /** The layer's output. */
  out: Mat;
  /** Attention contexts before o_proj, [T, heads·hd]. */
  ctx: Mat;
  /** The FFN's input (post-attention RMSNorm of `mid`). */
  ffnIn: Mat;
}

/** Causal grouped-query attention contexts for the (already normalised) input. */
export function attentionContext(w: LlamaWeights, l: number, x: Mat): Mat {
  const n = lname(l);
  const hd = w.arch.headDim;
  const q = matmulT(x, weight(w, n.q));
  const k = matmulT(x, weight(w, n.k));
  const v = matmulT(x, weight(w, n.v));
  rope(q, hd, w.arch.ropeTheta);
  rope(k, hd, w.arch.ropeTheta);
  const heads = q.cols / hd;
  const kvHeads = k.cols / hd;
  if (!Number.isInteger(heads) || !Number.isInteger(kvHeads) || heads % kvHeads !== 0) {
    throw new ZooInvalidError(`layer ${l}: ${q.cols} query and ${k.cols} key columns do not make whole heads of ${hd} in groups`);
  }
  const group = heads / kvHeads;
  const T = x.rows;
  const ctx = mat(T, heads * hd);
  const scale = 1 / Math.sqrt(hd);
  const scores = new Float64Array(T);
  for (let h = 0; h < heads; h++) {
    const kh = Math.floor(h / group);
    for (let t = 0; t < T; t++) {
      let max = -Infinity;
      for (let s = 0; s <= t; s++) {
        let dot = 0;
        for (let i = 0; i < hd; i++) dot += q.data[t * q.cols + h * hd + i]! * k.data[s * k.cols + kh * hd + i]!;
        scores[s] = dot * scale;
        if (scores[s]! > max) max = scores[s]!;
      }
      let sum = 0;
      for (let s = 0; s <= t; s++) {
        scores[s] = Math.exp(scores[s]! - max);
        sum += scores[s]!;
      }
      for (let s = 0; s <= t; s++) {
        const p = scores[s]! / sum;
        for (let i = 0; i < hd; i++) ctx.data[t * ctx.cols + h * hd + i]! += p * v.data[s * v.cols + kh * hd + i]!;
      }
    }
  }
  return ctx;
}

/** silu(x Gᵀ) ⊙ (x Uᵀ): the FFN's activations before down_proj, [T, channels]. */
export function ffnActivations(w: LlamaWeights, l: number, x: Mat): Mat {
  const n = lname(l);
  const g = matmulT(x, weight(w, n.gate));
  const u = matmulT(x, weight(w, n.up));
  for (let i = 0; i < g.data.length; i++) {
    const z = g.data[i]!;
    g.data[i] = (z / (1 + Math.exp(-z))) * u.data[i]!;
  }
  return g;
}

/** One decoder layer with its intermediates. */
export function layerTrace(w: LlamaWeights, l: number, h: Mat): LayerTrace {
  const n = lname(l);
  const eps = w.arch.rmsNormEps;
  const ctx = attentionContext(w, l, rmsNorm(h, weight(w, n.inputNorm), eps));
  const mid = addInPlace(matmulT(ctx, weight(w, n.o)), h);
  const ffnIn = rmsNorm(mid, weight(w, n.postNorm), eps);
  const out = addInPlace(matmulT(ffnActivations(w, l, ffnIn), weight(w, n.down)), mid);
  return { mid, out, ctx, ffnIn };
}

/** Layers [from, to) on h (a new matrix; h is left as it is). */
export function runLayers(w: LlamaWeights, h: Mat, from: number, to: number): Mat {
  if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from > to || to > w.arch.numLayers) {
    throw new ZooInvalidError(`layers [${from}, ${to}) are not a range within [0, ${w.arch.numLayers})`);
  }
  let x = h;
  for (let l = from; l < to; l++) x = layerTrace(w, l, x).out;
  return x === h ? mat(h.rows, h.cols, h.data) : x;
}

/** Hidden states: [0] the embeddings, [l + 1] after layer l. */
export function hiddenStates(w: LlamaWeights, tokens: readonly number[]): Mat[] {
  const out = [embed(w, tokens)];
  for (let l = 0; l < w.arch.numLayers; l++) out.push(layerTrace(w, l, out[l]!).out);
  return out;
}

/** The model's final RMSNorm and LM head on any hidden state: logits [T, V]. */
export function headLogits(w: LlamaWeights, h: Mat): Mat {
  const normed = rmsNorm(h, weight(w, 'model.norm.weight'), w.arch.rmsNormEps);
  const head = w.arch.tieWordEmbeddings ? weight(w, 'model.embed_tokens.weight') : weight(w, 'lm_head.weight');
  return matmulT(normed, head);
}

/** Row-wise softmax, in place; returns its argument. */
export function softmaxRows(x: Mat): Mat {
  for (let i = 0; i < x.rows; i++) {
    const o = i * x.cols;
    let max = -Infinity;
    for (let j = 0; j < x.cols; j++) max = Math.max(max, x.data[o + j]!);
    let sum = 0;
    for (let j = 0; j < x.cols; j++) {
      x.data[o + j] = Math.exp(x.data[o + j]! - max);
      sum += x.data[o + j]!;
    }
    for (let j = 0; j < x.cols; j++) x.data[o + j]! /= sum;
  }
  return x;
}

/** The logit lens (design note A1): softmax(lmHead(finalNorm(h))), [T, V]. */
export function logitLens(w: LlamaWeights, h: Mat): Mat {
  return softmaxRows(headLogits(w, h));
}
