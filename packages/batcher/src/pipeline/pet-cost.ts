/**
 * PetS's cost models for the batch window's planner (pets.md §4: α for the shared model, β per PET type, both in ms):
 *
 *   analytic (default)  `analyticCostModel` with constants derived below from the shared model's shape: an
 *                       assumed throughput turns each part's FLOPs into ms, plus fixed launch costs. Its absolute
 *                       values are rough; what planning needs is the ratios (shared vs PET work, per-token vs
 *                       per-launch), which follow the model's shape.
 *   tables              profiled α/β tables from a JSON file (`--cost-tables`), as `--profile-out` writes them:
 *                       `{ "alpha": CostTableJson, "beta": { "<pet type>": CostTableJson, … } }`.
 *   profiled            tables measured at start-up on this machine (`--profile`), on a small grid.
 */
import { TesseraError } from '@tessera/core';

import { type AnalyticCostParams, analyticCostModel, type CostModel, tableCostModel } from '../coordinated/cost-model.js';
import { CostTable, type CostTableJson } from '../coordinated/cost-table.js';
import { type CostProfilerTarget, profileCostTables } from '../coordinated/profiler.js';

/** The shape of a shared encoder, as far as pricing its PET work needs it. */
export interface EncoderShape {
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
}

/** FLOPs per millisecond assumed by the analytic model: 10 GFLOP/s, a few CPU cores' worth of f32 GEMM. */
export const ANALYTIC_FLOPS_PER_MS = 1e7;
/** Fixed cost of one shared forward per layer (kernel launches, attention set-up), ms. */
export const ANALYTIC_FORWARD_MS_PER_LAYER = 0.02;
/** Fixed cost of one PET op launch (one site of one layer, one mini-batch), ms. */
export const ANALYTIC_PET_LAUNCH_MS = 0.005;
/** The artifact's caps (pets.md §11 #6): at most 32 queries per mini-batch and 128 per macro-batch. */
export const PETS_MAX_MINI = 32;
export const PETS_MAX_MACRO = 128;

/**
 * Per PET type: FLOPs per token per layer (with the generator's default hyperparameters: MaskBert 5% of each weight
 * masked, Diff-Pruning 0.5% non-zeros, adapter bottleneck hidden/12, LoRA rank 8 on query and value, prefix
 * length 8) and the PET op launches per layer.
 */
export function petWorkPerLayer(config: EncoderShape): Record<string, { flops: number; launches: number }> {
  const h = config.hiddenSize;
  const linear = 4 * h * h + 2 * h * config.intermediateSize; // q, k, v, o, ffn_in, ffn_out
  const bottleneck = Math.max(1, Math.round(h / 12));
  return {
    // Two adapters (after attention, after the FFN): down and up projections, plus their task LayerNorms.
    adapter: { flops: 2 * (4 * h * bottleneck) + 2 * 5 * h, launches: 4 },
    // SpMM of x by W ⊙ M̄ at every linear site (5% of the weights).
    maskbert: { flops: 2 * 0.05 * linear, launches: 4 },
    // SpMM of x by δ (0.5% of the weights), the merged bias and task LayerNorms.
    diff: { flops: 2 * 0.005 * linear + 2 * 5 * h, launches: 6 },
    // Bias overrides at every linear site and task LayerNorms.
    bitfit: { flops: 5 * h + config.intermediateSize + 2 * 5 * h, launches: 6 },
    // x·A·B at query and value, rank 8.
    lora: { flops: 2 * 2 * (2 * h * 8), launches: 2 },
    // Attention over 8 more keys: scores and values.
    prefix: { flops: 4 * h * 8, launches: 1 },
    // Nothing per token: the task head only.
    standard: { flops: 0, launches: 0 },
  };
}

/** The analytic model's constants for a shared model (see the module comment). */
export function petsAnalyticCostParams(config: EncoderShape): AnalyticCostParams {
  const h = config.hiddenSize;
  const layers = config.numLayers;
  const linear = 4 * h * h + 2 * h * config.intermediateSize;
  const k: Record<string, number> = {};
  const m: Record<string, number> = {};
  for (const [type, work] of Object.entries(petWorkPerLayer(config))) {
    // One more launch for the task head, per mini-batch.
    k[type] = ANALYTIC_PET_LAUNCH_MS * (work.launches * layers + 1);
    m[type] = (work.flops * layers) / ANALYTIC_FLOPS_PER_MS;
  }
  return {
    a0: ANALYTIC_FORWARD_MS_PER_LAYER * layers,
    // Dense GEMMs: 2 FLOPs per weight per token.
    a1: (2 * linear * layers) / ANALYTIC_FLOPS_PER_MS,
    // Attention scores and the weighted sum: 4·hidden FLOPs per token per key, so N·L² overall.
    a2: (4 * h * layers) / ANALYTIC_FLOPS_PER_MS,
    k,
    m,
    maxMini: PETS_MAX_MINI,
    maxMacro: PETS_MAX_MACRO,
  };
}

