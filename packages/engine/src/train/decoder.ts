/**
 * Training the Llama-style decoder: a forward that keeps its activations and the explicit backward of every op
 * (llm.c style), on @tessera/native's backward kernels. The serving forward (models/decoder.ts) is untouched; this
 * one reads the same weights by the same names, runs a padded batch [batch, seq] with the causal prefill kernel
 * and no KV cache, and keeps per layer exactly what the backward kernels need (their inputs: the kernels
 * recompute norm statistics and attention probabilities).
 *
 * Forward per layer (T = batch·seq rows): h → x1 = RMSNorm(h) → q, k, v = x1 Wᵀ (+ LoRA) → RoPE(q, k) →
 * a = attention(q, k, v) (causal, key mask) → h2 = h + a Woᵀ → x2 = RMSNorm(h2) → g, u = x2 Wᵀ → m = silu(g)·u →
 * h' = h2 + m Wdᵀ; then RMSNorm and the LM head on every row, and cross-entropy against the shifted targets.
 * The backward walks the same ops in reverse, adding parameter gradients into the trainable params' buffers
 * (frozen weights get none) and stopping below the lowest layer that has anything to train.
 */
import {
  Tensor,
  add,
  attentionPrefill,
  attentionPrefillBackward,
  crossEntropy,
  embedding,
  embeddingBackward,
  gemm,
  linear,
  rmsNorm,
  rmsNormBackward,
  rope,
  ropeBackward,
  siluMul,
  siluMulBackward,
} from '@tessera/native';
import { SplitMix32, streamState } from '@tessera/core';
import type { DecoderConfig } from '../config.js';
import type { LoraWeights } from '../hooks/lora-delta.js';
import type { LoraModuleWeights } from '../formats/peft-writer.js';
import type { DecoderModel } from '../models/decoder.js';
import { decoderLinearModules, decoderNormModules, decoderTopModules } from '../models/names.js';
import { Scope } from '../models/scope.js';
import type { ModelWeights } from '../models/weights.js';
import { IGNORE_INDEX, type LmExample, causalLmBatch, countTargets } from './data.js';
import { TrainConfigError, TrainDataError } from './errors.js';
import type { LossResult, TrainableModel } from './trainable.js';
import { type LoraKeep, linearSiteBackward, linearSiteForward, siteScratch } from './linear-site.js';
import {
  DECODER_LINEAR_SITES,
  type LoraParams,
  type TrainParam,
  type TrainableSpec,
  baseParams,
  createLoraParams,
  decoderTrainableNames,
  disposeParams,
  loraModuleWeightsOf,
  loraWeightsOf,
  zeroGrads,
} from './params.js';

export { IGNORE_INDEX };

export type { LossResult };

/**
 * A padded causal-LM batch: `batch` rows of `seq` tokens, row-major. targets[i] is the token the model should
 * predict after tokens[i] (IGNORE_INDEX: none). Padding may be anything in `tokens` as long as its targets are
 * ignored and its `mask` entries are 0 (right padding; padding keys are never attended to).
 */
export interface LmBatch {
  batch: number;
  seq: number;
  tokens: Int32Array;
  targets: Int32Array;
  /** 1 for a real token, 0 for padding; absent: every token is real. */
  mask?: Uint8Array;
}


type Site = (typeof DECODER_LINEAR_SITES)[number];

interface LayerActs {
  h: Tensor; // layer input [T, H]
  x1: Tensor; // RMSNorm(h)
  q: Tensor; // after RoPE [T, qDim]
  k: Tensor; // after RoPE [T, kvDim]
  v: Tensor;
  attn: Tensor; // attention context [T, qDim]
  h2: Tensor; // h + o
  x2: Tensor; // RMSNorm(h2)
  gate: Tensor; // [T, F] pre-activation
  up: Tensor;
  act: Tensor; // silu(gate)·up
  lora: Partial<Record<Site, LoraKeep>>;
}

export interface TrainableDecoderOptions {
  /** Seeds LoRA's A initialisation and dropout masks (default 0). */
  seed?: number;
  /** Name of the LoRA adapter as `loraWeights()` reports it (default 'trained'). */
  adapterName?: string;
}

