/**
 * Training the BERT-style encoder for sequence classification: a forward over a padded batch that keeps its
 * activations, and the explicit backward of every op on @tessera/native's kernels (as train/decoder.ts does for
 * the decoder). The serving forward (models/encoder.ts) is untouched; this one reads the same weights by name.
 *
 * Forward (T = batch·seq rows, right padding masked out of attention): e = word + position + type embeddings →
 * h = LN(e); per layer: q, k, v = h Wᵀ + b (+ LoRA) → a = attention(q, k, v) (bidirectional, key mask) →
 * s1 = a Woᵀ + bo + h → h1 = LN(s1) → i = h1 W1ᵀ + b1 → g = GELU(i) → s2 = g W2ᵀ + b2 + h1 → h' = LN(s2); then
 * the pooler tanh(W_p h[CLS] + b_p), the classifier and cross-entropy against the labels. The pooler's tanh runs
 * on the host, as in the serving forward ([batch, hidden], one row per sequence).
 */
import {
  Tensor,
  add,
  attentionPrefill,
  columnSum,
  gemm,
  attentionPrefillBackward,
  crossEntropy,
  embedding,
  embeddingBackward,
  gatherRows,
  geluErf,
  geluErfBackward,
  geluTanh,
  geluTanhBackward,
  layerNorm,
  layerNormBackward,
  linear,
  scatterRows,
} from '@tessera/native';
import { SplitMix32, streamState } from '@tessera/core';
import type { EncoderConfig } from '../config.js';
import type { LoraModuleWeights } from '../formats/peft-writer.js';
import { type SafetensorsEntry, writeSafetensors } from '../formats/safetensors.js';
import { uniformWithStd } from '../gen/rng.js';
import { peftTargetMatches } from '../formats/peft-writer.js';
import type { LoraWeights } from '../hooks/lora-delta.js';
import type { EncoderModel } from '../models/encoder.js';
import { encoderLinearModules, encoderNormModules, encoderTopModules } from '../models/names.js';
import { Scope } from '../models/scope.js';
import { type ClassificationBatch, type ClassificationExample, classificationBatch } from './data.js';
import { TrainConfigError, TrainDataError } from './errors.js';
import { type LoraKeep, linearSiteBackward, linearSiteForward, siteScratch } from './linear-site.js';
import {
  type AdapterSpec,
  DEFAULT_ENCODER_LORA_TARGETS,
  ENCODER_LINEAR_SITES,
  type LoraParams,
  type TrainParam,
  type TrainableSpec,
  baseParams,
  createLoraParams,
  disposeParams,
  encoderTrainableNames,
  loraModuleWeightsOf,
  loraWeightsOf,
  zeroGrads,
} from './params.js';
import type { LossResult, TrainableModel } from './trainable.js';

type Site = (typeof ENCODER_LINEAR_SITES)[number];

/** PetS's tensor names of the adapter after `module` (pet-ops LAYOUTS.md). */
export function adapterTensorNames(module: string): { down: string; downBias: string; up: string; upBias: string } {
  return { down: `${module}.adapter.down.weight`, downBias: `${module}.adapter.down.bias`, up: `${module}.adapter.up.weight`, upBias: `${module}.adapter.up.bias` };
}

/** One bottleneck adapter's params. */
export interface AdapterParams {
  readonly module: string;
  readonly down: TrainParam;
  readonly downBias: TrainParam;
  readonly up: TrainParam;
  readonly upBias: TrainParam;
}

/** What the forward keeps of an adapter for its backward. */
interface AdapterKeep {
  p: AdapterParams;
  /** The site output H (the adapter's input) [T, h]. */
  x: Tensor;
  /** H W_downᵀ + b_down [T, m] (pre-activation). */
  z: Tensor;
  /** act(z). */
  a: Tensor;
}

interface LayerActs {
  h: Tensor; // layer input (q/k/v input and the first residual)
  q: Tensor;
  k: Tensor;
  v: Tensor;
  attn: Tensor;
  s1: Tensor; // LN input
  h1: Tensor; // LN(s1)
  inner: Tensor; // pre-GELU
  g: Tensor; // GELU(inner)
  s2: Tensor;
  lora: Partial<Record<Site, LoraKeep>>;
  adapters: { attn_out?: AdapterKeep; ffn_out?: AdapterKeep };
}

export interface TrainableEncoderOptions {
  /** Seeds LoRA's A initialisation and dropout masks (default 0). */
  seed?: number;
  adapterName?: string;
}

