/**
 * Float64 training references: the decoder's summed causal-LM loss over a padded batch (each sequence run alone
 * over its real tokens, so padding cannot leak), with optional LoRA branches, and central differences of it.
 * Written from the HF modeling code, independent of the engine's forward; weights are float64 arrays by HF name.
 */
import type { DecoderConfig, EncoderConfig } from '../../src/config.js';
import {
  decoderLinearModules,
  decoderNormModules,
  decoderTopModules,
  encoderLinearModules,
  encoderNormModules,
  encoderTopModules,
} from '../../src/models/names.js';
import { geluErf, geluTanh } from './reference-models.js';

export type F64Weights = Map<string, Float64Array>;
/** LoRA factors by module; `mask` (optional): the dropout mask [batch·seq, in] (0 or 1/(1-p)) of the padded batch. */
export type F64Lora = Map<string, { a: Float64Array; b: Float64Array; r: number; scale: number; mask?: Float64Array }>;

function linear(x: Float64Array, rows: number, inF: number, w: Float64Array): Float64Array {
  const outF = w.length / inF;
  const y = new Float64Array(rows * outF);
  for (let r = 0; r < rows; r++) {
    for (let o = 0; o < outF; o++) {
      let acc = 0;
      for (let i = 0; i < inF; i++) acc += x[r * inF + i]! * w[o * inF + i]!;
      y[r * outF + o] = acc;
    }
  }
  return y;
}

/** base(x) + scale · (dropout(x) Aᵀ) Bᵀ (PEFT's LoRA Linear); the mask rows start at batch row `rowOffset`. */
function adapted(x: Float64Array, rows: number, inF: number, w: Float64Array, lora: F64Lora | undefined, module: string, rowOffset = 0): Float64Array {
  const y = linear(x, rows, inF, w);
  const l = lora?.get(module);
  if (!l) return y;
  const mask = l.mask;
  const xd = mask ? x.map((xi, i) => xi * mask[rowOffset * inF + i]!) : x;
  const u = linear(xd, rows, inF, l.a);
  const d = linear(u, rows, l.r, l.b);
  for (let i = 0; i < y.length; i++) y[i] = y[i]! + l.scale * d[i]!;
  return y;
}

function rmsNorm(x: Float64Array, rows: number, n: number, g: Float64Array, eps: number): Float64Array {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let ms = 0;
    for (let c = 0; c < n; c++) ms += x[r * n + c]! ** 2;
    const inv = 1 / Math.sqrt(ms / n + eps);
    for (let c = 0; c < n; c++) y[r * n + c] = x[r * n + c]! * inv * g[c]!;
  }
  return y;
}

