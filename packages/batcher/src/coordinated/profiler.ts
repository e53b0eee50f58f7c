/**
 * Builds the α and β tables by timing an engine (pets.md §4 [ARTIFACT] tables, §10 "profile α/β tables for the
 * tiny model on CPU"). Every grid cell is run `warmup` times untimed, then `repeats` times timed; the table stores
 * the median. Medians are stored as measured (no monotone smoothing): the round-up lookup of CostTable assumes the
 * tables are roughly monotone, which holds for real engines up to noise.
 */
import { CostTable } from './cost-table.js';
import { CostModelError } from './errors.js';

export interface CostProfilerTarget {
  /** Runs the shared model (no PET ops) once on N queries padded to length L. */
  runShared(N: number, L: number): void | Promise<void>;
  /**
   * Runs only the PET ops of one mini-batch of n queries of length l of type petType, once. An engine that runs
   * every segment of a site in one call (so a segment's fixed cost is shared) may time several identical segments
   * per run and return how many: the profiler divides the run's time by that count (default 1), so β is the cost
   * one segment adds in such an engine.
   */
  runPet(petType: string, n: number, l: number): void | number | Promise<void | number>;
  petTypes: readonly string[];
}

export interface ProfileOptions {
  /** α batch grid; default 1, 2, 4, ..., 128. */
  batches?: number[];
  /** α length grid; default 8, 16, ..., 128. */
  lengths?: number[];
  /** β batch grid; default 1, 2, 4, 8, 16, 32. */
  petBatches?: number[];
  /** β length grid; default: `lengths`. */
  petLengths?: number[];
  /** Timed runs per cell (the median is stored); default 3. */
  repeats?: number;
  /** Untimed runs per cell before the timed ones; default 1. */
  warmup?: number;
  /** Milliseconds; default performance.now. */
  now?: () => number;
  /** Called after every cell with (cells done, cells in all). */
  onProgress?: (done: number, total: number) => void;
  /** Cap of the β tables (batches above cost +∞); default: the last petBatches point. */
  maxMini?: number;
  /** Cap of the α table; default: the last batches point. */
  maxMacro?: number;
}

export const DEFAULT_PROFILE_BATCHES: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128];
export const DEFAULT_PROFILE_LENGTHS: readonly number[] = Array.from({ length: 16 }, (_, i) => 8 * (i + 1));
export const DEFAULT_PROFILE_PET_BATCHES: readonly number[] = [1, 2, 4, 8, 16, 32];

export async function profileCostTables(target: CostProfilerTarget, options: ProfileOptions = {}): Promise<{ alpha: CostTable; beta: Map<string, CostTable> }> {
  if (target === null || typeof target !== 'object' || typeof target.runShared !== 'function' || typeof target.runPet !== 'function') {
    throw invalid('profileCostTables: target must have runShared(N, L) and runPet(petType, n, l)');
  }
  if (!Array.isArray(target.petTypes) || target.petTypes.some((t) => typeof t !== 'string' || t.length === 0)) {
    throw invalid('profileCostTables: target.petTypes must be an array of non-empty strings');
  }
  if (new Set(target.petTypes).size !== target.petTypes.length) throw invalid('profileCostTables: target.petTypes has duplicates');
  const batches = grid('batches', options.batches ?? DEFAULT_PROFILE_BATCHES);
  const lengths = grid('lengths', options.lengths ?? DEFAULT_PROFILE_LENGTHS);
  const petBatches = grid('petBatches', options.petBatches ?? DEFAULT_PROFILE_PET_BATCHES);
  const petLengths = grid('petLengths', options.petLengths ?? lengths);
  const repeats = count('repeats', options.repeats ?? 3, 1);
  const warmup = count('warmup', options.warmup ?? 1, 0);
  const now = options.now ?? (() => performance.now());
  if (typeof now !== 'function') throw invalid('profileCostTables: now must be a function returning milliseconds');
  const maxMacro = options.maxMacro === undefined ? undefined : count('maxMacro', options.maxMacro, 1);
  const maxMini = options.maxMini === undefined ? undefined : count('maxMini', options.maxMini, 1);

  const total = batches.length * lengths.length + target.petTypes.length * petBatches.length * petLengths.length;
  let done = 0;
  const samples = new Float64Array(repeats);
  const measure = async (run: () => void | number | Promise<void | number>, what: string): Promise<number> => {
    for (let w = 0; w < warmup; w++) await run();
    for (let r = 0; r < repeats; r++) {
      const t0 = now();
      const result = run();
      const per = result instanceof Promise ? await result : result;
      const dt = now() - t0;
      if (!Number.isFinite(dt) || dt < 0) throw invalid(`profileCostTables: ${what} measured ${dt} ms; is now() monotonic and in milliseconds?`);
      if (per !== undefined && (typeof per !== 'number' || !Number.isInteger(per) || per < 1)) {
        throw invalid(`profileCostTables: ${what} returned ${String(per)}; a run returns nothing or the number of segments it timed (an integer >= 1)`);
      }
      samples[r] = dt / (per ?? 1);
    }
    options.onProgress?.(++done, total);
    return median(samples);
  };

  const alphaValues = new Float64Array(batches.length * lengths.length);
  for (let bi = 0; bi < batches.length; bi++) {
    for (let li = 0; li < lengths.length; li++) {
      const N = batches[bi]!;
      const L = lengths[li]!;
      alphaValues[bi * lengths.length + li] = await measure(() => target.runShared(N, L), `runShared(${N}, ${L})`);
    }
  }
  const alphaInit: ConstructorParameters<typeof CostTable>[0] = { batches, lengths, values: alphaValues };
  if (maxMacro !== undefined) alphaInit.cap = maxMacro;
  const alpha = new CostTable(alphaInit);

  const beta = new Map<string, CostTable>();
  for (const petType of target.petTypes) {
    const values = new Float64Array(petBatches.length * petLengths.length);
    for (let bi = 0; bi < petBatches.length; bi++) {
      for (let li = 0; li < petLengths.length; li++) {
        const n = petBatches[bi]!;
        const l = petLengths[li]!;
        values[bi * petLengths.length + li] = await measure(() => target.runPet(petType, n, l), `runPet('${petType}', ${n}, ${l})`);
      }
    }
    const init: ConstructorParameters<typeof CostTable>[0] = { batches: petBatches, lengths: petLengths, values };
    if (maxMini !== undefined) init.cap = maxMini;
    beta.set(petType, new CostTable(init));
  }
  return { alpha, beta };
}

function invalid(message: string): CostModelError {
  return new CostModelError('TESSERA_INVALID_PROFILE_OPTIONS', message);
}

/** Positive integers, sorted and deduplicated (a grid is a set of points). */
function grid(name: string, values: readonly number[]): number[] {
  if (!Array.isArray(values) || values.length === 0) throw invalid(`profileCostTables: ${name} must be a non-empty array`);
  for (const v of values) {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw invalid(`profileCostTables: ${name} must hold integers >= 1, got ${String(v)}`);
  }
  return [...new Set(values)].sort((a, b) => a - b);
}

function count(name: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw invalid(`profileCostTables: ${name} must be an integer >= ${min}, got ${String(v)}`);
  return v;
}

/** Median of the samples (mean of the middle two for an even count); sorts a copy. */
function median(samples: Float64Array): number {
  const s = Float64Array.from(samples).sort();
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}