/** A BertForSequenceClassification with a trainable set (see TrainableDecoder; same ownership rules). */
export class TrainableEncoder implements TrainableModel<ClassificationExample, ClassificationBatch> {
  readonly model: EncoderModel;
  readonly config: EncoderConfig;
  readonly spec: TrainableSpec;
  readonly params: TrainParam[];
  readonly lora: Map<string, LoraParams>;
  dropoutDraws = 0;
  private readonly byName: Map<string, TrainParam>;
  private readonly dropout: number;
  private readonly seed: number;
  private readonly adapterName: string;
  /** The backward stops below this layer (nothing under it trains). */
  private readonly lowestLayer: number;
  /** Embedding-level tensors train: the backward goes through the embeddings LayerNorm. */
  private readonly embedTrainable: boolean;

  constructor(model: EncoderModel, spec: TrainableSpec, options: TrainableEncoderOptions = {}) {
    const c = model.config;
    if (c.architecture !== 'BertForSequenceClassification') {
      throw new TrainConfigError(`TrainableEncoder: sequence classification needs a BertForSequenceClassification, not a ${c.architecture}`);
    }
    this.model = model;
    this.config = c;
    this.spec = spec;
    this.seed = options.seed ?? 0;
    this.adapterName = options.adapterName ?? 'trained';
    if (spec.kind === 'lora') {
      const targets = spec.targetModules ?? DEFAULT_ENCODER_LORA_TARGETS;
      const top = encoderTopModules(c);
      for (const m of [top.pooler, top.classifier]) {
        if (peftTargetMatches(targets, m)) {
          throw new TrainConfigError(`LoRA target_modules ${JSON.stringify(targets)} match ${m}: LoRA on the head is not supported (train it with kind 'head' instead)`);
        }
      }
      const modules: { module: string; inFeatures: number; outFeatures: number }[] = [];
      for (let l = 0; l < c.numLayers; l++) {
        const lin = encoderLinearModules(c, l);
        for (const site of ENCODER_LINEAR_SITES) {
          const [outFeatures, inFeatures] = model.weights.get(`${lin[site]}.weight`).shape as [number, number];
          modules.push({ module: lin[site], inFeatures, outFeatures });
        }
      }
      this.lora = createLoraParams(modules, spec, this.seed, model.backend, DEFAULT_ENCODER_LORA_TARGETS);
      this.params = [...this.lora.values()].flatMap((p) => [p.a, p.b]);
      this.dropout = spec.dropout ?? 0;
    } else if (spec.kind === 'adapter') {
      this.lora = new Map();
      this.params = this.createAdapterParams(spec);
      this.dropout = 0;
    } else {
      this.lora = new Map();
      this.params = baseParams(model.weights, encoderTrainableNames(c, spec));
      this.dropout = 0;
    }
    this.byName = new Map(this.params.map((p) => [p.name, p]));
    if (spec.kind === 'adapter') for (const p of this.params) this.own.set(p.name, p.value);
    const top = encoderTopModules(c);
    this.embedTrainable = [top.wordEmbeddings, top.positionEmbeddings, top.tokenTypeEmbeddings, top.embeddingsNorm]
      .some((m) => this.byName.has(`${m}.weight`) || this.byName.has(`${m}.bias`));
    let lowest = c.numLayers;
    for (let l = c.numLayers - 1; l >= 0; l--) {
      const names = [...Object.values(encoderLinearModules(c, l)), ...Object.values(encoderNormModules(c, l))];
      if (names.some((m) => this.byName.has(`${m}.weight`) || this.byName.has(`${m}.bias`) || this.lora.has(m) || this.adapters.has(m))) lowest = l;
    }
    this.lowestLayer = this.embedTrainable ? 0 : lowest;
  }

  /** The task's own copies (adapter sets: head and LayerNorms), read in place of the shared tensors. */
  private readonly own = new Map<string, Tensor>();
  /** Adapters by the module they follow (attention.output.dense, output.dense). */
  readonly adapters = new Map<string, AdapterParams>();
  /** The adapter set's bottleneck and activation (null for other sets). */
  readonly adapterConfig: { bottleneck: number; activation: 'gelu' | 'gelu_tanh'; taskNorms: boolean } | null = null;

  private w(name: string): Tensor {
    return this.own.get(name) ?? this.model.weights.get(name);
  }

