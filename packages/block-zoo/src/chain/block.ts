/**
 * One block of the zoo as the staged engine runs it: a DecoderModel over the block's own tensors (the pool's, so a
 * tensor shared by several blocks is one native tensor), the block's PE delta if it has one, and a KV cache of its
 * own over the attention layers it holds (none for an embedding, FFN or head block). `run` executes the manifest's
 * stages — embed → ffn(l)? → layers(a, b) → attention(b)? → head — on the hidden state in place. A surrogate's
 * manifest runs too: the target's stages on the surrogate's pruned tensors, with an engine config (and a KV cache)
 * of the surrogate's own head and channel counts.
 *
 * Variants of one base block (the foundation's component and the fused PE blocks that modify it: same stages, same
 * base tensors) can run as one batch: `prepareTogether` prepares one step over several runtimes' sequences, each
 * row keyed to its runtime's delta, so the base weights pass once for all of them. Such runtimes share one KV cache
 * (`BlockRuntimeOptions.cache`), since a step writes its K/V into one.
 */
import {
  type DecoderConfig,
  DecoderModel,
  type DecoderSequence,
  type DecoderStepContext,
  decoderTensorShapes,
  LoraDelta,
  type ModelDelta,
  ModelWeights,
  mergeLoraIntoWeights,
  PagedKvCache,
  type SequenceId,
} from '@tessera/engine';
import { cast, type Tensor } from '@tessera/native';

import { decoderConfigOf } from '../ingest/index.js';
import { componentAt, componentOfTensor, type EngineStage } from '../planner/arch.js';
import { ZooInvalidError } from '../planner/errors.js';
import type { BlockManifest, FusedPe } from '../planner/manifest.js';
import type { DevicePool } from '../store/device-pool.js';
import { AdapterDelta, BitFitDelta, type BottleneckAdapter, type LayerPrefix, loraConfigOf, loraWeightsOf, prefixViews, writePrefixKv } from './pe-deltas.js';

/** How a fused LoRA runs: as the engine's LoraDelta at the hook sites, or merged into copies of its host weights. */
export type LoraMode = 'delta' | 'merged';

export interface BlockRuntimeOptions {
  /** Pages of the block's own KV cache (each page: 16 tokens of every attention layer the block holds). */
  kvPages: number;
  lora: LoraMode;
  /** The engine config's position limit (the zoo's architecture signature does not record one). */
  maxPositions: number;
  /**
   * A KV cache shared with the other variants of this base block (`variantSignature` equal): the caller owns it
   * (the runtime neither sizes nor frees it). Default: a cache of the runtime's own with `kvPages` pages.
   */
  cache?: PagedKvCache;
}

/**
 * What variants of one base block have in common: the stages, the architecture and the base tensors (a fused PE
 * block's own tensors left out). Runtimes with equal signatures may run together (`prepareTogether`); null for a
 * block that never does (a surrogate runs its own pruned shapes, and no delta).
 */
export function variantSignature(m: BlockManifest): string | null {
  if (m.kind === 'surrogate' || m.stages === null) return null;
  const base = m.tensors.filter((t) => m.pe === null || isBaseTensor(t.name)).map((t) => `${t.name}=${t.id}`);
  return JSON.stringify([m.archSig, m.stages, base.sort()]);
}

/** The layers whose attention half the stages run (and whose K/V the block's cache holds), as [first, end). */
export function attentionLayersOf(stages: readonly EngineStage[]): { first: number; end: number } | null {
  const layers: number[] = [];
  for (const s of stages) {
    if (s.stage === 'layers') for (let l = s.from; l < s.to; l++) layers.push(l);
    else if (s.stage === 'attention') layers.push(s.layer);
  }
  if (layers.length === 0) return null;
  return { first: layers[0]!, end: layers.at(-1)! + 1 };
}

/** A KV cache of `pages` pages over the block's attention layers, in its heads' shape; null for a block without attention. */
export function blockKvCache(m: BlockManifest, pages: number, backend: DevicePool['backend']): PagedKvCache | null {
  const kv = m.stages ? attentionLayersOf(m.stages) : null;
  if (!kv) return null;
  const c = decoderConfigOf(m.archSig);
  return PagedKvCache.create({ numLayers: kv.end - kv.first, firstLayer: kv.first, numKvHeads: c.numKvHeads, headDim: c.headDim, numPages: pages }, backend);
}