export function petsAnalyticModel(config: EncoderShape): CostModel {
  return analyticCostModel(petsAnalyticCostParams(config));
}

/** The JSON form of profiled tables (what --profile-out writes and --cost-tables reads). */
export interface CostTablesJson {
  alpha: CostTableJson;
  beta: Record<string, CostTableJson>;
}

export function costTablesJson(tables: { alpha: CostTable; beta: ReadonlyMap<string, CostTable> }): CostTablesJson {
  return { alpha: tables.alpha.toJSON(), beta: Object.fromEntries([...tables.beta].map(([type, table]) => [type, table.toJSON()])) };
}

/** Thrown for a tables file that cannot price every PET type this server runs, or is not tables at all. */
export class CostTablesError extends TesseraError {
  static override readonly kind = 'invalid' as const;
  constructor(message: string) {
    super('TESSERA_INVALID_COST_TABLES', message);
  }
}

/** Reads profiled tables; every PET type the server runs must have a β table (else every task of it would fail to plan). */
export function petsTablesModel(json: unknown, petTypes: readonly string[], source: string): CostModel {
  if (json === null || typeof json !== 'object' || !('alpha' in json) || !('beta' in json)) {
    throw new CostTablesError(`${source}: expected {"alpha": {…}, "beta": {"<pet type>": {…}}} as written by --profile-out`);
  }
  const j = json as { alpha: unknown; beta: unknown };
  if (j.beta === null || typeof j.beta !== 'object' || Array.isArray(j.beta)) throw new CostTablesError(`${source}: "beta" must map PET types to tables`);
  let alpha: CostTable;
  const beta = new Map<string, CostTable>();
  try {
    alpha = CostTable.fromJSON(j.alpha);
    for (const [type, table] of Object.entries(j.beta as Record<string, unknown>)) beta.set(type, CostTable.fromJSON(table));
  } catch (err) {
    throw new CostTablesError(`${source}: ${(err as Error).message}`);
  }
  const missing = petTypes.filter((t) => !beta.has(t));
  if (missing.length > 0) throw new CostTablesError(`${source}: no β table for ${missing.join(', ')} (profile every PET type: --profile --profile-out <file>)`);
  return tableCostModel(alpha, beta);
}

/**
 * The small start-up grid of --profile: α up to the artifact's macro cap (128 queries) and the model's positions,
 * β up to the mini cap (32). Lengths are clipped to the model's max positions.
 */
export function petsProfileGrid(maxPositions: number): { batches: number[]; lengths: number[]; petBatches: number[]; petLengths: number[] } {
  const lengths = [...new Set([16, 32, 64, 128, 256, 512].filter((l) => l <= maxPositions).concat(Math.min(maxPositions, 512)))].sort((a, b) => a - b);
  return { batches: [1, 2, 4, 8, 16, 32, 64, PETS_MAX_MACRO], lengths, petBatches: [1, 4, 16, PETS_MAX_MINI], petLengths: lengths };
}

/**
 * Profiles PetS's α/β tables on `target` (pet-ops' petsCostProfilerTarget, with a task of every type loaded) over the
 * start-up grid of {@link petsProfileGrid}: one warm-up and three timed runs per cell, progress reported as a line
 * every tenth of the cells. Write the result with {@link costTablesJson}; price with `tableCostModel(alpha, beta)`.
 */
export async function profilePetsCostTables(
  target: CostProfilerTarget,
  maxPositions: number,
  progress: (line: string) => void = () => {},
): Promise<{ alpha: CostTable; beta: Map<string, CostTable> }> {
  const grid = petsProfileGrid(maxPositions);
  let reported = 0;
  return profileCostTables(target, {
    ...grid,
    repeats: 3,
    warmup: 1,
    maxMini: grid.petBatches.at(-1)!,
    maxMacro: grid.batches.at(-1)!,
    onProgress: (done, total) => {
      const tenth = Math.floor((10 * done) / total);
      if (tenth > reported || done === total) {
        reported = tenth;
        progress(`profiling α/β tables: ${done}/${total} cells (${Math.round((100 * done) / total)}%)`);
      }
    },
  });
}
