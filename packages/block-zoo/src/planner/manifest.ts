/**
 * Block manifests (design note §3.7). A manifest is everything that makes a block what it is: its kind, the family
 * and architecture it belongs to, the span of components it covers, the fused parameter-efficient delta if any,
 * and its tensors by content id. The block id is the hash of exactly that, so byte-identical blocks share an id.
 * Facts that change over a block's life (which applications use it, its equivalences, surrogates, profile) live
 * in the zoo beside the manifest, never inside it.
 */
import { type ArchSig, type EngineStage, type Span, componentAt, engineStages } from './arch.js';
import { ZooInvalidError } from './errors.js';
import { type BlockId, contentBlockId, type TensorId, tensorByteLength } from './ids.js';

/** One tensor a model or block uses: its name in the checkpoint (or adapter file) and its content id. */
export interface TensorRef {
  name: string;
  id: TensorId;
  dtype: string;
  shape: readonly number[];
}

export type PeMethod = 'lora' | 'adapter' | 'prefix' | 'bitfit';
export const PE_METHODS: readonly PeMethod[] = ['lora', 'adapter', 'prefix', 'bitfit'];

/** A parameter-efficient delta fused into its host component's block (design note A8). */
export interface FusedPe {
  method: PeMethod;
  /** The fine-tune's own configuration (rank, alpha, targets, bottleneck, prefix length, …); part of the identity. */
  config: Readonly<Record<string, string | number | boolean | null | readonly (string | number)[]>>;
}

export type BlockKind = 'embedding' | 'attention' | 'ffn' | 'lmHead' | 'layerRange' | 'stitch' | 'surrogate';

export interface BlockManifest {
  blockId: BlockId;
  kind: BlockKind;
  /** The foundation family the block lives in (the root foundation's model id). */
  family: string;
  archSig: ArchSig;
  /** Components covered, in the family's coordinates; null for a stitch (it sits between two families). */
  span: Span | null;
  /** How the staged engine runs the span; null for a stitch. */
  stages: readonly EngineStage[] | null;
  pe: FusedPe | null;
  /** For a stitch: the families it maps between and how the stitching position is encoded. */
  stitch: { fromFamily: string; toFamily: string; positionFeature: 'sum-over-total-depth' } | null;
  /** Tensors by name (sorted), each name once (two names may share one content id, e.g. equal norm gains). */
  tensors: readonly TensorRef[];
  /** Width of the block's input: the hidden size, or 0 for a block that starts at the token ids. */
  dIn: number;
  /** Width of the block's output: the hidden size, or the vocabulary for a block that ends at the LM head. */
  dOut: number;
  params: number;
  paramBytes: number;
  /** f32 K and V of the attention components covered, per token (0 for FFN-only blocks). */
  kvBytesPerToken: number;
  /** f32 bytes the block hands to the next one per token. */
  activationBytesPerToken: number;
}

/** Engine activations and KV are f32. */
const ACT_BYTES = 4;