  /**
   * Adapter params: per layer, down [m, h] (uniform, std 0.02, from the (seed, name) stream), b_down 0, up [h, m]
   * 0, b_up 0 after each of the two sites (so training starts from the shared model); then copies of the
   * classifier and, with taskNorms, of both LayerNorms.
   */
  private createAdapterParams(spec: AdapterSpec): TrainParam[] {
    const c = this.config;
    const be = this.model.backend;
    const h = c.hiddenSize;
    const m = spec.bottleneck ?? Math.max(1, Math.round(h / 12));
    if (!Number.isInteger(m) || m < 1) throw new TrainConfigError(`adapter bottleneck must be an integer >= 1, got ${m}`);
    const activation = spec.activation ?? 'gelu';
    if (activation !== 'gelu' && activation !== 'gelu_tanh') throw new TrainConfigError(`adapter activation must be gelu or gelu_tanh, got ${String(activation)}`);
    const taskNorms = spec.taskNorms ?? true;
    (this as { adapterConfig: TrainableEncoder['adapterConfig'] }).adapterConfig = { bottleneck: m, activation, taskNorms };
    const param = (name: string, data: Float32Array, shape: number[], decay: boolean): TrainParam => {
      const value = Tensor.from(data, shape, { backend: be });
      return { name, value, grad: Tensor.zeros(shape, 'f32', be), decay };
    };
    const copy = (name: string): TrainParam => {
      const t = this.model.weights.get(name);
      return param(name, this.model.weights.hostF32(name), t.shape, t.rank >= 2);
    };
    const top = encoderTopModules(c);
    const params = [copy(`${top.classifier}.weight`), copy(`${top.classifier}.bias`)];
    for (let l = 0; l < c.numLayers; l++) {
      const lin = encoderLinearModules(c, l);
      for (const module of [lin.attn_out, lin.ffn_out]) {
        const n = adapterTensorNames(module);
        const down = param(n.down, uniformWithStd(m * h, this.seed, n.down, 0.02), [m, h], true);
        const downBias = param(n.downBias, new Float32Array(m), [m], false);
        const up = param(n.up, new Float32Array(h * m), [h, m], true);
        const upBias = param(n.upBias, new Float32Array(h), [h], false);
        this.adapters.set(module, { module, down, downBias, up, upBias });
        params.push(down, downBias, up, upBias);
      }
      if (taskNorms) for (const norm of Object.values(encoderNormModules(c, l))) params.push(copy(`${norm}.weight`), copy(`${norm}.bias`));
    }
    return params;
  }

  /**
   * The trained adapter task in PetS's PET file layout (pet-ops LAYOUTS.md, pet_type 'adapter'): tensors by name,
   * and the metadata a PET file carries.
   */
  petParams(): { metadata: Record<string, string>; tensors: Map<string, { shape: number[]; data: Float32Array }> } {
    const cfg = this.adapterConfig;
    if (!cfg) throw new TrainConfigError('petParams: the trainable set is not adapters');
    const tensors = new Map(this.params.map((p) => [p.name, { shape: p.value.shape, data: p.value.toArray() as Float32Array }]));
    const metadata = {
      format: 'tessera-pet',
      format_version: '1',
      pet_type: 'adapter',
      pet_config: JSON.stringify({ labels: this.config.labels, bottleneck: cfg.bottleneck, activation: cfg.activation }),
    };
    return { metadata, tensors };
  }

  /** Writes `petParams()` as a safetensors PET file. */
  writePetFile(path: string): void {
    const { metadata, tensors } = this.petParams();
    writeSafetensors(path, [...tensors].map(([name, t]) => [name, { dtype: 'f32', shape: t.shape, data: t.data }] as [string, SafetensorsEntry]), metadata);
  }

  private gradOf(name: string): Tensor | null {
    return this.byName.get(name)?.grad ?? null;
  }

  zeroGrad(): void {
    zeroGrads(this.params);
  }

  collate(examples: readonly ClassificationExample[]): ClassificationBatch {
    return classificationBatch(examples, this.config.padTokenId);
  }

  countTargets(batch: ClassificationBatch): number {
    return batch.batch;
  }

  accumulateGradients(batch: ClassificationBatch, gradScale: number): LossResult {
    return this.run(batch, { grad: true, gradScale, train: true }).result;
  }

  loss(batch: ClassificationBatch): LossResult {
    return this.run(batch, { grad: false, gradScale: 0, train: false }).result;
  }

