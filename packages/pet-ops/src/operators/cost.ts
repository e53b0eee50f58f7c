/**
 * Analytic FLOPs and bytes of the PET ops (pets.md §6.2, fp32): the operational intensity Algorithm 2 sorts by
 * when no profiler is at hand. `tokens` is the rows the op touches (n·l of a mini-batch). CSR, bias and LayerNorm
 * count exactly as @tessera/native's petOpCost (the §6.2 table plus the CSR row pointers); the adapter keeps the
 * §6.2 table's form, whose large-n·l intensity d·m / (2d + m) Algorithm 2 is specified with (petOpCost also counts
 * the activation and keeps the bottleneck in registers: within a few percent).
 */
export interface OpCost {
  flops: number;
  bytes: number;
}

/** CSR SpMM (Diff-Pruning, MaskBert): 2·n·l·nnz FLOPs; nnz·8 + (d_out + 1)·4 + n·l·(d_in + d_out)·4 bytes. */
export function csrCost(tokens: number, nnz: number, inFeatures: number, outFeatures: number): OpCost {
  return { flops: 2 * tokens * nnz, bytes: nnz * 8 + (outFeatures + 1) * 4 + tokens * (inFeatures + outFeatures) * 4 };
}

/** Bias add (BitFit, Diff-Pruning's b_t): n·l·d FLOPs; n·l·d·8 + d·4 bytes. */
export function biasCost(tokens: number, features: number): OpCost {
  return { flops: tokens * features, bytes: tokens * features * 8 + features * 4 };
}

/** Adapter pair: 2·n·l·(2·d·m) FLOPs; (2·d·m + m + d)·4 + n·l·(2d + m)·4 bytes. */
export function adapterCost(tokens: number, features: number, bottleneck: number): OpCost {
  const d = features;
  const m = bottleneck;
  return { flops: 2 * tokens * 2 * d * m, bytes: (2 * d * m + m + d) * 4 + tokens * (2 * d + m) * 4 };
}

/** Task LayerNorm: about 8 FLOPs per element (mean, variance, normalize, scale, shift); reads x, writes y. */
export function layerNormCost(tokens: number, features: number): OpCost {
  return { flops: 8 * tokens * features, bytes: tokens * features * 8 + 2 * features * 4 };
}

/** LoRA shrink + expand: 2·n·l·r·(d_in + d_out) FLOPs; the two factors plus x, y and the rank-r intermediate. */
export function loraCost(tokens: number, rank: number, inFeatures: number, outFeatures: number): OpCost {
  return { flops: 2 * tokens * rank * (inFeatures + outFeatures), bytes: rank * (inFeatures + outFeatures) * 4 + tokens * (inFeatures + outFeatures + 2 * rank) * 4 };
}

/** Prefix-tuning in one layer: every token scores p more keys and mixes p more values (2·2·p·d FLOPs per token). */
export function prefixCost(tokens: number, prefixLength: number, hidden: number): OpCost {
  return { flops: 4 * tokens * prefixLength * hidden, bytes: 2 * prefixLength * hidden * 4 + tokens * hidden * 8 };
}
