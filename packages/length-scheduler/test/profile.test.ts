/**
 * Runtime profiles and the offline profiler (arlo.md §4, §6.4, §12 item 6): M = ⌊SLO/t⌋ with the overhead, the
 * latency models (M/D/1 against its formula, convex and continuous past the cap; the table's convex envelope),
 * and the profiler driving a caller's measure().
 */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  batchArrivalLatency,
  LengthSchedulerArgumentError,
  makeRuntimeProfile,
  md1Latency,
  profileLatencyCurve,
  profileRuntimes,
  quantileSorted,
  tableLatency,
} from '../src/index.js';

describe('capacity', () => {
  it('Fig. 4: SLO 480 ms and t = 6, 12, 24 ms give M = 80, 40, 20', () => {
    expect([6, 12, 24].map((t, i) => makeRuntimeProfile({ maxLength: 128 << i, serviceMs: t, sloMs: 480 }).capacity)).toEqual([80, 40, 20]);
  });

  it('includes the per-request overhead before dividing (§4)', () => {
    const p = makeRuntimeProfile({ maxLength: 64, serviceMs: 1.15, overheadMs: 0.8, sloMs: 150 });
    expect(p.serviceMs).toBeCloseTo(1.95, 12);
    expect(p.capacity).toBe(Math.floor(150 / 1.95));
    expect(() => makeRuntimeProfile({ maxLength: 64, serviceMs: 200, sloMs: 150 })).toThrow(/exceeds the SLO/);
  });
});

describe('latency models', () => {
  it('M/D/1 follows t + ρt/(2(1−ρ)) below the cap', () => {
    const L = md1Latency(2, 100);
    for (const B of [0, 1, 10, 25, 40, 48]) {
      const rho = (B * 2) / 100;
      expect(L(B)).toBeCloseTo(2 + (rho * 2) / (2 * (1 - rho)), 9);
    }
  });

  it('M/D/1 g(B) = B·𝓛(B) is continuous, increasing and convex through and past the cap', () => {
    const L = md1Latency(2, 100, { rhoCap: 0.9 });
    const g = (B: number) => B * L(B);
    const cap = 45;
    expect(g(cap + 1e-7)).toBeCloseTo(g(cap - 1e-7), 4);
    let prevSlope = -Infinity;
    for (let B = 0.5; B < 120; B += 0.5) {
      const slope = g(B + 0.5) - g(B);
      expect(slope).toBeGreaterThan(0);
      expect(slope).toBeGreaterThanOrEqual(prevSlope - 1e-9);
      prevSlope = slope;
    }
  });

  it('batch arrival: 𝓛(B) = t(B+1)/2', () => {
    expect(batchArrivalLatency(4)(9)).toBe(20);
  });

  it('a table becomes the lower convex envelope of g through (0, 0), extended with the last slope', () => {
    const rand = mulberry32(4);
    const pts = Array.from({ length: 12 }, (_, k) => ({ load: k + 1 + rand() * 0.5, ms: 3 + 0.4 * (k + 1) + (rand() - 0.5) }));
    const L = tableLatency(pts);
    const g = (B: number) => B * L(B);
    // Never above a measured point; convex; extrapolated linearly.
    for (const p of pts) expect(g(p.load)).toBeLessThanOrEqual(p.load * p.ms + 1e-9);
    let prevSlope = -Infinity;
    for (let B = 0.25; B < 20; B += 0.25) {
      const slope = (g(B + 0.25) - g(B)) / 0.25;
      expect(slope).toBeGreaterThanOrEqual(prevSlope - 1e-9);
      prevSlope = slope;
    }
    // Exactly convex data is reproduced: 𝓛(B) = 2 + B has g = 2B + B², piecewise linear between the points.
    const exact = tableLatency([1, 2, 3, 4].map((B) => ({ load: B, ms: 2 + B })));
    for (const B of [1, 2, 3, 4]) expect(exact(B)).toBeCloseTo(2 + B, 12);
    expect(exact(2.5) * 2.5).toBeCloseTo((8 + 15) / 2, 12);
    expect(exact(5) * 5).toBeCloseTo(24 + 9, 12);
    expect(exact(0)).toBeCloseTo(3, 12);
    // Duplicate loads keep the lower measurement.
    expect(tableLatency([{ load: 2, ms: 5 }, { load: 2, ms: 4 }])(2)).toBe(4);
    expect(() => tableLatency([])).toThrow(LengthSchedulerArgumentError);
    expect(() => tableLatency([{ load: 0, ms: 1 }])).toThrow(/load/);
  });
});

describe('the offline profiler', () => {
  it('warms up, times reps runs of [batch, length] per runtime and builds each profile', async () => {
    const calls: [number, number][] = [];
    const rand = mulberry32(8);
    const samples = new Map<number, number[]>();
    const measure = (length: number, batch: number) => {
      calls.push([length, batch]);
      const ms = 0.01 * length + rand() * 0.1;
      const list = samples.get(length) ?? [];
      list.push(ms);
      samples.set(length, list);
      return ms;
    };
    const got = await profileRuntimes({ lengths: [64, 128], measure, sloMs: 150, warmup: 3, reps: 20, overheadMs: 0.8 });
    expect(calls.length).toBe(2 * 23);
    expect(calls.every(([, b]) => b === 1)).toBe(true);
    for (const p of got) {
      const measured = samples.get(p.maxLength)!.slice(3).sort((a, b) => a - b);
      const mean = measured.reduce((a, b) => a + b, 0) / measured.length;
      expect(p.meanMs).toBeCloseTo(mean, 12);
      expect(p.serviceMs).toBeCloseTo(mean + 0.8, 12);
      expect(p.capacity).toBe(Math.floor(150 / (mean + 0.8)));
      expect(p.p50Ms).toBe(quantileSorted(measured, 0.5));
      expect(p.p99Ms).toBe(measured[measured.length - 1]);
      expect(p.reps).toBe(20);
      expect(p.latencyAtLoad(0)).toBeCloseTo(p.serviceMs, 12);
    }
  });

  it('accepts async measurements and rejects bad ones', async () => {
    const curve = await profileLatencyCurve({ lengths: [8, 16, 24], measure: async (l) => l / 8, reps: 5, warmup: 1 });
    expect(curve).toEqual([{ length: 8, ms: 1 }, { length: 16, ms: 2 }, { length: 24, ms: 3 }]);
    await expect(profileRuntimes({ lengths: [64], measure: () => NaN, sloMs: 100, warmup: 0, reps: 2 })).rejects.toThrow(/returned NaN/);
    await expect(profileRuntimes({ lengths: [64], measure: () => 1, sloMs: 100, reps: 0 })).rejects.toThrow(/reps/);
  });
});
