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
import {
  type ClassificationBatch,
  type ClassificationExample,
  IGNORE_INDEX,
  type MaskedLmBatch,
  type MaskedLmExample,
  classificationBatch,
  countTargets,
  maskedLmBatch,
} from './data.js';
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

/** Masked-LM settings (HF DataCollatorForLanguageModeling). */
export interface MaskedLmOptions {
  /** The tokenizer's [MASK] id. */
  maskTokenId: number;
  /** Ids never selected for masking ([CLS], [SEP], [PAD], …). */
  specialTokenIds: readonly number[];
  /** Share of tokens selected (default 0.15); of those 80 % become [MASK], 10 % a random token, 10 % stay. */
  probability?: number;
}

export interface TrainableEncoderOptions {
  /** Seeds LoRA's A initialisation, adapter init, dropout and MLM masks (default 0). */
  seed?: number;
  adapterName?: string;
  /** 'classification' (default; a BertForSequenceClassification) or 'masked-lm' (any BERT body, with a fresh MLM head). */
  task?: 'classification' | 'masked-lm';
  /** Required for 'masked-lm'. */
  maskedLm?: MaskedLmOptions;
}

function isClassificationHead(c: EncoderConfig, name: string): boolean {
  const top = encoderTopModules(c);
  return name.startsWith(`${top.pooler}.`) || name.startsWith(`${top.classifier}.`);
}

/** HF BertForMaskedLM's head: transform (dense, act, LayerNorm) and the output bias; the decoder is tied to the word embeddings. */
export function mlmHeadNames() {
  return {
    dense: { module: 'cls.predictions.transform.dense', weight: 'cls.predictions.transform.dense.weight', bias: 'cls.predictions.transform.dense.bias' },
    norm: { weight: 'cls.predictions.transform.LayerNorm.weight', bias: 'cls.predictions.transform.LayerNorm.bias' },
    bias: 'cls.predictions.bias',
  } as const;
}

export type EncoderExample = ClassificationExample | MaskedLmExample;
export type EncoderBatch = ClassificationBatch | MaskedLmBatch;

/**
 * A BERT-style encoder with a trainable set (see TrainableDecoder; same ownership rules), for sequence
 * classification or masked LM.
 */
export class TrainableEncoder implements TrainableModel<EncoderExample, EncoderBatch> {
  readonly model: EncoderModel;
  readonly config: EncoderConfig;
  readonly spec: TrainableSpec;
  readonly params: TrainParam[];
  readonly lora: Map<string, LoraParams>;
  dropoutDraws = 0;
  /** Training batches masked so far (MLM): batch n draws from the (seed, `mlm_mask/<n>`) stream. */
  maskDraws = 0;
  readonly task: 'classification' | 'masked-lm';
  private readonly maskedLm: MaskedLmOptions | null;
  /** Params whose values this object owns (LoRA, adapters, copies, the MLM head): freed by dispose. */
  private readonly owned: TrainParam[] = [];
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
    this.task = options.task ?? 'classification';
    this.maskedLm = options.maskedLm ?? null;
    if (this.task === 'classification' && c.architecture !== 'BertForSequenceClassification') {
      throw new TrainConfigError(`TrainableEncoder: sequence classification needs a BertForSequenceClassification, not a ${c.architecture}`);
    }
    if (this.task === 'masked-lm') {
      if (!this.maskedLm) throw new TrainConfigError('TrainableEncoder: masked LM needs maskedLm options (the [MASK] id and the special ids)');
      const prob = this.maskedLm.probability ?? 0.15;
      if (!(prob > 0 && prob < 1)) throw new TrainConfigError(`masked LM probability must be in (0, 1), got ${prob}`);
      if (spec.kind === 'adapter') throw new TrainConfigError('adapter sets are classification PETs (PetS layout); masked LM trains full, layers, head, BitFit or LoRA');
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
      // For masked LM, 'head' is the MLM head alone, and no set includes the (unused) pooler and classifier.
      const names = this.task === 'masked-lm' && spec.kind === 'head' ? []
        : encoderTrainableNames(c, spec).filter((n) => this.task === 'classification' || !isClassificationHead(c, n));
      this.params = baseParams(model.weights, names);
      this.dropout = 0;
    }
    if (spec.kind === 'lora' || spec.kind === 'adapter') this.owned.push(...this.params);
    if (spec.kind === 'adapter') for (const p of this.params) this.own.set(p.name, p.value);
    if (this.task === 'masked-lm') {
      const head = this.createMlmHead();
      this.params.push(...head);
      this.owned.push(...head);
      for (const p of head) this.own.set(p.name, p.value);
    }
    this.byName = new Map(this.params.map((p) => [p.name, p]));
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
  readonly adapterConfig: {
    bottleneck: number; activation: 'gelu' | 'gelu_tanh'; taskNorms: boolean; from: number; to: number; sites: ('attn_out' | 'ffn_out')[];
  } | null = null;

