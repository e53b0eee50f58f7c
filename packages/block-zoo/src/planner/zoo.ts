/**
 * The block zoo (design note §3): foundations, their parameter-efficient and full fine-tunes, partitioned lazily
 * into blocks (§3.2, algorithm 5.1), the chain of blocks of every application, equivalence edges between segments
 * (§3.3), stitches between families (§3.4) and surrogates (§3.5).
 *
 * Partitions are kept per weight set (a foundation or a full fine-tune) as sorted cut points in component
 * coordinates; blocks are derived from the cuts and sealed by content, and chains are derived from the partitions,
 * so a split (ensureBoundary) changes every chain that used the split block at once and no chain can go stale.
 */
import { type ArchSig, type Span, checkSpan, componentAt, componentCount, componentOfTensor, layerRunSpan } from './arch.js';
import { ZooConflictError, ZooIntegrityError, ZooInvalidError, ZooNotFoundError } from './errors.js';
import { type BlockId, type TensorId, tensorByteLength } from './ids.js';
import {
  type BlockManifest,
  type FusedPe,
  PE_METHODS,
  type PeMethod,
  spanManifest,
  stitchManifest,
  surrogateManifest,
  namedSize,
  type TensorRef,
  uniqueSize,
} from './manifest.js';

/** Cosine of logit-lens distributions at or above which two segments are equivalent (design note §5.0, A4). */
export const DEFAULT_EQUIVALENCE_THRESHOLD = 0.98;

/** A whole checkpoint: every tensor with its content id. */
export interface ModelDescription {
  id: string;
  archSig: ArchSig;
  tensors: readonly TensorRef[];
}

/** A parameter-efficient fine-tune: its own tensors only, each placed in the component it modifies. */
export interface PeDescription {
  id: string;
  /** The model it was trained on (a foundation or a full fine-tune already in the zoo). */
  base: string;
  method: PeMethod;
  config: FusedPe['config'];
  /** `component` may be left out for names that say it (PEFT's `base_model.model.model.layers.3.self_attn…`). */
  tensors: readonly (TensorRef & { component?: number })[];
}

/** A run of components of one weight set (foundation or full fine-tune). */
export interface Segment {
  model: string;
  span: Span;
}

export interface EquivalenceEdge {
  a: Segment;
  b: Segment;
  /** Mean logit-lens cosine over the segment's positions and the calibration tokens. */
  score: number;
  threshold: number;
  method: string;
  /** Hash of the calibration data both sides were fed. */
  datasetHash: string;
  /** True when the two sides differ in hidden size, so crossing needs a stitch (§3.4). */
  requiresStitch: boolean;
}

export interface StitchEntry {
  fromFamily: string;
  toFamily: string;
  blockId: BlockId;
}

export interface SurrogateLink {
  target: BlockId;
  surrogate: BlockId;
  /** Cosine of the surrogate's output against the real block's on the calibration data. */
  cosine: number;
  /** Measured time of the block over time of the surrogate. */
  speedup: number;
  /** Fraction of the block's parameters removed. */
  prunedFraction: number;
}

export type ModelKind = 'foundation' | 'full' | 'pe';

export interface ModelInfo {
  id: string;
  kind: ModelKind;
  /** The root foundation's id (the family). */
  family: string;
  /** What it was derived from: null for a foundation. */
  base: string | null;
  archSig: ArchSig;
  pe: FusedPe | null;
}

export interface Chain {
  app: string;
  family: string;
  blocks: BlockManifest[];
}

export interface StorageStats {
  /** Distinct tensors held by any application's chain, surrogates and stitches. */
  uniqueTensors: number;
  uniqueBytes: number;
  /** Bytes per-model provisioning would hold: every named tensor of every application's model. */
  logicalBytes: number;
  /** 1 − unique / logical. */
  redundancy: number;
  /** Distinct blocks in all chains, and chain positions in total (Σ chain lengths). */
  uniqueBlocks: number;
  chainPositions: number;
}

interface WeightSet {
  info: ModelInfo;
  /** Tensor refs per component. */
  components: TensorRef[][];
  /** Sorted cut points, always containing 0 and componentCount. */
  cuts: number[];
}

interface PeModel {
  info: ModelInfo;
  /** Component index → the delta's tensors there. */
  fused: Map<number, TensorRef[]>;
}

