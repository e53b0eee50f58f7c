/**
 * The BERT-style encoder family (BertModel / BertForSequenceClassification), on native ops.
 *
 * Data path of one forward: token ids of every sequence packed into rows (no padding: ragged sequences cost only
 * their own tokens) → embeddings (word + position + token type, LayerNorm) → per layer: q/k/v linears [site qkv]
 * → attention per sequence → attention.output.dense [site attn_out] → residual + LayerNorm [site attn_ln] →
 * intermediate.dense [site ffn_in] → GELU → output.dense [site ffn_out] → residual + LayerNorm [site ffn_ln] →
 * pooler (tanh(dense(CLS row))) → classifier.
 *
 * The forward is a composition of stages: `prepare` (validate, lay out rows, scratch) → `embed` → `layers(0, L)` →
 * `head` (pooler and classifier). Each stage is public: HMI supplies a looked-up hidden state and runs only
 * `layers(N, L)`, and a delta may wait at a layer boundary (`layersAsync`).
 */
import { type Backend, InvalidArgumentError, Tensor, add, cast, attentionPrefill, embedding, gatherRows, geluErf, geluTanh, getBackend, layerNorm, linear } from '@tessera/native';
import type { EncoderConfig } from '../config.js';
import { SegmentLayout } from '../hooks/segment-layout.js';
import type { AttentionPrefix, ModelDelta, SiteOutput } from '../hooks/sites.js';
import { runBeforeLayerHooks, runBeforeLayerHooksAsync, runLinearHooks, runNormHooks } from './hook-runner.js';
import { encoderLinearModules, encoderNormModules, encoderTensorShapes, encoderTopModules } from './names.js';
import { Scope, withScope } from './scope.js';
import { ModelWeights, type TensorSource } from './weights.js';

export interface EncoderSequence {
  /** Token ids, including [CLS]/[SEP] (as the tokenizer's template adds them). */
  ids: ArrayLike<number>;
  /** Token type ids (segment A = 0, B = 1); default all 0. */
  tokenTypes?: ArrayLike<number>;
  /** Tenant/adapter key of this sequence for the SegmentLayout (null or absent: the base model). */
  key?: string | null;
  /**
   * Position id of the first token; default 0. HMI's window mode runs a tri-gram without its PAD slots and keeps
   * the centre at local position 1, so `(PAD, c, r)` runs `[c, r]` from position 1. offset + length ≤ maxPositions.
   */
  positionOffset?: number;
}

/** How one batch is laid out and which deltas it runs with. */
export interface EncoderBatchOptions {
  /** Multi-tenant deltas called at every hook site, in order. */
  deltas?: readonly ModelDelta[];
  /** Use this layout instead of grouping the sequences' keys (a batcher that already built one passes it). */
  layout?: SegmentLayout;
  /**
   * Lay the batch out padded, as dense-batch engines (TurboTransformers, PetS) do: every sequence occupies
   * `padTo` rows, its tokens first, then pad tokens. The linear sites run over all rows (the cost of padding);
   * attention reads only each sequence's own tokens, so a sequence's results do not depend on `padTo`. Default:
   * packed (each sequence occupies exactly its tokens).
   */
  padTo?: number;
}

export interface EncoderForwardOptions extends EncoderBatchOptions {
  /** Which results to return; default: hidden states and, for a classification model, pooled output and logits. */
  outputs?: { hidden?: boolean; pooled?: boolean; logits?: boolean };
}

/** What `head` computes: the pooled [CLS] rows and/or the classifier's logits. */
export interface EncoderHeadOutput {
  /** f32 [batch, hidden]: tanh(pooler(CLS row)). */
  pooled?: Tensor;
  /** f32 [batch, numLabels]. */
  logits?: Tensor;
}