  /** Whether the adapters are PetS's layout: both sites of every layer. */
  get petsLayout(): boolean {
    const a = this.adapterConfig;
    return !!a && a.from === 0 && a.to === this.config.numLayers && a.sites.length === 2;
  }

  /**
   * HMI's (vBERT's) flat per-layer adapter vectors, [W_down (m·h) | b_down (m) | W_up (h·m) | b_up (h)] in f32, for
   * an adapter set with one adapter per layer (sites ['attn_out'], HMI's placement after the attention sub-layer).
   * The task head is `classifier.weight` / `classifier.bias` of `params`.
   */
  hmiAdapters(): { layer: number; data: Float32Array }[] {
    const a = this.adapterConfig;
    if (!a || a.sites.length !== 1 || a.sites[0] !== 'attn_out') throw new TrainConfigError("hmiAdapters: needs an adapter set with sites ['attn_out'] (one adapter per layer)");
    const out: { layer: number; data: Float32Array }[] = [];
    for (let l = a.from; l < a.to; l++) {
      const p = this.adapters.get(encoderLinearModules(this.config, l).attn_out)!;
      const parts = [p.down, p.downBias, p.up, p.upBias].map((t) => t.value.toArray() as Float32Array);
      const data = new Float32Array(parts.reduce((n, x) => n + x.length, 0));
      let o = 0;
      for (const x of parts) {
        data.set(x, o);
        o += x.length;
      }
      out.push({ layer: l, data });
    }
    return out;
  }

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
    const from = spec.layers?.from ?? 0;
    const to = spec.layers?.to ?? c.numLayers;
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from >= to || to > c.numLayers) {
      throw new TrainConfigError(`adapter layers [${from}, ${to}) are not a non-empty range within [0, ${c.numLayers})`);
    }
    const sites = [...(spec.sites ?? ['attn_out', 'ffn_out'])];
    if (sites.length === 0 || sites.some((x) => x !== 'attn_out' && x !== 'ffn_out') || new Set(sites).size !== sites.length) {
      throw new TrainConfigError(`adapter sites must be a non-empty subset of attn_out, ffn_out, got ${JSON.stringify(spec.sites)}`);
    }
    (this as { adapterConfig: TrainableEncoder['adapterConfig'] }).adapterConfig = { bottleneck: m, activation, taskNorms, from, to, sites };
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
    for (let l = from; l < to; l++) {
      const lin = encoderLinearModules(c, l);
      for (const module of sites.map((x) => lin[x])) {
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

  /** The masked-LM head's params (`cls.predictions.*`; empty for classification). */
  headParams(): TrainParam[] {
    return this.params.filter((p) => p.name.startsWith('cls.predictions.'));
  }

  /** A fresh MLM head (BertForMaskedLM init: dense uniform with std 0.02, LayerNorm 1 / 0, biases 0). */
  private createMlmHead(): TrainParam[] {
    const be = this.model.backend;
    const h = this.config.hiddenSize;
    const names = mlmHeadNames();
    const param = (name: string, data: Float32Array, shape: number[]): TrainParam =>
      ({ name, value: Tensor.from(data, shape, { backend: be }), grad: Tensor.zeros(shape, 'f32', be), decay: shape.length >= 2 });
    return [
      param(names.dense.weight, uniformWithStd(h * h, this.seed, names.dense.weight, 0.02), [h, h]),
      param(names.dense.bias, new Float32Array(h), [h]),
      param(names.norm.weight, new Float32Array(h).fill(1), [h]),
      param(names.norm.bias, new Float32Array(h), [h]),
      param(names.bias, new Float32Array(this.config.vocabSize), [this.config.vocabSize]),
    ];
  }

  /**
   * The trained adapter task in PetS's PET file layout (pet-ops LAYOUTS.md, pet_type 'adapter'): tensors by name,
   * and the metadata a PET file carries.
   */
  petParams(): { metadata: Record<string, string>; tensors: Map<string, { shape: number[]; data: Float32Array }> } {
    const cfg = this.adapterConfig;
    if (!cfg) throw new TrainConfigError('petParams: the trainable set is not adapters');
    if (!this.petsLayout) {
      throw new TrainConfigError(`petParams: PetS's layout has adapters after both sites of every layer; this set has ${JSON.stringify(cfg.sites)} in layers [${cfg.from}, ${cfg.to})`);
    }
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

  /**
   * Classification: right-padded examples. Masked LM: examples masked as HF's collator does (training batches draw
   * fresh masks from the seeded stream; evaluation batches get the same masks every time).
   */
  collate(examples: readonly EncoderExample[], mode: 'train' | 'eval' = 'train'): EncoderBatch {
    if (this.task === 'classification') return classificationBatch(examples as ClassificationExample[], this.config.padTokenId);
    const m = this.maskedLm!;
    const stream = mode === 'train' ? `mlm_mask/${this.maskDraws++}` : `mlm_eval/${examples.map((e) => e.line).join(',')}`;
    return maskedLmBatch(examples as MaskedLmExample[], {
      padId: this.config.padTokenId, maskTokenId: m.maskTokenId, specialTokenIds: m.specialTokenIds, vocabSize: this.config.vocabSize,
      probability: m.probability ?? 0.15, rng: new SplitMix32(streamState(this.seed, stream)),
    });
  }

  countTargets(batch: EncoderBatch): number {
    return 'labels' in batch ? batch.batch : countTargets(batch);
  }

  accumulateGradients(batch: EncoderBatch, gradScale: number): LossResult {
    return this.run(batch, { grad: true, gradScale, train: true }).result;
  }

  loss(batch: EncoderBatch): LossResult {
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
    disposeParams(this.params, false);
    for (const p of this.owned) p.value.dispose();
  }

  private checkBatch(batch: EncoderBatch): void {
    const c = this.config;
    const { batch: B, seq: S } = batch;
    const fail = (m: string): never => {
      throw new TrainDataError('<batch>', 0, m);
    };
    if (!Number.isInteger(B) || !Number.isInteger(S) || B < 1 || S < 1) fail(`batch ${B} × seq ${S} must be positive integers`);
    if (S > c.maxPositions) fail(`seq ${S} exceeds the model's ${c.maxPositions} positions`);
    if (batch.tokens.length !== B * S || batch.mask.length !== B * S) fail('tokens and mask must hold batch × seq values');
    for (const t of batch.tokens) if (t < 0 || t >= c.vocabSize) fail(`token ${t} is outside the vocabulary [0, ${c.vocabSize})`);
    if ('labels' in batch) {
      if (this.task !== 'classification') fail('a classification batch for a masked-LM trainable');
      if (batch.labels.length !== B) fail('labels must hold batch values');
      for (const y of batch.labels) if (y < 0 || y >= c.numLabels) fail(`label ${y} is outside [0, ${c.numLabels})`);
    } else {
      if (this.task !== 'masked-lm') fail('a masked-LM batch for a classification trainable');
      if (batch.targets.length !== B * S) fail('targets must hold batch × seq values');
      for (const y of batch.targets) if (y !== IGNORE_INDEX && (y < 0 || y >= c.vocabSize)) fail(`target ${y} is outside the vocabulary and not ${IGNORE_INDEX}`);
    }
  }

  private run(batch: EncoderBatch, mode: { grad: boolean; gradScale: number; train: boolean; logits?: boolean }): { result: LossResult; logits?: Float32Array } {
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
      const stop = this.lowestLayer;
      const needBody = stop < c.numLayers;
      let out: { result: LossResult; logits?: Float32Array };
      /** The head's backward: its parameter gradients, and dL/dh of the last layer's output (null: nothing below trains). */
      let headBackward: () => Tensor | null;
      if ('labels' in batch) {
        const clsIdx = i32(Int32Array.from({ length: B }, (_, b) => b * S), [B]);
        const cls = scope.keep(gatherRows(h, clsIdx));
        const pooled = scope.keep(linear(cls, ...wb(top.pooler)));
        const pooledHost = pooled.toArray() as Float32Array;
        for (let i = 0; i < pooledHost.length; i++) pooledHost[i] = Math.tanh(pooledHost[i]!);
        pooled.write(pooledHost);
        const logits = scope.keep(linear(pooled, ...wb(top.classifier)));
        const logitsHost = mode.logits ? (logits.toArray() as Float32Array) : undefined;
        const ce = crossEntropy(logits, i32(batch.labels, [B]), { reduction: 'sum', grad: mode.grad, gradScale: mode.gradScale, dlogits: logits });
        ce.losses.dispose();
        out = { result: { lossSum: ce.loss, count: ce.count } };
        if (logitsHost) out.logits = logitsHost;
        headBackward = () => {
          const needPooled = needBody || this.gradOf(`${top.pooler}.weight`) !== null || this.gradOf(`${top.pooler}.bias`) !== null;
          const dpooled = needPooled ? empty(B, H) : null;
          site(top.classifier, pooled, logits, undefined, dpooled, false);
          if (!dpooled) return null;
          // tanh' = 1 - tanh², on the host like the forward's tanh.
          const dp = dpooled.toArray() as Float32Array;
          for (let i = 0; i < dp.length; i++) dp[i] = dp[i]! * (1 - pooledHost[i]! * pooledHost[i]!);
          dpooled.write(dp);
          const dcls = needBody ? empty(B, H) : null;
          site(top.pooler, cls, dpooled, undefined, dcls, false);
          if (!dcls) return null;
          const dh = scope.keep(Tensor.zeros([T, H], 'f32', be));
          scatterRows(dcls, clsIdx, dh);
          return dh;
        };
      } else {
        // Masked LM: only the masked rows go through the head (the loss is the same as over every row).
        const rows: number[] = [];
        const targetsHost: number[] = [];
        batch.targets.forEach((y, i) => {
          if (y !== IGNORE_INDEX) {
            rows.push(i);
            targetsHost.push(y);
          }
        });
        const n = rows.length;
        if (n === 0) return { result: { lossSum: 0, count: 0 } };
        const idx = i32(Int32Array.from(rows), [n]);
        const xm = scope.keep(gatherRows(h, idx));
        const names = mlmHeadNames();
        const t1 = scope.keep(linear(xm, this.w(names.dense.weight), this.w(names.dense.bias)));
        const t2 = scope.keep(gelu(t1));
        const t3 = scope.keep(layerNorm(t2, this.w(names.norm.weight), this.w(names.norm.bias), { eps }));
        const word = this.w(`${top.wordEmbeddings}.weight`);
        const logits = scope.keep(linear(t3, word, this.w(names.bias)));
        const ce = crossEntropy(logits, i32(Int32Array.from(targetsHost), [n]), { reduction: 'sum', grad: mode.grad, gradScale: mode.gradScale, dlogits: logits });
        ce.losses.dispose();
        out = { result: { lossSum: ce.loss, count: ce.count } };
        headBackward = () => {
          // The decoder is the word embedding matrix (tied, as in BertForMaskedLM) plus its own bias.
          const wordGrad = this.gradOf(`${top.wordEmbeddings}.weight`);
          if (wordGrad) gemm(logits, t3, { transA: true, beta: 1, out: wordGrad });
          columnSum(logits, { out: this.gradOf(names.bias)!, accumulate: true });
          const dt3 = scope.keep(gemm(logits, word));
          const dt2 = empty(n, H);
          layerNormBackward(t2, this.w(names.norm.weight), dt3, {
            eps, dx: dt2, dgamma: this.gradOf(names.norm.weight), dbeta: this.gradOf(names.norm.bias), accumulate: true,
          });
          geluBackward(t1, dt2, { out: dt2 });
          const dxm = needBody ? empty(n, H) : null;
          site(names.dense.module, xm, dt2, undefined, dxm, false);
          if (!dxm) return null;
          const dh = scope.keep(Tensor.zeros([T, H], 'f32', be));
          scatterRows(dxm, idx, dh);
          return dh;
        };
      }
      if (!mode.grad || this.params.length === 0) return out;

      // ---------------------------------------------------------------- backward
      const scratch = siteScratch(scope, T, Math.max(0, ...[...this.lora.values()].map((p) => p.r)), Math.max(H, c.intermediateSize), this.dropout > 0, be);
      const site = (module: string, x: Tensor, dy: Tensor, keep: LoraKeep | undefined, dx: Tensor | null, accumulateDx: boolean) =>
        linearSiteBackward({
          scope, scratch, x, weight: this.w(`${module}.weight`), dy, dWeight: this.gradOf(`${module}.weight`), dBias: this.gradOf(`${module}.bias`),
          keep, dx, accumulateDx,
        });
      const dh = headBackward();
      if (!dh) return out;

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
