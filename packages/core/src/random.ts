/**
 * Seeded randomness that gives the same stream on every machine and Node version: 32-bit integer math only
 * (Math.imul, shifts). One generator (mulberry32) and one string hash (FNV-1a) for the whole repository.
 */

/** A uniform double in [0, 1). */
export type Random = () => number;

/** mulberry32 seeded with the low 32 bits of `seed`: a small, fast generator with a 2^32 period. */
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

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

/** 32-bit FNV-1a over bytes (or a string's UTF-8), continuing from `hash` (the FNV offset basis by default). */
export function fnv1a32(input: Uint8Array | string, hash = FNV_OFFSET): number {
  const bytes = typeof input === 'string' ? utf8.encode(input) : input;
  let h = hash >>> 0;
  for (const byte of bytes) h = Math.imul(h ^ byte, FNV_PRIME) >>> 0;
  return h;
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
