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

/** Throws unless `seed` is an integer in [0, 2^32): seeds are 32-bit so the streams stay exact. */
export function checkSeed(seed: number, what = 'seed'): number {
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new RangeError(`${what} must be an integer in [0, 2^32 - 1], got ${seed}`);
  }
  return seed;
}

/**
 * The starting state of the stream for (seed, name): FNV-1a over the seed's 4 little-endian bytes, then the UTF-8
 * name. Each generated tensor draws from its own stream, so adding a tensor or generating tensors in another
 * order never shifts the values of the others.
 */
export function streamState(seed: number, name: string): number {
  checkSeed(seed);
  const seedBytes = new Uint8Array(4);
  new DataView(seedBytes.buffer).setUint32(0, seed, true);
  return fnv1a32(name, fnv1a32(seedBytes));
}

/**
 * splitmix32: a Weyl sequence (golden-ratio increment) through the MurmurHash3 finalizer. Every 32-bit state is
 * a distinct output, and nearby states (seeds that differ by one bit) give unrelated outputs. The model and PET
 * generators draw their weights from it.
 */
export class SplitMix32 {
  private state: number;

  constructor(state: number) {
    this.state = state >>> 0;
  }

  /** A generator for the (seed, name) stream ({@link streamState}). */
  static forStream(seed: number, name: string): SplitMix32 {
    return new SplitMix32(streamState(seed, name));
  }

  /** The next uniform 32-bit unsigned integer. */
  nextUint32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** Uniform in [0, 1) with 32 bits of resolution. */
  nextFloat(): number {
    return this.nextUint32() / 0x100000000;
  }

  /** Uniform integer in [0, n), n ≤ 2^32 (a 32-bit fraction times n: each value's probability is off by < n / 2^32). */
  nextInt(n: number): number {
    return Math.floor(this.nextFloat() * n);
  }

  /** A uniform integer in [-2^23, 2^23): the top 24 bits, centred. Exactly representable in f32. */
  nextCentered24(): number {
    return (this.nextUint32() >>> 8) - 0x800000;
  }
}
