/**
 * Seeded randomness for traces: mulberry32 (a 32-bit integer generator; the same stream as @tessera/test-utils'
 * rng and @tessera/sgmv-kernel's seededRandom), plus the few distributions the workload generators draw from.
 * Integer arithmetic and Math.log/Math.exp only (V8 computes those in software), so a seed gives the same trace
 * on every machine.
 */

/** A uniform double in [0, 1). */
export type Random = () => number;

/** mulberry32 seeded with the low 32 bits of `seed`. */
export function mulberry32(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * An independent stream for one purpose of a run (arrival times, lengths, adapters…): the seed mixed with the
 * stream's index, so changing how one stream is used never shifts another.
 */
export function substream(seed: number, index: number): Random {
  let h = (Math.imul((seed >>> 0) ^ 0x9e3779b9, 0x85ebca6b) + Math.imul(index + 1, 0xc2b2ae35)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d) >>> 0;
  h = Math.imul(h ^ (h >>> 15), 0x846ca68b) >>> 0;
  return mulberry32(h ^ (h >>> 16));
}

/** Exponential with the given mean (inverse CDF; 1 − u keeps the logarithm finite). */
export function exponential(random: Random, mean: number): number {
  return -Math.log(1 - random()) * mean;
}

/** Standard normal (Box–Muller, one of the pair). */
export function standardNormal(random: Random): number {
  const u = 1 - random();
  const v = random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}

/** An integer uniform in [min, max] (both included). */
export function uniformInt(random: Random, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}