/**
 * A decoder with a trainable set: the model's weights (shared, not copied: full / layer / head training updates
 * them in place, so `model.forward` serves the trained weights) plus LoRA factors when the spec asks for them.
 */
export class TrainableDecoder implements TrainableModel<LmExample, LmBatch> {
  readonly model: DecoderModel;
  readonly config: DecoderConfig;
  readonly spec: TrainableSpec;
  /** Every trainable tensor, in a fixed order (checkpoint order, then LoRA A/B per module in forward order). */
  readonly params: TrainParam[];
  /** LoRA factors by module name (empty unless the spec is LoRA). */
  readonly lora: Map<string, LoraParams>;
  private readonly byName: Map<string, TrainParam>;
  private readonly dropout: number;
  private readonly seed: number;
  private readonly adapterName: string;
  /**
   * Training forwards run with dropout so far: pass n draws its masks from the (seed, `lora_dropout/n`) stream, so
   * a resumed run (which restores this count) draws the same masks as an uninterrupted one.
   */
  dropoutDraws = 0;
  /** Layers below this one have nothing trainable and the embeddings are frozen: the backward stops here. */
  private readonly lowestLayer: number;
  private readonly embedTrainable: boolean;

  constructor(model: DecoderModel, spec: TrainableSpec, options: TrainableDecoderOptions = {}) {
    this.model = model;
    this.config = model.config;
    this.spec = spec;
    this.seed = options.seed ?? 0;
    this.adapterName = options.adapterName ?? 'trained';
    const c = this.config;
    if (spec.kind === 'lora') {
      const modules: { module: string; inFeatures: number; outFeatures: number }[] = [];
      for (let l = 0; l < c.numLayers; l++) {
        const lin = decoderLinearModules(l);
        for (const site of DECODER_LINEAR_SITES) {
          const [outFeatures, inFeatures] = model.weights.get(`${lin[site]}.weight`).shape as [number, number];
          modules.push({ module: lin[site], inFeatures, outFeatures });
        }
      }
      this.lora = createLoraParams(modules, spec, this.seed, model.backend);
      this.params = [...this.lora.values()].flatMap((p) => [p.a, p.b]);
      this.dropout = spec.dropout ?? 0;
    } else if (spec.kind === 'adapter') {
      throw new TrainConfigError('bottleneck adapters (PetS layout) are an encoder PET; the decoder trains full, layers, head or LoRA');
    } else {
      this.lora = new Map();
      this.params = baseParams(model.weights, decoderTrainableNames(c, spec));
      this.dropout = 0;
    }
    this.byName = new Map(this.params.map((p) => [p.name, p]));
    this.embedTrainable = this.byName.has(`${decoderTopModules.embedTokens}.weight`) &&
      !(c.tieWordEmbeddings && spec.kind === 'head');
    let lowest = c.numLayers;
    for (let l = c.numLayers - 1; l >= 0; l--) {
      const lin = decoderLinearModules(l);
      const norm = decoderNormModules(l);
      const names = [...Object.values(lin), ...Object.values(norm)];
      if (names.some((m) => this.byName.has(`${m}.weight`) || this.lora.has(m))) lowest = l;
    }
    this.lowestLayer = this.embedTrainable ? 0 : lowest;
  }

  private get weights(): ModelWeights {
    return this.model.weights;
  }

  private w(name: string): Tensor {
    return this.weights.get(name);
  }

  /** The gradient buffer of a base tensor, or null when it is frozen. */
  private gradOf(name: string): Tensor | null {
    return this.byName.get(name)?.grad ?? null;
  }

  zeroGrad(): void {
    zeroGrads(this.params);
  }

  /** Right-pads causal-LM examples (padding: the first EOS id) into one batch. */
  collate(examples: readonly LmExample[]): LmBatch {
    return causalLmBatch(examples, this.config.eosTokenIds[0] ?? 0);
  }

  countTargets(batch: LmBatch): number {
    return countTargets(batch);
  }

