/**
 * Plain float64 forwards of both model families: the oracle the ONNX export and the native engine are
 * checked against. Written for clarity, one sequence at a time, with loops that read like the Hugging Face
 * modeling code (BertModel / BertForSequenceClassification, LlamaForCausalLM; eval mode, no padding):
 * weights arrive as f32 and everything after is double.
 */
import type { DecoderConfig, EncoderConfig } from '../../src/config.js';
import {
  decoderLinearModules,
  decoderNormModules,
  decoderTensorShapes,
  decoderTopModules,
  encoderLinearModules,
  encoderNormModules,
  encoderTensorShapes,
  encoderTopModules,
} from '../../src/models/names.js';
import { CheckedWeights, type HostWeights } from '../../src/onnx/host-weights.js';

// ---------------------------------------------------------------------------------------------- scalar math

const TWO_OVER_SQRT_PI = 1.1283791670955126; // 2/√π

/**
 * erf(x) to about 1e-15 relative, from the series erf(x) = 2/√π · e^(−x²) · Σₙ 2ⁿ x^(2n+1) / (1·3·…·(2n+1)).
 * Every term is positive (no cancellation, unlike the alternating Taylor series), so the sum is accurate to a
 * few ulps for any x; past |x| = 6, erf(x) rounds to ±1 in double.
 */
export function erf(x: number): number {
  if (Number.isNaN(x)) return NaN;
  const ax = Math.abs(x);
  if (ax >= 6) return Math.sign(x);
  const x2 = ax * ax;
  let term = ax;
  let sum = ax;
  for (let n = 0; term > sum * 1e-17; n++) {
    term *= (2 * x2) / (2 * n + 3);
    sum += term;
  }
  const value = TWO_OVER_SQRT_PI * Math.exp(-x2) * sum;
  return x < 0 ? -value : value;
}

/** HF 'gelu': the exact form 0.5·x·(1 + erf(x/√2)). */
export function geluErf(x: number): number {
  return 0.5 * x * (1 + erf(x / Math.SQRT2));
}

/** HF 'gelu_new' / 'gelu_pytorch_tanh': 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). */
export function geluTanh(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

/** silu(x) = x · sigmoid(x). */
export function silu(x: number): number {
  return x / (1 + Math.exp(-x));
}

// ---------------------------------------------------------------------------------------------- row-major blocks

/** The checkpoint's tensors as float64, checked against the shapes the config implies. */
function float64Weights(weights: HostWeights, shapes: Map<string, number[]>): (name: string) => Float64Array {
  const checked = new CheckedWeights(weights, shapes);
  return (name) => Float64Array.from(checked.get(name));
}

/** y[r, o] = Σᵢ x[r, i]·W[o, i] (+ b[o]); W is an HF Linear weight [out, in]. */
function linear(x: Float64Array, rows: number, inF: number, weight: Float64Array, bias?: Float64Array): Float64Array {
  const outF = weight.length / inF;
  const y = new Float64Array(rows * outF);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outF; o++) {
      let acc = bias === undefined ? 0 : bias[o]!;
      for (let i = 0; i < inF; i++) acc += x[r * inF + i]! * weight[o * inF + i]!;
      y[r * outF + o] = acc;
    }
  }
  return y;
}

function add(a: Float64Array, b: Float64Array): Float64Array {
  return a.map((v, i) => v + b[i]!);
}

/** LayerNorm over each row: (x − mean)/√(var + eps)·γ + β, with the biased variance (as torch). */
function layerNorm(x: Float64Array, rows: number, n: number, gamma: Float64Array, beta: Float64Array, eps: number): Float64Array {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let mean = 0;
    for (let c = 0; c < n; c++) mean += x[r * n + c]!;
    mean /= n;
    let variance = 0;
    for (let c = 0; c < n; c++) variance += (x[r * n + c]! - mean) ** 2;
    variance /= n;
    const inv = 1 / Math.sqrt(variance + eps);
    for (let c = 0; c < n; c++) y[r * n + c] = (x[r * n + c]! - mean) * inv * gamma[c]! + beta[c]!;
  }
  return y;
}

/** RMSNorm over each row (LlamaRMSNorm): x · 1/√(mean(x²) + eps) · w. */
function rmsNorm(x: Float64Array, rows: number, n: number, weight: Float64Array, eps: number): Float64Array {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let meanSquare = 0;
    for (let c = 0; c < n; c++) meanSquare += x[r * n + c]! ** 2;
    meanSquare /= n;
    const inv = 1 / Math.sqrt(meanSquare + eps);
    for (let c = 0; c < n; c++) y[r * n + c] = x[r * n + c]! * inv * weight[c]!;
  }
  return y;
}

