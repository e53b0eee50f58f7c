import { describe, expect, it } from 'vitest';
import { randomFloats, randomInts, rng } from '../src/index.js';

describe('seeded data', () => {
  it('is the same sequence for the same seed, and a different one for another seed', () => {
    const a = rng(42);
    const b = rng(42);
    const c = rng(43);
    const sa = Array.from({ length: 8 }, a);
    expect(Array.from({ length: 8 }, b)).toEqual(sa);
    expect(Array.from({ length: 8 }, c)).not.toEqual(sa);
    // Pinned values: a change to the generator would silently change every seeded test and benchmark.
    expect(rng(1)()).toBeCloseTo(0.6270739405881613, 15);
  });

  it('is uniform in [0, 1)', () => {
    const a = rng(42);
    const b = rng(42);
    let sum = 0;
    for (let i = 0; i < 10_000; i++) {
      const v = a();
      expect(v).toBe(b());
      expect(v >= 0 && v < 1).toBe(true);
      sum += v;
    }
    expect(sum / 10_000).toBeGreaterThan(0.48);
    expect(sum / 10_000).toBeLessThan(0.52);
  });

  it('stays in range', () => {
    const f = randomFloats(10_000, 7, -2, 3);
    expect(Math.min(...f)).toBeGreaterThanOrEqual(-2);
    expect(Math.max(...f)).toBeLessThan(3);
    const i = randomInts(10_000, 7, 5, 9);
    expect(new Set(i)).toEqual(new Set([5, 6, 7, 8]));
  });
});
