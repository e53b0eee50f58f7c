/**
 * Max supported tasks (pets.md §8.2, Table 5; §9 behaviour 4). A task count T is supported when the device holds
 * the weights and a batch of 32 queries of length 128 still runs. SeqS keeps one full model copy per task:
 * T·γ + activations. PetS keeps the shared model once: γ + Σ η_t + activations, tasks added in round-robin PET
 * type order, T in steps of 8 (as the artifact).
 *
 * The sizes are measured, not estimated: γ and the activation bytes (the allocator's peak during one real forward
 * of the batch) on a seeded shared model, η of one loaded task of each type. Counting then needs no hundreds of
 * loaded tasks; `loadUntilFull` does load real tasks under the real budget, to check the accounting.
 */
import { type EncoderConfig, EncoderModel, ModelWeights, encoderTensorShapes } from '@tessera/engine';
import { type Backend, BudgetExceededError, allocatorStats, getBackend, resetPeak } from '@tessera/native';
import { DeviceBudgetError } from '../errors.js';
import { PAPER_PET_TYPES, generatePetParams } from '../gen/generate.js';
import { PetRng, uniformValues } from '../gen/rng.js';
import { type PetRegistry, defaultPetRegistry } from '../registry.js';
import type { PetType } from '../types.js';
import { SharedEncoder } from './shared-model.js';
import type { TaskManager } from './task-manager.js';

/** Table 5's batch: 32 random queries of length 128. */
export const TABLE5_BATCH = { batch: 32, seq: 128 } as const;
/** The artifact grows the task count 8 at a time. */
export const TABLE5_STEP = 8;

export interface FootprintOptions {
  config: EncoderConfig;
  /** The batch whose forward must fit (default 32 × 128). */
  batch?: { batch: number; seq: number };
  /** PET types to measure (default the paper's four). */
  types?: readonly PetType[];
  seed?: number;
  backend?: Backend;
  registry?: PetRegistry;
}

export interface Footprint {
  /** Device bytes of the shared model's weights (γ). */
  sharedBytes: number;
  /** Peak device bytes of one forward of the batch, above the resident weights. */
  activationBytes: number;
  /** Device bytes of one loaded task of each type (η). */
  perTypeBytes: Partial<Record<PetType, number>>;
}

/** Seeded host weights for `config` (uniform std 0.02, LayerNorm gains 1), as the engine's generator makes. */
export function seededSharedWeights(config: EncoderConfig, seed: number): Map<string, { data: Float32Array; shape: number[] }> {
  const out = new Map<string, { data: Float32Array; shape: number[] }>();
  for (const [name, shape] of encoderTensorShapes(config)) {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = /LayerNorm\.weight$/.test(name) ? new Float32Array(n).fill(1) : uniformValues(n, seed, `shared/${name}`, 0.02);
    out.set(name, { data, shape });
  }
  return out;
}

function inUse(backend: Backend): number {
  return allocatorStats(backend).inUse;
}

/** Measures γ, the batch's activation bytes and η per type on a seeded shared model with `config`. */
export function measureFootprint(options: FootprintOptions): Footprint {
  const { config, batch = TABLE5_BATCH, types = PAPER_PET_TYPES, seed = 1 } = options;
  const backend = options.backend ?? getBackend();
  const registry = options.registry ?? defaultPetRegistry();
  if (!Number.isInteger(batch.batch) || batch.batch < 1 || !Number.isInteger(batch.seq) || batch.seq < 1 || batch.seq > config.maxPositions) {
    throw new RangeError(`measureFootprint: batch ${batch.batch} × ${batch.seq} must be positive integers with seq ≤ ${config.maxPositions} positions`);
  }
  try {
    const before = inUse(backend);
    const model = new EncoderModel(config, ModelWeights.fromHost(seededSharedWeights(config, seed), backend));
    try {
      // A first tiny forward builds the fused q/k/v weights, so neither number below includes that one-off copy.
      disposeOutput(model.forward([{ ids: [1, 2] }]));
      const sharedBytes = inUse(backend) - before;

      const rng = new PetRng(seed, 'queries');
      const sequences = Array.from({ length: batch.batch }, () => ({ ids: Array.from({ length: batch.seq }, () => 1 + rng.nextInt(config.vocabSize - 1)) }));
      const base = inUse(backend);
      resetPeak(backend);
      disposeOutput(model.forward(sequences));
      const activationBytes = allocatorStats(backend).peak - base;

      const shared = new SharedEncoder('footprint', model, null);
      const perTypeBytes: Partial<Record<PetType, number>> = {};
      for (const type of types) {
        const params = generatePetParams(type, config, { seed, shared: (name) => shared.hostWeight(name) });
        const start = inUse(backend);
        const pet = registry.get(type).load(shared, params, backend);
        perTypeBytes[type] = inUse(backend) - start;
        pet.dispose();
      }
      return { sharedBytes, activationBytes, perTypeBytes };
    } finally {
      model.dispose();
    }
  } catch (err) {
    if (err instanceof BudgetExceededError) throw DeviceBudgetError.fromNative('measureFootprint', err);
    throw err;
  }
}