/** The JSON form of a zoo (see {@link BlockZoo.toJSON}). */
export interface ZooSnapshot {
  version: 1;
  threshold: number;
  /** Model ids in the order they were added. */
  order: string[];
  weightSets: { info: ModelInfo; components: TensorRef[][]; cuts: number[] }[];
  peModels: { info: ModelInfo; fused: [number, TensorRef[]][] }[];
  edges: EquivalenceEdge[];
  extraBlocks: BlockManifest[];
  stitches: StitchEntry[];
  surrogates: SurrogateLink[];
}

function sameArch(a: ArchSig, b: ArchSig): boolean {
  return (Object.keys(a) as (keyof ArchSig)[]).every((k) => a[k] === b[k]);
}

export class BlockZoo {
  readonly threshold: number;
  private readonly tensors = new Map<TensorId, { dtype: string; shape: readonly number[] }>();
  private readonly weightSets = new Map<string, WeightSet>();
  private readonly peModels = new Map<string, PeModel>();
  /** Models in the order they were added (chains are listed in this order). */
  private readonly order: string[] = [];
  private readonly edgeList: EquivalenceEdge[] = [];
  /** Stitch and surrogate manifests (they sit outside every chain). */
  private readonly extra = new Map<BlockId, BlockManifest>();
  private readonly stitchList: StitchEntry[] = [];
  private readonly surrogateList: SurrogateLink[] = [];
  /**
   * Chains and the block index, memoised until the next change: each chain re-derives (and seals) its manifests,
   * and the scheduler asks for hop routes per request and hop. Every change to the models, the cuts or the extra
   * blocks calls `changed()` right after it.
   */
  private memo: { chains: Map<string, Chain>; blocks: Map<BlockId, BlockManifest> | null } = { chains: new Map(), blocks: null };

  constructor(options: { threshold?: number } = {}) {
    const t = options.threshold ?? DEFAULT_EQUIVALENCE_THRESHOLD;
    if (!(t > 0 && t <= 1)) throw new ZooInvalidError(`the equivalence threshold must be in (0, 1], got ${t}`);
    this.threshold = t;
  }

  // ─── Ingest ───────────────────────────────────────────────────────────────────────────────────────────────

  /** A foundation: one block covering the whole model until a later model needs a boundary (lazy, §3.2). */
  addFoundation(desc: ModelDescription): ModelInfo {
    const info: ModelInfo = { id: desc.id, kind: 'foundation', family: desc.id, base: null, archSig: { ...desc.archSig }, pe: null };
    this.addWeightSet(info, desc);
    return info;
  }

  /**
   * A parameter-efficient fine-tune (algorithm 5.1, PE branch): the foundation is split at the boundaries of every
   * component the delta modifies, so everything else stays shared, and each modified component becomes one fused
   * block (host tensors + delta tensors; a LoRA branch is never a block by itself, principle 2).
   */
  addPeFineTune(desc: PeDescription): ModelInfo {
    this.checkNewId(desc.id);
    const base = this.weightSet(desc.base);
    if (!PE_METHODS.includes(desc.method)) throw new ZooInvalidError(`unknown PE method ${JSON.stringify(desc.method)} (known: ${PE_METHODS.join(', ')})`);
    if (desc.tensors.length === 0) throw new ZooInvalidError(`PE fine-tune ${desc.id} has no tensors`);
    const L = base.info.archSig.numLayers;
    const fused = new Map<number, TensorRef[]>();
    for (const t of desc.tensors) {
      const c = t.component ?? componentOfTensor(t.name, L);
      if (c === null) throw new ZooInvalidError(`PE tensor ${t.name} of ${desc.id} names no component of a ${L}-layer model; give its component explicitly`);
      componentAt(c, L); // range check
      this.registerTensor(t);
      const list = fused.get(c) ?? [];
      list.push({ name: t.name, id: t.id, dtype: t.dtype, shape: [...t.shape] });
      fused.set(c, list);
    }
    for (const c of fused.keys()) {
      this.ensureBoundary(base.info.id, c);
      this.ensureBoundary(base.info.id, c + 1);
    }
    const info: ModelInfo = { id: desc.id, kind: 'pe', family: base.info.family, base: base.info.id, archSig: { ...base.info.archSig }, pe: { method: desc.method, config: { ...desc.config } } };
    this.peModels.set(desc.id, { info, fused: new Map([...fused].sort((a, b) => a[0] - b[0])) });
    this.order.push(desc.id);
    this.changed();
    return info;
  }

