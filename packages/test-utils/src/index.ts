/** Seeded data for tests and benchmarks: the same sequence on every machine and Node version. */

/** mulberry32: a small, fast 32-bit generator; returns uniform floats in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform floats in [lo, hi). */
export function randomFloats(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  const span = hi - lo;
  for (let i = 0; i < n; i++) out[i] = lo + span * next();
  return out;
}

/** n uniform integers in [lo, hiExclusive). */
export function randomInts(n: number, seed: number, lo: number, hiExclusive: number): Int32Array {
  const next = rng(seed);
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + Math.floor(next() * (hiExclusive - lo));
  return out;
}