/** Scratch of one batch, reused by every layer. */
interface EncoderBatchWork {
  readonly scope: Scope;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly qkvOut: Tensor;
  /** qkvOut viewed as [3·rows, hidden]: row 3t is token t's q, 3t + 1 its k, 3t + 2 its v. */
  readonly qkvRows: Tensor;
  readonly split: { readonly q: Tensor; readonly k: Tensor; readonly v: Tensor };
  readonly attn: Tensor;
  readonly attnOut: Tensor;
  readonly inter: Tensor;
  readonly ffn: Tensor;
  readonly sum: Tensor;
  /** Per-sequence views for attention: its own tokens only, never pad rows. */
  readonly seqViews: readonly SequenceViews[];
  readonly prefixDeltas: readonly ModelDelta[];
  /** The deltas that define beforeLayer (empty: no boundary calls, the common case). */
  readonly boundaryDeltas: readonly ModelDelta[];
}

interface SequenceViews {
  readonly b: number;
  readonly o: number;
  readonly len: number;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  readonly ctx: Tensor;
  readonly rows: { readonly q: Tensor; readonly k: Tensor; readonly v: Tensor; readonly ctx: Tensor };
}

/**
 * One encoder batch, prepared once (`EncoderModel.prepare`) and run by `embed`, `layers` (whole, in pieces, or
 * from layer N on a supplied hidden state) and `head`. `dispose()` frees its scratch; `layout` stays the caller's.
 */
export class EncoderBatchContext {
  readonly sequences: readonly EncoderSequence[];
  /** Row offset of each sequence (length batch + 1); with `padTo`, sequence b starts at b · padTo. */
  readonly offsets: Int32Array;
  /** Rows of the batch (tokens, or batch · padTo when padded). */
  readonly rows: number;
  readonly padTo: number | undefined;
  readonly layout: SegmentLayout;
  readonly deltas: readonly ModelDelta[];
  /** @internal */
  readonly model: EncoderModel;
  /** @internal */
  readonly work: EncoderBatchWork;
  private isDisposed = false;

  /** @internal Built by EncoderModel.prepare. */
  constructor(init: {
    model: EncoderModel; sequences: readonly EncoderSequence[]; offsets: Int32Array; padTo: number | undefined;
    layout: SegmentLayout; deltas: readonly ModelDelta[]; work: EncoderBatchWork;
  }) {
    this.model = init.model;
    this.sequences = init.sequences;
    this.offsets = init.offsets;
    this.rows = init.offsets[init.sequences.length]!;
    this.padTo = init.padTo;
    this.layout = init.layout;
    this.deltas = init.deltas;
    this.work = init.work;
  }

  get disposed(): boolean {
    return this.isDisposed;
  }

  /** Frees the scratch. Idempotent. */
  dispose(): void {
    if (this.isDisposed) return;
    this.isDisposed = true;
    this.work.scope.dispose();
  }
}

export interface EncoderOutput {
  /** f32 [totalTokens, hidden]: the last layer's output, rows packed per sequence. */
  hidden?: Tensor;
  /** Row offset of each sequence in `hidden` (length batch + 1); with `padTo`, sequence b starts at b · padTo. */
  offsets: Int32Array;
  /** f32 [batch, hidden]: tanh(pooler(CLS row)). */
  pooled?: Tensor;
  /** f32 [batch, numLabels]. */
  logits?: Tensor;
  /** The layout the hooks saw. */
  layout: SegmentLayout;
}

/**
 * Padded, HF-style input (input_ids + attention_mask, and token_type_ids for sentence pairs) turned into ragged
 * sequences: mask-0 positions are dropped from every row given.
 */
