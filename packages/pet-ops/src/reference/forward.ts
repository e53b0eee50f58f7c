/**
 * A float64 BERT forward in plain JS (HF BertForSequenceClassification, eval mode), one sequence at a time, with
 * the merged model's extensions (Houlsby adapters, attention prefixes). The oracle the unified PET execution is
 * compared against; slow by design (no batching, no kernels), for tiny models only.
 */
import { type EncoderConfig, encoderLinearModules, encoderNormModules, encoderTopModules } from '@tessera/engine';
import { type MergedPetExtensions, adapterKey } from './merge.js';

export interface ReferenceSequence {
  readonly ids: ArrayLike<number>;
  readonly tokenTypes?: ArrayLike<number>;
}

export interface ReferenceOutput {
  /** Per sequence: [tokens · hidden], the last layer's output. */
  hidden: Float64Array[];
  /** Per sequence: [hidden] = tanh(pooler(CLS)). */
  pooled: Float64Array[];
  /** Per sequence: [numLabels]. */
  logits: Float64Array[];
}

const SQRT_PI = Math.sqrt(Math.PI);

/** erf to ~1e-13 (float64): its Maclaurin series below 3, the continued fraction of erfc above. */
export function erf(x: number): number {
  const ax = Math.abs(x);
  if (ax < 3) {
    let term = ax;
    let sum = ax;
    const x2 = ax * ax;
    for (let n = 1; n < 200 && Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= -x2 / n;
      sum += term / (2 * n + 1);
    }
    return Math.sign(x) * (2 / SQRT_PI) * sum;
  }
  let k = ax;
  for (let n = 60; n >= 1; n--) k = ax + n / 2 / k;
  const erfc = Math.exp(-ax * ax) / (SQRT_PI * k);
  return Math.sign(x) * (1 - erfc);
}

export function geluErfRef(x: number): number {
  return 0.5 * x * (1 + erf(x / Math.SQRT2));
}

export function geluTanhRef(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
}

type Weights = (name: string) => ArrayLike<number>;

/** y [n, out] = x [n, in] · Wᵀ + b with W [out, in]. */
function linear(x: Float64Array<ArrayBufferLike>, n: number, inF: number, w: ArrayLike<number>, b: ArrayLike<number> | null, outF: number): Float64Array {
  const y = new Float64Array(n * outF);
  for (let r = 0; r < n; r++) {
    for (let o = 0; o < outF; o++) {
      let acc = b ? b[o]! : 0;
      for (let i = 0; i < inF; i++) acc += x[r * inF + i]! * w[o * inF + i]!;
      y[r * outF + o] = acc;
    }
  }
  return y;
}

function layerNorm(x: Float64Array<ArrayBufferLike>, n: number, d: number, gamma: ArrayLike<number>, beta: ArrayLike<number>, eps: number): Float64Array {
  const y = new Float64Array(n * d);
  for (let r = 0; r < n; r++) {
    let mean = 0;
    for (let j = 0; j < d; j++) mean += x[r * d + j]!;
    mean /= d;
    let v = 0;
    for (let j = 0; j < d; j++) v += (x[r * d + j]! - mean) ** 2;
    const inv = 1 / Math.sqrt(v / d + eps);
    for (let j = 0; j < d; j++) y[r * d + j] = (x[r * d + j]! - mean) * inv * gamma[j]! + beta[j]!;
  }
  return y;
}

/** In place: y += act(y·downᵀ + bd)·upᵀ + bu, row by row. */
function applyAdapter(y: Float64Array, n: number, d: number, a: { down: ArrayLike<number>; downBias: ArrayLike<number>; up: ArrayLike<number>; upBias: ArrayLike<number>; m: number; act: 'gelu' | 'gelu_tanh' }): void {
  const act = a.act === 'gelu' ? geluErfRef : geluTanhRef;
  const z = new Float64Array(a.m);
  for (let r = 0; r < n; r++) {
    for (let k = 0; k < a.m; k++) {
      let acc = a.downBias[k]!;
      for (let j = 0; j < d; j++) acc += y[r * d + j]! * a.down[k * d + j]!;
      z[k] = act(acc);
    }
    for (let j = 0; j < d; j++) {
      let acc = a.upBias[j]!;
      for (let k = 0; k < a.m; k++) acc += z[k]! * a.up[j * a.m + k]!;
      y[r * d + j] = y[r * d + j]! + acc;
    }
  }
}