  /**
   * Forward and backward of one batch: adds gradScale · ∂(Σ token losses)/∂θ into every trainable param's
   * gradient (call zeroGrad before the first micro-batch of a step; gradScale = 1 / tokens in the step gives the
   * mean over the step's tokens however it is split). Returns the summed loss and the counted tokens.
   */
  accumulateGradients(batch: LmBatch, gradScale: number): LossResult {
    return this.run(batch, { grad: true, gradScale, train: true });
  }

  /** The loss of a batch without gradients or dropout (evaluation). */
  loss(batch: LmBatch): LossResult {
    return this.run(batch, { grad: false, gradScale: 0, train: false });
  }

  /** The trained LoRA factors as LoraDelta serves them (live tensors). */
  loraWeights(): LoraWeights {
    if (this.lora.size === 0) throw new TrainConfigError('loraWeights: the trainable set is not LoRA');
    return loraWeightsOf(this.adapterName, this.lora);
  }

  /** The trained LoRA factors as host arrays for writeLoraAdapter. */
  loraModuleWeights(): LoraModuleWeights[] {
    return loraModuleWeightsOf(this.lora);
  }

  /** Frees gradients and LoRA factors (base weights belong to the model). */
  dispose(): void {
    disposeParams(this.params, this.spec.kind === 'lora');
  }

  private checkBatch(batch: LmBatch): void {
    const { batch: B, seq: S, tokens, targets, mask } = batch;
    const c = this.config;
    if (!Number.isInteger(B) || !Number.isInteger(S) || B < 1 || S < 1) throw new TrainDataError('<batch>', 0, `batch ${B} × seq ${S} must be positive integers`);
    if (S > c.maxPositions) throw new TrainDataError('<batch>', 0, `seq ${S} exceeds the model's ${c.maxPositions} positions`);
    const T = B * S;
    if (tokens.length !== T || targets.length !== T || (mask && mask.length !== T)) {
      throw new TrainDataError('<batch>', 0, `tokens, targets and mask must each hold batch × seq = ${T} values`);
    }
    for (let i = 0; i < T; i++) {
      const t = tokens[i]!;
      if (t < 0 || t >= c.vocabSize) throw new TrainDataError('<batch>', 0, `token ${t} at row ${Math.floor(i / S)}, position ${i % S} is outside the vocabulary [0, ${c.vocabSize})`);
      const y = targets[i]!;
      if (y !== IGNORE_INDEX && (y < 0 || y >= c.vocabSize)) {
        throw new TrainDataError('<batch>', 0, `target ${y} at row ${Math.floor(i / S)}, position ${i % S} is outside the vocabulary and not ${IGNORE_INDEX}`);
      }
    }
  }