export function unpadBatch(
  inputIds: readonly ArrayLike<number>[],
  attentionMask: readonly ArrayLike<number>[],
  tokenTypeIds?: readonly ArrayLike<number>[],
): EncoderSequence[] {
  if (inputIds.length !== attentionMask.length) {
    throw new InvalidArgumentError(`unpadBatch: ${inputIds.length} rows of input_ids but ${attentionMask.length} rows of attention_mask`);
  }
  if (tokenTypeIds !== undefined && tokenTypeIds.length !== inputIds.length) {
    throw new InvalidArgumentError(`unpadBatch: ${inputIds.length} rows of input_ids but ${tokenTypeIds.length} rows of token_type_ids`);
  }
  return inputIds.map((ids, b) => {
    const mask = attentionMask[b]!;
    if (mask.length !== ids.length) throw new InvalidArgumentError(`unpadBatch: row ${b} has ${ids.length} ids but ${mask.length} mask entries`);
    const types = tokenTypeIds?.[b];
    if (types !== undefined && types.length !== ids.length) {
      throw new InvalidArgumentError(`unpadBatch: row ${b} has ${ids.length} ids but ${types.length} token type ids`);
    }
    const kept: number[] = [];
    const keptTypes: number[] = [];
    for (let i = 0; i < ids.length; i++) {
      if (!mask[i]) continue;
      kept.push(ids[i]!);
      if (types !== undefined) keptTypes.push(types[i]!);
    }
    return types === undefined ? { ids: kept } : { ids: kept, tokenTypes: keptTypes };
  });
}

export class EncoderModel {
  readonly config: EncoderConfig;
  readonly weights: ModelWeights;
  readonly backend: Backend;

  constructor(config: EncoderConfig, weights: ModelWeights) {
    this.config = config;
    this.weights = weights;
    this.backend = weights.backend;
    if (config.hiddenSize % config.numHeads !== 0) {
      throw new InvalidArgumentError(`EncoderModel: hidden size ${config.hiddenSize} is not divisible by ${config.numHeads} heads`);
    }
  }

  /** Loads the weights the config implies from a tensor source (a safetensors file or model directory). */
  static fromSource(config: EncoderConfig, source: TensorSource, backend: Backend = getBackend()): EncoderModel {
    return new EncoderModel(config, ModelWeights.load(source, encoderTensorShapes(config), backend));
  }

  private w(name: string): Tensor {
    return this.weights.get(name);
  }

  /** Per layer: the fused [3·hidden, hidden] q/k/v weight and [3·hidden] bias, and the tensors they were built from. */
  private readonly fused: ({ weight: Tensor; bias: Tensor; parts: Tensor[] } | undefined)[] = [];

  /**
   * The layer's q, k and v projections as one weight. Built on first use by copying the three into one tensor;
   * the weights map then holds row views of it under the HF names, so an in-place update of a projection (a LoRA
   * merge) writes through. If a projection is later replaced by another tensor, the fused copy is rebuilt.
   */
  private fusedQkv(layer: number): { weight: Tensor; bias: Tensor } {
    const lin = encoderLinearModules(this.config, layer);
    const names = [lin.query, lin.key, lin.value].flatMap((m) => [`${m}.weight`, `${m}.bias`]);
    const current = names.map((n) => this.w(n));
    const cached = this.fused[layer];
    if (cached && cached.parts.every((t, i) => t === current[i] && !t.disposed)) return cached;
    const H = this.config.hiddenSize;
    const ws = [current[0]!, current[2]!, current[4]!];
    const dtype = ws.every((w) => w.dtype === ws[0]!.dtype) ? ws[0]!.dtype : 'f32';
    const weight = Tensor.empty([3 * H, H], dtype, this.backend);
    const bias = Tensor.empty([3 * H], 'f32', this.backend);
    const parts: Tensor[] = [];
    for (let i = 0; i < 3; i++) {
      const wView = weight.rows(i * H, H);
      const bView = bias.rows(i * H, H);
      cast(current[2 * i]!, dtype, { out: wView });
      cast(current[2 * i + 1]!, 'f32', { out: bView });
      for (const [j, view] of [[2 * i, wView], [2 * i + 1, bView]] as const) {
        this.weights.tensors.set(names[j]!, view);
        current[j]!.dispose();
        parts[j] = view;
      }
    }
    cached?.weight.dispose();
    cached?.bias.dispose();
    const entry = { weight, bias, parts };
    this.fused[layer] = entry;
    return entry;
  }

  /** One whole batch: prepare → embed → layers(0, L) → head. Synchronous; see forwardAsync. */
  forward(sequences: readonly EncoderSequence[], options: EncoderForwardOptions = {}): EncoderOutput {
    const want = this.wanted(options);
    const ctx = this.prepare(sequences, options);
    try {
      const h = ctx.work.scope.keep(this.embed(ctx));
      this.layers(0, this.config.numLayers, h, ctx);
      return this.finish(h, ctx, want);
    } finally {
      ctx.dispose();
    }
  }

