/**
 * The length estimator (arlo.md §5, §12 item 7): Q_i = count_i / window · SLO by ideal bin, the prior at cold
 * start and its weight against data, the carry-over between windows, and the prior from a length sample.
 */
import type { Clock } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { LengthEstimator, LengthSchedulerArgumentError, priorFromLengths } from '../src/index.js';

function manualClock(start = 0): Clock & { t: number } {
  const c = { t: start, now: () => c.t };
  return c;
}

describe('LengthEstimator', () => {
  it('2 400 requests over 120 s with a 150 ms SLO give ΣQ = 3, counted by ideal bin', () => {
    const clock = manualClock();
    const est = new LengthEstimator([64, 128, 192, 256], { sloMs: 150, clock });
    // 1 200 of ≤ 64, 600 of 65–128, 600 of 129–192, none longer.
    for (let k = 0; k < 1200; k++) est.observe(1 + (k % 64));
    for (let k = 0; k < 600; k++) est.observe(65 + (k % 64));
    for (let k = 0; k < 600; k++) est.observe(129 + (k % 64));
    clock.t = 120_000;
    const snap = est.snapshot();
    expect(snap.counts).toEqual([1200, 600, 600, 0]);
    expect(snap.q.reduce((a, b) => a + b, 0)).toBeCloseTo(3, 12);
    expect(snap.q[0]).toBeCloseTo(1.5, 12);
    expect(snap.windowMs).toBe(120_000);
  });

  it('counts requests longer than the longest runtime in its bin and reports them', () => {
    const clock = manualClock();
    const est = new LengthEstimator([64, 128], { sloMs: 100, clock });
    est.observe(500);
    est.observe(128);
    clock.t = 1000;
    const snap = est.snapshot();
    expect(snap.counts).toEqual([0, 2]);
    expect(snap.oversize).toBe(1);
  });

  it('returns the prior at cold start, and weighs it as priorWeightMs of traffic after', () => {
    const clock = manualClock(5000);
    const est = new LengthEstimator([64, 128], { sloMs: 100, clock, prior: { q: [4, 1], weightMs: 10_000 } });
    expect(est.peek().q).toEqual([4, 1]);
    // 1 s of data, all in bin 2 at 50 req/s (5 per SLO window); Q_i = SLO·(count_i + ref_i·w)/(T + w):
    for (let k = 0; k < 50; k++) est.observe(100);
    clock.t = 6000;
    const q = est.peek().q;
    expect(q[0]).toBeCloseTo((100 * (0 + (4 / 100) * 10_000)) / 11_000, 12);
    expect(q[1]).toBeCloseTo((100 * (50 + (1 / 100) * 10_000)) / 11_000, 12);
    // A tiny sample barely moves the estimate: bin 1 keeps most of its prior instead of dropping to 0.
    expect(q[0]).toBeGreaterThan(3.5);
  });

  it('is the paper estimator with weight 0, and without a prior', () => {
    const clock = manualClock();
    const est = new LengthEstimator([64, 128], { sloMs: 100, clock, prior: { q: [4, 1], weightMs: 0 } });
    for (let k = 0; k < 30; k++) est.observe(10);
    clock.t = 3000;
    expect(est.peek().q).toEqual([1, 0]);
    expect(new LengthEstimator([64], { sloMs: 100, clock }).peek().q).toEqual([0]);
  });

  it('carries each snapshot over as the next window reference, with the carry-over weight', () => {
    const clock = manualClock();
    const est = new LengthEstimator([64, 128], { sloMs: 100, clock, prior: { q: [0, 0], weightMs: 1000 }, carryOverMs: 500 });
    for (let k = 0; k < 200; k++) est.observe(10);
    clock.t = 10_000;
    const first = est.snapshot().q;
    expect(first[0]).toBeCloseTo((100 * 200) / 11_000, 12);
    // Right after the snapshot, with no new data, the estimate is the previous one.
    expect(est.peek().q[0]).toBeCloseTo(first[0]!, 12);
    expect(est.peek().counts).toEqual([0, 0]);
    // Then the previous estimate weighs as 500 ms of traffic, the prior's 1 000 ms no longer.
    for (let k = 0; k < 30; k++) est.observe(100);
    clock.t = 11_000;
    const q = est.peek().q;
    expect(q[0]).toBeCloseTo((100 * ((first[0]! / 100) * 500)) / 1500, 12);
    expect(q[1]).toBeCloseTo((100 * 30) / 1500, 12);
    // Both weights 0: a snapshot with no time passed keeps the last estimate rather than dropping to 0.
    const bare = new LengthEstimator([64], { sloMs: 100, clock, carryOverMs: 0 });
    bare.observe(1);
    clock.t = 12_000;
    const last = bare.snapshot().q;
    expect(bare.snapshot().q).toEqual(last);
  });

  it('rejects bad configuration', () => {
    expect(() => new LengthEstimator([64], { sloMs: 0 })).toThrow(LengthSchedulerArgumentError);
    expect(() => new LengthEstimator([64, 32], { sloMs: 10 })).toThrow(/ascending/);
    expect(() => new LengthEstimator([64], { sloMs: 10, prior: { q: [1, 2] } })).toThrow(/prior has 2 bins/);
    expect(() => new LengthEstimator([64], { sloMs: 10, prior: { q: [-1] } })).toThrow(/prior q\[0\]/);
    expect(() => new LengthEstimator([64], { sloMs: 10 }).observe(Number.NaN)).toThrow(/request length/);
  });
});

describe('priorFromLengths', () => {
  it('turns a length sample and a rate into Q per SLO window', () => {
    const q = priorFromLengths([64, 128], [10, 20, 30, 100], 1000, 150);
    expect(q).toEqual([112.5, 37.5]);
    expect(priorFromLengths([64], [1000], 10, 100)).toEqual([1]);
    expect(() => priorFromLengths([64], [], 10, 100)).toThrow(/non-empty/);
  });
});
