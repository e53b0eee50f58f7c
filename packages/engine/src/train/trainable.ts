/** What the Trainer drives: the trainable decoder and encoder both implement it. */
import type { TrainParam } from './params.js';

export interface LossResult {
  /** Σ of the per-target cross-entropies over the counted targets (natural log). */
  lossSum: number;
  /** Targets that count (tokens for causal LM, sequences for classification). */
  count: number;
}

/** A model with a trainable set, over examples E collated into batches B. */
export interface TrainableModel<E, B> {
  /** The trainable set (saved in checkpoints and checked on resume). */
  readonly spec: unknown;
  readonly params: readonly TrainParam[];
  /** Training forwards run with dropout so far (restored on resume so masks repeat exactly). */
  dropoutDraws: number;
  /** Training batches randomly masked so far (masked LM; restored on resume). */
  maskDraws?: number;
  zeroGrad(): void;
  /** Pads examples into one batch (random masking, if any, draws fresh masks for 'train' and fixed ones for 'eval'). */
  collate(examples: readonly E[], mode?: 'train' | 'eval'): B;
  /** Targets of a batch whose loss counts. */
  countTargets(batch: B): number;
  /** Forward + backward: adds gradScale · ∂(Σ losses)/∂θ to every param's gradient. */
  accumulateGradients(batch: B, gradScale: number): LossResult;
  /** Forward only, without dropout. */
  loss(batch: B): LossResult;
}
