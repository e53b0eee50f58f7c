/**
 * The Llama-style decoder family (LlamaForCausalLM), on native ops, with a paged KV cache.
 *
 * One forward takes a mixed batch: sequences starting their prompt (prefill: many new tokens, nothing cached)
 * and sequences continuing (decode: usually one new token against cached KV), packed into rows. Data path per
 * layer: RMSNorm [site input_norm] → q, k, v linears [sites q, k, v] (one GEMM over the stacked weights, then split
 * into the three outputs before their sites run) → RoPE at each row's position → new K/V
 * rows written into the cache pages → attention (causal prefill kernel for fresh prompts, the paged decode
 * kernel for every other row) → o [site o] → residual → RMSNorm [site post_attn_norm] → gate, up [sites] (one GEMM,
 * as q, k, v) → SiLU(gate)·up → down [site down] → residual. Then the final RMSNorm and the LM head on the rows
 * asked for. Every linear layer is applied by `DecoderModel.project`.
 *
 * The forward is a composition of stages: `prepare` (validate, reserve KV pages, scratch) → `embed` →
 * `layers(0, L)` → `commit` → `head`. Each stage is public, so a caller can run the layers in pieces (BlockLLM's
 * blocks, each with a KV cache of its own layer range) or wait at a layer boundary (`layersAsync`). A layer also
 * runs as its two halves, `attention(l)` then `ffn(l)` (the same ops in the same order as `layers(l, l + 1)`, so
 * the same bits): a block cut mid-layer (a PE delta fused with the half it modifies) runs one half. A step
 * prepared with `cache: null` runs only the stages that touch no KV (embed, ffn, head): a block holding no
 * attention layer.
 */