/** Runs every sequence through the encoder with `weights` (by HF name; any array-like of numbers). */
export function referenceEncoderForward(
  config: EncoderConfig,
  weights: ReadonlyMap<string, ArrayLike<number>> | Weights,
  sequences: readonly ReferenceSequence[],
  extensions: MergedPetExtensions = {},
): ReferenceOutput {
  const w: Weights = typeof weights === 'function' ? weights : (name) => {
    const t = weights.get(name);
    if (!t) throw new Error(`referenceEncoderForward: no weight named ${name}`);
    return t;
  };
  const H = config.hiddenSize;
  const nh = config.numHeads;
  const hd = H / nh;
  const F = config.intermediateSize;
  const eps = config.layerNormEps;
  const gelu = config.hiddenAct === 'gelu' ? geluErfRef : geluTanhRef;
  const top = encoderTopModules(config);
  const out: ReferenceOutput = { hidden: [], pooled: [], logits: [] };

  for (const seq of sequences) {
    const n = seq.ids.length;
    let x: Float64Array = new Float64Array(n * H);
    const word = w(`${top.wordEmbeddings}.weight`);
    const pos = w(`${top.positionEmbeddings}.weight`);
    const typ = w(`${top.tokenTypeEmbeddings}.weight`);
    for (let t = 0; t < n; t++) {
      const id = seq.ids[t]!;
      const tt = seq.tokenTypes?.[t] ?? 0;
      for (let j = 0; j < H; j++) x[t * H + j] = word[id * H + j]! + pos[t * H + j]! + typ[tt * H + j]!;
    }
    x = layerNorm(x, n, H, w(`${top.embeddingsNorm}.weight`), w(`${top.embeddingsNorm}.bias`), eps);

    for (let l = 0; l < config.numLayers; l++) {
      const lin = encoderLinearModules(config, l);
      const ln = encoderNormModules(config, l);
      const q = linear(x, n, H, w(`${lin.query}.weight`), w(`${lin.query}.bias`), H);
      const k = linear(x, n, H, w(`${lin.key}.weight`), w(`${lin.key}.bias`), H);
      const v = linear(x, n, H, w(`${lin.value}.weight`), w(`${lin.value}.bias`), H);
      const prefix = extensions.prefixes?.get(l);
      const p = prefix?.length ?? 0;
      const keyAt = (j: number, c: number) => (j < p ? prefix!.key[j * H + c]! : k[(j - p) * H + c]!);
      const valueAt = (j: number, c: number) => (j < p ? prefix!.value[j * H + c]! : v[(j - p) * H + c]!);
      const ctx = new Float64Array(n * H);
      const scores = new Float64Array(p + n);
      for (let head = 0; head < nh; head++) {
        const c0 = head * hd;
        for (let t = 0; t < n; t++) {
          let max = -Infinity;
          for (let j = 0; j < p + n; j++) {
            let s = 0;
            for (let c = 0; c < hd; c++) s += q[t * H + c0 + c]! * keyAt(j, c0 + c);
            scores[j] = s / Math.sqrt(hd);
            if (scores[j]! > max) max = scores[j]!;
          }
          let sum = 0;
          for (let j = 0; j < p + n; j++) {
            scores[j] = Math.exp(scores[j]! - max);
            sum += scores[j]!;
          }
          for (let c = 0; c < hd; c++) {
            let acc = 0;
            for (let j = 0; j < p + n; j++) acc += scores[j]! * valueAt(j, c0 + c);
            ctx[t * H + c0 + c] = acc / sum;
          }
        }
      }
      const attn = linear(ctx, n, H, w(`${lin.attn_out}.weight`), w(`${lin.attn_out}.bias`), H);
      const a1 = extensions.adapters?.get(adapterKey(l, 'attn_out'));
      if (a1) applyAdapter(attn, n, H, a1);
      for (let i = 0; i < n * H; i++) attn[i] = attn[i]! + x[i]!;
      const x1 = layerNorm(attn, n, H, w(`${ln.attn_ln}.weight`), w(`${ln.attn_ln}.bias`), eps);
      const inter = linear(x1, n, H, w(`${lin.ffn_in}.weight`), w(`${lin.ffn_in}.bias`), F);
      for (let i = 0; i < inter.length; i++) inter[i] = gelu(inter[i]!);
      const ffn = linear(inter, n, F, w(`${lin.ffn_out}.weight`), w(`${lin.ffn_out}.bias`), H);
      const a2 = extensions.adapters?.get(adapterKey(l, 'ffn_out'));
      if (a2) applyAdapter(ffn, n, H, a2);
      for (let i = 0; i < n * H; i++) ffn[i] = ffn[i]! + x1[i]!;
      x = layerNorm(ffn, n, H, w(`${ln.ffn_ln}.weight`), w(`${ln.ffn_ln}.bias`), eps);
    }
    out.hidden.push(x);
    const pooled = linear(x.subarray(0, H), 1, H, w(`${top.pooler}.weight`), w(`${top.pooler}.bias`), H).map(Math.tanh);
    out.pooled.push(pooled);
    out.logits.push(linear(pooled, 1, H, w(`${top.classifier}.weight`), w(`${top.classifier}.bias`), config.numLabels));
  }
  return out;
}
