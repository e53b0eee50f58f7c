/**
 * Table 1 analytically: the share of a fine-tuned model's parameters that are the foundation's,
 * base / (base + extra), from the architecture's shape and the PE configuration alone (design note §2.1).
 */
import { ZooInvalidError } from './errors.js';

/** The shape of a decoder-only transformer, enough to count its parameters. */
export interface TransformerShape {
  /** 'llama': RMSNorm, no biases, SwiGLU (3 FFN matrices). 'neox': LayerNorm with bias, biases everywhere, GELU (2). */
  style: 'llama' | 'neox';
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  intermediateSize: number;
  /** K/V width (numKvHeads × headDim); equals hiddenSize without grouped-query attention. */
  kvSize?: number;
  tieWordEmbeddings: boolean;
}

/** LLaMA-7B: 6,738,415,616 parameters. */
export const LLAMA_7B: TransformerShape = { style: 'llama', vocabSize: 32000, hiddenSize: 4096, numLayers: 32, intermediateSize: 11008, tieWordEmbeddings: false };
/** LLaMA-13B: 13,015,864,320 parameters. */
export const LLAMA_13B: TransformerShape = { style: 'llama', vocabSize: 32000, hiddenSize: 5120, numLayers: 40, intermediateSize: 13824, tieWordEmbeddings: false };
/** GPT-NeoX-20B: 20,554,567,680 parameters. */
export const NEOX_20B: TransformerShape = { style: 'neox', vocabSize: 50432, hiddenSize: 6144, numLayers: 44, intermediateSize: 24576, tieWordEmbeddings: false };

/** The attention and FFN linears a LoRA may target, by their Llama names (NeoX's fused qkv counts as q, k and v). */
export type LinearTarget = 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down';

export type PeConfig =
  /** LoRA of rank r on the targeted linears of every layer: r · (in + out) each. */
  | { method: 'lora'; rank: number; targets: readonly LinearTarget[] }
  /** `perLayer` bottleneck adapters per layer (Houlsby: 2), each down d→m and up m→d with biases. */
  | { method: 'adapter'; bottleneck: number; perLayer: number; biases?: boolean }
  /** Prefix-tuning: `tokens` trained key and value vectors in every layer. */
  | { method: 'prefix'; tokens: number }
  /** Prompt-tuning: `tokens` trained input embeddings. */
  | { method: 'prompt'; tokens: number }
  /** BitFit: a bias on every targeted linear of every layer (the foundation's own biases when it has them). */
  | { method: 'bitfit'; targets: readonly LinearTarget[] };

function checkPositive(name: string, v: number): void {
  if (!Number.isInteger(v) || v < 1) throw new ZooInvalidError(`${name} must be a positive integer, got ${v}`);
}

function checkShape(s: TransformerShape): void {
  for (const k of ['vocabSize', 'hiddenSize', 'numLayers', 'intermediateSize'] as const) checkPositive(k, s[k]);
  if (s.kvSize !== undefined) checkPositive('kvSize', s.kvSize);
}

/** [in, out] of each linear of one layer. */
function linearShapes(s: TransformerShape): Record<LinearTarget, [number, number]> {
  const d = s.hiddenSize;
  const kv = s.kvSize ?? d;
  const f = s.intermediateSize;
  return { q: [d, d], k: [d, kv], v: [d, kv], o: [d, d], gate: [d, f], up: [d, f], down: [f, d] };
}

/** Parameters of the foundation. */
export function baseParamCount(s: TransformerShape): number {
  checkShape(s);
  const d = s.hiddenSize;
  const lin = linearShapes(s);
  const ffn: LinearTarget[] = s.style === 'llama' ? ['gate', 'up', 'down'] : ['up', 'down'];
  const used: LinearTarget[] = ['q', 'k', 'v', 'o', ...ffn];
  let layer = 0;
  for (const t of used) {
    const [i, o] = lin[t];
    layer += i * o + (s.style === 'neox' ? o : 0);
  }
  // llama: two RMSNorm gains; neox: two LayerNorms with weight and bias.
  layer += s.style === 'llama' ? 2 * d : 4 * d;
  const embed = s.vocabSize * d;
  const head = s.tieWordEmbeddings ? 0 : s.vocabSize * d;
  const finalNorm = s.style === 'llama' ? d : 2 * d;
  return embed + s.numLayers * layer + finalNorm + head;
}

/** Parameters the fine-tune adds to the foundation. */
export function peParamCount(s: TransformerShape, pe: PeConfig): number {
  checkShape(s);
  const d = s.hiddenSize;
  const L = s.numLayers;
  const lin = linearShapes(s);
  switch (pe.method) {
    case 'lora': {
      checkPositive('rank', pe.rank);
      if (pe.targets.length === 0) throw new ZooInvalidError('a LoRA needs at least one target');
      return L * pe.targets.reduce((n, t) => n + pe.rank * (lin[t][0] + lin[t][1]), 0);
    }
    case 'adapter': {
      checkPositive('bottleneck', pe.bottleneck);
      checkPositive('perLayer', pe.perLayer);
      const m = pe.bottleneck;
      const one = 2 * d * m + (pe.biases === false ? 0 : m + d);
      return L * pe.perLayer * one;
    }
    case 'prefix':
      checkPositive('tokens', pe.tokens);
      return L * pe.tokens * 2 * (s.kvSize ?? d);
    case 'prompt':
      checkPositive('tokens', pe.tokens);
      return pe.tokens * d;
    case 'bitfit':
      if (pe.targets.length === 0) throw new ZooInvalidError('BitFit needs at least one target');
      // Llama has no biases, so BitFit adds them; NeoX trains (replaces) the ones it has.
      return L * pe.targets.reduce((n, t) => n + lin[t][1], 0);
  }
}

/**
 * Fraction of the fine-tuned model's parameters shared with the foundation: (base − replaced) / (base + added).
 * Every method adds its parameters except a BitFit of a model that has biases (NeoX), which replaces them.
 */
export function sharedParamFraction(s: TransformerShape, pe: PeConfig): number {
  const base = baseParamCount(s);
  const trained = peParamCount(s, pe);
  const replaces = pe.method === 'bitfit' && s.style === 'neox';
  return replaces ? (base - trained) / base : base / (base + trained);
}
