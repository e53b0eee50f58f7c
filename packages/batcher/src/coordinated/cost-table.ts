/**
 * A profiled latency table over a (batch, length) grid, with the PetS artifact's look-up rule (pets.md §4, §11 #7):
 * an off-grid batch or length rounds UP to the next grid point (conservative: never cheaper than measured), a value
 * past the last grid point clamps to it, and a batch above the cap costs +∞ (that is how the artifact caps
 * mini-batches at 32 and macro-batches at 128 queries). Round-up assumes the table is roughly monotone in both
 * axes; the profiler stores medians as measured and does not force monotonicity.
 */
import { CostModelError } from './errors.js';

/** The JSON form of a CostTable (what `toJSON` writes and `fromJSON` reads). */
export interface CostTableJson {
  batches: number[];
  lengths: number[];
  /** Row-major [batches.length][lengths.length]. */
  values: number[];
  cap: number;
}

export interface CostTableInit {
  /** Profiled batch sizes, strictly increasing, > 0. */
  batches: readonly number[];
  /** Profiled lengths, strictly increasing, > 0. */
  lengths: readonly number[];
  /** Row-major [batches.length][lengths.length] latencies, finite and >= 0. */
  values: ArrayLike<number>;
  /** Batches above this cost +∞; default: the last batch grid point. */
  cap?: number;
}

export class CostTable {
  readonly batches: readonly number[];
  readonly lengths: readonly number[];
  readonly cap: number;
  private readonly values: Float64Array;

  constructor(init: CostTableInit) {
    if (init === null || typeof init !== 'object') throw invalid('CostTable: init must be an object');
    this.batches = checkGrid('batches', init.batches);
    this.lengths = checkGrid('lengths', init.lengths);
    const expected = this.batches.length * this.lengths.length;
    const values = init.values;
    if (values === null || typeof values !== 'object' || typeof values.length !== 'number') {
      throw invalid('CostTable: values must be an array-like of numbers');
    }
    if (values.length !== expected) {
      throw invalid(`CostTable: values has ${values.length} entries, expected batches.length × lengths.length = ` +
        `${this.batches.length} × ${this.lengths.length} = ${expected}`);
    }
    this.values = new Float64Array(expected);
    for (let i = 0; i < expected; i++) {
      const v = values[i];
      if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
        const b = this.batches[Math.floor(i / this.lengths.length)];
        const l = this.lengths[i % this.lengths.length];
        throw invalid(`CostTable: values[${i}] (batch ${b}, length ${l}) must be a finite number >= 0, got ${String(v)}`);
      }
      this.values[i] = v;
    }
    const cap = init.cap ?? this.batches[this.batches.length - 1]!;
    if (typeof cap !== 'number' || !Number.isFinite(cap) || cap <= 0) {
      throw invalid(`CostTable: cap must be a finite number > 0, got ${String(cap)}`);
    }
    this.cap = cap;
  }

  /**
   * Latency of `batch` queries at `length`: the entry at the first grid batch >= batch and the first grid length
   * >= length (each clamped to the last grid point); +Infinity when batch > cap.
   */
  lookup(batch: number, length: number): number {
    if (!(batch >= 0) || !(length >= 0)) {
      throw new CostModelError('TESSERA_INVALID_COST_LOOKUP',
        `CostTable.lookup: batch and length must be numbers >= 0, got batch=${batch}, length=${length}`);
    }
    if (batch > this.cap) return Infinity;
    return this.values[roundUpIndex(this.batches, batch) * this.lengths.length + roundUpIndex(this.lengths, length)]!;
  }

  /** The stored value at grid indices (bi, li). */
  at(batchIndex: number, lengthIndex: number): number {
    if (!Number.isInteger(batchIndex) || batchIndex < 0 || batchIndex >= this.batches.length ||
      !Number.isInteger(lengthIndex) || lengthIndex < 0 || lengthIndex >= this.lengths.length) {
      throw new CostModelError('TESSERA_INVALID_COST_LOOKUP',
        `CostTable.at: grid index (${batchIndex}, ${lengthIndex}) is outside [0, ${this.batches.length}) × [0, ${this.lengths.length})`);
    }
    return this.values[batchIndex * this.lengths.length + lengthIndex]!;
  }

  toJSON(): CostTableJson {
    return { batches: [...this.batches], lengths: [...this.lengths], values: Array.from(this.values), cap: this.cap };
  }

  /** Rebuilds a table from `toJSON()` output (e.g. parsed from a file); validates like the constructor. */
  static fromJSON(json: unknown): CostTable {
    if (json === null || typeof json !== 'object') throw invalid('CostTable.fromJSON: expected an object');
    const j = json as Partial<Record<keyof CostTableJson, unknown>>;
    for (const key of ['batches', 'lengths', 'values'] as const) {
      if (!Array.isArray(j[key])) throw invalid(`CostTable.fromJSON: '${key}' must be an array`);
    }
    if (j.cap !== undefined && typeof j.cap !== 'number') throw invalid(`CostTable.fromJSON: 'cap' must be a number`);
    const init: CostTableInit = { batches: j.batches as number[], lengths: j.lengths as number[], values: j.values as number[] };
    if (j.cap !== undefined) init.cap = j.cap;
    return new CostTable(init);
  }
}

function invalid(message: string): CostModelError {
  return new CostModelError('TESSERA_INVALID_COST_TABLE', message);
}

function checkGrid(name: string, grid: readonly number[] | undefined): number[] {
  if (!Array.isArray(grid) || grid.length === 0) throw invalid(`CostTable: ${name} must be a non-empty array`);
  const out: number[] = [];
  for (let i = 0; i < grid.length; i++) {
    const g: unknown = grid[i];
    if (typeof g !== 'number' || !Number.isFinite(g) || g <= 0) {
      throw invalid(`CostTable: ${name}[${i}] must be a finite number > 0, got ${String(g)}`);
    }
    if (i > 0 && g <= out[i - 1]!) {
      throw invalid(`CostTable: ${name} must be strictly increasing (${name}[${i - 1}] = ${out[i - 1]}, ${name}[${i}] = ${g})`);
    }
    out.push(g);
  }
  return out;
}

/** Index of the first grid point >= value; the last index when value is beyond the grid (clamp). */
function roundUpIndex(grid: readonly number[], value: number): number {
  let lo = 0;
  let hi = grid.length - 1;
  if (value >= grid[hi]!) return hi;
  // Invariant: grid[hi] >= value; find the smallest such index.
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (grid[mid]! >= value) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
