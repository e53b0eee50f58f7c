/**
 * Seeded weights that are the same bytes on every machine. Only 32-bit integer math (Math.imul, shifts) and
 * IEEE-exact double products feed each value, then Math.fround: no Math.random, no transcendental functions,
 * nothing a platform's libm could round differently.
 *
 * Each tensor draws from its own stream, derived from (seed, tensor name) with FNV-1a, so adding a tensor or
 * generating tensors in another order never shifts the values of the others.
 */

import { SplitMix32, streamState } from '@tessera/core';

// The stream primitives (FNV-1a, splitmix32, the (seed, name) stream state) are @tessera/core's.
export { checkSeed, fnv1a32, SplitMix32, streamState } from '@tessera/core';

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