  /**
   * A full fine-tune of `base` with the same architecture (algorithm 5.1, FF branch). `layerScores[l]` is the
   * logit-lens cosine of layer l against the base (algorithm 5.2). Maximal runs of layers on the same side of the
   * threshold become the fine-tune's blocks; the base is split at the same places; each run at or above the
   * threshold gets an equivalence edge to the base's segment. The embedding rides with the first run and the head
   * with the last (they are not scored on their own, and principle 1 forbids blocks nothing needs).
   */
  addFullFineTune(desc: ModelDescription & { base: string }, layerScores: readonly number[], options: { method?: string; datasetHash?: string } = {}): ModelInfo {
    const base = this.weightSet(desc.base);
    if (!sameArch(base.info.archSig, desc.archSig)) {
      throw new ZooInvalidError(`full fine-tune ${desc.id} does not share ${desc.base}'s architecture; use addSiblingEquivalence for a model of another shape`);
    }
    const L = desc.archSig.numLayers;
    if (layerScores.length !== L) throw new ZooInvalidError(`full fine-tune ${desc.id} has ${L} layers but ${layerScores.length} layer scores were given`);
    for (const [l, s] of layerScores.entries()) {
      if (!Number.isFinite(s) || s < -1 || s > 1) throw new ZooInvalidError(`layer ${l} of ${desc.id} scored ${s}, not a cosine in [-1, 1]`);
    }
    const info: ModelInfo = { id: desc.id, kind: 'full', family: base.info.family, base: base.info.id, archSig: { ...desc.archSig }, pe: null };
    const ws = this.addWeightSet(info, desc);

    const runs: { from: number; to: number; equivalent: boolean }[] = [];
    for (let l = 0; l < L; l++) {
      const eq = layerScores[l]! >= this.threshold;
      const last = runs.at(-1);
      if (last && last.equivalent === eq) last.to = l + 1;
      else runs.push({ from: l, to: l + 1, equivalent: eq });
    }
    for (const r of runs) {
      const span = layerRunSpan(r.from, r.to, L);
      this.ensureBoundary(base.info.id, span.start);
      this.ensureBoundary(base.info.id, span.end);
      if (insertCut(ws.cuts, span.start)) this.changed();
      if (insertCut(ws.cuts, span.end)) this.changed();
      if (r.equivalent) {
        const scores = layerScores.slice(r.from, r.to);
        this.edgeList.push({
          a: { model: desc.id, span },
          b: { model: base.info.id, span },
          score: scores.reduce((a, b) => a + b, 0) / scores.length,
          threshold: this.threshold,
          method: options.method ?? 'logit-lens-cosine',
          datasetHash: options.datasetHash ?? 'unspecified',
          requiresStitch: false,
        });
      }
    }
    return info;
  }

  /**
   * Equivalences between two models of different shapes (a 7B and a 13B sibling) by proportional-depth groups
   * (§3.3): each group at or above the threshold splits both models at its ends and gets an edge, marked as
   * needing a stitch when the hidden sizes differ. Returns the edges added.
   */
  addSiblingEquivalence(init: {
    a: string;
    b: string;
    groups: readonly { a: { from: number; to: number }; b: { from: number; to: number }; score: number }[];
    method?: string;
    datasetHash?: string;
  }): EquivalenceEdge[] {
    const A = this.weightSet(init.a);
    const B = this.weightSet(init.b);
    if (A.info.archSig.vocabSize !== B.info.archSig.vocabSize) {
      throw new ZooInvalidError(`${init.a} and ${init.b} have different vocabularies (${A.info.archSig.vocabSize} vs ${B.info.archSig.vocabSize}); logit-lens equivalence needs a shared one`);
    }
    const added: EquivalenceEdge[] = [];
    for (const g of init.groups) {
      if (!(g.score >= this.threshold)) continue;
      const spanA = layerRunSpan(g.a.from, g.a.to, A.info.archSig.numLayers);
      const spanB = layerRunSpan(g.b.from, g.b.to, B.info.archSig.numLayers);
      for (const [ws, span] of [[A, spanA], [B, spanB]] as const) {
        this.ensureBoundary(ws.info.id, span.start);
        this.ensureBoundary(ws.info.id, span.end);
      }
      const edge: EquivalenceEdge = {
        a: { model: init.a, span: spanA },
        b: { model: init.b, span: spanB },
        score: g.score,
        threshold: this.threshold,
        method: init.method ?? 'logit-lens-cosine',
        datasetHash: init.datasetHash ?? 'unspecified',
        requiresStitch: A.info.archSig.hiddenSize !== B.info.archSig.hiddenSize,
      };
      this.edgeList.push(edge);
      added.push(edge);
    }
    return added;
  }

