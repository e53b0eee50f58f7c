/**
 * The BERT-style encoder family (BertModel / BertForSequenceClassification), on native ops.
 *
 * Data path of one forward: token ids of every sequence packed into rows (no padding: ragged sequences cost only
 * their own tokens) → embeddings (word + position + token type, LayerNorm) → per layer: q/k/v linears [site qkv]
 * → attention per sequence → attention.output.dense [site attn_out] → residual + LayerNorm [site attn_ln] →
 * intermediate.dense [site ffn_in] → GELU → output.dense [site ffn_out] → residual + LayerNorm [site ffn_ln] →
 * pooler (tanh(dense(CLS row))) → classifier.
 */
import { type Backend, InvalidArgumentError, Tensor, add, cast, attentionPrefill, embedding, gatherRows, geluErf, geluTanh, getBackend, layerNorm, linear } from '@tessera/native';
import type { EncoderConfig } from '../config.js';
import { SegmentLayout } from '../hooks/segment-layout.js';
import type { AttentionPrefix, ModelDelta, SiteOutput } from '../hooks/sites.js';
import { runLinearHooks, runNormHooks } from './hook-runner.js';
import { encoderLinearModules, encoderNormModules, encoderTensorShapes, encoderTopModules } from './names.js';
import { Scope } from './scope.js';
import { ModelWeights, type TensorSource } from './weights.js';

export interface EncoderSequence {
  /** Token ids, including [CLS]/[SEP] (as the tokenizer's template adds them). */
  ids: ArrayLike<number>;
  /** Token type ids (segment A = 0, B = 1); default all 0. */
  tokenTypes?: ArrayLike<number>;
  /** Tenant/adapter key of this sequence for the SegmentLayout (null or absent: the base model). */
  key?: string | null;
}

