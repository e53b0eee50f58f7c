/**
 * LoRA popularity workloads of Punica's evaluation (punica.md §9.8, the repo's generators): how the rows of a
 * batch of `bs` requests are spread over adapters. Each generator returns segment sizes (rows per adapter, all
 * ≥ 1, summing to bs); `assignAdapters` turns sizes into a shuffled per-request adapter id list, as the
 * text-generation benchmark does.
 */
import { mulberry32 } from '@tessera/core';
import { InvalidArgumentError } from '@tessera/core';

export type PopularityName = 'distinct' | 'uniform' | 'zipf' | 'identical' | 'skewed';

/** The four distributions of the paper's figures, in their order (zipf with α = 1.5). */
export const PAPER_POPULARITIES: readonly PopularityName[] = ['distinct', 'uniform', 'zipf', 'identical'];

/** Zipf's α in every Punica experiment. */
export const DEFAULT_ZIPF_ALPHA = 1.5;

function checkBatch(what: string, bs: number): void {
  if (!Number.isSafeInteger(bs) || bs < 1) throw new InvalidArgumentError(`${what}: batch size must be a positive integer, got ${bs}`);
}

/** Every request its own adapter: bs segments of one row. */
export function distinct(bs: number): number[] {
  checkBatch('distinct', bs);
  return new Array<number>(bs).fill(1);
}

/** Every request the same adapter: one segment of bs rows. */
export function identical(bs: number): number[] {
  checkBatch('identical', bs);
  return [bs];
}

/** m = ⌈√bs⌉ adapters with ⌊bs/m⌋ rows each, the remainder spread one row at a time over the first ones. */
export function uniform(bs: number): number[] {
  checkBatch('uniform', bs);
  const m = Math.ceil(Math.sqrt(bs));
  const sizes = new Array<number>(m).fill(Math.floor(bs / m));
  const rest = bs - sizes.reduce((a, b) => a + b, 0);
  for (let i = 0; i < rest; i++) sizes[i]! += 1;
  return sizes;
}

/**
 * Zipf-like popularity: sizes ⌊α^k⌋ for k = 0, 1, 2, … while the running sum plus the next size stays below bs;
 * the remainder is the last size; sorted descending. Consecutive popularity ranks differ by about α (the repo's
 * generator: a geometric decay, which the paper calls Zipf-α).
 */
export function zipf(bs: number, alpha: number = DEFAULT_ZIPF_ALPHA): number[] {
  checkBatch('zipf', bs);
  if (!Number.isFinite(alpha) || alpha <= 1) throw new InvalidArgumentError(`zipf: alpha must be a finite number > 1, got ${alpha}`);
  const sizes: number[] = [];
  let sum = 0;
  for (let k = 0; ; k++) {
    const next = Math.floor(alpha ** k);
    if (sum + next >= bs) break;
    sizes.push(next);
    sum += next;
  }
  sizes.push(bs - sum);
  return sizes.sort((a, b) => b - a);
}

/** The repo's imbalanced test pattern: [1, bs − 1] for bs ≥ 3, else one segment. */
export function skewed(bs: number): number[] {
  checkBatch('skewed', bs);
  return bs >= 3 ? [1, bs - 1] : [bs];
}

/** Segment sizes of a named distribution (zipf uses `alpha`, default 1.5). */
export function popularity(name: PopularityName, bs: number, options: { alpha?: number } = {}): number[] {
  switch (name) {
    case 'distinct':
      return distinct(bs);
    case 'uniform':
      return uniform(bs);
    case 'zipf':
      return zipf(bs, options.alpha ?? DEFAULT_ZIPF_ALPHA);
    case 'identical':
      return identical(bs);
    case 'skewed':
      return skewed(bs);
    default:
      throw new InvalidArgumentError(`popularity: unknown distribution ${JSON.stringify(name)} (distinct, uniform, zipf, identical, skewed)`);
  }
}

/** Segment sizes → CSR row pointers [0, s0, s0 + s1, …] (Int32Array, length sizes.length + 1). */
export function indptrFromSizes(sizes: readonly number[]): Int32Array {
  const indptr = new Int32Array(sizes.length + 1);
  sizes.forEach((s, i) => {
    if (!Number.isSafeInteger(s) || s < 0) throw new InvalidArgumentError(`indptrFromSizes: size ${i} is ${s}, not a non-negative integer`);
    indptr[i + 1] = indptr[i]! + s;
  });
  return indptr;
}


/**
 * Request-level assignment: adapter id i repeated sizes[i] times, then shuffled (Fisher–Yates) with a fixed
 * seed, so arrival order interleaves adapters the way real traffic does while the popularity stays exact.
 */
export function assignAdapters(sizes: readonly number[], seed = 0): number[] {
  const ids: number[] = [];
  sizes.forEach((s, i) => {
    if (!Number.isSafeInteger(s) || s < 0) throw new InvalidArgumentError(`assignAdapters: size ${i} is ${s}, not a non-negative integer`);
    for (let k = 0; k < s; k++) ids.push(i);
  });
  const next = mulberry32(seed);
  for (let i = ids.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  return ids;
}