  /** forward, awaiting every delta's beforeLayer(j) (e.g. until layer j's adapters are resident). */
  async forwardAsync(sequences: readonly EncoderSequence[], options: EncoderForwardOptions = {}): Promise<EncoderOutput> {
    const want = this.wanted(options);
    const ctx = this.prepare(sequences, options);
    try {
      const h = ctx.work.scope.keep(this.embed(ctx));
      await this.layersAsync(0, this.config.numLayers, h, ctx);
      return this.finish(h, ctx, want);
    } finally {
      ctx.dispose();
    }
  }

  private wanted(options: EncoderForwardOptions): { hidden: boolean; pooled: boolean; logits: boolean } {
    const c = this.config;
    const isClassifier = c.architecture === 'BertForSequenceClassification';
    const want = {
      hidden: options.outputs?.hidden ?? true,
      pooled: options.outputs?.pooled ?? isClassifier,
      logits: options.outputs?.logits ?? isClassifier,
    };
    if ((want.pooled || want.logits) && !isClassifier) {
      throw new InvalidArgumentError(`EncoderModel: a ${c.architecture} has no pooler or classifier; ask for hidden states only`);
    }
    return want;
  }

  /** `h` is in the batch's scope: released to the caller only when hidden states are asked for. */
  private finish(h: Tensor, ctx: EncoderBatchContext, want: { hidden: boolean; pooled: boolean; logits: boolean }): EncoderOutput {
    const result: EncoderOutput = { offsets: ctx.offsets, layout: ctx.layout };
    if (want.pooled || want.logits) {
      const { pooled, logits } = this.head(h, ctx, { pooled: want.pooled, logits: want.logits });
      if (pooled) result.pooled = pooled;
      if (logits) result.logits = logits;
    }
    if (want.hidden) result.hidden = ctx.work.scope.release(h);
    return result;
  }

