/**
 * The Llama-style decoder family (LlamaForCausalLM), on native ops, with a paged KV cache.
 *
 * One forward takes a mixed batch: sequences starting their prompt (prefill: many new tokens, nothing cached)
 * and sequences continuing (decode: usually one new token against cached KV), packed into rows. Data path per
 * layer: RMSNorm [site input_norm] → q, k, v linears [sites q, k, v] → RoPE at each row's position → new K/V
 * rows written into the cache pages → attention (causal prefill kernel for fresh prompts, the paged decode
 * kernel for every other row) → o [site o] → residual → RMSNorm [site post_attn_norm] → gate, up [sites] →
 * SiLU(gate)·up → down [site down] → residual. Then the final RMSNorm and the LM head on the rows asked for.
 */
import {
  type Backend,
  InvalidArgumentError,
  PAGE_SIZE,
  Tensor,
  add,
  attentionDecode,
  attentionPrefill,
  embedding,
  gatherRows,
  getBackend,
  linear,
  rmsNorm,
  rope,
  scatterRows,
  siluMul,
} from '@tessera/native';
import type { DecoderConfig } from '../config.js';
import { KvCacheExhaustedError } from '../errors.js';
import { SegmentLayout } from '../hooks/segment-layout.js';
import type { DecoderLinearSite, ModelDelta } from '../hooks/sites.js';
import type { PagedKvCache } from '../kv/paged-kv-cache.js';
import { runLinearHooks, runNormHooks } from './hook-runner.js';
import { decoderLinearModules, decoderNormModules, decoderTensorShapes, decoderTopModules } from './names.js';
import { Scope } from './scope.js';
import { ModelWeights, type TensorSource } from './weights.js';

import type { SequenceId } from '../kv/paged-kv-cache.js';
export type { SequenceId };

export interface DecoderSequence {
  /** The sequence's id in the KV cache (added to the cache on first use). */
  id: SequenceId;
  /** New tokens to process: the whole prompt for a prefill, the last sampled token for a decode step. */
  tokens: ArrayLike<number>;
  /** Tenant/adapter key for the SegmentLayout (null or absent: the base model). */
  key?: string | null;
}

export interface DecoderForwardOptions {
  cache: PagedKvCache;
  deltas?: readonly ModelDelta[];
  /** 'last' (default): logits of each sequence's last new token, [batch, vocab]; 'all': [totalRows, vocab]; 'none'. */
  logits?: 'last' | 'all' | 'none';
  /** Use this layout instead of grouping the sequences' keys. */
  layout?: SegmentLayout;
}

export interface DecoderOutput {
  logits?: Tensor;
  /** Row offset of each sequence's new tokens (length batch + 1). */
  offsets: Int32Array;
  layout: SegmentLayout;
}

export class DecoderModel {
  readonly config: DecoderConfig;
  readonly weights: ModelWeights;
  readonly backend: Backend;

  constructor(config: DecoderConfig, weights: ModelWeights) {
    this.config = config;
    this.weights = weights;
    this.backend = weights.backend;
    if (config.numHeads % config.numKvHeads !== 0) {
      throw new InvalidArgumentError(`DecoderModel: ${config.numHeads} heads are not a multiple of ${config.numKvHeads} kv heads`);
    }
  }

  static fromSource(config: DecoderConfig, source: TensorSource, backend: Backend = getBackend()): DecoderModel {
    return new DecoderModel(config, ModelWeights.load(source, decoderTensorShapes(config), backend));
  }

  /** The shape a KV cache for this model needs. */
  get kvShape(): { numLayers: number; numKvHeads: number; headDim: number } {
    return { numLayers: this.config.numLayers, numKvHeads: this.config.numKvHeads, headDim: this.config.headDim };
  }

  private w(name: string): Tensor {
    return this.weights.get(name);
  }

