/**
 * A Llama-family decoder in the zoo's coordinates. The finest units a block may cut at (design note §3.1,
 * principle 2) are the embedding, each layer's attention and FFN, and the LM head. They are numbered in forward
 * order, so a block is a half-open range of component indices:
 *
 *   0            embedding          (model.embed_tokens)
 *   1 + 2l       attention of layer l (input_layernorm, q/k/v/o_proj)
 *   2 + 2l       FFN of layer l       (post_attention_layernorm, gate/up/down_proj)
 *   2L + 1       LM head            (model.norm, lm_head; the embedding again when tied)
 *
 * A range whose ends fall on layer boundaries is `embed? + layers(a, b) + head?` of the staged engine (engineStages).
 */
import { ZooInvalidError } from './errors.js';

/** The architecture signature of a model: what two blocks must agree on to be interchangeable without a stitch. */
export interface ArchSig {
  architecture: 'LlamaForCausalLM';
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
  rmsNormEps: number;
  ropeTheta: number;
  tieWordEmbeddings: boolean;
  /** Weight dtype of the checkpoint (f32, f16, bf16). */
  dtype: string;
}

export type ComponentKind = 'embedding' | 'attention' | 'ffn' | 'lmHead';

export interface Component {
  index: number;
  kind: ComponentKind;
  /** The layer of an attention or FFN component; null for the embedding and the head. */
  layer: number | null;
}

/** Components of a model with `numLayers` layers: 2L + 2. */
export function componentCount(numLayers: number): number {
  return 2 * numLayers + 2;
}

export function componentAt(index: number, numLayers: number): Component {
  const n = componentCount(numLayers);
  if (!Number.isInteger(index) || index < 0 || index >= n) throw new ZooInvalidError(`component ${index} is outside [0, ${n}) of a ${numLayers}-layer model`);
  if (index === 0) return { index, kind: 'embedding', layer: null };
  if (index === n - 1) return { index, kind: 'lmHead', layer: null };
  const layer = Math.floor((index - 1) / 2);
  return { index, kind: (index - 1) % 2 === 0 ? 'attention' : 'ffn', layer };
}

export function attentionIndex(layer: number): number {
  return 1 + 2 * layer;
}

export function ffnIndex(layer: number): number {
  return 2 + 2 * layer;
}

/** A half-open range of component indices [start, end). */
export interface Span {
  start: number;
  end: number;
}

export function checkSpan(span: Span, numLayers: number): void {
  const n = componentCount(numLayers);
  if (!Number.isInteger(span.start) || !Number.isInteger(span.end) || span.start < 0 || span.start >= span.end || span.end > n) {
    throw new ZooInvalidError(`span [${span.start}, ${span.end}) is not a non-empty range of components within [0, ${n})`);
  }
}

/** The component span of layers [a, b), including the embedding when a = 0 and the head when b = L. */
export function layerRunSpan(a: number, b: number, numLayers: number): Span {
  if (!Number.isInteger(a) || !Number.isInteger(b) || a < 0 || a >= b || b > numLayers) {
    throw new ZooInvalidError(`layers [${a}, ${b}) are not a non-empty range within [0, ${numLayers})`);
  }
  return { start: a === 0 ? 0 : attentionIndex(a), end: b === numLayers ? componentCount(numLayers) : attentionIndex(b) };
}

/**
 * One step of the staged engine. `embed`, `layers(from, to)` and `head` are the engine's stages today; `attention`
 * and `ffn` are the sub-layer halves a span has at an end that falls mid-layer (lazy partitioning cuts there when
 * a PE delta modifies one half of a layer), which chain execution runs as half a layer.
 */
export type EngineStage =
  | { stage: 'embed' }
  | { stage: 'ffn'; layer: number }
  | { stage: 'layers'; from: number; to: number }
  | { stage: 'attention'; layer: number }
  | { stage: 'head' };

/** The stages that run a span, in order: embed? → ffn(l)? → layers(a, b)? → attention(b)? → head?. */
export function engineStages(span: Span, numLayers: number): EngineStage[] {
  checkSpan(span, numLayers);
  const n = componentCount(numLayers);
  const out: EngineStage[] = [];
  let i = span.start;
  let end = span.end;
  if (i === 0) {
    out.push({ stage: 'embed' });
    i = 1;
  }
  const head = end === n;
  if (head) end = n - 1;
  if (i < end && componentAt(i, numLayers).kind === 'ffn') {
    out.push({ stage: 'ffn', layer: componentAt(i, numLayers).layer! });
    i++;
  }
  const trailing = i < end && componentAt(end - 1, numLayers).kind === 'attention' ? componentAt(end - 1, numLayers).layer! : null;
  if (trailing !== null) end--;
  if (i < end) out.push({ stage: 'layers', from: (i - 1) / 2, to: (end - 1) / 2 });
  if (trailing !== null) out.push({ stage: 'attention', layer: trailing });
  if (head) out.push({ stage: 'head' });
  return out;
}

const LAYER_TENSOR_RE = /^model\.layers\.(\d+)\.(self_attn|mlp|input_layernorm|post_attention_layernorm)\b/;

/**
 * The component a Llama checkpoint tensor (or a PEFT module or tensor name under `base_model.model.`) belongs
 * to, or null for a name outside the architecture.
 */
export function componentOfTensor(name: string, numLayers: number): number | null {
  const bare = name.startsWith('base_model.model.') ? name.slice('base_model.model.'.length) : name;
  if (bare.startsWith('model.embed_tokens.') || bare === 'model.embed_tokens') return 0;
  if (bare.startsWith('model.norm.') || bare === 'model.norm' || bare.startsWith('lm_head.') || bare === 'lm_head') return componentCount(numLayers) - 1;
  const m = LAYER_TENSOR_RE.exec(bare);
  if (!m) return null;
  const layer = Number(m[1]);
  if (layer >= numLayers) return null;
  return m[2] === 'self_attn' || m[2] === 'input_layernorm' ? attentionIndex(layer) : ffnIndex(layer);
}

/**
 * Proportional-depth grouping of two stacks (design note §3.3, A3): group g covers layers
 * [⌊La·g/G⌋, ⌊La·(g+1)/G⌋) of A and [⌊Lb·g/G⌋, ⌊Lb·(g+1)/G⌋) of B. With La = 32, Lb = 40 and G = 8 that is
 * 4 ↔ 5 layers; the paper's 3 ↔ 4 is G = ⌊32 / 3⌋ groups where the remainder falls into the last.
 */
export function proportionalDepthGroups(layersA: number, layersB: number, groups: number): { a: { from: number; to: number }; b: { from: number; to: number } }[] {
  for (const [name, v] of [['layersA', layersA], ['layersB', layersB], ['groups', groups]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new ZooInvalidError(`${name} must be a positive integer, got ${v}`);
  }
  if (groups > Math.min(layersA, layersB)) throw new ZooInvalidError(`${groups} groups do not fit ${Math.min(layersA, layersB)} layers (every group needs at least one layer on each side)`);
  const out = [];
  for (let g = 0; g < groups; g++) {
    out.push({
      a: { from: Math.floor((layersA * g) / groups), to: Math.floor((layersA * (g + 1)) / groups) },
      b: { from: Math.floor((layersB * g) / groups), to: Math.floor((layersB * (g + 1)) / groups) },
    });
  }
  return out;
}
