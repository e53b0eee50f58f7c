/**
 * A fitted surrogate (fit/surrogate.ts) into the store and the zoo, linked to the block it stands in for. Its
 * pruned tensors are stored as f32 in the shapes its own architecture signature implies (norm gains 1-D); a target
 * that also holds the embedding or the LM head lends the surrogate those tensors (by content id: nothing is stored
 * twice), so the surrogate's manifest runs the target's stages on its own as a BlockRuntime.
 */
import { decoderTensorShapes } from '@tessera/engine';

import type { Surrogate } from '../fit/surrogate.js';
import { type ArchSig, attentionIndex, componentAt, componentOfTensor, ffnIndex } from '../planner/arch.js';
import { ZooInvalidError } from '../planner/errors.js';
import type { BlockId } from '../planner/ids.js';
import type { BlockManifest, TensorRef } from '../planner/manifest.js';
import type { BlockZoo } from '../planner/zoo.js';
import type { DiskTensorStore } from '../store/disk-store.js';
import { decoderConfigOf } from './index.js';

/** The embedding's and the head's tensors: a surrogate of a block holding them uses the target's own. */
const EDGE_TENSORS = new Set(['model.embed_tokens.weight', 'model.norm.weight', 'lm_head.weight']);

/** Fields of the signature a surrogate must share with its target (it prunes heads and channels, nothing else). */
const SHARED_ARCH: readonly (keyof ArchSig)[] = ['architecture', 'vocabSize', 'hiddenSize', 'numLayers', 'headDim', 'rmsNormEps', 'ropeTheta', 'tieWordEmbeddings'];

/** The components (indices) a surrogate replaces: both halves of layers [from, to), or one half of `from`. */
function replacedComponents(s: Surrogate): number[] {
  if (s.component === 'attention') return [attentionIndex(s.from)];
  if (s.component === 'ffn') return [ffnIndex(s.from)];
  const out: number[] = [];
  for (let l = s.from; l < s.to; l++) out.push(attentionIndex(l), ffnIndex(l));
  return out;
}

/**
 * Stores surrogate `s` of block `target` (its tensors as f32, deduplicated) and links it in the zoo
 * (`zoo.addSurrogate`, with the surrogate's cosine, speedup and pruned fraction). The surrogate must replace exactly
 * the target's layer components (whole layers [from, to) for a layerRange block, the one half for an `attn(l)` or
 * `ffn(l)` block); the target's embedding and head tensors, if it holds them, join the surrogate's manifest.
 * Throws ZooInvalidError when the surrogate does not fit the target (other layers, another architecture, a tensor
 * whose shape its archSig does not imply).
 */
export function storeSurrogate(zoo: BlockZoo, store: DiskTensorStore, target: BlockId, s: Surrogate): BlockManifest {
  const t = zoo.block(target);
  if (t.span === null) throw new ZooInvalidError(`block ${target} is a ${t.kind}; only span blocks get surrogates`);
  if (t.kind === 'surrogate') throw new ZooInvalidError(`block ${target} is itself a surrogate`);
  const a = t.archSig;
  for (const k of SHARED_ARCH) {
    if (s.archSig[k] !== a[k]) throw new ZooInvalidError(`the surrogate's ${k} is ${String(s.archSig[k])}, its target's ${String(a[k])}: a surrogate prunes heads and channels only`);
  }
  const have: number[] = [];
  for (let i = t.span.start; i < t.span.end; i++) if (componentAt(i, a.numLayers).layer !== null) have.push(i);
  const want = replacedComponents(s);
  if (have.length !== want.length || have.some((c, i) => c !== want[i])) {
    const what = s.component ? `the ${s.component} of layer ${s.from}` : `layers [${s.from}, ${s.to})`;
    throw new ZooInvalidError(`the surrogate replaces ${what} (components ${want.join(', ')}), but block ${target} holds layer components [${have.join(', ')}]`);
  }

  const shapes = decoderTensorShapes(decoderConfigOf(s.archSig));
  const replaced = new Set(want);
  for (const name of shapes.keys()) {
    const c = componentOfTensor(name, a.numLayers);
    if (c !== null && replaced.has(c) && !s.tensors.has(name)) throw new ZooInvalidError(`the surrogate has no ${name}`);
  }
  for (const name of s.tensors.keys()) {
    const c = componentOfTensor(name, a.numLayers);
    if (c === null || !replaced.has(c)) throw new ZooInvalidError(`the surrogate's tensor ${name} is not a weight of the components it replaces`);
  }
  const refs: TensorRef[] = [...s.tensors].map(([name, m]) => {
    const shape = shapes.get(name);
    if (!shape) throw new ZooInvalidError(`the surrogate's tensor ${name} is not a Llama weight`);
    const ok = shape.length === 1 ? m.rows * m.cols === shape[0] && (m.rows === 1 || m.cols === 1) : m.rows === shape[0] && m.cols === shape[1];
    if (!ok) throw new ZooInvalidError(`the surrogate's tensor ${name} is ${m.rows}×${m.cols}; its archSig implies [${shape.join(', ')}]`);
    const { id } = store.put({ dtype: 'f32', shape }, Float32Array.from(m.data));
    return { name, id, dtype: 'f32', shape: [...shape] };
  });
  for (const r of t.tensors) if (EDGE_TENSORS.has(r.name) && !s.tensors.has(r.name)) refs.push(r);
  return zoo.addSurrogate(target, { archSig: s.archSig, tensors: refs, cosine: s.cosine, speedup: s.speedup, prunedFraction: s.prunedFraction });
}
