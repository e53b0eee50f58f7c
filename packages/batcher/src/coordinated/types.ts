/** The public shapes of coordinated batching (PetS, pets.md §4–§5). */
import type { CostModel } from './cost-model.js';

/** One query of the pool: its task and its token length. */
export interface CbQuery {
  id: number | string;
  task: string;
  /** Tokens (an integer >= 1). */
  length: number;
  /** Arrival order; default: the index in the input. Ties in length are broken by it (then by input index). */
  arrival?: number;
}

/** One PET-operator invocation: queries of one task, padded (for the PET op) to their own max length. */
export interface MiniBatch {
  task: string;
  petType: string;
  queries: CbQuery[];
  /** Max length of its queries. */
  maxLength: number;
}

/** One executed batch: all its rows go through the shared model at maxLength; each mini-batch is one PET segment. */
export interface MacroBatch {
  miniBatches: MiniBatch[];
  /** Max length of its mini-batches (= of its queries). */
  maxLength: number;
  /** Total queries. */
  size: number;
}

/**
 * 'cb': Step 1 (intra-task, β) then Step 2 (inter-task, α); every mini-batch stays its own segment.
 * 'alpha-only': Step 2 over single-query mini-batches, then same-task queries of a macro-batch merged.
 * 'beta-only': Step 1 only; every mini-batch is its own macro-batch.
 * 'fixed': arrival-order chunks of `fixedSize`, same-task queries of a chunk merged.
 */
export type BatchingStrategy = 'cb' | 'fixed' | 'alpha-only' | 'beta-only';

export interface PlanOptions {
  /** 'auto' plans every strategy and keeps the lowest Eq. 3 estimate (ties: cb, alpha-only, beta-only, fixed). */
  strategy: BatchingStrategy | 'auto';
  cost: CostModel;
  /** PET type of a task; throwing means the task is unknown (PlanError TESSERA_UNKNOWN_TASK). */
  petTypeOf: (task: string) => string;
  /** Fixed batching's chunk size; default 32; at most maxMacro. The last partial chunk is kept (the artifact drops it). */
  fixedSize?: number;
  /** Queries per mini-batch at most (default 32), enforced as +∞ β in Step 1 and by splitting merged segments. */
  maxMini?: number;
  /** Queries per macro-batch at most (default 128), enforced as +∞ α in Step 2. */
  maxMacro?: number;
}

/** Eq. 3: Σ α over macro-batches, Σ β over their mini-batches. */
export interface CostEstimate {
  alpha: number;
  beta: number;
  total: number;
}

export interface BatchPlan {
  strategy: BatchingStrategy;
  /** In execution order (ascending max length for the DP strategies, arrival order for 'fixed'). */
  batches: MacroBatch[];
  estimate: CostEstimate;
  /** For 'auto': the estimate of each candidate planned (a candidate the cost model cannot price is absent). */
  candidates?: Partial<Record<BatchingStrategy, CostEstimate>>;
}