  /** Validates a batch (ids, lengths, padTo, layout), lays its rows out and allocates its scratch. The caller disposes it. */
  prepare(sequences: readonly EncoderSequence[], options: EncoderBatchOptions = {}): EncoderBatchContext {
    const c = this.config;
    const H = c.hiddenSize;
    const nh = c.numHeads;
    const hd = H / nh;
    const deltas = options.deltas ?? [];

    // Pack the sequences' rows and check ids before any native work.
    const padTo = options.padTo;
    if (padTo !== undefined && (!Number.isInteger(padTo) || padTo < 1 || padTo > c.maxPositions)) {
      throw new InvalidArgumentError(`EncoderModel: padTo = ${padTo} is not an integer in [1, ${c.maxPositions}]`);
    }
    const offsets = new Int32Array(sequences.length + 1);
    sequences.forEach((s, b) => {
      if (s.ids.length === 0) throw new InvalidArgumentError(`EncoderModel: sequence ${b} is empty`);
      if (s.ids.length > c.maxPositions) {
        throw new InvalidArgumentError(`EncoderModel: sequence ${b} has ${s.ids.length} tokens, more than the ${c.maxPositions} positions of the model`);
      }
      const off = s.positionOffset ?? 0;
      if (!Number.isInteger(off) || off < 0 || off + s.ids.length > c.maxPositions) {
        throw new InvalidArgumentError(
          `EncoderModel: sequence ${b} has positionOffset ${off} and ${s.ids.length} tokens; the offset must be an integer ≥ 0 with offset + tokens ≤ the ${c.maxPositions} positions of the model`,
        );
      }
      if (s.tokenTypes && s.tokenTypes.length !== s.ids.length) {
        throw new InvalidArgumentError(`EncoderModel: sequence ${b} has ${s.ids.length} ids but ${s.tokenTypes.length} token types`);
      }
      if (padTo !== undefined && s.ids.length > padTo) {
        throw new InvalidArgumentError(`EncoderModel: sequence ${b} has ${s.ids.length} tokens, more than padTo = ${padTo}`);
      }
      offsets[b + 1] = offsets[b]! + (padTo ?? s.ids.length);
    });
    const T = offsets[sequences.length]!;
    const layout =
      options.layout ?? SegmentLayout.fromRowKeys(sequences.flatMap((s, b) => Array<string | null>(offsets[b + 1]! - offsets[b]!).fill(s.key ?? null)));
    if (layout.rows !== T) throw new InvalidArgumentError(`EncoderModel: layout covers ${layout.rows} rows but the batch has ${T} tokens`);

    const scope = new Scope();
    const be = this.backend;
    try {
      const q = scope.keep(Tensor.empty([T, H], 'f32', be));
      const k = scope.keep(Tensor.empty([T, H], 'f32', be));
      const v = scope.keep(Tensor.empty([T, H], 'f32', be));
      const qkvOut = scope.keep(Tensor.empty([T, 3 * H], 'f32', be));
      const splitIdx = (part: number) => scope.keep(Tensor.from(Int32Array.from({ length: T }, (_, t) => 3 * t + part), [T], { backend: be }));
      const attn = scope.keep(Tensor.empty([T, H], 'f32', be));
      // Pad rows are never written by attention; zeros keep them finite through the layers. Only they are written.
      if (padTo !== undefined) {
        const zeros = new Float32Array(Math.max(0, ...sequences.map((s) => padTo - s.ids.length)) * H);
        sequences.forEach((s, b) => {
          const pad = padTo - s.ids.length;
          if (pad > 0) scope.rows(attn, offsets[b]! + s.ids.length, pad).write(zeros.subarray(0, pad * H));
        });
      }
      const work: EncoderBatchWork = {
        scope,
        q,
        k,
        v,
        qkvOut,
        qkvRows: scope.reshape(qkvOut, [3 * T, H]),
        split: { q: splitIdx(0), k: splitIdx(1), v: splitIdx(2) },
        attn,
        attnOut: scope.keep(Tensor.empty([T, H], 'f32', be)),
        inter: scope.keep(Tensor.empty([T, c.intermediateSize], 'f32', be)),
        ffn: scope.keep(Tensor.empty([T, H], 'f32', be)),
        sum: scope.keep(Tensor.empty([T, H], 'f32', be)),
        seqViews: sequences.map((s, b) => {
          const o = offsets[b]!;
          const len = s.ids.length;
          const rows = (t: Tensor) => scope.rows(t, o, len);
          const view = (t: Tensor) => scope.reshape(rows(t), [1, len, nh, hd]);
          return { b, o, len, q: view(q), k: view(k), v: view(v), ctx: view(attn), rows: { q: rows(q), k: rows(k), v: rows(v), ctx: rows(attn) } };
        }),
        prefixDeltas: deltas.filter((d) => d.attentionPrefix),
        boundaryDeltas: deltas.filter((d) => d.beforeLayer),
      };
      return new EncoderBatchContext({ model: this, sequences, offsets, padTo, layout, deltas, work });
    } catch (err) {
      scope.dispose();
      throw err;
    }
  }