export class BlockRuntime {
  readonly manifest: BlockManifest;
  readonly config: DecoderConfig;
  readonly model: DecoderModel;
  /** The block's KV cache over its attention layers; null for a block without attention. */
  readonly cache: PagedKvCache | null;
  readonly deltas: readonly ModelDelta[];
  /** Prefix-tuning K/V per layer, written into a sequence's pages before its first token; null when none. */
  readonly prefix: ReadonlyMap<number, LayerPrefix> | null;
  /** The fused delta the runtime applies: the manifest's, or null for a surrogate (its tensors are all it runs). */
  readonly pe: FusedPe | null;
  /** variantSignature(manifest), computed once. */
  readonly signature: string | null;
  /** The SegmentLayout key of this runtime's rows: its delta applies to the rows under it (null: no delta). */
  private readonly rowKey: string | null;
  private readonly ownsCache: boolean;
  private readonly stages: readonly EngineStage[];
  private readonly pool: DevicePool;
  /** Tensors this runtime made (casts, merged copies, prefix views, delta scratch): the pool's are not ours. */
  private readonly owned: Tensor[] = [];
  private readonly disposables: { dispose(): void }[] = [];
  private disposed = false;

  constructor(manifest: BlockManifest, pool: DevicePool, options: BlockRuntimeOptions) {
    if (manifest.span === null || manifest.stages === null) throw new ZooInvalidError(`block ${manifest.blockId} is a ${manifest.kind}; only span blocks run as chain blocks`);
    this.manifest = manifest;
    this.stages = manifest.stages;
    this.pool = pool;
    // A surrogate's archSig is its own (fewer heads, fewer channels): the engine runs the pruned shapes.
    this.config = { ...decoderConfigOf(manifest.archSig), maxPositions: options.maxPositions };
    if (manifest.kind === 'surrogate') checkSurrogateTensors(manifest, this.config);
    // A surrogate is fitted on its target's effective weights (a PE delta merged before pruning): it runs no delta.
    this.pe = manifest.kind === 'surrogate' ? null : manifest.pe;
    this.signature = variantSignature(manifest);
    // Keyed by the block, so the deltas of several variants in one batch never meet each other's rows.
    const rowKey = manifest.blockId;
    this.rowKey = this.pe ? rowKey : null;
    this.ownsCache = options.cache === undefined;
    const tensors = pool.acquire(manifest);
    try {
      const weights = new Map<string, Tensor>();
      const peTensors = new Map<string, Tensor>();
      for (const ref of manifest.tensors) {
        const t = tensors.get(ref.name)!;
        if (this.pe && !isBaseTensor(ref.name)) peTensors.set(ref.name, t);
        else weights.set(ref.name, t.shape.length === 1 && t.dtype !== 'f32' ? this.own(cast(t, 'f32')) : t);
      }
      const deltas: ModelDelta[] = [];
      this.prefix = null;
      if (this.pe) {
        const what = `block ${manifest.blockId} (${this.pe.method})`;
        const component = componentAt(manifest.span.start, manifest.archSig.numLayers);
        switch (this.pe.method) {
          case 'lora': {
            const { weights: lora, owned } = loraWeightsOf(what, peTensors, loraConfigOf(this.pe.config, what));
            this.owned.push(...owned);
            if (options.lora === 'merged') {
              // Copies of the targeted weights, so the pool's shared tensors stay the foundation's.
              for (const module of lora.modules.keys()) {
                const name = `${module}.weight`;
                const base = weights.get(name);
                if (!base) throw new ZooInvalidError(`${what}: the LoRA targets ${module}, whose weight the block does not hold`);
                weights.set(name, this.own(cast(base, 'f32')));
              }
              mergeLoraIntoWeights(new ModelWeights(weights, pool.backend), lora);
            } else {
              deltas.push(this.keep(new LoraDelta(new Map([[rowKey, lora]]))));
            }
            break;
          }
          case 'bitfit':
            deltas.push(this.keep(new BitFitDelta(new Map([[rowKey, peTensors]]))));
            break;
          case 'adapter': {
            if (component.layer === null) throw new ZooInvalidError(`${what}: an adapter sits on an attention or FFN component, not the ${component.kind}`);
            deltas.push(new AdapterDelta(new Map([[rowKey, [{ layer: component.layer, component: component.kind as 'attention' | 'ffn', adapter: this.bottleneckOf(peTensors, what) }]]])));
            break;
          }
          case 'prefix': {
            if (component.kind !== 'attention' || peTensors.size !== 1) {
              throw new ZooInvalidError(`${what}: a prefix is one [2, P, kvDim] tensor fused with an attention component, got ${peTensors.size} tensor(s) on the ${component.kind}`);
            }
            const views = prefixViews([...peTensors.values()][0]!, what);
            this.owned.push(views.key, views.value);
            this.prefix = new Map([[component.layer!, views]]);
            break;
          }
        }
      }
      this.deltas = deltas;
      this.model = new DecoderModel(this.config, new ModelWeights(weights, pool.backend));
      const kv = attentionLayersOf(this.stages);
      if (options.cache !== undefined) {
        const shared = options.cache;
        if (!kv || shared.numLayers !== kv.end - kv.first || shared.firstLayer !== kv.first || shared.numKvHeads !== this.config.numKvHeads || shared.headDim !== this.config.headDim) {
          throw new ZooInvalidError(`block ${manifest.blockId}: the shared KV cache does not hold its attention layers with ${this.config.numKvHeads} kv heads of ${this.config.headDim}`);
        }
      }
      this.cache = kv ? (options.cache ?? blockKvCache(manifest, options.kvPages, pool.backend)) : null;
      if (this.prefix && (!kv || kv.end - kv.first !== 1)) throw new ZooInvalidError(`block ${manifest.blockId}: a prefix block must hold exactly its attention layer`);
    } catch (err) {
      this.releaseResources();
      throw err;
    }
  }

