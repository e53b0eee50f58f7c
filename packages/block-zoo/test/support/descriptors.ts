/**
 * Hand-made model descriptions for planner tests: every tensor of a Llama checkpoint with a content id made from
 * (model seed, tensor name), so two descriptions share a tensor exactly when they say so.
 */
import { type ArchSig, type ModelDescription, type TensorRef, tensorId } from '../../src/planner/index.js';

export function tinyArch(overrides: Partial<ArchSig> = {}): ArchSig {
  return {
    architecture: 'LlamaForCausalLM',
    vocabSize: 16,
    hiddenSize: 8,
    numLayers: 2,
    numHeads: 2,
    numKvHeads: 1,
    headDim: 4,
    intermediateSize: 12,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: false,
    dtype: 'f32',
    ...overrides,
  };
}

/** A tensor ref whose bytes are a deterministic function of (seed, name). */
export function ref(name: string, shape: number[], seed: string): TensorRef {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  let h = 2166136261;
  for (const ch of `${seed}/${name}`) h = Math.imul(h ^ ch.charCodeAt(0), 16777619) >>> 0;
  for (let i = 0; i < n; i++) {
    h = Math.imul(h ^ (h >>> 15), 2246822507) >>> 0;
    data[i] = (h / 2 ** 32) - 0.5;
  }
  return { name, id: tensorId({ dtype: 'f32', shape }, data), dtype: 'f32', shape };
}

export function llamaShapes(a: ArchSig): Map<string, number[]> {
  const h = a.hiddenSize;
  const m = new Map<string, number[]>();
  m.set('model.embed_tokens.weight', [a.vocabSize, h]);
  for (let l = 0; l < a.numLayers; l++) {
    const p = `model.layers.${l}`;
    m.set(`${p}.self_attn.q_proj.weight`, [a.numHeads * a.headDim, h]);
    m.set(`${p}.self_attn.k_proj.weight`, [a.numKvHeads * a.headDim, h]);
    m.set(`${p}.self_attn.v_proj.weight`, [a.numKvHeads * a.headDim, h]);
    m.set(`${p}.self_attn.o_proj.weight`, [h, a.numHeads * a.headDim]);
    m.set(`${p}.mlp.gate_proj.weight`, [a.intermediateSize, h]);
    m.set(`${p}.mlp.up_proj.weight`, [a.intermediateSize, h]);
    m.set(`${p}.mlp.down_proj.weight`, [h, a.intermediateSize]);
    m.set(`${p}.input_layernorm.weight`, [h]);
    m.set(`${p}.post_attention_layernorm.weight`, [h]);
  }
  m.set('model.norm.weight', [h]);
  if (!a.tieWordEmbeddings) m.set('lm_head.weight', [a.vocabSize, h]);
  return m;
}

/** A whole model; `seedOf(name)` picks each tensor's seed (the same seed as another model's = shared bytes). */
export function describeModel(id: string, a: ArchSig, seedOf: (name: string) => string = () => id): ModelDescription {
  return { id, archSig: a, tensors: [...llamaShapes(a)].map(([name, shape]) => ref(name, shape, seedOf(name))) };
}

/** PEFT LoRA tensors (rank r) on the given projections of every layer. */
export function loraTensors(id: string, a: ArchSig, rank: number, targets: readonly ('q_proj' | 'v_proj' | 'up_proj')[]): TensorRef[] {
  const out: TensorRef[] = [];
  for (let l = 0; l < a.numLayers; l++) {
    for (const t of targets) {
      const mod = t === 'up_proj' ? `model.layers.${l}.mlp.${t}` : `model.layers.${l}.self_attn.${t}`;
      const outDim = t === 'q_proj' ? a.numHeads * a.headDim : t === 'v_proj' ? a.numKvHeads * a.headDim : a.intermediateSize;
      out.push(ref(`base_model.model.${mod}.lora_A.weight`, [rank, a.hiddenSize], id));
      out.push(ref(`base_model.model.${mod}.lora_B.weight`, [outDim, rank], id));
    }
  }
  return out;
}
