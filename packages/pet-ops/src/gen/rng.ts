/**
 * Seeded streams for the PET generator: one splitmix32 stream per (seed, name), started from FNV-1a over the
 * seed's bytes and the name, so a tensor's values depend only on the seed and its own name (adding a tensor never
 * shifts another) and are the same on every machine (32-bit integer math only).
 */
import { SplitMix32, streamState } from '@tessera/core';

export { checkSeed } from '@tessera/core';

/** The PET generator's stream for (seed, name): @tessera/core's splitmix32 with a uniform fill. */
export class PetRng extends SplitMix32 {
  constructor(seed: number, name: string) {
    super(streamState(seed, name));
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