  /** Whether the block starts at the token ids (its first stage is embed). */
  get startsAtTokens(): boolean {
    return this.stages[0]?.stage === 'embed';
  }

  /** Whether the block ends at the logits (its last stage is head). */
  get endsAtLogits(): boolean {
    return this.stages.at(-1)?.stage === 'head';
  }

  /** Prepares one step of the block over `sequences` (their K/V, if the block holds attention, in its cache). */
  prepare(sequences: readonly { id: SequenceId; tokens: ArrayLike<number> }[]): DecoderStepContext {
    return BlockRuntime.prepareTogether([{ runtime: this, sequences }]);
  }

  /**
   * Prepares one step over several variants of one base block (equal `signature`, one KV cache): their sequences in
   * order, each row keyed to its runtime's delta, so one `run` of the first runtime passes the base weights once for
   * all of them. A row's result is the one its own runtime gives it alone (the kernels are batch-invariant and each
   * delta touches only its rows).
   */
  static prepareTogether(parts: readonly { runtime: BlockRuntime; sequences: readonly { id: SequenceId; tokens: ArrayLike<number> }[] }[]): DecoderStepContext {
    const first = parts[0]?.runtime;
    if (!first) throw new ZooInvalidError('prepareTogether needs at least one runtime');
    const seqs: DecoderSequence[] = [];
    const deltas: ModelDelta[] = [];
    const seen = new Set<BlockRuntime>();
    for (const { runtime, sequences } of parts) {
      runtime.checkLive();
      if (runtime !== first && (runtime.signature === null || runtime.signature !== first.signature || runtime.cache !== first.cache)) {
        throw new ZooInvalidError(`blocks ${first.manifest.blockId} and ${runtime.manifest.blockId} are not variants of one base block sharing a KV cache`);
      }
      // A runtime's deltas once, however many parts it has.
      if (!seen.has(runtime)) deltas.push(...runtime.deltas);
      seen.add(runtime);
      for (const s of sequences) seqs.push({ id: s.id, tokens: s.tokens, key: runtime.rowKey });
    }
    return first.model.prepare(seqs, { cache: first.cache, deltas });
  }

  /** Writes the block's prefix K/V for a sequence new to its cache; false when the block has no prefix or knows the sequence. */
  admitPrefix(id: SequenceId): boolean {
    if (!this.prefix || !this.cache || this.cache.hasSequence(id)) return false;
    writePrefixKv(this.cache, id, this.prefix);
    return true;
  }

  /**
   * Runs the block's stages. `hidden` is the previous block's output (f32 [rows, hidden], updated in place and
   * returned as `hidden`), or null for a block that starts at the embedding (which makes a new one). A block that
   * ends at the head returns `logits` (new) and leaves `hidden` as its input.
   */
  run(hidden: Tensor | null, ctx: DecoderStepContext, logits: 'last' | 'all'): { hidden: Tensor | null; logits: Tensor | null } {
    this.checkLive();
    let h = hidden;
    let made: Tensor | null = null;
    let out: Tensor | null = null;
    try {
      for (const s of this.stages) {
        switch (s.stage) {
          case 'embed':
            if (h !== null) throw new ZooInvalidError(`block ${this.manifest.blockId} starts at the embedding but was given a hidden state`);
            h = made = this.model.embed(ctx);
            break;
          case 'ffn':
            this.model.ffn(s.layer, this.need(h), ctx);
            break;
          case 'layers':
            this.model.layers(s.from, s.to, this.need(h), ctx);
            break;
          case 'attention':
            this.model.attention(s.layer, this.need(h), ctx);
            break;
          case 'head':
            out = this.model.head(this.need(h), ctx, logits);
            break;
        }
      }
      return { hidden: h, logits: out };
    } catch (err) {
      made?.dispose();
      (out as Tensor | null)?.dispose();
      throw err;
    }
  }

