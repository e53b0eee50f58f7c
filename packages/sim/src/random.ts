/**
 * Seeded randomness for traces: @tessera/core's mulberry32 and substream (the repository's one generator),
 * plus the few distributions the workload generators draw from.
 * Integer arithmetic and Math.log/Math.exp only (V8 computes those in software), so a seed gives the same trace
 * on every machine.
 */

import { mulberry32, type Random, substream } from '@tessera/core';

export { mulberry32, type Random, substream };

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