function applyRope(x: Float64Array, seq: number, heads: number, d: number, theta: number): void {
  const half = d / 2;
  for (let p = 0; p < seq; p++) {
    for (let h = 0; h < heads; h++) {
      const base = p * heads * d + h * d;
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

function causalAttention(q: Float64Array, k: Float64Array, v: Float64Array, seq: number, nh: number, nkv: number, d: number): Float64Array {
  const group = nh / nkv;
  const out = new Float64Array(seq * nh * d);
  const scale = 1 / Math.sqrt(d);
  for (let h = 0; h < nh; h++) {
    const hk = Math.floor(h / group);
    for (let i = 0; i < seq; i++) {
      const s = new Float64Array(i + 1);
      let max = -Infinity;
      for (let j = 0; j <= i; j++) {
        let dot = 0;
        for (let c = 0; c < d; c++) dot += q[i * nh * d + h * d + c]! * k[j * nkv * d + hk * d + c]!;
        s[j] = dot * scale;
        max = Math.max(max, s[j]!);
      }
      let total = 0;
      for (let j = 0; j <= i; j++) total += (s[j] = Math.exp(s[j]! - max));
      for (let c = 0; c < d; c++) {
        let acc = 0;
        for (let j = 0; j <= i; j++) acc += (s[j]! / total) * v[j * nkv * d + hk * d + c]!;
        out[i * nh * d + h * d + c] = acc;
      }
    }
  }
  return out;
}

/** Logits [seq, vocab] of one sequence. */
export function referenceDecoderLogits(config: DecoderConfig, w: F64Weights, ids: readonly number[], lora?: F64Lora, rowOffset = 0): Float64Array {
  const g = (n: string) => w.get(n)!;
  const seq = ids.length;
  const { hiddenSize: H, numHeads: nh, numKvHeads: nkv, headDim: d, intermediateSize: F, rmsNormEps: eps } = config;
  const embed = g(`${decoderTopModules.embedTokens}.weight`);
  let x = new Float64Array(seq * H);
  for (let t = 0; t < seq; t++) x.set(embed.subarray(ids[t]! * H, (ids[t]! + 1) * H), t * H);
  for (let l = 0; l < config.numLayers; l++) {
    const lin = decoderLinearModules(l);
    const norm = decoderNormModules(l);
    const p = (input: Float64Array, m: string, inF: number) => adapted(input, seq, inF, g(`${m}.weight`), lora, m, rowOffset);
    const n1 = rmsNorm(x, seq, H, g(`${norm.input_norm}.weight`), eps);
    const q = p(n1, lin.q, H);
    const k = p(n1, lin.k, H);
    const v = p(n1, lin.v, H);
    applyRope(q, seq, nh, d, config.ropeTheta);
    applyRope(k, seq, nkv, d, config.ropeTheta);
    const o = p(causalAttention(q, k, v, seq, nh, nkv, d), lin.o, nh * d);
    const h2 = x.map((xi, i) => xi + o[i]!);
    const n2 = rmsNorm(h2, seq, H, g(`${norm.post_attn_norm}.weight`), eps);
    const gate = p(n2, lin.gate, H);
    const up = p(n2, lin.up, H);
    const m = gate.map((gi, i) => (gi / (1 + Math.exp(-gi))) * up[i]!);
    const down = p(m, lin.down, F);
    x = h2.map((hi, i) => hi + down[i]!);
  }
  const xf = rmsNorm(x, seq, H, g(`${decoderTopModules.finalNorm}.weight`), eps);
  const head = config.tieWordEmbeddings ? embed : g(`${decoderTopModules.lmHead}.weight`);
  return linear(xf, seq, H, head);
}

/** Σ cross-entropy over the counted targets of a padded batch (rows: `lengths[b]` real tokens each). */
export function referenceDecoderLoss(
  config: DecoderConfig, w: F64Weights,
  batch: { batch: number; seq: number; tokens: ArrayLike<number>; targets: ArrayLike<number>; lengths: readonly number[] },
  lora?: F64Lora,
): number {
  const V = config.vocabSize;
  let total = 0;
  for (let b = 0; b < batch.batch; b++) {
    const n = batch.lengths[b]!;
    const ids = Array.from({ length: n }, (_, t) => batch.tokens[b * batch.seq + t]!);
    const logits = referenceDecoderLogits(config, w, ids, lora, b * batch.seq);
    for (let t = 0; t < n; t++) {
      const y = batch.targets[b * batch.seq + t]!;
      if (y === -100) continue;
      let max = -Infinity;
      for (let j = 0; j < V; j++) max = Math.max(max, logits[t * V + j]!);
      let s = 0;
      for (let j = 0; j < V; j++) s += Math.exp(logits[t * V + j]! - max);
      total += Math.log(s) + max - logits[t * V + y]!;
    }
  }
  return total;
}

/** (f(x + h) - f(x - h)) / 2h at one element of `arr`, with h = step · max(1, |x|); restores the element. */
export function centralDiffAt(f: () => number, arr: Float64Array, i: number, step = 1e-5): number {
  const x0 = arr[i]!;
  const h = step * Math.max(1, Math.abs(x0));
  arr[i] = x0 + h;
  const up = f();
  arr[i] = x0 - h;
  const down = f();
  arr[i] = x0;
  return (up - down) / (2 * h);
}

function linearBias(x: Float64Array, rows: number, inF: number, w: Float64Array, b: Float64Array, lora: F64Lora | undefined, module: string): Float64Array {
  const y = adapted(x, rows, inF, w, lora, module);
  const outF = b.length;
  for (let r = 0; r < rows; r++) for (let o = 0; o < outF; o++) y[r * outF + o] = y[r * outF + o]! + b[o]!;
  return y;
}

function layerNorm(x: Float64Array, rows: number, n: number, g: Float64Array, b: Float64Array, eps: number): Float64Array {
  const y = new Float64Array(rows * n);
  for (let r = 0; r < rows; r++) {
    let mean = 0;
    for (let c = 0; c < n; c++) mean += x[r * n + c]!;
    mean /= n;
    let v = 0;
    for (let c = 0; c < n; c++) v += (x[r * n + c]! - mean) ** 2;
    const inv = 1 / Math.sqrt(v / n + eps);
    for (let c = 0; c < n; c++) y[r * n + c] = (x[r * n + c]! - mean) * inv * g[c]! + b[c]!;
  }
  return y;
}

function fullAttention(q: Float64Array, k: Float64Array, v: Float64Array, seq: number, nh: number, d: number): Float64Array {
  const out = new Float64Array(seq * nh * d);
  const scale = 1 / Math.sqrt(d);
  for (let h = 0; h < nh; h++) {
    for (let i = 0; i < seq; i++) {
      const s = new Float64Array(seq);
      let max = -Infinity;
      for (let j = 0; j < seq; j++) {
        let dot = 0;
        for (let c = 0; c < d; c++) dot += q[i * nh * d + h * d + c]! * k[j * nh * d + h * d + c]!;
        s[j] = dot * scale;
        max = Math.max(max, s[j]!);
      }
      let total = 0;
      for (let j = 0; j < seq; j++) total += (s[j] = Math.exp(s[j]! - max));
      for (let c = 0; c < d; c++) {
        let acc = 0;
        for (let j = 0; j < seq; j++) acc += (s[j]! / total) * v[j * nh * d + h * d + c]!;
        out[i * nh * d + h * d + c] = acc;
      }
    }
  }
  return out;
}

/**
 * Class logits of one unpadded sequence (token types 0), BertForSequenceClassification in eval mode. When `w` holds
 * `<module>.adapter.{down,up}.{weight,bias}` (PetS names), the site output H of that module becomes
 * H + act(H W_downᵀ + b_down) W_upᵀ + b_up (act: `adapterAct`, default GELU erf).
 */
export function referenceEncoderLogits(
  config: EncoderConfig, w: F64Weights, ids: readonly number[], lora?: F64Lora, adapterAct: 'gelu' | 'gelu_tanh' = 'gelu',
): Float64Array {
  const H = config.hiddenSize;
  const top = encoderTopModules(config);
  const g = (n: string) => w.get(n)!;
  const x = referenceEncoderHidden(config, w, ids, lora, adapterAct);
  const pooled = linearBias(x.subarray(0, H), 1, H, g(`${top.pooler}.weight`), g(`${top.pooler}.bias`), undefined, '').map(Math.tanh);
  return linearBias(pooled, 1, H, g(`${top.classifier}.weight`), g(`${top.classifier}.bias`), undefined, '');
}

/** The last layer's hidden states [seq, hidden] of one unpadded sequence (see referenceEncoderLogits). */
export function referenceEncoderHidden(
  config: EncoderConfig, w: F64Weights, ids: readonly number[], lora?: F64Lora, adapterAct: 'gelu' | 'gelu_tanh' = 'gelu',
): Float64Array {
  const g = (n: string) => w.get(n)!;
  const seq = ids.length;
  const H = config.hiddenSize;
  const nh = config.numHeads;
  const d = H / nh;
  const eps = config.layerNormEps;
  const act = config.hiddenAct === 'gelu' ? geluErf : geluTanh;
  const top = encoderTopModules(config);
  const word = g(`${top.wordEmbeddings}.weight`);
  const pos = g(`${top.positionEmbeddings}.weight`);
  const type = g(`${top.tokenTypeEmbeddings}.weight`);
  let x: Float64Array = new Float64Array(seq * H);
  for (let t = 0; t < seq; t++) for (let c = 0; c < H; c++) x[t * H + c] = word[ids[t]! * H + c]! + pos[t * H + c]! + type[c]!;
  x = layerNorm(x, seq, H, g(`${top.embeddingsNorm}.weight`), g(`${top.embeddingsNorm}.bias`), eps);
  for (let l = 0; l < config.numLayers; l++) {
    const lin = encoderLinearModules(config, l);
    const ln = encoderNormModules(config, l);
    const dense = (input: Float64Array, m: string, inF: number) => linearBias(input, seq, inF, g(`${m}.weight`), g(`${m}.bias`), lora, m);
    const ctx = fullAttention(dense(x, lin.query, H), dense(x, lin.key, H), dense(x, lin.value, H), seq, nh, d);
    const adapter = (y: Float64Array, m: string): Float64Array => {
      if (!w.has(`${m}.adapter.down.weight`)) return y;
      const down = g(`${m}.adapter.down.weight`);
      const z = linearBias(y, seq, H, down, g(`${m}.adapter.down.bias`), undefined, '').map(adapterAct === 'gelu' ? geluErf : geluTanh);
      const u = linearBias(z, seq, down.length / H, g(`${m}.adapter.up.weight`), g(`${m}.adapter.up.bias`), undefined, '');
      return y.map((yi, i) => yi + u[i]!);
    };
    const o = adapter(dense(ctx, lin.attn_out, H), lin.attn_out);
    const h1 = layerNorm(o.map((oi, i) => oi + x[i]!), seq, H, g(`${ln.attn_ln}.weight`), g(`${ln.attn_ln}.bias`), eps);
    const inner = dense(h1, lin.ffn_in, H).map(act);
    const f = adapter(dense(inner, lin.ffn_out, config.intermediateSize), lin.ffn_out);
    x = layerNorm(f.map((fi, i) => fi + h1[i]!), seq, H, g(`${ln.ffn_ln}.weight`), g(`${ln.ffn_ln}.bias`), eps);
  }
  return x;
}

/**
 * Σ masked-LM cross-entropy of a padded batch (each sequence run alone over its `lengths[b]` tokens): at every
 * target, LayerNorm(GELU(dense(h))) · Eᵀ + bias (BertForMaskedLM's head, decoder tied to the word embeddings).
 */
export function referenceMaskedLmLoss(
  config: EncoderConfig, w: F64Weights,
  batch: { batch: number; seq: number; tokens: ArrayLike<number>; targets: ArrayLike<number>; lengths: readonly number[] },
): number {
  const H = config.hiddenSize;
  const V = config.vocabSize;
  const g = (n: string) => w.get(n)!;
  const act = config.hiddenAct === 'gelu' ? geluErf : geluTanh;
  const word = g(`${encoderTopModules(config).wordEmbeddings}.weight`);
  let total = 0;
  for (let b = 0; b < batch.batch; b++) {
    const n = batch.lengths[b]!;
    const x = referenceEncoderHidden(config, w, Array.from({ length: n }, (_, t) => batch.tokens[b * batch.seq + t]!));
    for (let t = 0; t < n; t++) {
      const y = batch.targets[b * batch.seq + t]!;
      if (y === -100) continue;
      const d = linearBias(x.subarray(t * H, (t + 1) * H), 1, H, g('cls.predictions.transform.dense.weight'), g('cls.predictions.transform.dense.bias'), undefined, '').map(act);
      const u = layerNorm(d, 1, H, g('cls.predictions.transform.LayerNorm.weight'), g('cls.predictions.transform.LayerNorm.bias'), config.layerNormEps);
      const z = linearBias(u, 1, H, word, g('cls.predictions.bias'), undefined, '');
      let max = -Infinity;
      for (const v of z) max = Math.max(max, v);
      let sum = 0;
      for (const v of z) sum += Math.exp(v - max);
      total += Math.log(sum) + max - z[y]!;
    }
  }
  return total;
}

/** Σ cross-entropy of the sequences' logits against their labels. */
export function referenceEncoderLoss(
  config: EncoderConfig, w: F64Weights, seqs: readonly { ids: readonly number[]; label: number }[], lora?: F64Lora, adapterAct: 'gelu' | 'gelu_tanh' = 'gelu',
): number {
  let total = 0;
  for (const s of seqs) {
    const z = referenceEncoderLogits(config, w, s.ids, lora, adapterAct);
    let max = -Infinity;
    for (const v of z) max = Math.max(max, v);
    let sum = 0;
    for (const v of z) sum += Math.exp(v - max);
    total += Math.log(sum) + max - z[s.label]!;
  }
  return total;
}