function elements(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** Sorted by name, each name once; two refs with one name but different ids are an error. */
export function normaliseTensors(refs: readonly TensorRef[]): TensorRef[] {
  const byName = new Map<string, TensorRef>();
  for (const r of refs) {
    const prior = byName.get(r.name);
    if (prior && prior.id !== r.id) throw new ZooInvalidError(`tensor ${r.name} is listed twice with different contents (${prior.id} and ${r.id})`);
    byName.set(r.name, { name: r.name, id: r.id, dtype: r.dtype, shape: [...r.shape] });
  }
  return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Parameters and bytes of refs that are each a distinct tensor (e.g. normalised by name), duplicates included by content. */
export function namedSize(refs: Iterable<TensorRef>): { params: number; bytes: number } {
  let params = 0;
  let bytes = 0;
  for (const r of refs) {
    params += elements(r.shape);
    bytes += tensorByteLength(r);
  }
  return { params, bytes };
}

/** Parameters and bytes of a set of refs, each content id counted once (what deduplicated storage holds). */
export function uniqueSize(refs: Iterable<TensorRef>): { params: number; bytes: number } {
  const seen = new Set<TensorId>();
  let params = 0;
  let bytes = 0;
  for (const r of refs) {
    if (seen.has(r.id)) continue;
    seen.add(r.id);
    params += elements(r.shape);
    bytes += tensorByteLength(r);
  }
  return { params, bytes };
}

type ManifestBody = Omit<BlockManifest, 'blockId'>;

/** The id hashes what the block is, not what it is filed under: the family name stays out of it. */
function identity(body: ManifestBody): unknown {
  const { family: _family, ...rest } = body;
  return rest;
}

function seal(body: ManifestBody): BlockManifest {
  return { blockId: contentBlockId(identity(body)), ...body };
}

/** The manifest of a span of a model's components (a foundation or full fine-tune block, or a PE-fused one). */
export function spanManifest(init: { family: string; archSig: ArchSig; span: Span; tensors: readonly TensorRef[]; pe?: FusedPe | null }): BlockManifest {
  const { archSig: a, span } = init;
  const stages = engineStages(span, a.numLayers);
  const head = span.end === a.numLayers * 2 + 2;
  const tensors = normaliseTensors(init.tensors);
  const { params, bytes } = namedSize(tensors);
  let attention = 0;
  for (let i = span.start; i < span.end; i++) if (componentAt(i, a.numLayers).kind === 'attention') attention++;
  let kind: BlockKind;
  if (span.end - span.start === 1) kind = componentAt(span.start, a.numLayers).kind;
  else kind = 'layerRange';
  return seal({
    kind,
    family: init.family,
    archSig: { ...a },
    span: { start: span.start, end: span.end },
    stages,
    pe: init.pe ?? null,
    stitch: null,
    tensors,
    dIn: span.start === 0 ? 0 : a.hiddenSize,
    dOut: head ? a.vocabSize : a.hiddenSize,
    params,
    paramBytes: bytes,
    kvBytesPerToken: 2 * attention * a.numKvHeads * a.headDim * ACT_BYTES,
    activationBytesPerToken: (head ? a.vocabSize : a.hiddenSize) * ACT_BYTES,
  });
}

/** The manifest of a stitching block: one Linear (dIn + 1 → dOut) from one family's hidden space to another's. */
export function stitchManifest(init: { fromFamily: string; toFamily: string; archSig: ArchSig; dIn: number; dOut: number; tensors: readonly TensorRef[] }): BlockManifest {
  const tensors = normaliseTensors(init.tensors);
  const { params, bytes } = namedSize(tensors);
  return seal({
    kind: 'stitch',
    family: init.toFamily,
    archSig: { ...init.archSig },
    span: null,
    stages: null,
    pe: null,
    stitch: { fromFamily: init.fromFamily, toFamily: init.toFamily, positionFeature: 'sum-over-total-depth' },
    tensors,
    dIn: init.dIn,
    dOut: init.dOut,
    params,
    paramBytes: bytes,
    kvBytesPerToken: 0,
    activationBytesPerToken: init.dOut * ACT_BYTES,
  });
}

/** The manifest of a surrogate for `target`: the same span and interface, its own (pruned) tensors and shape. */
export function surrogateManifest(target: BlockManifest, init: { archSig: ArchSig; tensors: readonly TensorRef[] }): BlockManifest {
  if (target.span === null) throw new ZooInvalidError(`block ${target.blockId} is a ${target.kind}; only span blocks get surrogates`);
  const base = spanManifest({ family: target.family, archSig: init.archSig, span: target.span, tensors: init.tensors, pe: target.pe });
  const { blockId: _drop, ...body } = base;
  return seal({ ...body, kind: 'surrogate', dIn: target.dIn, dOut: target.dOut });
}

/** Recomputes a manifest's id from its body: false when the manifest was altered after sealing. */
export function verifyManifest(m: BlockManifest): boolean {
  const { blockId, ...body } = m;
  return contentBlockId(identity(body)) === blockId;
}

/** A block in one line: its engine stages, and the fused delta if any, e.g. `attn(3)+lora`, `layers(0,2) head`. */
export function formatBlock(m: BlockManifest): string {
  if (m.kind === 'stitch') return `stitch(${m.stitch!.fromFamily}→${m.stitch!.toFamily})`;
  const stages = (m.stages ?? []).map((s) => {
    switch (s.stage) {
      case 'embed':
        return 'embed';
      case 'head':
        return 'head';
      case 'attention':
        return `attn(${s.layer})`;
      case 'ffn':
        return `ffn(${s.layer})`;
      case 'layers':
        return s.to - s.from === 1 ? `layer(${s.from})` : `layers(${s.from},${s.to})`;
    }
  });
  return `${m.kind === 'surrogate' ? 'surrogate ' : ''}${stages.join(' ')}${m.pe ? `+${m.pe.method}` : ''}`;
}