/**
 * Scaled dot-product attention of one sequence. q [seq, numHeads·d], k and v [seq, numKvHeads·d]; query head
 * hq reads kv head ⌊hq / g⌋ (g = numHeads / numKvHeads, HF repeat_kv). With `causal`, query i sees keys 0..i;
 * HF's finfo.min bias on the other keys makes their weight exactly 0, which is what leaving them out does.
 * Returns the context [seq, numHeads·d].
 */
function attention(
  q: Float64Array,
  k: Float64Array,
  v: Float64Array,
  seq: number,
  numHeads: number,
  numKvHeads: number,
  d: number,
  causal: boolean,
): Float64Array {
  const group = numHeads / numKvHeads;
  const qWidth = numHeads * d;
  const kvWidth = numKvHeads * d;
  const scale = 1 / Math.sqrt(d);
  const context = new Float64Array(seq * qWidth);
  for (let hq = 0; hq < numHeads; hq++) {
    const hk = Math.floor(hq / group);
    for (let i = 0; i < seq; i++) {
      const visible = causal ? i + 1 : seq;
      const scores = new Float64Array(visible);
      for (let j = 0; j < visible; j++) {
        let dot = 0;
        for (let c = 0; c < d; c++) dot += q[i * qWidth + hq * d + c]! * k[j * kvWidth + hk * d + c]!;
        scores[j] = dot * scale;
      }
      let max = -Infinity;
      for (const s of scores) max = Math.max(max, s);
      let total = 0;
      for (let j = 0; j < visible; j++) {
        scores[j] = Math.exp(scores[j]! - max);
        total += scores[j]!;
      }
      for (let c = 0; c < d; c++) {
        let acc = 0;
        for (let j = 0; j < visible; j++) acc += (scores[j]! / total) * v[j * kvWidth + hk * d + c]!;
        context[i * qWidth + hq * d + c] = acc;
      }
    }
  }
  return context;
}

/**
 * RoPE in place on x [seq, heads·d] at positions 0..seq-1, HF's rotate_half convention: with half = d/2 and
 * angle_i = p·θ^(−2i/d), out[i] = x[i]·cos − x[i+half]·sin and out[i+half] = x[i+half]·cos + x[i]·sin.
 */
function applyRope(x: Float64Array, seq: number, heads: number, d: number, theta: number): void {
  const half = d / 2;
  const width = heads * d;
  for (let p = 0; p < seq; p++) {
    for (let h = 0; h < heads; h++) {
      const base = p * width + h * d;
      for (let i = 0; i < half; i++) {
        const angle = p * Math.pow(theta, (-2 * i) / d);
        const c = Math.cos(angle);
        const s = Math.sin(angle);
        const a = x[base + i]!;
        const b = x[base + half + i]!;
        x[base + i] = a * c - b * s;
        x[base + half + i] = b * c + a * s;
      }
    }
  }
}

function checkIds(ids: readonly number[], limit: number, what: string, maxLength: number): void {
  if (ids.length === 0) throw new RangeError(`${what}: empty sequence`);
  if (ids.length > maxLength) throw new RangeError(`${what}: ${ids.length} tokens exceed max_position_embeddings ${maxLength}`);
  ids.forEach((id, t) => {
    if (!Number.isInteger(id) || id < 0 || id >= limit) throw new RangeError(`${what}: position ${t} has id ${id}, outside [0, ${limit})`);
  });
}

// ---------------------------------------------------------------------------------------------- the families

export interface ReferenceEncoderOutput {
  /** last_hidden_state [seq, hidden]. */
  hidden: Float64Array;
  /** pooler_output [hidden] (BertForSequenceClassification only). */
  pooler?: Float64Array;
  /** logits [numLabels] (BertForSequenceClassification only). */
  logits?: Float64Array;
}