import {
  type Backend,
  InvalidArgumentError,
  PAGE_SIZE,
  Tensor,
  add,
  attentionDecode,
  attentionPrefill,
  gatherRows,
  getBackend,
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
import { runBeforeLayerHooks, runBeforeLayerHooksAsync, runLinearHooks, runNormHooks } from './hook-runner.js';
import { decoderLinearModules, decoderNormModules, decoderTensorShapes, decoderTopModules } from './names.js';
import { embedding, linear } from './quantized.js'; // float or Q8_0 weights (weights: 'int8')
import { Scope, withScope } from './scope.js';
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

/** What one step of the decoder runs on: the cache its new K/V go into, the deltas, the layout. */
export interface DecoderStepOptions {
  /**
   * The KV cache of the layers this step runs: every layer (`kvShape`), or one block's range (see `layers`).
   * null: a step of KV-free stages only (`embed`, `ffn`, `head`), e.g. for a block that holds no attention layer;
   * nothing is reserved, positions are not checked, and `layers` / `attention` refuse it.
   */
  cache: PagedKvCache | null;
  deltas?: readonly ModelDelta[];
  /** Use this layout instead of grouping the sequences' keys. */
  layout?: SegmentLayout;
}

export interface DecoderForwardOptions extends DecoderStepOptions {
  /** 'last' (default): logits of each sequence's last new token, [batch, vocab]; 'all': [totalRows, vocab]; 'none'. */
  logits?: 'last' | 'all' | 'none';
}

export interface DecoderOutput {
  logits?: Tensor;
  /** Row offset of each sequence's new tokens (length batch + 1). */
  offsets: Int32Array;
  layout: SegmentLayout;
}

/**
 * The layers a KV cache holds, [first, end). A per-block cache (created with `firstLayer: a`, `numLayers: b - a`)
 * holds [a, b) and answers `layer(j)` for the global index j; one created without it holds [0, numLayers).
 */
function cacheLayerRange(cache: PagedKvCache): { first: number; end: number } {
  return { first: cache.firstLayer, end: cache.firstLayer + cache.numLayers };
}

/** Paged-decode attention inputs (see DecoderModel.pagedAttentionInputs). */
type PagedInputs = NonNullable<ReturnType<DecoderModel['pagedAttentionInputs']>>;

/**
 * Where a fused projection's output goes: `out` [rows, sum of the parts' features] gets the one GEMM, and `parts`
 * (each [rows, features]) are what the sites see. With one row the parts are column ranges of `out`, i.e. row
 * views of it: nothing to copy. With more rows `split` copies them out: `out` viewed as `src` [rows · units,
 * unit] (a unit is a head for q/k/v, a whole projection for gate/up) gathers into each part viewed as
 * [rows · its units, unit].
 */
interface FusedOutput {
  readonly out: Tensor;
  readonly parts: readonly Tensor[];
  readonly split: { readonly src: Tensor; readonly idx: readonly Tensor[]; readonly dst: readonly Tensor[] } | null;
}

/** Scratch and row metadata of one step, reused by every layer. */
interface DecoderStepWork {
  readonly scope: Scope;
  readonly starts: readonly number[];
  readonly tokenIds: Tensor;
  readonly positions: Tensor;
  readonly slots: Tensor;
  readonly x: Tensor;
  readonly q: Tensor;
  readonly k: Tensor;
  readonly v: Tensor;
  /** q, k, v as one output (q, k, v are its parts). */
  readonly qkv: FusedOutput;
  /** gate, up as one output (gate, up are its parts). */
  readonly gateUp: FusedOutput;
  readonly q3: Tensor;
  readonly k3: Tensor;
  readonly attn: Tensor;
  readonly o: Tensor;
  readonly gate: Tensor;
  readonly up: Tensor;
  readonly down: Tensor;
  readonly prefill: readonly { q: Tensor; k: Tensor; v: Tensor; ctx: Tensor }[];
  readonly paged: PagedInputs | null;
  /** The deltas that define beforeLayer (empty: no boundary calls, the common case). */
  readonly boundaryDeltas: readonly ModelDelta[];
}

/**
 * The row-sized scratch of a step: what every layer writes (x, the fused projections and their parts, attn, o, down)
 * and the row metadata (token ids, positions, cache slots). It depends on the step's row count alone, so a step of
 * at most SCRATCH_POOL_MAX_ROWS rows takes one from its model's pool and gives it back when disposed: a decode step
 * then creates none of its twenty-odd tensors, each an allocation and a native handle, which were about half of a
 * batch-1 step's host work (prepare took 120-150 us of a 1.3 ms int8 step on a Zen 5).
 */
interface StepScratch {
  readonly rows: number;
  /** Owns every tensor below. */
  readonly scope: Scope;
  readonly tokenIds: Tensor;
  readonly positions: Tensor;
  readonly slots: Tensor;
  readonly x: Tensor;
  readonly qkv: FusedOutput;
  readonly gateUp: FusedOutput;
  readonly q3: Tensor;
  readonly k3: Tensor;
  readonly attn: Tensor;
  /** attn as [rows, heads, headDim]: the decode attention's output when every row is a paged row, in order. */
  readonly attn3: Tensor;
  readonly o: Tensor;
  readonly down: Tensor;
}

/** Steps of up to this many rows reuse pooled scratch; larger ones (prompts) allocate theirs, a small cost beside their compute. */
const SCRATCH_POOL_MAX_ROWS = 64;
/** Pooled scratch kept per row count (more than one only while steps of that size overlap). */
const SCRATCH_POOL_PER_SIZE = 2;
/** Row counts the pool keeps scratch for; beyond this the least recently returned size is dropped. */
const SCRATCH_POOL_SIZES = 4;

/**
 * One decoder step, prepared once (`DecoderModel.prepare`) and run by `embed`, `layers` (in one piece or several)
 * and `head`. Its KV pages are reserved in `cache`; `commit()` makes the new tokens readable by later steps, and
 * `dispose()` frees the scratch and, if the step was not committed, gives the reserved pages back. `layout` stays
 * the caller's (as `DecoderOutput.layout` does).
 */
export class DecoderStepContext {
  readonly sequences: readonly DecoderSequence[];
  /** Row offset of each sequence's new tokens (length batch + 1). */
  readonly offsets: Int32Array;
  /** Rows of the step (new tokens of all sequences). */
  readonly rows: number;
  readonly layout: SegmentLayout;
  readonly deltas: readonly ModelDelta[];
  /** The step's KV cache; null for a KV-free step (see DecoderStepOptions.cache). */
  readonly cache: PagedKvCache | null;
  /** @internal */
  readonly model: DecoderModel;
  /** @internal */
  readonly work: DecoderStepWork;
  /** Global layers run in this step: commit checks every layer of the cache got its K/V. */
  private readonly ran: Uint8Array;
  private readonly rollback: () => void;
  /** Gives the pooled scratch back (or frees it), once the step's own scratch is freed. */
  private readonly release: () => void;
  private state: 'open' | 'committed' | 'disposed' = 'open';

  /** @internal Built by DecoderModel.prepare. */
  constructor(init: {
    model: DecoderModel; sequences: readonly DecoderSequence[]; offsets: Int32Array; layout: SegmentLayout;
    deltas: readonly ModelDelta[]; cache: PagedKvCache | null; work: DecoderStepWork; rollback: () => void; release: () => void;
  }) {
    this.model = init.model;
    this.sequences = init.sequences;
    this.offsets = init.offsets;
    this.rows = init.offsets[init.sequences.length]!;
    this.layout = init.layout;
    this.deltas = init.deltas;
    this.cache = init.cache;
    this.work = init.work;
    this.rollback = init.rollback;
    this.release = init.release;
    this.ran = new Uint8Array(init.model.config.numLayers);
  }

  get disposed(): boolean {
    return this.state === 'disposed';
  }

  /** @internal */
  markRan(layer: number): void {
    this.ran[layer] = 1;
  }

  /**
   * Marks the step's new tokens written in `cache` (their K/V may now be read by later steps). Every layer the
   * cache holds must have run in this step (its attention half, which writes the K/V). Idempotent; a KV-free
   * step has nothing to mark.
   */
  commit(): void {
    if (this.state === 'committed') return;
    if (this.state === 'disposed') throw new InvalidArgumentError('DecoderStepContext.commit: the step was disposed');
    const cache = this.cache;
    if (cache === null) {
      this.state = 'committed';
      return;
    }
    const { first, end } = cacheLayerRange(cache);
    for (let j = first; j < end; j++) {
      if (!this.ran[j]) {
        throw new InvalidArgumentError(
          `DecoderStepContext.commit: layer ${j} of the KV cache (layers [${first}, ${end})) did not run in this step, so its K/V for the new tokens are missing`);
      }
    }
    this.sequences.forEach((s, b) => cache.commit(s.id, this.work.starts[b]! + s.tokens.length));
    this.state = 'committed';
  }

  /** Frees the scratch; an uncommitted step gives its reserved pages back, leaving the cache as it was. Idempotent. */
  dispose(): void {
    if (this.state === 'disposed') return;
    if (this.state === 'open') this.rollback();
    this.state = 'disposed';
    this.work.scope.dispose();
    this.release();
  }
}

export class DecoderModel {
  readonly config: DecoderConfig;
  readonly weights: ModelWeights;
  readonly backend: Backend;
  /** Free step scratch by row count (see StepScratch), least recently returned size first. */
  private readonly scratchPool = new Map<number, StepScratch[]>();
  private disposed = false;

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

  /** One whole step: prepare → embed → layers(0, L) → commit → head. Synchronous; see forwardAsync. */
  forward(sequences: readonly DecoderSequence[], options: DecoderForwardOptions): DecoderOutput {
    const ctx = this.prepare(sequences, options);
    try {
      const h = ctx.work.scope.keep(this.embed(ctx));
      this.layers(0, this.config.numLayers, h, ctx);
      return this.finish(h, ctx, options.logits ?? 'last');
    } finally {
      ctx.dispose();
    }
  }

  /** forward, awaiting every delta's beforeLayer(j) (e.g. until layer j's adapters are resident). */
  async forwardAsync(sequences: readonly DecoderSequence[], options: DecoderForwardOptions): Promise<DecoderOutput> {
    const ctx = this.prepare(sequences, options);
    try {
      const h = ctx.work.scope.keep(this.embed(ctx));
      await this.layersAsync(0, this.config.numLayers, h, ctx);
      return this.finish(h, ctx, options.logits ?? 'last');
    } finally {
      ctx.dispose();
    }
  }

  private finish(h: Tensor, ctx: DecoderStepContext, mode: 'last' | 'all' | 'none'): DecoderOutput {
    ctx.commit();
    const result: DecoderOutput = { offsets: ctx.offsets, layout: ctx.layout };
    if (mode !== 'none') result.logits = this.head(h, ctx, mode);
    return result;
  }

  /**
   * Validates a step (token ids, positions, KV room, layout), reserves its KV pages in `options.cache` and
   * allocates its scratch. Nothing is reserved when it throws. The caller disposes the context.
   */
  prepare(sequences: readonly DecoderSequence[], options: DecoderStepOptions): DecoderStepContext {
    const c = this.config;
    const { cache } = options;
    const deltas = options.deltas ?? [];
    const hd = c.headDim;
    if (cache !== null) {
      const range = cacheLayerRange(cache);
      if (range.first < 0 || range.end > c.numLayers) {
        throw new InvalidArgumentError(`DecoderModel: the KV cache holds layers [${range.first}, ${range.end}), outside this model's [0, ${c.numLayers})`);
      }
      const kv = cache.layer(range.first).k.shape;
      if (cache.layer(range.first).k.backend.binding !== this.backend.binding || kv[2] !== c.numKvHeads || kv[3] !== hd) {
        throw new InvalidArgumentError(`DecoderModel: the KV cache ([${kv.join(', ')}] per layer) does not fit this model (${c.numLayers} layers, ${c.numKvHeads} kv heads of ${hd})`);
      }
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
      if (cache === null) {
        // A KV-free step: no positions (nothing here reads them), no pages.
        starts.push(0);
        offsets[b + 1] = offsets[b]! + s.tokens.length;
        return;
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
    if (cache !== null && newPages > cache.freePages) {
      throw new KvCacheExhaustedError(
        `KV cache exhausted: this forward needs ${newPages} new pages of ${PAGE_SIZE} tokens but only ${cache.freePages} of ${cache.numPages} are free`);
    }
    const T = offsets[sequences.length]!;
    const layout = options.layout ?? SegmentLayout.fromRowKeys(sequences.flatMap((s) => Array<string | null>(s.tokens.length).fill(s.key ?? null)));
    if (layout.rows !== T) throw new InvalidArgumentError(`DecoderModel: layout covers ${layout.rows} rows but the batch has ${T} tokens`);

    // What this step reserves, so a failure before the commit (a hook that throws, a native error) gives the
    // pages back and leaves the cache exactly as it was.
    const pagesBefore = sequences.map((s) => (cache?.hasSequence(s.id) ? cache.pages(s.id).length : -1));
    const rollback = () =>
      sequences.forEach((s, b) => {
        if (cache === null || !cache.hasSequence(s.id)) return;
        if (pagesBefore[b] === -1) cache.release(s.id);
        else cache.shrinkPages(s.id, pagesBefore[b]!);
      });
    const scope = new Scope();
    let scratch: StepScratch | null = null;
    try {
      if (cache !== null) {
        sequences.forEach((s, b) => {
          if (!cache.hasSequence(s.id)) cache.addSequence(s.id);
          cache.reserve(s.id, starts[b]! + s.tokens.length);
        });
      }

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
        if (cache === null) return;
        slots.set(cache.slotsFor(s.id, start, s.tokens.length), o);
        // A fresh prompt attends only to itself: the tiled causal kernel. Everything else reads the paged cache.
        if (start === 0 && s.tokens.length > 1) prefill.push({ offset: o, len: s.tokens.length });
        else for (let i = 0; i < s.tokens.length; i++) pagedRows.push(o + i);
      });

      scratch = this.takeScratch(T);
      scratch.tokenIds.write(tokenIds);
      scratch.positions.write(positions);
      scratch.slots.write(slots);
      const { qkv, gateUp, attn } = scratch;
      const [q, k, v] = qkv.parts as [Tensor, Tensor, Tensor];
      const [gate, up] = gateUp.parts as [Tensor, Tensor];
      const work: DecoderStepWork = {
        scope,
        starts,
        tokenIds: scratch.tokenIds,
        positions: scratch.positions,
        slots: scratch.slots,
        x: scratch.x,
        q,
        k,
        v,
        qkv,
        gateUp,
        q3: scratch.q3,
        k3: scratch.k3,
        attn,
        o: scratch.o,
        gate,
        up,
        down: scratch.down,
        prefill: prefill.map(({ offset, len }) => {
          const view = (t: Tensor, heads: number) => scope.reshape(scope.rows(t, offset, len), [1, len, heads, hd]);
          return { q: view(q, c.numHeads), k: view(k, c.numKvHeads), v: view(v, c.numKvHeads), ctx: view(attn, c.numHeads) };
        }),
        paged: cache === null ? null : this.pagedAttentionInputs(pagedRows, sequences, starts, offsets, cache, scratch, scope),
        boundaryDeltas: deltas.filter((d) => d.beforeLayer),
      };
      const taken = scratch;
      return new DecoderStepContext({ model: this, sequences, offsets, layout, deltas, cache, work, rollback, release: () => this.giveBackScratch(taken) });
    } catch (err) {
      rollback();
      scope.dispose();
      if (scratch) this.giveBackScratch(scratch);
      throw err;
    }
  }

  /** Scratch for a step of `rows` rows: a pooled one when there is one (see StepScratch), else a new one. */
  private takeScratch(rows: number): StepScratch {
    return this.scratchPool.get(rows)?.pop() ?? this.newScratch(rows);
  }

  /** Pools a step's scratch for the next step of its size, or frees it (too large, pool full, model disposed). */
  private giveBackScratch(scratch: StepScratch): void {
    let free = this.scratchPool.get(scratch.rows);
    if (this.disposed || scratch.rows > SCRATCH_POOL_MAX_ROWS || (free && free.length >= SCRATCH_POOL_PER_SIZE)) {
      scratch.scope.dispose();
      return;
    }
    if (free) {
      // Most recently returned last, so that the size dropped below is the one unused the longest.
      this.scratchPool.delete(scratch.rows);
      this.scratchPool.set(scratch.rows, free);
    } else {
      if (this.scratchPool.size >= SCRATCH_POOL_SIZES) {
        const [oldest, list] = this.scratchPool.entries().next().value as [number, StepScratch[]];
        for (const s of list) s.scope.dispose();
        this.scratchPool.delete(oldest);
      }
      free = [];
      this.scratchPool.set(scratch.rows, free);
    }
    free.push(scratch);
  }

  private newScratch(rows: number): StepScratch {
    const c = this.config;
    const be = this.backend;
    const H = c.hiddenSize;
    const hd = c.headDim;
    const scope = new Scope();
    try {
      const qkv = fusedOutput(scope, be, rows, hd, [c.numHeads, c.numKvHeads, c.numKvHeads]);
      const attn = scope.keep(Tensor.empty([rows, c.numHeads * hd], 'f32', be));
      return {
        rows,
        scope,
        tokenIds: scope.keep(Tensor.empty([rows], 'i32', be)),
        positions: scope.keep(Tensor.empty([rows], 'i32', be)),
        slots: scope.keep(Tensor.empty([rows], 'i32', be)),
        x: scope.keep(Tensor.empty([rows, H], 'f32', be)),
        qkv,
        gateUp: fusedOutput(scope, be, rows, c.intermediateSize, [1, 1]),
        q3: scope.reshape(qkv.parts[0]!, [rows, c.numHeads, hd]),
        k3: scope.reshape(qkv.parts[1]!, [rows, c.numKvHeads, hd]),
        attn,
        attn3: scope.reshape(attn, [rows, c.numHeads, hd]),
        o: scope.keep(Tensor.empty([rows, H], 'f32', be)),
        down: scope.keep(Tensor.empty([rows, H], 'f32', be)),
      };
    } catch (err) {
      scope.dispose();
      throw err;
    }
  }

  /** The token embeddings of the step's rows: a new f32 [rows, hidden] tensor, the caller's to dispose. */
  embed(ctx: DecoderStepContext): Tensor {
    this.checkContext(ctx, 'embed');
    const h = Tensor.empty([ctx.rows, this.config.hiddenSize], 'f32', this.backend);
    try {
      embedding(this.w(`${decoderTopModules.embedTokens}.weight`), ctx.work.tokenIds, { out: h });
    } catch (err) {
      h.dispose();
      throw err;
    }
    return h;
  }

  /**
   * Runs layers [from, to) on `hidden` (f32 [rows, hidden], updated in place; returned), writing their K/V for the
   * new tokens into `ctx.cache`, which must hold those layers. Call it once for the whole stack or piece by piece
   * in order. Each delta's `beforeLayer(j)` is called before layer j; one that returns a Promise is an error here
   * (use `layersAsync`).
   */
  layers(from: number, to: number, hidden: Tensor, ctx: DecoderStepContext): Tensor {
    this.checkLayers(from, to, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    for (let l = from; l < to; l++) {
      if (hooks.length > 0) runBeforeLayerHooks(hooks, { family: 'decoder', layer: l, hidden, layout: ctx.layout }, 'DecoderModel');
      this.runLayer(l, hidden, ctx);
    }
    return hidden;
  }

  /**
   * The first half of layer l on `hidden` (updated in place; returned): RMSNorm → q, k, v → RoPE → K/V into
   * `ctx.cache` (which must hold layer l) → attention → o → residual. `attention(l)` then `ffn(l)` is
   * `layers(l, l + 1)`, bit for bit. Each delta's `beforeLayer(l)` is called first (a Promise is an error here;
   * use `attentionAsync`).
   */
  attention(layer: number, hidden: Tensor, ctx: DecoderStepContext): Tensor {
    this.checkHalf('attention', layer, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    if (hooks.length > 0) runBeforeLayerHooks(hooks, { family: 'decoder', layer, hidden, layout: ctx.layout }, 'DecoderModel');
    this.runAttention(layer, hidden, ctx);
    return hidden;
  }

  /** `attention`, awaiting each delta's `beforeLayer(l)` first. */
  async attentionAsync(layer: number, hidden: Tensor, ctx: DecoderStepContext): Promise<Tensor> {
    this.checkHalf('attentionAsync', layer, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    if (hooks.length > 0) {
      await runBeforeLayerHooksAsync(hooks, { family: 'decoder', layer, hidden, layout: ctx.layout });
      this.checkContext(ctx, 'attentionAsync'); // disposed while we waited?
    }
    this.runAttention(layer, hidden, ctx);
    return hidden;
  }

  /**
   * The second half of layer l on `hidden` (updated in place; returned): RMSNorm → gate, up → SiLU(gate)·up →
   * down → residual. It reads and writes no KV, so it runs on any step, a KV-free one (`cache: null`) included.
   * No `beforeLayer` call: the layer's boundary is before its attention half.
   */
  ffn(layer: number, hidden: Tensor, ctx: DecoderStepContext): Tensor {
    this.checkHalf('ffn', layer, hidden, ctx);
    this.runFfn(layer, hidden, ctx);
    return hidden;
  }

  /** `layers`, awaiting each delta's `beforeLayer(j)` before layer j. */
  async layersAsync(from: number, to: number, hidden: Tensor, ctx: DecoderStepContext): Promise<Tensor> {
    this.checkLayers(from, to, hidden, ctx);
    const hooks = ctx.work.boundaryDeltas;
    for (let l = from; l < to; l++) {
      if (hooks.length > 0) {
        await runBeforeLayerHooksAsync(hooks, { family: 'decoder', layer: l, hidden, layout: ctx.layout });
        this.checkContext(ctx, 'layersAsync'); // disposed while we waited?
      }
      this.runLayer(l, hidden, ctx);
    }
    return hidden;
  }

  /**
   * The final RMSNorm and the LM head: a new f32 tensor of logits, [batch, vocab] for each sequence's last new
   * token ('last', default) or [rows, vocab] for every row ('all').
   */
  head(hidden: Tensor, ctx: DecoderStepContext, rows: 'last' | 'all' = 'last'): Tensor {
    this.checkContext(ctx, 'head');
    this.checkHidden(hidden, ctx);
    const c = this.config;
    const be = this.backend;
    return withScope((scope) => {
      let x = hidden;
      // Every sequence's last row, unless those are all the rows (a decode step: one new token each).
      if (rows === 'last' && ctx.rows !== ctx.sequences.length) {
        const last = Int32Array.from(ctx.sequences, (_, b) => ctx.offsets[b + 1]! - 1);
        x = scope.keep(gatherRows(hidden, scope.keep(Tensor.from(last, [last.length], { backend: be }))));
      }
      const normed = scope.keep(rmsNorm(x, this.w(`${decoderTopModules.finalNorm}.weight`), { eps: c.rmsNormEps }));
      const head = this.w(c.tieWordEmbeddings ? `${decoderTopModules.embedTokens}.weight` : `${decoderTopModules.lmHead}.weight`);
      const logits = Tensor.empty([normed.shape[0]!, head.shape[0]!], 'f32', be);
      try {
        this.project(normed, head, logits);
      } catch (err) {
        logits.dispose();
        throw err;
      }
      return logits;
    });
  }

  private checkContext(ctx: DecoderStepContext, what: string): void {
    if (ctx.model !== this) throw new InvalidArgumentError(`DecoderModel.${what}: the step was prepared by another model`);
    if (ctx.disposed) throw new InvalidArgumentError(`DecoderModel.${what}: the step was disposed`);
  }

  private checkHidden(hidden: Tensor, ctx: DecoderStepContext): void {
    const s = hidden.shape;
    if (hidden.dtype !== 'f32' || s.length !== 2 || s[0] !== ctx.rows || s[1] !== this.config.hiddenSize || hidden.backend.binding !== this.backend.binding) {
      throw new InvalidArgumentError(
        `DecoderModel: hidden is ${hidden.dtype} [${s.join(', ')}], expected f32 [${ctx.rows}, ${this.config.hiddenSize}] (rows, hidden) on the model's backend`);
    }
  }

  private checkLayers(from: number, to: number, hidden: Tensor, ctx: DecoderStepContext): void {
    this.checkContext(ctx, 'layers');
    const L = this.config.numLayers;
    if (!Number.isInteger(from) || !Number.isInteger(to) || from < 0 || from > to || to > L) {
      throw new InvalidArgumentError(`DecoderModel.layers: [${from}, ${to}) is not a range of layers within [0, ${L})`);
    }
    if (from < to && ctx.cache === null) {
      throw new InvalidArgumentError(`DecoderModel.layers: layers [${from}, ${to}) need a KV cache, but the step was prepared without one (cache: null)`);
    }
    if (from < to && ctx.cache !== null) {
      const { first, end } = cacheLayerRange(ctx.cache);
      if (from < first || to > end) {
        throw new InvalidArgumentError(`DecoderModel.layers: layers [${from}, ${to}) are not all in the step's KV cache, which holds layers [${first}, ${end})`);
      }
    }
    this.checkHidden(hidden, ctx);
  }

  private checkHalf(what: 'attention' | 'attentionAsync' | 'ffn', layer: number, hidden: Tensor, ctx: DecoderStepContext): void {
    this.checkContext(ctx, what);
    const L = this.config.numLayers;
    if (!Number.isInteger(layer) || layer < 0 || layer >= L) {
      throw new InvalidArgumentError(`DecoderModel.${what}: layer ${layer} is not a layer within [0, ${L})`);
    }
    if (what !== 'ffn') {
      if (ctx.cache === null) {
        throw new InvalidArgumentError(`DecoderModel.${what}: layer ${layer}'s attention needs a KV cache, but the step was prepared without one (cache: null)`);
      }
      const { first, end } = cacheLayerRange(ctx.cache);
      if (layer < first || layer >= end) {
        throw new InvalidArgumentError(`DecoderModel.${what}: layer ${layer} is not in the step's KV cache, which holds layers [${first}, ${end})`);
      }
    }
    this.checkHidden(hidden, ctx);
  }

  /**
   * One decoder layer on `h`, in place: its attention half, then its FFN half. The layer body exists once, in
   * runAttention and runFfn, which every path (`layers`, `attention`, `ffn`, sync and async) calls.
   */
  private runLayer(l: number, h: Tensor, ctx: DecoderStepContext): void {
    this.runAttention(l, h, ctx);
    this.runFfn(l, h, ctx);
  }

  /** The linear-site hook runner of layer l. */
  private siteRunner(l: number, ctx: DecoderStepContext): (name: DecoderLinearSite, input: Tensor, y: Tensor) => void {
    const { deltas, layout } = ctx;
    const lin = decoderLinearModules(l);
    return (name, input, y) =>
      runLinearHooks(deltas, { family: 'decoder', site: name, layer: l, x: input, outputs: [{ slice: name, module: lin[name], y }], layout });
  }

  /**
   * out = x · weightᵀ. Every linear layer of the model is applied here (the fused ones through projectFused), so a
   * different way of applying weights (another dtype, another kernel) changes this one method.
   */
  private project(x: Tensor, weight: Tensor, out: Tensor): void {
    linear(x, weight, undefined, { out, compute: this.weights.compute });
  }

  /**
   * The linears of `modules` (same input, e.g. q, k, v) into the parts of `dst`: one GEMM over their stacked
   * weights, then the split; or, where the weights cannot be stacked (see ModelWeights.fusedRows), one GEMM each.
   */
  private projectFused(x: Tensor, modules: readonly string[], dst: FusedOutput): void {
    const stacked = this.weights.fusedRows(modules.map((m) => `${m}.weight`));
    if (stacked === null) {
      modules.forEach((m, i) => this.project(x, this.w(`${m}.weight`), dst.parts[i]!));
      return;
    }
    this.project(x, stacked, dst.out);
    const split = dst.split;
    if (split) split.idx.forEach((idx, i) => gatherRows(split.src, idx, { out: split.dst[i]! }));
  }

  /** The attention half of layer l on `h`, in place (the caller checked that the cache holds layer l). */
  private runAttention(l: number, h: Tensor, ctx: DecoderStepContext): void {
    const c = this.config;
    const { deltas, layout } = ctx;
    const cache = ctx.cache!;
    const { x, q, k, v, qkv, q3, k3, attn, o, positions, slots, prefill, paged } = ctx.work;
    const lin = decoderLinearModules(l);
    const norm = decoderNormModules(l);
    const site = this.siteRunner(l, ctx);

    rmsNorm(h, this.w(`${norm.input_norm}.weight`), { eps: c.rmsNormEps, out: x });
    runNormHooks(deltas, { family: 'decoder', site: 'input_norm', layer: l, module: norm.input_norm, x: h, y: x, layout });
    this.projectFused(x, [lin.q, lin.k, lin.v], qkv);
    site('q', x, q);
    site('k', x, k);
    site('v', x, v);
    rope(q3, positions, { base: c.ropeTheta });
    rope(k3, positions, { base: c.ropeTheta });

    const cacheRows = cache.layerRows(l);
    scatterRows(k, slots, cacheRows.k);
    scatterRows(v, slots, cacheRows.v);
    ctx.markRan(l);
    for (const pv of prefill) attentionPrefill(pv.q, pv.k, pv.v, { causal: true, out: pv.ctx });
    if (paged) {
      const layerCache = cache.layer(l);
      if (paged.rowIdx && paged.q) gatherRows(q, paged.rowIdx, { out: paged.q });
      attentionDecode(paged.q3 ?? q3, layerCache.k, layerCache.v, paged.table, paged.lens, { out: paged.ctx3, hostIndices: paged.host });
      if (paged.rowIdx) scatterRows(paged.ctx, paged.rowIdx, attn);
    }

    this.project(attn, this.w(`${lin.o}.weight`), o);
    site('o', attn, o);
    add(h, o, { out: h });
  }

  /** The FFN half of layer l on `h`, in place. */
  private runFfn(l: number, h: Tensor, ctx: DecoderStepContext): void {
    const c = this.config;
    const { deltas, layout } = ctx;
    const { x, gate, up, gateUp, down } = ctx.work;
    const lin = decoderLinearModules(l);
    const norm = decoderNormModules(l);
    const site = this.siteRunner(l, ctx);
    rmsNorm(h, this.w(`${norm.post_attn_norm}.weight`), { eps: c.rmsNormEps, out: x });
    runNormHooks(deltas, { family: 'decoder', site: 'post_attn_norm', layer: l, module: norm.post_attn_norm, x: h, y: x, layout });
    this.projectFused(x, [lin.gate, lin.up], gateUp);
    site('gate', x, gate);
    site('up', x, up);
    siluMul(gate, up, { out: gate });
    this.project(gate, this.w(`${lin.down}.weight`), down);
    site('down', gate, down);
    add(h, down, { out: h });
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
    scratch: StepScratch,
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
    const ctxRows = contiguous ? scratch.attn : scope.keep(Tensor.empty([n, qDim], 'f32', be));
    return {
      table: scope.keep(Tensor.from(table, [n, maxPages], { backend: be })),
      lens: scope.keep(Tensor.from(lens, [n], { backend: be })),
      // The host mirror of table and lens: every layer's attention call checks it instead of reading them back.
      host: { blockTable: table, contextLens: lens },
      rowIdx: contiguous ? null : scope.keep(Tensor.from(Int32Array.from(rows), [n], { backend: be })),
      q: qRows,
      ctx: ctxRows,
      q3: contiguous ? null : scope.reshape(qRows!, [n, c.numHeads, c.headDim]),
      ctx3: contiguous ? scratch.attn3 : scope.reshape(ctxRows, [n, c.numHeads, c.headDim]),
    };
  }

  /**
   * Frees the pooled step scratch (see StepScratch): at most SCRATCH_POOL_PER_SIZE per row count for
   * SCRATCH_POOL_SIZES row counts of up to SCRATCH_POOL_MAX_ROWS rows, about 340 KB a row at Llama-7B's sizes. Steps
   * open now keep theirs; later steps make new scratch and pool it again. For a caller that accounts for memory.
   */
  trimScratch(): void {
    for (const list of this.scratchPool.values()) for (const s of list) s.scope.dispose();
    this.scratchPool.clear();
  }

  dispose(): void {
    this.disposed = true;
    this.trimScratch();
    this.weights.dispose();
  }
}

/**
 * Scratch for a fused projection over `rows` rows whose parts have `units[i]` units of `unit` features each (see
 * FusedOutput), kept in `scope`.
 */
function fusedOutput(scope: Scope, be: Backend, rows: number, unit: number, units: readonly number[]): FusedOutput {
  const total = units.reduce((a, b) => a + b, 0);
  const out = scope.keep(Tensor.empty([rows, total * unit], 'f32', be));
  if (rows === 1) {
    // One row: part i is units [first, first + units[i]) of the row, a row view of out seen as [total, unit].
    const flat = scope.reshape(out, [total, unit]);
    let first = 0;
    const parts = units.map((n) => {
      const part = scope.reshape(scope.rows(flat, first, n), [1, n * unit]);
      first += n;
      return part;
    });
    return { out, parts, split: null };
  }
  const parts = units.map((n) => scope.keep(Tensor.empty([rows, n * unit], 'f32', be)));
  let first = 0;
  const idx = units.map((n) => {
    const rowsOf = new Int32Array(rows * n);
    for (let t = 0; t < rows; t++) for (let u = 0; u < n; u++) rowsOf[t * n + u] = t * total + first + u;
    first += n;
    return scope.keep(Tensor.from(rowsOf, [rows * n], { backend: be }));
  });
  return {
    out,
    parts,
    split: { src: scope.reshape(out, [rows * total, unit]), idx, dst: units.map((n, i) => scope.reshape(parts[i]!, [rows * n, unit])) },
  };
}