  /**
   * The embeddings (word + position + token type, LayerNorm) of the batch's rows, pad rows included: a new f32
   * [rows, hidden] tensor, the caller's to dispose.
   */
  embed(ctx: EncoderBatchContext): Tensor {
    this.checkContext(ctx, 'embed');
    const c = this.config;
    const T = ctx.rows;
    const be = this.backend;
    const top = encoderTopModules(c);
    const ids = new Int32Array(T);
    const positions = new Int32Array(T);
    const types = new Int32Array(T);
    const { sequences, offsets } = ctx;
    sequences.forEach((s, b) => {
      const o = offsets[b]!;
      const off = s.positionOffset ?? 0;
      for (let i = 0; i < s.ids.length; i++) {
        ids[o + i] = s.ids[i]!;
        positions[o + i] = off + i;
        types[o + i] = s.tokenTypes?.[i] ?? 0;
      }
      // Pad rows (padTo) are never attended to; position i < padTo ≤ maxPositions keeps them in range.
      for (let i = s.ids.length; i < offsets[b + 1]! - o; i++) {
        ids[o + i] = c.padTokenId;
        positions[o + i] = i;
      }
    });
    const h = Tensor.empty([T, c.hiddenSize], 'f32', be);
    const scope = new Scope();
    try {
      const sum = ctx.work.sum;
      embedding(this.w(`${top.wordEmbeddings}.weight`), scope.keep(Tensor.from(ids, [T], { backend: be })), { out: h });
      embedding(this.w(`${top.positionEmbeddings}.weight`), scope.keep(Tensor.from(positions, [T], { backend: be })), { out: sum });
      add(h, sum, { out: h });
      embedding(this.w(`${top.tokenTypeEmbeddings}.weight`), scope.keep(Tensor.from(types, [T], { backend: be })), { out: sum });
      add(h, sum, { out: h });
      layerNorm(h, this.w(`${top.embeddingsNorm}.weight`), this.w(`${top.embeddingsNorm}.bias`), { eps: c.layerNormEps, out: h });
      return h;
    } catch (err) {
      h.dispose();
      throw err;
    } finally {
      scope.dispose();
    }
  }