/** BertModel / BertForSequenceClassification on one unpadded sequence (token types default to 0). */
export function referenceEncoder(
  config: EncoderConfig,
  weights: HostWeights,
  ids: readonly number[],
  tokenTypes?: readonly number[],
): ReferenceEncoderOutput {
  checkIds(ids, config.vocabSize, 'referenceEncoder', config.maxPositions);
  const types = tokenTypes ?? ids.map(() => 0);
  if (types.length !== ids.length) throw new RangeError(`referenceEncoder: ${types.length} token types for ${ids.length} ids`);
  checkIds(types, config.typeVocabSize, 'referenceEncoder (token types)', config.maxPositions);

  const w = float64Weights(weights, encoderTensorShapes(config));
  const seq = ids.length;
  const h = config.hiddenSize;
  const heads = config.numHeads;
  const d = h / heads;
  const eps = config.layerNormEps;
  const act = config.hiddenAct === 'gelu' ? geluErf : geluTanh;
  const top = encoderTopModules(config);

  // Embeddings: word + token type + absolute position, then LayerNorm.
  const word = w(`${top.wordEmbeddings}.weight`);
  const position = w(`${top.positionEmbeddings}.weight`);
  const tokenType = w(`${top.tokenTypeEmbeddings}.weight`);
  let x: Float64Array = new Float64Array(seq * h);
  for (let t = 0; t < seq; t++) {
    for (let c = 0; c < h; c++) {
      x[t * h + c] = word[ids[t]! * h + c]! + tokenType[types[t]! * h + c]! + position[t * h + c]!;
    }
  }
  x = layerNorm(x, seq, h, w(`${top.embeddingsNorm}.weight`), w(`${top.embeddingsNorm}.bias`), eps);

  for (let i = 0; i < config.numLayers; i++) {
    const lin = encoderLinearModules(config, i);
    const ln = encoderNormModules(config, i);
    const dense = (input: Float64Array, module: string, inF: number) => linear(input, seq, inF, w(`${module}.weight`), w(`${module}.bias`));

    const context = attention(dense(x, lin.query, h), dense(x, lin.key, h), dense(x, lin.value, h), seq, heads, heads, d, false);
    const attn = layerNorm(add(dense(context, lin.attn_out, h), x), seq, h, w(`${ln.attn_ln}.weight`), w(`${ln.attn_ln}.bias`), eps);
    const inner = dense(attn, lin.ffn_in, h).map(act);
    x = layerNorm(add(dense(inner, lin.ffn_out, config.intermediateSize), attn), seq, h, w(`${ln.ffn_ln}.weight`), w(`${ln.ffn_ln}.bias`), eps);
  }

  if (config.architecture !== 'BertForSequenceClassification') return { hidden: x };
  // Pooler: tanh(dense(h[0])); classifier on the pooled vector.
  const pooler = linear(x.subarray(0, h), 1, h, w(`${top.pooler}.weight`), w(`${top.pooler}.bias`)).map(Math.tanh);
  const logits = linear(pooler, 1, h, w(`${top.classifier}.weight`), w(`${top.classifier}.bias`));
  return { hidden: x, pooler, logits };
}

/** LlamaForCausalLM on one sequence at positions 0..seq-1: logits [seq, vocab]. */
export function referenceDecoder(config: DecoderConfig, weights: HostWeights, ids: readonly number[]): Float64Array {
  checkIds(ids, config.vocabSize, 'referenceDecoder', config.maxPositions);
  const w = float64Weights(weights, decoderTensorShapes(config));
  const seq = ids.length;
  const { hiddenSize: h, numHeads, numKvHeads, headDim: d, intermediateSize: f, rmsNormEps: eps } = config;

  const embed = w(`${decoderTopModules.embedTokens}.weight`);
  let x: Float64Array = new Float64Array(seq * h);
  for (let t = 0; t < seq; t++) x.set(embed.subarray(ids[t]! * h, (ids[t]! + 1) * h), t * h);

  for (let i = 0; i < config.numLayers; i++) {
    const lin = decoderLinearModules(i);
    const norm = decoderNormModules(i);
    const proj = (input: Float64Array, module: string, inF: number) => linear(input, seq, inF, w(`${module}.weight`));

    const n1 = rmsNorm(x, seq, h, w(`${norm.input_norm}.weight`), eps);
    const q = proj(n1, lin.q, h);
    const k = proj(n1, lin.k, h);
    const v = proj(n1, lin.v, h);
    applyRope(q, seq, numHeads, d, config.ropeTheta);
    applyRope(k, seq, numKvHeads, d, config.ropeTheta);
    const context = attention(q, k, v, seq, numHeads, numKvHeads, d, true);
    x = add(x, proj(context, lin.o, numHeads * d));

    const n2 = rmsNorm(x, seq, h, w(`${norm.post_attn_norm}.weight`), eps);
    const gate = proj(n2, lin.gate, h);
    const up = proj(n2, lin.up, h);
    const hidden = gate.map((g, j) => silu(g) * up[j]!);
    x = add(x, proj(hidden, lin.down, f));
  }

  const final = rmsNorm(x, seq, h, w(`${decoderTopModules.finalNorm}.weight`), eps);
  const head = config.tieWordEmbeddings ? embed : w(`${decoderTopModules.lmHead}.weight`);
  return linear(final, seq, h, head);
}
