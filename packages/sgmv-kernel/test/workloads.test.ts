import { InvalidArgumentError } from '@tessera/native';
import { describe, expect, it } from 'vitest';
import { PAPER_POPULARITIES, assignAdapters, distinct, identical, indptrFromSizes, popularity, skewed, uniform, zipf } from '../src/bench.js';

const BATCHES = [1, 2, 3, 4, 7, 10, 16, 32, 64, 133, 1000];

describe('popularity generators (punica.md §9.8)', () => {
  it('reproduce the worked examples exactly', () => {
    expect(zipf(32, 1.5)).toEqual([11, 7, 5, 3, 2, 2, 1, 1]);
    expect(zipf(64, 1.5)).toEqual([17, 17, 11, 7, 5, 3, 2, 1, 1]);
    expect(zipf(1000, 1.5)).toEqual([291, 194, 133, 129, 86, 57, 38, 25, 17, 11, 7, 5, 3, 2, 1, 1]);
    expect(zipf(1000)).toHaveLength(16);
    expect(uniform(32)).toEqual([6, 6, 5, 5, 5, 5]);
    expect(uniform(64)).toEqual(new Array(8).fill(8));
    expect(uniform(1000)).toHaveLength(32);
    expect(distinct(4)).toEqual([1, 1, 1, 1]);
    expect(identical(64)).toEqual([64]);
    expect(skewed(64)).toEqual([1, 63]);
    expect(skewed(3)).toEqual([1, 2]);
    expect(skewed(2)).toEqual([2]);
    expect(skewed(1)).toEqual([1]);
  });

  it('small batches: zipf(1) = [1], zipf(2) = [1, 1], uniform(2) = [1, 1]', () => {
    expect(zipf(1)).toEqual([1]);
    expect(zipf(2)).toEqual([1, 1]);
    expect(zipf(4)).toEqual([2, 1, 1]);
    expect(uniform(1)).toEqual([1]);
    expect(uniform(2)).toEqual([1, 1]);
    expect(uniform(3)).toEqual([2, 1]);
  });

  it('every distribution covers the batch with non-empty segments', () => {
    for (const name of ['distinct', 'uniform', 'zipf', 'identical', 'skewed'] as const) {
      for (const bs of BATCHES) {
        const sizes = popularity(name, bs);
        expect(sizes.reduce((a, b) => a + b, 0), `${name}(${bs})`).toBe(bs);
        expect(sizes.every((s) => Number.isInteger(s) && s >= 1), `${name}(${bs})`).toBe(true);
      }
    }
    expect(PAPER_POPULARITIES).toEqual(['distinct', 'uniform', 'zipf', 'identical']);
  });

  it('zipf sizes fall by about alpha from rank to rank (a geometric decay) and honour other alphas', () => {
    const sizes = zipf(1000, 1.5).slice(4); // below the head, where the remainder was inserted
    for (let i = 0; i + 1 < sizes.length - 2; i++) expect(sizes[i]! / sizes[i + 1]!).toBeGreaterThan(1.3);
    expect(zipf(100, 2)).toEqual([37, 32, 16, 8, 4, 2, 1]);
  });

  it('rejects bad arguments with InvalidArgumentError', () => {
    expect(() => zipf(0)).toThrow(InvalidArgumentError);
    expect(() => uniform(2.5)).toThrow(/positive integer/);
    expect(() => zipf(10, 1)).toThrow(/alpha/);
    expect(() => popularity('nope' as never, 4)).toThrow(/unknown distribution/);
  });
});

describe('indptr and request-level assignment', () => {
  it('indptrFromSizes is the prefix sum, empty segments kept', () => {
    expect(Array.from(indptrFromSizes([11, 7, 0, 5]))).toEqual([0, 11, 18, 18, 23]);
    expect(() => indptrFromSizes([1, -1])).toThrow(InvalidArgumentError);
  });

  it('assignAdapters keeps each popularity exactly, shuffles, and is seeded', () => {
    const sizes = zipf(64);
    const ids = assignAdapters(sizes, 7);
    expect(ids).toHaveLength(64);
    const counts = new Array(sizes.length).fill(0);
    for (const id of ids) counts[id]++;
    expect(counts).toEqual(sizes);
    expect(assignAdapters(sizes, 7)).toEqual(ids);
    expect(assignAdapters(sizes, 8)).not.toEqual(ids);
    // Not left sorted: a shuffle of 64 items almost surely breaks the order.
    expect(ids).not.toEqual([...ids].sort((a, b) => a - b));
  });
});
