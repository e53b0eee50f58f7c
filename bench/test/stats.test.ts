import { describe, expect, it } from 'vitest';
import { median, measure, measureAsync, percentile } from '../src/stats.js';

/** A clock that only moves when the measured function says so. */
function fakeClock(): { now: () => number; advance: (ms: number) => void } {
  let t = 0;
  return { now: () => t, advance: (ms) => (t += ms) };
}

describe('median and percentile', () => {
  it('median of odd and even counts, unsorted input left untouched', () => {
    const xs = [5, 1, 3];
    expect(median(xs)).toBe(3);
    expect(xs).toEqual([5, 1, 3]);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median([7])).toBe(7);
    expect(() => median([])).toThrow(RangeError);
  });

  it('percentile interpolates linearly', () => {
    const xs = [10, 20, 30, 40, 50];
    expect(percentile(xs, 0)).toBe(10);
    expect(percentile(xs, 100)).toBe(50);
    expect(percentile(xs, 50)).toBe(30);
    expect(percentile(xs, 25)).toBe(20);
    expect(percentile([1, 2], 50)).toBe(1.5);
    expect(() => percentile(xs, 101)).toThrow(RangeError);
  });
});

describe('measure', () => {
  it('warms up, then samples until the budget is spent, reporting the median', () => {
    const clock = fakeClock();
    let calls = 0;
    // Calls take 3 ms, except one slow outlier which the median ignores.
    const t = measure(
      () => {
        calls++;
        clock.advance(calls === 6 ? 50 : 3);
      },
      { warmup: 2, budgetMs: 30, minSamples: 3, minSampleMs: 0, now: clock.now },
    );
    expect(t.medianMs).toBe(3);
    expect(t.maxMs).toBe(50);
    expect(t.batch).toBe(1);
    // 2 warm-up calls, then samples until 30 ms have passed: the outlier uses 50 ms at once.
    expect(t.samples).toBe(4);
    expect(calls).toBe(2 + 4);
  });

  it('takes at least minSamples even past the budget, and at most maxSamples', () => {
    const clock = fakeClock();
    const slow = measure(() => clock.advance(100), { warmup: 1, budgetMs: 10, minSamples: 5, minSampleMs: 0, now: clock.now });
    expect(slow.samples).toBe(5);
    const fast = measure(() => clock.advance(1), { warmup: 0, budgetMs: 1e9, minSamples: 1, maxSamples: 7, minSampleMs: 0, now: clock.now });
    expect(fast.samples).toBe(7);
  });

  it('batches calls faster than minSampleMs and reports per-call time', () => {
    const clock = fakeClock();
    let calls = 0;
    const t = measure(
      () => {
        calls++;
        clock.advance(0.1);
      },
      { warmup: 2, budgetMs: 20, minSamples: 3, minSampleMs: 2, now: clock.now },
    );
    expect(t.batch).toBe(20);
    expect(t.medianMs).toBeCloseTo(0.1, 12);
    expect(t.samples).toBe(10);
    expect(calls).toBe(2 + 20 * 10);
  });

  it('times a real function with the real clock', () => {
    const t = measure(() => {
      let s = 0;
      for (let i = 0; i < 1e4; i++) s += Math.sqrt(i);
      return s;
    }, { budgetMs: 20 });
    expect(t.medianMs).toBeGreaterThan(0);
    expect(t.minMs).toBeLessThanOrEqual(t.medianMs);
    expect(t.maxMs).toBeGreaterThanOrEqual(t.medianMs);
    expect(t.sampleMs).toHaveLength(t.samples);
  });

  it('rejects nonsensical options', () => {
    expect(() => measure(() => 0, { minSamples: 0 })).toThrow(RangeError);
    expect(() => measure(() => 0, { minSamples: 5, maxSamples: 2 })).toThrow(RangeError);
  });
});

describe('measureAsync', () => {
  it('awaits each call and measures like measure()', async () => {
    const clock = fakeClock();
    let inFlight = 0;
    let maxInFlight = 0;
    const t = await measureAsync(
      async () => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        await Promise.resolve();
        clock.advance(4);
        inFlight--;
      },
      { warmup: 1, budgetMs: 40, minSamples: 2, minSampleMs: 0, now: clock.now },
    );
    expect(maxInFlight).toBe(1);
    expect(t.medianMs).toBe(4);
    expect(t.samples).toBe(10);
  });
});
