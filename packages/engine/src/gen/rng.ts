/**
 * Seeded weights that are the same bytes on every machine. Only 32-bit integer math (Math.imul, shifts) and
 * IEEE-exact double products feed each value, then Math.fround: no Math.random, no transcendental functions,
 * nothing a platform's libm could round differently.
 *
 * Each tensor draws from its own stream, derived from (seed, tensor name) with FNV-1a, so adding a tensor or
 * generating tensors in another order never shifts the values of the others.
 */

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

/** 32-bit FNV-1a over bytes, continuing from `hash` (the FNV offset basis by default). */
export function fnv1a32(bytes: Uint8Array, hash = FNV_OFFSET): number {
  let h = hash >>> 0;
  for (const byte of bytes) h = Math.imul(h ^ byte, FNV_PRIME) >>> 0;
  return h;
}

/** Throws unless `seed` is an integer in [0, 2^32): the generator's seeds are 32-bit so streams stay exact. */
export function checkSeed(seed: number, what = 'seed'): number {
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    throw new RangeError(`${what} must be an integer in [0, 2^32 - 1], got ${seed}`);
  }
  return seed;
}

/** The starting state of the stream for (seed, name): FNV-1a over the seed's 4 little-endian bytes, then the UTF-8 name. */
export function streamState(seed: number, name: string): number {
  checkSeed(seed);
  const seedBytes = new Uint8Array(4);
  new DataView(seedBytes.buffer).setUint32(0, seed, true);
  return fnv1a32(utf8.encode(name), fnv1a32(seedBytes));
}

/**
 * splitmix32: a Weyl sequence (golden-ratio increment) through the MurmurHash3 finalizer. Every 32-bit state is
 * a distinct output, and nearby states (seeds that differ by one bit) give unrelated outputs.
 */
export class SplitMix32 {
  private state: number;

  constructor(state: number) {
    this.state = state >>> 0;
  }

  /** The next uniform 32-bit unsigned integer. */
  nextUint32(): number {
    this.state = (this.state + 0x9e3779b9) >>> 0;
    let z = this.state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  }

  /** A uniform integer in [-2^23, 2^23): the top 24 bits, centred. Exactly representable in f32. */
  nextCentered24(): number {
    return (this.nextUint32() >>> 8) - 0x800000;
  }
}

/** √3, written out: a uniform(-a, a) has standard deviation a/√3, so a = std·√3. */
export const SQRT3 = 1.7320508075688772;

/**
 * Fills `out` with uniform(-bound, bound) values from the (seed, name) stream: each is a 24-bit integer k times
 * bound/2^23 (a power-of-two division, exact), rounded once to f32 by the Float32Array store.
 */
export function fillUniform(out: Float32Array, seed: number, name: string, bound: number): Float32Array {
  if (!(bound >= 0) || !Number.isFinite(bound)) throw new RangeError(`uniform bound for ${name} must be finite and >= 0, got ${bound}`);
  const rng = new SplitMix32(streamState(seed, name));
  const step = bound / 0x800000;
  for (let i = 0; i < out.length; i++) out[i] = rng.nextCentered24() * step;
  return out;
}

/** n values uniform in [-std·√3, std·√3), i.e. with standard deviation `std`, from the (seed, name) stream. */
export function uniformWithStd(n: number, seed: number, name: string, std: number): Float32Array {
  return fillUniform(new Float32Array(n), seed, name, Math.fround(std * SQRT3));
}