  /** Registers a fitted stitch (one Linear, dIn + 1 → dOut) from one family's hidden space to another's. */
  registerStitch(init: { fromFamily: string; toFamily: string; tensors: readonly TensorRef[] }): BlockManifest {
    const from = this.weightSet(init.fromFamily);
    const to = this.weightSet(init.toFamily);
    for (const t of init.tensors) this.registerTensor(t);
    const m = stitchManifest({
      fromFamily: init.fromFamily,
      toFamily: init.toFamily,
      archSig: to.info.archSig,
      dIn: from.info.archSig.hiddenSize,
      dOut: to.info.archSig.hiddenSize,
      tensors: init.tensors,
    });
    this.extra.set(m.blockId, m);
    this.changed();
    const prior = this.stitchList.findIndex((s) => s.fromFamily === init.fromFamily && s.toFamily === init.toFamily);
    const entry = { fromFamily: init.fromFamily, toFamily: init.toFamily, blockId: m.blockId };
    if (prior >= 0) this.stitchList[prior] = entry;
    else this.stitchList.push(entry);
    return m;
  }

  /** Links a surrogate (its own pruned tensors and shape) to a block of some chain. */
  addSurrogate(target: BlockId, init: { archSig: ArchSig; tensors: readonly TensorRef[]; cosine: number; speedup: number; prunedFraction: number }): BlockManifest {
    const t = this.block(target);
    for (const r of init.tensors) this.registerTensor(r);
    const m = surrogateManifest(t, init);
    this.extra.set(m.blockId, m);
    this.changed();
    this.surrogateList.push({ target, surrogate: m.blockId, cosine: init.cosine, speedup: init.speedup, prunedFraction: init.prunedFraction });
    return m;
  }

  // ─── Partitioning ───────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Makes `index` a block boundary of `model`'s partition: the block containing it strictly inside is replaced by
   * two (same tensors, new manifests), and every chain that used it now uses the two in order. Returns false when
   * `index` already was a boundary (nothing changes: the partition is minimal).
   */
  ensureBoundary(model: string, index: number): boolean {
    const ws = this.weightSet(model);
    const n = componentCount(ws.info.archSig.numLayers);
    if (!Number.isInteger(index) || index < 0 || index > n) throw new ZooInvalidError(`boundary ${index} is outside [0, ${n}] of ${model}`);
    const cut = insertCut(ws.cuts, index);
    if (cut) this.changed();
    return cut;
  }

  /** The blocks of a weight set's partition, in order. */
  partition(model: string): BlockManifest[] {
    const ws = this.weightSet(model);
    const out: BlockManifest[] = [];
    for (let i = 0; i + 1 < ws.cuts.length; i++) out.push(this.spanBlock(ws, { start: ws.cuts[i]!, end: ws.cuts[i + 1]! }));
    return out;
  }

  /** The blocks of `model` that cover exactly `segment.span` (its ends are always boundaries once an edge names them). */
  realize(segment: Segment): BlockManifest[] {
    const ws = this.weightSet(segment.model);
    checkSpan(segment.span, ws.info.archSig.numLayers);
    const blocks = this.partition(segment.model).filter((b) => b.span!.start >= segment.span.start && b.span!.end <= segment.span.end);
    if (blocks[0]?.span!.start !== segment.span.start || blocks.at(-1)?.span!.end !== segment.span.end) {
      throw new ZooNotFoundError('segment', `${segment.model}[${segment.span.start}, ${segment.span.end})`, `the span [${segment.span.start}, ${segment.span.end}) of ${segment.model} does not fall on block boundaries`);
    }
    return blocks;
  }

  // ─── Queries ───────────────────────────────────────────────────────────────────────────────────────────────

  /** An application's chain of blocks (one application per model). */
  chain(app: string): Chain {
    let c = this.memo.chains.get(app);
    if (!c) {
      c = this.deriveChain(app);
      this.memo.chains.set(app, c);
    }
    return { app: c.app, family: c.family, blocks: [...c.blocks] };
  }