  private run(batch: LmBatch, mode: { grad: boolean; gradScale: number; train: boolean }): LossResult {
    this.checkBatch(batch);
    const c = this.config;
    const be = this.model.backend;
    const { batch: B, seq: S } = batch;
    const T = B * S;
    const H = c.hiddenSize;
    const hd = c.headDim;
    const qDim = c.numHeads * hd;
    const kvDim = c.numKvHeads * hd;
    const scope = new Scope();
    try {
      const ids = scope.keep(Tensor.from(batch.tokens, [T], { dtype: 'i32', backend: be }));
      const targets = scope.keep(Tensor.from(batch.targets, [T], { dtype: 'i32', backend: be }));
      const posHost = new Int32Array(T);
      for (let i = 0; i < T; i++) posHost[i] = i % S;
      const positions = scope.keep(Tensor.from(posHost, [T], { dtype: 'i32', backend: be }));
      const keyMask = batch.mask ? scope.keep(Tensor.from(batch.mask, [B, S], { dtype: 'u8', backend: be })) : undefined;
      const empty = (cols: number) => scope.keep(Tensor.empty([T, cols], 'f32', be));
      const view = (t: Tensor, shape: number[]) => scope.reshape(t, shape);

      // ---------------------------------------------------------------- forward, keeping activations
      const dropoutOn = mode.train && this.dropout > 0 && this.lora.size > 0;
      const dropoutRng = dropoutOn ? new SplitMix32(streamState(this.seed, `lora_dropout/${this.dropoutDraws++}`)) : null;
      const dropout = dropoutRng ? { rng: dropoutRng, p: this.dropout } : null;
      const proj = (x: Tensor, module: string, keep: Partial<Record<Site, LoraKeep>>, site: Site): Tensor => {
        const r = linearSiteForward(scope, x, this.w(`${module}.weight`), undefined, this.lora.get(module), dropout);
        if (r.keep) keep[site] = r.keep;
        return r.y;
      };

      let h = empty(H);
      embedding(this.w(`${decoderTopModules.embedTokens}.weight`), ids, { out: h });
      const acts: LayerActs[] = [];
      for (let l = 0; l < c.numLayers; l++) {
        const lin = decoderLinearModules(l);
        const norm = decoderNormModules(l);
        const lora: Partial<Record<Site, LoraKeep>> = {};
        const x1 = empty(H);
        rmsNorm(h, this.w(`${norm.input_norm}.weight`), { eps: c.rmsNormEps, out: x1 });
        const q = proj(x1, lin.q, lora, 'q');
        const k = proj(x1, lin.k, lora, 'k');
        const v = proj(x1, lin.v, lora, 'v');
        rope(view(q, [T, c.numHeads, hd]), positions, { base: c.ropeTheta });
        rope(view(k, [T, c.numKvHeads, hd]), positions, { base: c.ropeTheta });
        const attn = empty(qDim);
        attentionPrefill(view(q, [B, S, c.numHeads, hd]), view(k, [B, S, c.numKvHeads, hd]), view(v, [B, S, c.numKvHeads, hd]),
          { causal: true, keyMask, out: view(attn, [B, S, c.numHeads, hd]) });
        const o = proj(attn, lin.o, lora, 'o');
        const h2 = empty(H);
        add(h, o, { out: h2 });
        const x2 = empty(H);
        rmsNorm(h2, this.w(`${norm.post_attn_norm}.weight`), { eps: c.rmsNormEps, out: x2 });
        const gate = proj(x2, lin.gate, lora, 'gate');
        const up = proj(x2, lin.up, lora, 'up');
        const act = empty(c.intermediateSize);
        siluMul(gate, up, { out: act });
        const down = proj(act, lin.down, lora, 'down');
        const hNext = empty(H);
        add(h2, down, { out: hNext });
        acts.push({ h, x1, q, k, v, attn, h2, x2, gate, up, act, lora });
        h = hNext;
      }
      const finalNorm = this.w(`${decoderTopModules.finalNorm}.weight`);
      const headName = c.tieWordEmbeddings ? `${decoderTopModules.embedTokens}.weight` : `${decoderTopModules.lmHead}.weight`;
      const xf = empty(H);
      rmsNorm(h, finalNorm, { eps: c.rmsNormEps, out: xf });
      const logits = scope.keep(linear(xf, this.w(headName)));
      const ce = crossEntropy(logits, targets, {
        ignoreIndex: IGNORE_INDEX, reduction: 'sum', grad: mode.grad, gradScale: mode.gradScale, dlogits: logits,
      });
      ce.losses.dispose();
      const result = { lossSum: ce.loss, count: ce.count };
      if (!mode.grad || this.params.length === 0) return result;
      const dlogits = logits; // in place

      // ---------------------------------------------------------------- backward
      const headGrad = this.gradOf(headName);
      if (headGrad) gemm(dlogits, xf, { transA: true, beta: 1, out: headGrad });
      const stop = this.lowestLayer;
      if (stop >= c.numLayers && !this.embedTrainable) {
        // Only the head (and perhaps the final norm) trains.
        if (this.gradOf(`${decoderTopModules.finalNorm}.weight`)) {
          const dxf = scope.keep(gemm(dlogits, this.w(headName)));
          rmsNormBackward(h, finalNorm, dxf, { eps: c.rmsNormEps, dx: null, dgamma: this.gradOf(`${decoderTopModules.finalNorm}.weight`), accumulate: true });
        }
        return result;
      }
      const dxf = scope.keep(gemm(dlogits, this.w(headName)));
      const dh = empty(H);
      rmsNormBackward(h, finalNorm, dxf, { eps: c.rmsNormEps, dx: dh, dgamma: this.gradOf(`${decoderTopModules.finalNorm}.weight`) ?? null, accumulate: true });

      const dx = empty(H);
      const tmpH = empty(H);
      const dact = empty(c.intermediateSize);
      const dgate = empty(c.intermediateSize);
      const dup = empty(c.intermediateSize);
      const dattn = empty(qDim);
      const dq = empty(qDim);
      const dk = empty(kvDim);
      const dv = empty(kvDim);
      const rMax = Math.max(0, ...[...this.lora.values()].map((p) => p.r));
      const scratch = siteScratch(scope, T, rMax, Math.max(H, c.intermediateSize, qDim), this.dropout > 0, be);
      const siteBackward = (module: string, x: Tensor, dy: Tensor, keep: LoraKeep | undefined, dxOut: Tensor | null, accumulateDx: boolean) =>
        linearSiteBackward({
          scope, scratch, x, weight: this.w(`${module}.weight`), dy, dWeight: this.gradOf(`${module}.weight`), dBias: null, keep, dx: dxOut, accumulateDx,
        });

      for (let l = c.numLayers - 1; l >= stop; l--) {
        const a = acts[l]!;
        const lin = decoderLinearModules(l);
        const norm = decoderNormModules(l);
        const needInput = l > stop || this.embedTrainable;
        // MLP: h' = h2 + down(silu(gate)·up); dh holds dL/dh'.
        siteBackward(lin.down, a.act, dh, a.lora.down, dact, false);
        siluMulBackward(a.gate, a.up, dact, { dgate, dup });
        siteBackward(lin.gate, a.x2, dgate, a.lora.gate, dx, false);
        siteBackward(lin.up, a.x2, dup, a.lora.up, dx, true);
        rmsNormBackward(a.h2, this.w(`${norm.post_attn_norm}.weight`), dx, {
          eps: c.rmsNormEps, dx: tmpH, dgamma: this.gradOf(`${norm.post_attn_norm}.weight`), accumulate: true,
        });
        add(dh, tmpH, { out: dh }); // dL/dh2
        // Attention: h2 = h + o(attn).
        siteBackward(lin.o, a.attn, dh, a.lora.o, dattn, false);
        attentionPrefillBackward(
          view(a.q, [B, S, c.numHeads, hd]), view(a.k, [B, S, c.numKvHeads, hd]), view(a.v, [B, S, c.numKvHeads, hd]),
          view(dattn, [B, S, c.numHeads, hd]),
          { causal: true, keyMask, dq: view(dq, [B, S, c.numHeads, hd]), dk: view(dk, [B, S, c.numKvHeads, hd]), dv: view(dv, [B, S, c.numKvHeads, hd]) },
        );
        ropeBackward(view(dq, [T, c.numHeads, hd]), positions, { base: c.ropeTheta });
        ropeBackward(view(dk, [T, c.numKvHeads, hd]), positions, { base: c.ropeTheta });
        // The lowest trained layer needs dx only for its input norm's gain (and not at all when that is frozen).
        const inputNormGrad = this.gradOf(`${norm.input_norm}.weight`);
        const needDx = needInput || inputNormGrad !== null;
        siteBackward(lin.q, a.x1, dq, a.lora.q, needDx ? dx : null, false);
        siteBackward(lin.k, a.x1, dk, a.lora.k, needDx ? dx : null, true);
        siteBackward(lin.v, a.x1, dv, a.lora.v, needDx ? dx : null, true);
        if (needDx) {
          rmsNormBackward(a.h, this.w(`${norm.input_norm}.weight`), dx, {
            eps: c.rmsNormEps, dx: needInput ? tmpH : null, dgamma: inputNormGrad, accumulate: true,
          });
          if (needInput) add(dh, tmpH, { out: dh }); // dL/dh
        }
      }
      if (this.embedTrainable) {
        embeddingBackward(dh, ids, c.vocabSize, { out: this.gradOf(`${decoderTopModules.embedTokens}.weight`)!, accumulate: true });
      }
      return result;
    } finally {
      scope.dispose();
    }
  }
}