  /** Class logits [batch, numLabels] (host), without dropout. */
  logits(batch: ClassificationBatch): Float32Array {
    return this.run(batch, { grad: false, gradScale: 0, train: false, logits: true }).logits!;
  }

  loraWeights(): LoraWeights {
    if (this.lora.size === 0) throw new TrainConfigError('loraWeights: the trainable set is not LoRA');
    return loraWeightsOf(this.adapterName, this.lora);
  }

  loraModuleWeights(): LoraModuleWeights[] {
    return loraModuleWeightsOf(this.lora);
  }

  dispose(): void {
    disposeParams(this.params, this.spec.kind === 'lora' || this.spec.kind === 'adapter');
  }

  private checkBatch(batch: ClassificationBatch): void {
    const c = this.config;
    const { batch: B, seq: S } = batch;
    const fail = (m: string): never => {
      throw new TrainDataError('<batch>', 0, m);
    };
    if (!Number.isInteger(B) || !Number.isInteger(S) || B < 1 || S < 1) fail(`batch ${B} × seq ${S} must be positive integers`);
    if (S > c.maxPositions) fail(`seq ${S} exceeds the model's ${c.maxPositions} positions`);
    if (batch.tokens.length !== B * S || batch.mask.length !== B * S || batch.labels.length !== B) fail('tokens / mask must hold batch × seq values and labels batch');
    for (const t of batch.tokens) if (t < 0 || t >= c.vocabSize) fail(`token ${t} is outside the vocabulary [0, ${c.vocabSize})`);
    for (const y of batch.labels) if (y < 0 || y >= c.numLabels) fail(`label ${y} is outside [0, ${c.numLabels})`);
  }