  private deriveChain(app: string): Chain {
    const ws = this.weightSets.get(app);
    if (ws) return { app, family: ws.info.family, blocks: this.partition(app) };
    const pe = this.peModels.get(app);
    if (!pe) throw new ZooNotFoundError('application', app);
    const base = this.weightSet(pe.info.base!);
    const blocks = this.partition(base.info.id).map((b) => {
      const delta = pe.fused.get(b.span!.start);
      if (delta === undefined) return b;
      if (b.span!.end - b.span!.start !== 1) throw new ZooIntegrityError(app, `block ${b.blockId} of ${base.info.id} covers [${b.span!.start}, ${b.span!.end}) around a component ${app} modifies`);
      return spanManifest({ family: base.info.family, archSig: base.info.archSig, span: b.span!, tensors: [...b.tensors, ...delta], pe: pe.info.pe });
    });
    return { app, family: pe.info.family, blocks };
  }

  /** Every application's chain, in the order the models were added. */
  chains(): Chain[] {
    return this.order.map((id) => this.chain(id));
  }

  apps(): string[] {
    return [...this.order];
  }

  model(id: string): ModelInfo {
    const m = this.weightSets.get(id)?.info ?? this.peModels.get(id)?.info;
    if (!m) throw new ZooNotFoundError('model', id);
    return m;
  }

  hasModel(id: string): boolean {
    return this.weightSets.has(id) || this.peModels.has(id);
  }

  /** Every distinct block of every chain, then the stitches and surrogates. */
  blocks(): BlockManifest[] {
    const out = new Map<BlockId, BlockManifest>();
    for (const c of this.chains()) for (const b of c.blocks) out.set(b.blockId, b);
    for (const [id, m] of this.extra) out.set(id, m);
    return [...out.values()];
  }

  block(id: BlockId): BlockManifest {
    if (!this.memo.blocks) this.memo.blocks = new Map(this.blocks().map((b) => [b.blockId, b] as const));
    const found = this.extra.get(id) ?? this.memo.blocks.get(id);
    if (!found) throw new ZooNotFoundError('block', id);
    return found;
  }

  /** The applications whose chain uses the block. */
  usersOf(id: BlockId): string[] {
    return this.chains().filter((c) => c.blocks.some((b) => b.blockId === id)).map((c) => c.app);
  }

  equivalences(): EquivalenceEdge[] {
    return this.edgeList.map((e) => ({ ...e, a: { ...e.a, span: { ...e.a.span } }, b: { ...e.b, span: { ...e.b.span } } }));
  }

  /** Edges whose segment on `model`'s side covers the block (for the scheduler's adaptive candidates). */
  equivalentsOf(model: string, block: BlockId): { edge: EquivalenceEdge; other: Segment }[] {
    const b = this.block(block);
    if (b.span === null) return [];
    const out: { edge: EquivalenceEdge; other: Segment }[] = [];
    for (const e of this.edgeList) {
      for (const [mine, other] of [[e.a, e.b], [e.b, e.a]] as const) {
        if (mine.model === model && mine.span.start <= b.span.start && b.span.end <= mine.span.end) out.push({ edge: e, other });
      }
    }
    return out;
  }

  stitch(fromFamily: string, toFamily: string): BlockManifest | null {
    const s = this.stitchList.find((x) => x.fromFamily === fromFamily && x.toFamily === toFamily);
    return s ? this.extra.get(s.blockId)! : null;
  }

  surrogatesOf(target: BlockId): SurrogateLink[] {
    return this.surrogateList.filter((s) => s.target === target).map((s) => ({ ...s }));
  }

  /** Dtype and shape of a registered tensor. */
  tensor(id: TensorId): { dtype: string; shape: readonly number[]; bytes: number } {
    const t = this.tensors.get(id);
    if (!t) throw new ZooNotFoundError('tensor', id);
    return { dtype: t.dtype, shape: [...t.shape], bytes: tensorByteLength(t) };
  }