  forward(sequences: readonly DecoderSequence[], options: DecoderForwardOptions): DecoderOutput {
    const c = this.config;
    const { cache } = options;
    const deltas = options.deltas ?? [];
    const H = c.hiddenSize;
    const hd = c.headDim;
    const qDim = c.numHeads * hd;
    const kvDim = c.numKvHeads * hd;
    const kv = cache.layer(0).k.shape;
    if (cache.layer(0).k.backend.binding !== this.backend.binding || kv[2] !== c.numKvHeads || kv[3] !== hd || cache.numLayers !== c.numLayers) {
      throw new InvalidArgumentError(`DecoderModel: the KV cache ([${kv.join(', ')}] per layer) does not fit this model (${c.numLayers} layers, ${c.numKvHeads} kv heads of ${hd})`);
    }

    // Positions, rows and KV room, all checked before any native work.
    const ids = new Set<SequenceId>();
    const starts: number[] = [];
    const offsets = new Int32Array(sequences.length + 1);
    let newPages = 0;
    sequences.forEach((s, b) => {
      if (ids.has(s.id)) throw new InvalidArgumentError(`DecoderModel: sequence ${String(s.id)} appears twice in one forward`);
      ids.add(s.id);
      if (s.tokens.length === 0) throw new InvalidArgumentError(`DecoderModel: sequence ${String(s.id)} has no new tokens`);
      for (let i = 0; i < s.tokens.length; i++) {
        const t = s.tokens[i]!;
        if (!Number.isInteger(t) || t < 0 || t >= c.vocabSize) {
          throw new InvalidArgumentError(`DecoderModel: token ${t} of sequence ${String(s.id)} is outside the vocabulary [0, ${c.vocabSize})`);
        }
      }
      const start = cache.hasSequence(s.id) ? cache.length(s.id) : 0;
      const end = start + s.tokens.length;
      if (end > c.maxPositions) {
        throw new InvalidArgumentError(`DecoderModel: sequence ${String(s.id)} would reach ${end} tokens, more than the model's ${c.maxPositions} positions`);
      }
      starts.push(start);
      offsets[b + 1] = offsets[b]! + s.tokens.length;
      const have = cache.hasSequence(s.id) ? cache.pages(s.id).length : 0;
      newPages += Math.max(0, Math.ceil(end / PAGE_SIZE) - have);
    });
    if (newPages > cache.freePages) {
      throw new KvCacheExhaustedError(
        `KV cache exhausted: this forward needs ${newPages} new pages of ${PAGE_SIZE} tokens but only ${cache.freePages} of ${cache.numPages} are free`);
    }
    const T = offsets[sequences.length]!;
    const layout = options.layout ?? SegmentLayout.fromRowKeys(sequences.flatMap((s) => Array<string | null>(s.tokens.length).fill(s.key ?? null)));
    if (layout.rows !== T) throw new InvalidArgumentError(`DecoderModel: layout covers ${layout.rows} rows but the batch has ${T} tokens`);

    // What this forward reserves, so a failure before the commit (a hook that throws, a native error) gives the
    // pages back and leaves the cache exactly as it was.
    const pagesBefore = sequences.map((s) => (cache.hasSequence(s.id) ? cache.pages(s.id).length : -1));
    const rollback = () =>
      sequences.forEach((s, b) => {
        if (!cache.hasSequence(s.id)) return;
        if (pagesBefore[b] === -1) cache.release(s.id);
        else cache.shrinkPages(s.id, pagesBefore[b]!);
      });
    sequences.forEach((s, b) => {
      if (!cache.hasSequence(s.id)) cache.addSequence(s.id);
      cache.reserve(s.id, starts[b]! + s.tokens.length);
    });
    let committed = false;

    // Host-side row metadata: token ids, positions, cache slots; which rows use which attention kernel.
    const tokenIds = new Int32Array(T);
    const positions = new Int32Array(T);
    const slots = new Int32Array(T);
    const prefill: { offset: number; len: number }[] = [];
    const pagedRows: number[] = [];
    sequences.forEach((s, b) => {
      const o = offsets[b]!;
      const start = starts[b]!;
      for (let i = 0; i < s.tokens.length; i++) {
        tokenIds[o + i] = s.tokens[i]!;
        positions[o + i] = start + i;
      }
      slots.set(cache.slotsFor(s.id, start, s.tokens.length), o);
      // A fresh prompt attends only to itself: the tiled causal kernel. Everything else reads the paged cache.
      if (start === 0 && s.tokens.length > 1) prefill.push({ offset: o, len: s.tokens.length });
      else for (let i = 0; i < s.tokens.length; i++) pagedRows.push(o + i);
    });

    const scope = new Scope();
    const be = this.backend;
    const result: DecoderOutput = { offsets, layout };
    try {
      const h = scope.keep(Tensor.empty([T, H], 'f32', be));
      const x = scope.keep(Tensor.empty([T, H], 'f32', be));
      const q = scope.keep(Tensor.empty([T, qDim], 'f32', be));
      const k = scope.keep(Tensor.empty([T, kvDim], 'f32', be));
      const v = scope.keep(Tensor.empty([T, kvDim], 'f32', be));
      const ctx = scope.keep(Tensor.empty([T, qDim], 'f32', be));
      const o = scope.keep(Tensor.empty([T, H], 'f32', be));
      const gate = scope.keep(Tensor.empty([T, c.intermediateSize], 'f32', be));
      const up = scope.keep(Tensor.empty([T, c.intermediateSize], 'f32', be));
      const down = scope.keep(Tensor.empty([T, H], 'f32', be));
      const q3 = scope.reshape(q, [T, c.numHeads, hd]);
      const k3 = scope.reshape(k, [T, c.numKvHeads, hd]);
      const posT = scope.keep(Tensor.from(positions, [T], { backend: be }));
      const slotsT = scope.keep(Tensor.from(slots, [T], { backend: be }));

      embedding(this.w(`${decoderTopModules.embedTokens}.weight`), scope.keep(Tensor.from(tokenIds, [T], { backend: be })), { out: h });

      const prefillViews = prefill.map(({ offset, len }) => {
        const view = (t: Tensor, heads: number) => scope.reshape(scope.rows(t, offset, len), [1, len, heads, hd]);
        return { q: view(q, c.numHeads), k: view(k, c.numKvHeads), v: view(v, c.numKvHeads), ctx: view(ctx, c.numHeads) };
      });
      const paged = this.pagedAttentionInputs(pagedRows, sequences, starts, offsets, cache, ctx, scope);

      for (let l = 0; l < c.numLayers; l++) {
        const lin = decoderLinearModules(l);
        const norm = decoderNormModules(l);
        const site = (name: DecoderLinearSite, input: Tensor, y: Tensor) =>
          runLinearHooks(deltas, { family: 'decoder', site: name, layer: l, x: input, outputs: [{ slice: name, module: lin[name], y }], layout });

        rmsNorm(h, this.w(`${norm.input_norm}.weight`), { eps: c.rmsNormEps, out: x });
        runNormHooks(deltas, { family: 'decoder', site: 'input_norm', layer: l, module: norm.input_norm, x: h, y: x, layout });
        linear(x, this.w(`${lin.q}.weight`), undefined, { out: q });
        site('q', x, q);
        linear(x, this.w(`${lin.k}.weight`), undefined, { out: k });
        site('k', x, k);
        linear(x, this.w(`${lin.v}.weight`), undefined, { out: v });
        site('v', x, v);
        rope(q3, posT, { base: c.ropeTheta });
        rope(k3, posT, { base: c.ropeTheta });

        const cacheRows = cache.layerRows(l);
        scatterRows(k, slotsT, cacheRows.k);
        scatterRows(v, slotsT, cacheRows.v);
        for (const pv of prefillViews) attentionPrefill(pv.q, pv.k, pv.v, { causal: true, out: pv.ctx });
        if (paged) {
          const layerCache = cache.layer(l);
          if (paged.rowIdx && paged.q) gatherRows(q, paged.rowIdx, { out: paged.q });
          attentionDecode(paged.q3 ?? q3, layerCache.k, layerCache.v, paged.table, paged.lens, { out: paged.ctx3 });
          if (paged.rowIdx) scatterRows(paged.ctx, paged.rowIdx, ctx);
        }

        linear(ctx, this.w(`${lin.o}.weight`), undefined, { out: o });
        site('o', ctx, o);
        add(h, o, { out: h });
        rmsNorm(h, this.w(`${norm.post_attn_norm}.weight`), { eps: c.rmsNormEps, out: x });
        runNormHooks(deltas, { family: 'decoder', site: 'post_attn_norm', layer: l, module: norm.post_attn_norm, x: h, y: x, layout });
        linear(x, this.w(`${lin.gate}.weight`), undefined, { out: gate });
        site('gate', x, gate);
        linear(x, this.w(`${lin.up}.weight`), undefined, { out: up });
        site('up', x, up);
        siluMul(gate, up, { out: gate });
        linear(gate, this.w(`${lin.down}.weight`), undefined, { out: down });
        site('down', gate, down);
        add(h, down, { out: h });
      }

      sequences.forEach((s, b) => cache.commit(s.id, starts[b]! + s.tokens.length));
      committed = true;

      const mode = options.logits ?? 'last';
      if (mode !== 'none') {
        let rows = h;
        if (mode === 'last') {
          const last = Int32Array.from(sequences, (_, b) => offsets[b + 1]! - 1);
          rows = scope.keep(gatherRows(h, scope.keep(Tensor.from(last, [last.length], { backend: be }))));
        }
        const normed = scope.keep(rmsNorm(rows, this.w(`${decoderTopModules.finalNorm}.weight`), { eps: c.rmsNormEps }));
        const head = c.tieWordEmbeddings ? `${decoderTopModules.embedTokens}.weight` : `${decoderTopModules.lmHead}.weight`;
        result.logits = linear(normed, this.w(head));
      }
      return result;
    } catch (err) {
      if (!committed) rollback();
      throw err;
    } finally {
      scope.dispose();
    }
  }