  /**
   * Runs layers [from, to) on `hidden` (f32 [rows, hidden], the batch's rows in its layout; updated in place and
   * returned). `layers(0, L)` after `embed` is the whole stack; `layers(N, L, suppliedHidden)` starts from a hidden
   * state looked up elsewhere (HMI's PLOT). Each delta's `beforeLayer(j)` is called before layer j; one that returns
   * a Promise is an error here (use `layersAsync`).
   */
  layers(from: number, to: number, hidden: Tensor, ctx: EncoderBatchContext): Tensor {
    this.checkLayers(from, to, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    for (let l = from; l < to; l++) {
      if (hooks.length > 0) runBeforeLayerHooks(hooks, { family: 'encoder', layer: l, hidden, layout: ctx.layout }, 'EncoderModel');
      this.runLayer(l, hidden, ctx);
    }
    return hidden;
  }

  /** `layers`, awaiting each delta's `beforeLayer(j)` before layer j. */
  async layersAsync(from: number, to: number, hidden: Tensor, ctx: EncoderBatchContext): Promise<Tensor> {
    this.checkLayers(from, to, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    for (let l = from; l < to; l++) {
      if (hooks.length > 0) {
        await runBeforeLayerHooksAsync(hooks, { family: 'encoder', layer: l, hidden, layout: ctx.layout });
        this.checkContext(ctx, 'layersAsync'); // disposed while we waited?
      }
      this.runLayer(l, hidden, ctx);
    }
    return hidden;
  }

  /**
   * The pooler (tanh(dense(CLS row))) and the classifier of a BertForSequenceClassification: new tensors, the
   * caller's to dispose. Default: both.
   */
  head(hidden: Tensor, ctx: EncoderBatchContext, outputs: { pooled?: boolean; logits?: boolean } = {}): EncoderHeadOutput {
    this.checkContext(ctx, 'head');
    this.checkHidden(hidden, ctx);
    const c = this.config;
    if (c.architecture !== 'BertForSequenceClassification') {
      throw new InvalidArgumentError(`EncoderModel: a ${c.architecture} has no pooler or classifier; ask for hidden states only`);
    }
    const wantPooled = outputs.pooled ?? true;
    const wantLogits = outputs.logits ?? true;
    const result: EncoderHeadOutput = {};
    if (!wantPooled && !wantLogits) return result;
    const top = encoderTopModules(c);
    const n = ctx.sequences.length;
    return withScope((scope) => {
      const clsRows = scope.keep(Tensor.from(ctx.offsets.subarray(0, n), [n], { backend: this.backend }));
      const cls = scope.keep(gatherRows(hidden, clsRows));
      const pooled = linear(cls, this.w(`${top.pooler}.weight`), this.w(`${top.pooler}.bias`));
      try {
        tanhInPlace(pooled);
        if (wantLogits) result.logits = linear(pooled, this.w(`${top.classifier}.weight`), this.w(`${top.classifier}.bias`));
      } catch (err) {
        pooled.dispose();
        throw err;
      }
      if (wantPooled) result.pooled = pooled;
      else pooled.dispose();
      return result;
    });
  }

  private checkContext(ctx: EncoderBatchContext, what: string): void {
    if (ctx.model !== this) throw new InvalidArgumentError(`EncoderModel.${what}: the batch was prepared by another model`);
    if (ctx.disposed) throw new InvalidArgumentError(`EncoderModel.${what}: the batch was disposed`);
  }

  private checkHidden(hidden: Tensor, ctx: EncoderBatchContext): void {
    const s = hidden.shape;
    if (hidden.dtype !== 'f32' || s.length !== 2 || s[0] !== ctx.rows || s[1] !== this.config.hiddenSize || hidden.backend.binding !== this.backend.binding) {
      throw new InvalidArgumentError(
        `EncoderModel: hidden is ${hidden.dtype} [${s.join(', ')}], expected f32 [${ctx.rows}, ${this.config.hiddenSize}] (rows, hidden) on the model's backend`);
    }
  }

  private checkLayers(from: number, to: number, hidden: Tensor, ctx: EncoderBatchContext): void {
    this.checkContext(ctx, 'layers');
    const L = this.config.numLayers;
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from > to || to > L) {
      throw new InvalidArgumentError(`EncoderModel.layers: [${from}, ${to}) is not a range of layers within [0, ${L})`);
    }
    this.checkHidden(hidden, ctx);
  }

  /** One encoder layer on `h`, in place. The only copy of the layer body: both `layers` paths call it. */
  private runLayer(l: number, h: Tensor, ctx: EncoderBatchContext): void {
    const c = this.config;
    const { deltas, layout } = ctx;
    const { q, k, v, qkvOut, qkvRows, split, attn, attnOut, inter, ffn, sum, seqViews, prefixDeltas } = ctx.work;
    const lin = encoderLinearModules(c, l);
    const ln = encoderNormModules(c, l);
    const wb = (m: string) => [this.w(`${m}.weight`), this.w(`${m}.bias`)] as const;
    const gelu = c.hiddenAct === 'gelu' ? geluErf : geluTanh;

    // One GEMM for q, k and v (n = 3·hidden keeps the GEMM efficient at BERT sizes), then split: viewed as
    // [3·tokens, hidden] rows, row 3t is token t's q, 3t + 1 its k, 3t + 2 its v.
    const fused = this.fusedQkv(l);
    const compute = this.weights.compute;
    linear(h, fused.weight, fused.bias, { out: qkvOut, compute });
    gatherRows(qkvRows, split.q, { out: q });
    gatherRows(qkvRows, split.k, { out: k });
    gatherRows(qkvRows, split.v, { out: v });
    const qkv: SiteOutput[] = [
      { slice: 'query', module: lin.query, y: q },
      { slice: 'key', module: lin.key, y: k },
      { slice: 'value', module: lin.value, y: v },
    ];
    runLinearHooks(deltas, { family: 'encoder', site: 'qkv', layer: l, x: h, outputs: qkv, layout });

    for (const sv of seqViews) {
      const prefix = prefixDeltas.length === 0 ? null : this.attentionPrefixFor(prefixDeltas, l, sv.b, layout.keyOf(sv.o));
      if (prefix) this.prefixedAttention(sv, prefix);
      else attentionPrefill(sv.q, sv.k, sv.v, { out: sv.ctx });
    }

    linear(attn, ...wb(lin.attn_out), { out: attnOut, compute });
    runLinearHooks(deltas, { family: 'encoder', site: 'attn_out', layer: l, x: attn, outputs: [{ slice: 'attn_out', module: lin.attn_out, y: attnOut }], layout });
    add(attnOut, h, { out: sum });
    layerNorm(sum, ...wb(ln.attn_ln), { eps: c.layerNormEps, out: h });
    runNormHooks(deltas, { family: 'encoder', site: 'attn_ln', layer: l, module: ln.attn_ln, x: sum, y: h, layout });

    linear(h, ...wb(lin.ffn_in), { out: inter, compute });
    runLinearHooks(deltas, { family: 'encoder', site: 'ffn_in', layer: l, x: h, outputs: [{ slice: 'ffn_in', module: lin.ffn_in, y: inter }], layout });
    gelu(inter, { out: inter });
    linear(inter, ...wb(lin.ffn_out), { out: ffn, compute });
    runLinearHooks(deltas, { family: 'encoder', site: 'ffn_out', layer: l, x: inter, outputs: [{ slice: 'ffn_out', module: lin.ffn_out, y: ffn }], layout });
    add(ffn, h, { out: sum });
    layerNorm(sum, ...wb(ln.ffn_ln), { eps: c.layerNormEps, out: h });
    runNormHooks(deltas, { family: 'encoder', site: 'ffn_ln', layer: l, module: ln.ffn_ln, x: sum, y: h, layout });
  }

  /** The first non-null prefix any delta returns for this sequence and layer (one PET per task). */
  private attentionPrefixFor(deltas: readonly ModelDelta[], layer: number, sequence: number, key: string | null): AttentionPrefix | null {
    for (const d of deltas) {
      const p = d.attentionPrefix!({ family: 'encoder', layer, sequence, key });
      if (p) return p;
    }
    return null;
  }

  /**
   * Attention of one sequence over [prefix keys; its keys] (prefix-tuning). The kernel takes as many queries as
   * keys, so the p prefix positions get zero query rows whose outputs are dropped: p extra rows of work, which
   * keeps one attention kernel for every PET type.
   */
  private prefixedAttention(sv: SequenceViews, prefix: AttentionPrefix): void {
    const H = this.config.hiddenSize;
    const nh = this.config.numHeads;
    const p = prefix.key.shape[0]!;
    for (const [name, t] of [['key', prefix.key], ['value', prefix.value]] as const) {
      const s = t.shape;
      if (t.dtype !== 'f32' || s.length !== 2 || s[0] !== p || s[1] !== H) {
        throw new InvalidArgumentError(`EncoderModel: attention prefix ${name} is ${t.dtype} [${s.join(', ')}], expected f32 [${p}, ${H}]`);
      }
    }
    const n = p + sv.len;
    const scope = new Scope();
    try {
      const qx = scope.keep(Tensor.zeros([n, H], 'f32', this.backend));
      const kx = scope.keep(Tensor.empty([n, H], 'f32', this.backend));
      const vx = scope.keep(Tensor.empty([n, H], 'f32', this.backend));
      const cx = scope.keep(Tensor.empty([n, H], 'f32', this.backend));
      cast(sv.rows.q, 'f32', { out: scope.rows(qx, p, sv.len) });
      cast(prefix.key, 'f32', { out: scope.rows(kx, 0, p) });
      cast(sv.rows.k, 'f32', { out: scope.rows(kx, p, sv.len) });
      cast(prefix.value, 'f32', { out: scope.rows(vx, 0, p) });
      cast(sv.rows.v, 'f32', { out: scope.rows(vx, p, sv.len) });
      const heads = (t: Tensor) => scope.reshape(t, [1, n, nh, H / nh]);
      attentionPrefill(heads(qx), heads(kx), heads(vx), { out: heads(cx) });
      cast(scope.rows(cx, p, sv.len), 'f32', { out: sv.rows.ctx });
    } finally {
      scope.dispose();
    }
  }

  dispose(): void {
    for (const f of this.fused) {
      f?.weight.dispose();
      f?.bias.dispose();
    }
    this.weights.dispose();
  }
}

/**
 * tanh for the pooler's [batch, hidden] output. The native core has no tanh kernel; this is one small row per
 * sequence, so a host round trip costs less than a kernel launch would save.
 */
function tanhInPlace(t: Tensor): void {
  const a = t.toArray() as Float32Array;
  for (let i = 0; i < a.length; i++) a[i] = Math.tanh(a[i]!);
  t.write(a);
}