function disposeOutput(out: { hidden?: { dispose(): void }; pooled?: { dispose(): void }; logits?: { dispose(): void } }): void {
  out.hidden?.dispose();
  out.pooled?.dispose();
  out.logits?.dispose();
}

export interface MaxTasksResult {
  /** Tasks PetS holds (a multiple of `step`). */
  pets: number;
  /** Tasks SeqS holds (one full copy each). */
  seqs: number;
  /** pets / seqs (Infinity when SeqS holds none but PetS some; 0 when neither holds any). */
  ratio: number;
  sharedBytes: number;
  activationBytes: number;
  /** Mean η over the types. */
  meanPetBytes: number;
  perTypeBytes: Partial<Record<PetType, number>>;
}

/** Counts SeqS and PetS tasks for a budget from measured sizes (the second half of {@link maxTasks}). */
export function countTasks(options: { budgetBytes: number; footprint: Footprint; types?: readonly PetType[]; step?: number }): MaxTasksResult {
  const { budgetBytes, footprint, types = PAPER_PET_TYPES, step = TABLE5_STEP } = options;
  if (!Number.isInteger(step) || step < 1) throw new RangeError(`countTasks: step must be a positive integer, got ${step}`);
  if (types.length === 0) throw new RangeError('countTasks: types must name at least one PET type');
  const { sharedBytes, activationBytes, perTypeBytes } = footprint;
  const sizes = types.map((t) => {
    const b = perTypeBytes[t];
    if (b === undefined) throw new RangeError(`countTasks: the footprint has no size for ${t} tasks`);
    return b;
  });
  const cycle = sizes.reduce((a, b) => a + b, 0);
  const prefix = [0];
  for (const s of sizes) prefix.push(prefix[prefix.length - 1]! + s);
  // Bytes of the first T tasks in round-robin type order.
  const bytesOf = (T: number) => Math.floor(T / sizes.length) * cycle + prefix[T % sizes.length]!;

  const free = budgetBytes - activationBytes;
  const seqs = free > 0 && sharedBytes > 0 ? Math.floor(free / sharedBytes) : 0;
  const room = free - sharedBytes;
  let pets = 0;
  if (room >= 0 && cycle > 0) {
    // The largest k with bytesOf(k · step) ≤ room (bytesOf rises with T).
    let lo = 0;
    let hi = Math.floor(room / (Math.min(...sizes) * step)) + 1;
    while (bytesOf(hi * step) <= room) hi *= 2;
    while (hi - lo > 1) {
      const mid = Math.floor((lo + hi) / 2);
      if (bytesOf(mid * step) <= room) lo = mid;
      else hi = mid;
    }
    pets = lo * step;
  }
  return {
    pets,
    seqs,
    ratio: seqs > 0 ? pets / seqs : pets > 0 ? Infinity : 0,
    sharedBytes,
    activationBytes,
    meanPetBytes: cycle / sizes.length,
    perTypeBytes,
  };
}

export interface MaxTasksOptions extends FootprintOptions {
  budgetBytes: number;
  /** Tasks are added this many at a time (default 8, as the artifact). */
  step?: number;
}

/** Table 5's procedure for one model and budget: measure the sizes, then count SeqS and PetS tasks. */
export function maxTasks(options: MaxTasksOptions): MaxTasksResult {
  const footprint = measureFootprint(options);
  return countTasks({ budgetBytes: options.budgetBytes, footprint, ...(options.types ? { types: options.types } : {}), ...(options.step === undefined ? {} : { step: options.step }) });
}

export interface LoadUntilFullResult {
  /** Ids of the tasks that stayed loaded, in order. */
  ids: string[];
  /** The error that stopped loading (null when `limit` was reached first). */
  stoppedBy: DeviceBudgetError | null;
}

/**
 * Registers generated tasks (round-robin over `types`) on `tag` and loads them `step` at a time until the device
 * budget refuses a group; that group is unregistered again (all-or-nothing, as loadTasks). Loads real tasks under
 * the real budget, so its count checks {@link countTasks}' accounting.
 */
export function loadUntilFull(
  manager: TaskManager,
  options: { tag: string; types?: readonly PetType[]; seed?: number; step?: number; limit?: number },
): LoadUntilFullResult {
  const { tag, types = PAPER_PET_TYPES, seed = 1, step = TABLE5_STEP, limit = 100_000 } = options;
  if (!Number.isInteger(step) || step < 1) throw new RangeError(`loadUntilFull: step must be a positive integer, got ${step}`);
  const shared = manager.loadSharedModel(tag);
  const seeds = new PetRng(seed, 'load-until-full');
  const ids: string[] = [];
  while (ids.length + step <= limit) {
    const group: string[] = [];
    for (let i = 0; i < step; i++) {
      const type = types[(ids.length + i) % types.length]!;
      const params = generatePetParams(type, shared.config, { seed: seeds.nextUint32(), shared: (name) => shared.hostWeight(name) });
      group.push(manager.registerTask(type, tag, params));
    }
    try {
      manager.loadTasks(group);
    } catch (err) {
      for (const id of group) manager.unregisterTask(id);
      if (err instanceof DeviceBudgetError) return { ids, stoppedBy: err };
      throw err;
    }
    ids.push(...group);
  }
  return { ids, stoppedBy: null };
}