  /**
   * Inputs of the paged-decode attention call for `rows` (all rows that are not a fresh prompt): every row is one
   * query against its sequence's first (position + 1) cached tokens, so decode steps and continued prompts share
   * one kernel call per layer. Returns null when there are none.
   */
  private pagedAttentionInputs(
    rows: readonly number[],
    sequences: readonly DecoderSequence[],
    starts: readonly number[],
    offsets: Int32Array,
    cache: PagedKvCache,
    ctx: Tensor,
    scope: Scope,
  ) {
    if (rows.length === 0) return null;
    const c = this.config;
    const be = this.backend;
    const n = rows.length;
    const seqOfRow = new Int32Array(offsets[sequences.length]!);
    sequences.forEach((_, b) => seqOfRow.fill(b, offsets[b]!, offsets[b + 1]!));
    const maxPages = Math.max(...sequences.map((s) => cache.pages(s.id).length));
    const table = new Int32Array(n * maxPages).fill(-1);
    const lens = new Int32Array(n);
    rows.forEach((row, i) => {
      const b = seqOfRow[row]!;
      const pages = cache.pages(sequences[b]!.id);
      table.set(pages, i * maxPages);
      lens[i] = starts[b]! + (row - offsets[b]!) + 1;
    });
    // When the paged rows are exactly all rows in order (a pure decode step), q is used as is: no gather.
    const contiguous = n === seqOfRow.length && rows.every((r, i) => r === i);
    const qDim = c.numHeads * c.headDim;
    const qRows = contiguous ? null : scope.keep(Tensor.empty([n, qDim], 'f32', be));
    const ctxRows = contiguous ? ctx : scope.keep(Tensor.empty([n, qDim], 'f32', be));
    return {
      table: scope.keep(Tensor.from(table, [n, maxPages], { backend: be })),
      lens: scope.keep(Tensor.from(lens, [n], { backend: be })),
      rowIdx: contiguous ? null : scope.keep(Tensor.from(Int32Array.from(rows), [n], { backend: be })),
      q: qRows,
      ctx: ctxRows,
      q3: contiguous ? null : scope.reshape(qRows!, [n, c.numHeads, c.headDim]),
      ctx3: scope.reshape(ctxRows, [n, c.numHeads, c.headDim]),
    };
  }

  dispose(): void {
    this.weights.dispose();
  }
}