  /** Unique against logical bytes over every application (design note §7, behaviour 2; Fig. 5's redundancy). */
  storage(): StorageStats {
    const chains = this.chains();
    const unique = new Map<TensorId, TensorRef>();
    const blocks = new Set<BlockId>();
    let logicalBytes = 0;
    let chainPositions = 0;
    for (const c of chains) {
      const refs = c.blocks.flatMap((b) => b.tensors);
      logicalBytes += namedSize(byName(refs)).bytes;
      for (const r of refs) unique.set(r.id, r);
      for (const b of c.blocks) blocks.add(b.blockId);
      chainPositions += c.blocks.length;
    }
    for (const m of this.extra.values()) for (const r of m.tensors) unique.set(r.id, r);
    const uniqueBytes = uniqueSize(unique.values()).bytes;
    return {
      uniqueTensors: unique.size,
      uniqueBytes,
      logicalBytes,
      redundancy: logicalBytes === 0 ? 0 : 1 - uniqueBytes / logicalBytes,
      uniqueBlocks: blocks.size,
      chainPositions,
    };
  }

  /**
   * The measured Table 1 quantity for an application: parameters its chain shares (by content id) with its
   * family's foundation over all the parameters its chain holds.
   */
  sharedFraction(app: string): { params: number; sharedParams: number; fraction: number } {
    const chain = this.chain(app);
    const foundation = new Set(this.weightSet(chain.family).components.flat().map((r) => r.id));
    const refs = byName(chain.blocks.flatMap((b) => b.tensors));
    const all = namedSize(refs).params;
    const shared = namedSize(refs.filter((r) => foundation.has(r.id))).params;
    return { params: all, sharedParams: shared, fraction: all === 0 ? 0 : shared / all };
  }

  /** The zoo model whose tensors overlap `ids` most (a foundation detected by tensor-hash overlap, §5.1), or null. */
  detectBase(ids: Iterable<TensorId>): { model: string; sharedTensors: number } | null {
    const want = new Set(ids);
    let best: { model: string; sharedTensors: number } | null = null;
    for (const ws of this.weightSets.values()) {
      const n = new Set(ws.components.flat().map((r) => r.id).filter((id) => want.has(id))).size;
      if (n > 0 && (best === null || n > best.sharedTensors)) best = { model: ws.info.id, sharedTensors: n };
    }
    return best;
  }

  // ─── Persistence ───────────────────────────────────────────────────────────────────────────────────────────

  toJSON(): ZooSnapshot {
    return {
      version: 1,
      threshold: this.threshold,
      order: [...this.order],
      weightSets: this.order.filter((id) => this.weightSets.has(id)).map((id) => {
        const ws = this.weightSets.get(id)!;
        return { info: ws.info, components: ws.components, cuts: [...ws.cuts] };
      }),
      peModels: this.order.filter((id) => this.peModels.has(id)).map((id) => {
        const pe = this.peModels.get(id)!;
        return { info: pe.info, fused: [...pe.fused] };
      }),
      edges: this.equivalences(),
      extraBlocks: [...this.extra.values()],
      stitches: this.stitchList.map((s) => ({ ...s })),
      surrogates: this.surrogateList.map((s) => ({ ...s })),
    };
  }

  static fromJSON(snapshot: ZooSnapshot): BlockZoo {
    if (snapshot.version !== 1) throw new ZooInvalidError(`unknown zoo snapshot version ${String(snapshot.version)}`);
    const zoo = new BlockZoo({ threshold: snapshot.threshold });
    const order = new Map<string, number>();
    for (const ws of snapshot.weightSets) {
      for (const r of ws.components.flat()) zoo.registerTensor(r);
      zoo.weightSets.set(ws.info.id, { info: ws.info, components: ws.components, cuts: [...ws.cuts] });
      order.set(ws.info.id, order.size);
    }
    for (const pe of snapshot.peModels) {
      for (const [, refs] of pe.fused) for (const r of refs) zoo.registerTensor(r);
      zoo.peModels.set(pe.info.id, { info: pe.info, fused: new Map(pe.fused) });
    }
    for (const id of snapshot.order) if (!zoo.hasModel(id)) throw new ZooInvalidError(`snapshot order names ${JSON.stringify(id)}, which it does not describe`);
    if (snapshot.order.length !== snapshot.weightSets.length + snapshot.peModels.length) throw new ZooInvalidError('snapshot order does not list every model once');
    zoo.order.push(...snapshot.order);
    zoo.edgeList.push(...snapshot.edges);
    for (const m of snapshot.extraBlocks) {
      for (const r of m.tensors) zoo.registerTensor(r);
      zoo.extra.set(m.blockId, m);
    }
    zoo.stitchList.push(...snapshot.stitches);
    zoo.surrogateList.push(...snapshot.surrogates);
    return zoo;
  }

