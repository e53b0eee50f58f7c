/** Seeded data for tests and benchmarks: the same sequence on every machine and Node version. */

import { mulberry32 } from '@tessera/core';

/** The repository's one seeded generator (@tessera/core's mulberry32), under the name the tests use. */
export { mulberry32 as rng };

/** n uniform floats in [lo, hi). */
export function randomFloats(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const next = mulberry32(seed);
  const out = new Float32Array(n);
  const span = hi - lo;
  for (let i = 0; i < n; i++) out[i] = lo + span * next();
  return out;
}

/** n uniform integers in [lo, hiExclusive). */
export function randomInts(n: number, seed: number, lo: number, hiExclusive: number): Int32Array {
  const next = mulberry32(seed);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + Math.floor(next() * (hiExclusive - lo));
  return out;
}
export { freePort, PrivateRedis, type PrivateRedisOptions } from './processes.js';
