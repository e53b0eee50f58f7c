/**
 * Seeded streams for the PET generator: one splitmix32 stream per (seed, name), started from FNV-1a over the
 * seed's bytes and the name, so a tensor's values depend only on the seed and its own name (adding a tensor never
 * shifts another) and are the same on every machine (32-bit integer math only).
 */
const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

export function checkSeed(seed: number, what = 'seed'): number {
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new RangeError(`${what} must be an integer in [0, 2^32 - 1], got ${seed}`);
  return seed;
}

function fnv1a(bytes: Uint8Array, hash: number): number {
  let h = hash >>> 0;
  for (const byte of bytes) h = Math.imul(h ^ byte, FNV_PRIME) >>> 0;
  return h;
}

export class PetRng {
  private state: number;

  constructor(seed: number, name: string) {
    checkSeed(seed);
    const seedBytes = new Uint8Array(4);
    new DataView(seedBytes.buffer).setUint32(0, seed, true);
    this.state = fnv1a(utf8.encode(name), fnv1a(seedBytes, FNV_OFFSET));
  }

  /** The next uniform 32-bit unsigned integer (splitmix32: a Weyl step through the MurmurHash3 finalizer). */
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

  /** Fills `out` with uniform values of standard deviation `std` (bound std·√3), centred on 0. */
  fillUniform(out: Float32Array, std: number): Float32Array {
    const bound = std * Math.sqrt(3);
    for (let i = 0; i < out.length; i++) out[i] = (this.nextFloat() * 2 - 1) * bound;
    return out;
  }
}

/** `n` uniform values of standard deviation `std` from the (seed, name) stream. */
export function uniformValues(n: number, seed: number, name: string, std: number): Float32Array {
  return new PetRng(seed, name).fillUniform(new Float32Array(n), std);
}

/**
 * `k` distinct positions in [0, n), sorted, from the (seed, name) stream (Floyd's algorithm: k draws, no
 * rejection loop, uniform over all k-subsets).
 */
export function samplePositions(n: number, k: number, seed: number, name: string): Int32Array {
  if (k > n) throw new RangeError(`cannot sample ${k} distinct positions out of ${n}`);
  const rng = new PetRng(seed, name);
  const chosen = new Set<number>();
  for (let j = n - k; j < n; j++) {
    const t = rng.nextInt(j + 1);
    chosen.add(chosen.has(t) ? j : t);
  }
  return Int32Array.from(chosen).sort();
}