  /** Forgets a sequence (its pages back to the block's cache). */
  release(id: SequenceId): void {
    if (this.cache?.hasSequence(id)) this.cache.release(id);
  }

  /** The sequence's committed tokens in this block's cache (prefix included), or null when the block holds no KV or not the sequence. */
  length(id: SequenceId): number | null {
    return this.cache?.hasSequence(id) ? this.cache.length(id) : null;
  }

  /** Frees the cache and what the runtime made, and releases the block in the pool. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.releaseResources();
  }

  private releaseResources(): void {
    this.disposed = true;
    if (this.ownsCache) (this as { cache: PagedKvCache | null }).cache?.dispose();
    for (const d of this.disposables) d.dispose();
    for (const t of this.owned) t.dispose();
    this.owned.length = 0;
    this.pool.release(this.manifest.blockId);
  }

  private need(h: Tensor | null): Tensor {
    if (h === null) throw new ZooInvalidError(`block ${this.manifest.blockId} does not start at the embedding and was given no hidden state`);
    return h;
  }

  private checkLive(): void {
    if (this.disposed) throw new ZooInvalidError(`block ${this.manifest.blockId}: the runtime was disposed`);
  }

  private own(t: Tensor): Tensor {
    this.owned.push(t);
    return t;
  }

  private keep<T extends { dispose(): void }>(d: T): T {
    this.disposables.push(d);
    return d;
  }

  private bottleneckOf(tensors: ReadonlyMap<string, Tensor>, what: string): BottleneckAdapter {
    const pick = (part: 'down' | 'up') => {
      const found = [...tensors].filter(([name]) => new RegExp(`(^|\\.)${part}(\\.weight)?$`).test(name));
      if (found.length !== 1) throw new ZooInvalidError(`${what}: expected one adapter tensor named …${part} (or …${part}.weight), found ${found.length} among ${[...tensors.keys()].join(', ')}`);
      const t = found[0]![1];
      return t.dtype === 'f32' ? t : this.own(cast(t, 'f32'));
    };
    if (tensors.size !== 2) throw new ZooInvalidError(`${what}: a bottleneck adapter is two tensors (down, up), got ${[...tensors.keys()].join(', ')}`);
    return { down: pick('down'), up: pick('up') };
  }
}

/**
 * A surrogate's tensors are Llama weights in the shapes its own archSig implies (pruned heads and channels), and
 * nothing else (no PE delta: the surrogate was fitted on the merged weights). Checked before anything is resident,
 * so a mismatch is a typed error here rather than a native shape error mid-run.
 */
function checkSurrogateTensors(m: BlockManifest, config: DecoderConfig): void {
  const shapes = decoderTensorShapes(config);
  const span = m.span!;
  const have = new Set(m.tensors.map((t) => t.name));
  for (const name of shapes.keys()) {
    const c = componentOfTensor(name, config.numLayers);
    if (c !== null && c >= span.start && c < span.end && !have.has(name)) throw new ZooInvalidError(`surrogate ${m.blockId} has no ${name}, which its stages need`);
  }
  for (const ref of m.tensors) {
    const want = shapes.get(ref.name);
    if (!want) throw new ZooInvalidError(`surrogate ${m.blockId}: ${ref.name} is not a weight of its architecture (a surrogate carries no PE delta)`);
    if (ref.shape.length !== want.length || ref.shape.some((d, i) => d !== want[i])) {
      throw new ZooInvalidError(`surrogate ${m.blockId}: ${ref.name} is [${ref.shape.join(', ')}], its archSig implies [${want.join(', ')}]`);
    }
  }
}

const BASE_TENSOR_RE = /^(model\.embed_tokens\.weight|model\.norm\.weight|lm_head\.weight|model\.layers\.\d+\.(input_layernorm|post_attention_layernorm)\.weight|model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight)$/;

/** A Llama checkpoint weight (everything else in a fused block is the PE delta's). */
function isBaseTensor(name: string): boolean {
  return BASE_TENSOR_RE.test(name);
}