  // ─── Internals ─────────────────────────────────────────────────────────────────────────────────────────────

  /** Drops the memoised chains and block index (see `memo`). */
  private changed(): void {
    this.memo = { chains: new Map(), blocks: null };
  }

  private checkNewId(id: string): void {
    if (typeof id !== 'string' || id.length === 0) throw new ZooInvalidError(`a model id must be a non-empty string, got ${JSON.stringify(id)}`);
    if (this.hasModel(id)) throw new ZooConflictError(id, `the zoo already holds a model named ${JSON.stringify(id)}`);
  }

  private registerTensor(r: { id: TensorId; dtype: string; shape: readonly number[]; name?: string }): void {
    tensorByteLength(r); // validates dtype and shape
    const prior = this.tensors.get(r.id);
    if (prior && (prior.dtype !== r.dtype || prior.shape.join(',') !== r.shape.join(','))) {
      throw new ZooIntegrityError(r.id, `tensor ${r.id}${r.name ? ` (${r.name})` : ''} is ${r.dtype} [${r.shape.join(', ')}] here but ${prior.dtype} [${prior.shape.join(', ')}] elsewhere`);
    }
    if (!prior) this.tensors.set(r.id, { dtype: r.dtype, shape: [...r.shape] });
  }

  private addWeightSet(info: ModelInfo, desc: ModelDescription): WeightSet {
    this.checkNewId(desc.id);
    const a = desc.archSig;
    for (const k of ['vocabSize', 'hiddenSize', 'numLayers', 'numHeads', 'numKvHeads', 'headDim', 'intermediateSize'] as const) {
      if (!Number.isInteger(a[k]) || a[k] < 1) throw new ZooInvalidError(`${desc.id}: archSig.${k} must be a positive integer, got ${a[k]}`);
    }
    const L = a.numLayers;
    const n = componentCount(L);
    const components: TensorRef[][] = Array.from({ length: n }, () => []);
    for (const t of desc.tensors) {
      const c = componentOfTensor(t.name, L);
      if (c === null) throw new ZooInvalidError(`${desc.id}: tensor ${t.name} belongs to no component of a ${L}-layer Llama`);
      this.registerTensor(t);
      components[c]!.push({ name: t.name, id: t.id, dtype: t.dtype, shape: [...t.shape] });
    }
    const embed = components[0]!.find((r) => r.name === 'model.embed_tokens.weight');
    if (a.tieWordEmbeddings && embed) components[n - 1]!.push(embed); // the head reads the embedding when tied
    for (let c = 0; c < n; c++) {
      if (components[c]!.length === 0) throw new ZooInvalidError(`${desc.id}: no tensor for component ${c} (${componentAt(c, L).kind}${c === 0 || c === n - 1 ? '' : ` of layer ${componentAt(c, L).layer}`})`);
      components[c]!.sort((x, y) => (x.name < y.name ? -1 : x.name > y.name ? 1 : 0));
    }
    const ws: WeightSet = { info, components, cuts: [0, n] };
    this.weightSets.set(desc.id, ws);
    this.order.push(desc.id);
    this.changed();
    return ws;
  }

  private weightSet(id: string): WeightSet {
    const ws = this.weightSets.get(id);
    if (ws) return ws;
    if (this.peModels.has(id)) throw new ZooInvalidError(`${id} is a PE fine-tune; only a foundation or a full fine-tune can be partitioned or be a base`);
    throw new ZooNotFoundError('model', id);
  }

  private spanBlock(ws: WeightSet, span: Span): BlockManifest {
    return spanManifest({ family: ws.info.family, archSig: ws.info.archSig, span, tensors: ws.components.slice(span.start, span.end).flat() });
  }
}

/** Each tensor name once (a tied embedding is listed by the embedding and the head blocks). */
function byName(refs: readonly TensorRef[]): TensorRef[] {
  return [...new Map(refs.map((r) => [r.name, r] as const)).values()];
}

/** Inserts `cut` into the sorted list; false when it was there already. */
function insertCut(cuts: number[], cut: number): boolean {
  let i = 0;
  while (i < cuts.length && cuts[i]! < cut) i++;
  if (cuts[i] === cut) return false;
  cuts.splice(i, 0, cut);
  return true;
}