  private run(batch: ClassificationBatch, mode: { grad: boolean; gradScale: number; train: boolean; logits?: boolean }): { result: LossResult; logits?: Float32Array } {
    this.checkBatch(batch);
    const c = this.config;
    const be = this.model.backend;
    const { batch: B, seq: S } = batch;
    const T = B * S;
    const H = c.hiddenSize;
    const nh = c.numHeads;
    const hd = H / nh;
    const eps = c.layerNormEps;
    const top = encoderTopModules(c);
    const gelu = c.hiddenAct === 'gelu' ? geluErf : geluTanh;
    const geluBackward = c.hiddenAct === 'gelu' ? geluErfBackward : geluTanhBackward;
    const scope = new Scope();
    try {
      const i32 = (a: Int32Array, shape: number[]) => scope.keep(Tensor.from(a, shape, { dtype: 'i32', backend: be }));
      const ids = i32(batch.tokens, [T]);
      const posHost = new Int32Array(T);
      for (let i = 0; i < T; i++) posHost[i] = i % S;
      const positions = i32(posHost, [T]);
      const types = i32(new Int32Array(T), [T]);
      const keyMask = scope.keep(Tensor.from(batch.mask, [B, S], { dtype: 'u8', backend: be }));
      const empty = (rows: number, cols: number) => scope.keep(Tensor.empty([rows, cols], 'f32', be));
      const heads = (t: Tensor) => scope.reshape(t, [B, S, nh, hd]);
      const wb = (m: string) => [this.w(`${m}.weight`), this.w(`${m}.bias`)] as const;
      const dropoutOn = mode.train && this.dropout > 0 && this.lora.size > 0;
      const dropout = dropoutOn ? { rng: new SplitMix32(streamState(this.seed, `lora_dropout/${this.dropoutDraws++}`)), p: this.dropout } : null;
      const proj = (x: Tensor, module: string, keep: Partial<Record<Site, LoraKeep>>, site: Site): Tensor => {
        const r = linearSiteForward(scope, x, ...wb(module), this.lora.get(module), dropout);
        if (r.keep) keep[site] = r.keep;
        return r.y;
      };

      const adapterAct = this.adapterConfig?.activation === 'gelu_tanh' ? geluTanh : geluErf;
      const adapterActBackward = this.adapterConfig?.activation === 'gelu_tanh' ? geluTanhBackward : geluErfBackward;
      /** H → H + act(H W_downᵀ + b_down) W_upᵀ + b_up, when an adapter follows the module. */
      const adapterForward = (module: string, x: Tensor): { y: Tensor; keep?: AdapterKeep } => {
        const p = this.adapters.get(module);
        if (!p) return { y: x };
        const z = scope.keep(linear(x, p.down.value, p.downBias.value));
        const act = scope.keep(adapterAct(z));
        const y = empty(T, H);
        linear(act, p.up.value, p.upBias.value, { out: y });
        add(y, x, { out: y });
        return { y, keep: { p, x, z, a: act } };
      };

      // ---------------------------------------------------------------- forward
      const e = empty(T, H);
      const tmp = empty(T, H);
      embedding(this.w(`${top.wordEmbeddings}.weight`), ids, { out: e });
      embedding(this.w(`${top.positionEmbeddings}.weight`), positions, { out: tmp });
      add(e, tmp, { out: e });
      embedding(this.w(`${top.tokenTypeEmbeddings}.weight`), types, { out: tmp });
      add(e, tmp, { out: e });
      let h = empty(T, H);
      layerNorm(e, ...wb(top.embeddingsNorm), { eps, out: h });
      const acts: LayerActs[] = [];
      for (let l = 0; l < c.numLayers; l++) {
        const lin = encoderLinearModules(c, l);
        const ln = encoderNormModules(c, l);
        const lora: Partial<Record<Site, LoraKeep>> = {};
        const q = proj(h, lin.query, lora, 'query');
        const k = proj(h, lin.key, lora, 'key');
        const v = proj(h, lin.value, lora, 'value');
        const attn = empty(T, H);
        attentionPrefill(heads(q), heads(k), heads(v), { keyMask, out: heads(attn) });
        const adapters: LayerActs['adapters'] = {};
        const ao = adapterForward(lin.attn_out, proj(attn, lin.attn_out, lora, 'attn_out'));
        if (ao.keep) adapters.attn_out = ao.keep;
        const s1 = ao.y;
        add(s1, h, { out: s1 });
        const h1 = empty(T, H);
        layerNorm(s1, ...wb(ln.attn_ln), { eps, out: h1 });
        const inner = proj(h1, lin.ffn_in, lora, 'ffn_in');
        const g = empty(T, c.intermediateSize);
        gelu(inner, { out: g });
        const fo = adapterForward(lin.ffn_out, proj(g, lin.ffn_out, lora, 'ffn_out'));
        if (fo.keep) adapters.ffn_out = fo.keep;
        const s2 = fo.y;
        add(s2, h1, { out: s2 });
        const hNext = empty(T, H);
        layerNorm(s2, ...wb(ln.ffn_ln), { eps, out: hNext });
        acts.push({ h, q, k, v, attn, s1, h1, inner, g, s2, lora, adapters });
        h = hNext;
      }
      const clsIdx = i32(Int32Array.from({ length: B }, (_, b) => b * S), [B]);
      const cls = scope.keep(gatherRows(h, clsIdx));
      const pooled = scope.keep(linear(cls, ...wb(top.pooler)));
      const pooledHost = pooled.toArray() as Float32Array;
      for (let i = 0; i < pooledHost.length; i++) pooledHost[i] = Math.tanh(pooledHost[i]!);
      pooled.write(pooledHost);
      const logits = scope.keep(linear(pooled, ...wb(top.classifier)));
      const logitsHost = mode.logits ? (logits.toArray() as Float32Array) : undefined;
      const labels = i32(batch.labels, [B]);
      const ce = crossEntropy(logits, labels, { reduction: 'sum', grad: mode.grad, gradScale: mode.gradScale, dlogits: logits });
      ce.losses.dispose();
      const out: { result: LossResult; logits?: Float32Array } = { result: { lossSum: ce.loss, count: ce.count } };
      if (logitsHost) out.logits = logitsHost;
      if (!mode.grad || this.params.length === 0) return out;

      // ---------------------------------------------------------------- backward
      const scratch = siteScratch(scope, T, Math.max(0, ...[...this.lora.values()].map((p) => p.r)), Math.max(H, c.intermediateSize), this.dropout > 0, be);
      const site = (module: string, x: Tensor, dy: Tensor, keep: LoraKeep | undefined, dx: Tensor | null, accumulateDx: boolean) =>
        linearSiteBackward({
          scope, scratch, x, weight: this.w(`${module}.weight`), dy, dWeight: this.gradOf(`${module}.weight`), dBias: this.gradOf(`${module}.bias`),
          keep, dx, accumulateDx,
        });
      const dlogits = logits;
      const stop = this.lowestLayer;
      const needPooled = stop < c.numLayers || this.gradOf(`${top.pooler}.weight`) !== null || this.gradOf(`${top.pooler}.bias`) !== null;
      const dpooled = needPooled ? empty(B, H) : null;
      site(top.classifier, pooled, dlogits, undefined, dpooled, false);
      if (!dpooled) return out;
      // tanh' = 1 - tanh², on the host like the forward's tanh.
      const dp = dpooled.toArray() as Float32Array;
      for (let i = 0; i < dp.length; i++) dp[i] = dp[i]! * (1 - pooledHost[i]! * pooledHost[i]!);
      dpooled.write(dp);
      const needCls = stop < c.numLayers;
      const dcls = needCls ? empty(B, H) : null;
      site(top.pooler, cls, dpooled, undefined, dcls, false);
      if (!dcls) return out;
      const dh = scope.keep(Tensor.zeros([T, H], 'f32', be));
      scatterRows(dcls, clsIdx, dh);

      const ds = empty(T, H);
      const dx = empty(T, H);
      const dattn = empty(T, H);
      const dg = empty(T, c.intermediateSize);
      const dq = empty(T, H);
      const dk = empty(T, H);
      const dv = empty(T, H);
      const dAdapter = this.adapters.size > 0 ? empty(T, H) : null;
      /** Adapter backward from dL/dY: parameter gradients, and dL/dH (into dAdapter, returned). */
      const adapterBackward = (k: AdapterKeep | undefined, dy: Tensor): Tensor => {
        if (!k) return dy;
        const { p, x, z, a: act } = k;
        gemm(dy, act, { transA: true, beta: 1, out: p.up.grad });
        columnSum(dy, { out: p.upBias.grad, accumulate: true });
        const dz = scope.keep(gemm(dy, p.up.value));
        adapterActBackward(z, dz, { out: dz });
        gemm(dz, x, { transA: true, beta: 1, out: p.down.grad });
        columnSum(dz, { out: p.downBias.grad, accumulate: true });
        gemm(dz, p.down.value, { out: dAdapter! });
        add(dAdapter!, dy, { out: dAdapter! });
        return dAdapter!;
      };
      const lnBackward = (x: Tensor, m: string, dy: Tensor, dxOut: Tensor | null) =>
        layerNormBackward(x, this.w(`${m}.weight`), dy, {
          eps, dx: dxOut, dgamma: this.gradOf(`${m}.weight`), dbeta: this.gradOf(`${m}.bias`), accumulate: true,
        });
      for (let l = c.numLayers - 1; l >= stop; l--) {
        const a = acts[l]!;
        const lin = encoderLinearModules(c, l);
        const ln = encoderNormModules(c, l);
        const needInput = l > stop || this.embedTrainable;
        lnBackward(a.s2, ln.ffn_ln, dh, ds); // dL/ds2: into ffn_out's output and the residual h1
        site(lin.ffn_out, a.g, adapterBackward(a.adapters.ffn_out, ds), a.lora.ffn_out, dg, false);
        geluBackward(a.inner, dg, { out: dg });
        site(lin.ffn_in, a.h1, dg, a.lora.ffn_in, ds, true); // dL/dh1 = ds2 + dinner W1
        lnBackward(a.s1, ln.attn_ln, ds, dh); // dL/ds1: into attn_out's output and the residual h
        site(lin.attn_out, a.attn, adapterBackward(a.adapters.attn_out, dh), a.lora.attn_out, dattn, false);
        attentionPrefillBackward(heads(a.q), heads(a.k), heads(a.v), heads(dattn), { keyMask, dq: heads(dq), dk: heads(dk), dv: heads(dv) });
        site(lin.query, a.h, dq, a.lora.query, needInput ? dh : null, true);
        site(lin.key, a.h, dk, a.lora.key, needInput ? dh : null, true);
        site(lin.value, a.h, dv, a.lora.value, needInput ? dh : null, true);
      }
      if (this.embedTrainable) {
        lnBackward(e, top.embeddingsNorm, dh, dx);
        const embed = (m: string, idx: Tensor, rows: number) => {
          const grad = this.gradOf(`${m}.weight`);
          if (grad) embeddingBackward(dx, idx, rows, { out: grad, accumulate: true });
        };
        embed(top.wordEmbeddings, ids, c.vocabSize);
        embed(top.positionEmbeddings, positions, c.maxPositions);
        embed(top.tokenTypeEmbeddings, types, c.typeVocabSize);
      }
      return out;
    } finally {
      scope.dispose();
    }
  }
}