export interface EncoderForwardOptions {
  /** Multi-tenant deltas called at every hook site, in order. */
  deltas?: readonly ModelDelta[];
  /**
   * Lower-stack substitution (HMI's PLOT): `hidden` f32 [totalTokens, hidden] replaces the output of the
   * embeddings and the first `layers` layers; the forward starts at layer `layers`. Rows are the sequences'
   * tokens packed in order, exactly as the forward would have produced them.
   */
  lowerStack?: { layers: number; hidden: Tensor };
  /** Which results to return; default: hidden states and, for a classification model, pooled output and logits. */
  outputs?: { hidden?: boolean; pooled?: boolean; logits?: boolean };
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

/** Padded, HF-style input (input_ids + attention_mask) turned into ragged sequences: mask-0 positions are dropped. */
export function unpadBatch(inputIds: readonly ArrayLike<number>[], attentionMask: readonly ArrayLike<number>[]): EncoderSequence[] {
  if (inputIds.length !== attentionMask.length) {
    throw new InvalidArgumentError(`unpadBatch: ${inputIds.length} rows of input_ids but ${attentionMask.length} rows of attention_mask`);
  }
  return inputIds.map((ids, b) => {
    const mask = attentionMask[b]!;
    if (mask.length !== ids.length) throw new InvalidArgumentError(`unpadBatch: row ${b} has ${ids.length} ids but ${mask.length} mask entries`);
    const kept: number[] = [];
    for (let i = 0; i < ids.length; i++) if (mask[i]) kept.push(ids[i]!);
    return { ids: kept };
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

  forward(sequences: readonly EncoderSequence[], options: EncoderForwardOptions = {}): EncoderOutput {
    const c = this.config;
    const H = c.hiddenSize;
    const nh = c.numHeads;
    const hd = H / nh;
    const deltas = options.deltas ?? [];
    const isClassifier = c.architecture === 'BertForSequenceClassification';
    const want = {
      hidden: options.outputs?.hidden ?? true,
      pooled: options.outputs?.pooled ?? isClassifier,
      logits: options.outputs?.logits ?? isClassifier,
    };
    if ((want.pooled || want.logits) && !isClassifier) {
      throw new InvalidArgumentError(`EncoderModel: a ${c.architecture} has no pooler or classifier; ask for hidden states only`);
    }

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
    const lower = options.lowerStack;
    if (lower) {
      if (!Number.isInteger(lower.layers) || lower.layers < 0 || lower.layers > c.numLayers) {
        throw new InvalidArgumentError(`EncoderModel: lowerStack.layers = ${lower.layers} is not in [0, ${c.numLayers}]`);
      }
      const s = lower.hidden.shape;
      if (s.length !== 2 || s[0] !== T || s[1] !== H) {
        throw new InvalidArgumentError(`EncoderModel: lowerStack.hidden is [${s.join(', ')}], expected [${T}, ${H}] (tokens, hidden)`);
      }
    }

    const scope = new Scope();
    const be = this.backend;
    const top = encoderTopModules(c);
    const result: EncoderOutput = { offsets, layout };
    try {
      // Workspace reused by every layer.
      const h = scope.keep(Tensor.empty([T, H], 'f32', be));
      const q = scope.keep(Tensor.empty([T, H], 'f32', be));
      const k = scope.keep(Tensor.empty([T, H], 'f32', be));
      const v = scope.keep(Tensor.empty([T, H], 'f32', be));
      const qkvOut = scope.keep(Tensor.empty([T, 3 * H], 'f32', be));
      const qkvRows = scope.reshape(qkvOut, [3 * T, H]);
      const splitIdx = (part: number) => scope.keep(Tensor.from(Int32Array.from({ length: T }, (_, t) => 3 * t + part), [T], { backend: be }));
      const split = { q: splitIdx(0), k: splitIdx(1), v: splitIdx(2) };
      const ctx = scope.keep(Tensor.empty([T, H], 'f32', be));
      const attn = scope.keep(Tensor.empty([T, H], 'f32', be));
      const inter = scope.keep(Tensor.empty([T, c.intermediateSize], 'f32', be));
      const ffn = scope.keep(Tensor.empty([T, H], 'f32', be));
      const sum = scope.keep(Tensor.empty([T, H], 'f32', be));
      // Pad rows are never written by attention; zeros keep them finite through the layers. Only they are written.
      if (padTo !== undefined) {
        const zeros = new Float32Array(Math.max(0, ...sequences.map((q) => padTo - q.ids.length)) * H);
        sequences.forEach((q, b) => {
          const pad = padTo - q.ids.length;
          if (pad > 0) scope.rows(ctx, offsets[b]! + q.ids.length, pad).write(zeros.subarray(0, pad * H));
        });
      }

      let firstLayer = 0;
      if (lower) {
        firstLayer = lower.layers;
        // Work on a copy so the caller's tensor is never written.
        cast(lower.hidden, 'f32', { out: h });
      } else {
        const ids = new Int32Array(T);
        const positions = new Int32Array(T);
        const types = new Int32Array(T);
        sequences.forEach((s, b) => {
          const o = offsets[b]!;
          for (let i = 0; i < s.ids.length; i++) {
            ids[o + i] = s.ids[i]!;
            positions[o + i] = i;
            types[o + i] = s.tokenTypes?.[i] ?? 0;
          }
          for (let i = s.ids.length; i < offsets[b + 1]! - o; i++) {
            ids[o + i] = c.padTokenId;
            positions[o + i] = i;
          }
        });
        const idsT = scope.keep(Tensor.from(ids, [T], { backend: be }));
        const posT = scope.keep(Tensor.from(positions, [T], { backend: be }));
        const typesT = scope.keep(Tensor.from(types, [T], { backend: be }));
        embedding(this.w(`${top.wordEmbeddings}.weight`), idsT, { out: h });
        embedding(this.w(`${top.positionEmbeddings}.weight`), posT, { out: sum });
        add(h, sum, { out: h });
        embedding(this.w(`${top.tokenTypeEmbeddings}.weight`), typesT, { out: sum });
        add(h, sum, { out: h });
        layerNorm(h, this.w(`${top.embeddingsNorm}.weight`), this.w(`${top.embeddingsNorm}.bias`), { eps: c.layerNormEps, out: h });
      }

      // Per-sequence views for attention (its own tokens only, never pad rows), made once.
      const seqViews = sequences.map((s, b) => {
        const o = offsets[b]!;
        const len = s.ids.length;
        const rows = (t: Tensor) => scope.rows(t, o, len);
        const view = (t: Tensor) => scope.reshape(rows(t), [1, len, nh, hd]);
        return { b, o, len, q: view(q), k: view(k), v: view(v), ctx: view(ctx), rows: { q: rows(q), k: rows(k), v: rows(v), ctx: rows(ctx) } };
      });
      const prefixDeltas = deltas.filter((d) => d.attentionPrefix);
      const gelu = c.hiddenAct === 'gelu' ? geluErf : geluTanh;

      for (let l = firstLayer; l < c.numLayers; l++) {
        const lin = encoderLinearModules(c, l);
        const ln = encoderNormModules(c, l);
        const wb = (m: string) => [this.w(`${m}.weight`), this.w(`${m}.bias`)] as const;

        // One GEMM for q, k and v (n = 3·hidden keeps the GEMM efficient at BERT sizes), then split: viewed as
        // [3·tokens, hidden] rows, row 3t is token t's q, 3t + 1 its k, 3t + 2 its v.
        const fused = this.fusedQkv(l);
        linear(h, fused.weight, fused.bias, { out: qkvOut });
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

        linear(ctx, ...wb(lin.attn_out), { out: attn });
        runLinearHooks(deltas, { family: 'encoder', site: 'attn_out', layer: l, x: ctx, outputs: [{ slice: 'attn_out', module: lin.attn_out, y: attn }], layout });
        add(attn, h, { out: sum });
        layerNorm(sum, ...wb(ln.attn_ln), { eps: c.layerNormEps, out: h });
        runNormHooks(deltas, { family: 'encoder', site: 'attn_ln', layer: l, module: ln.attn_ln, x: sum, y: h, layout });

        linear(h, ...wb(lin.ffn_in), { out: inter });
        runLinearHooks(deltas, { family: 'encoder', site: 'ffn_in', layer: l, x: h, outputs: [{ slice: 'ffn_in', module: lin.ffn_in, y: inter }], layout });
        gelu(inter, { out: inter });
        linear(inter, ...wb(lin.ffn_out), { out: ffn });
        runLinearHooks(deltas, { family: 'encoder', site: 'ffn_out', layer: l, x: inter, outputs: [{ slice: 'ffn_out', module: lin.ffn_out, y: ffn }], layout });
        add(ffn, h, { out: sum });
        layerNorm(sum, ...wb(ln.ffn_ln), { eps: c.layerNormEps, out: h });
        runNormHooks(deltas, { family: 'encoder', site: 'ffn_ln', layer: l, module: ln.ffn_ln, x: sum, y: h, layout });
      }

      if (want.pooled || want.logits) {
        const clsRows = scope.keep(Tensor.from(offsets.subarray(0, sequences.length), [sequences.length], { backend: be }));
        const cls = scope.keep(gatherRows(h, clsRows));
        const pooled = linear(cls, this.w(`${top.pooler}.weight`), this.w(`${top.pooler}.bias`));
        tanhInPlace(pooled);
        if (want.logits) result.logits = linear(pooled, this.w(`${top.classifier}.weight`), this.w(`${top.classifier}.bias`));
        if (want.pooled) result.pooled = pooled;
        else pooled.dispose();
      }
      if (want.hidden) result.hidden = scope.release(h);
      return result;
    } catch (err) {
      result.pooled?.dispose();
      result.logits?.dispose();
      throw err;
    } finally {
      scope.dispose();
    }
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
  private prefixedAttention(sv: { len: number; rows: { q: Tensor; k: Tensor; v: Tensor; ctx: Tensor } }, prefix: AttentionPrefix): void {
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
