/**
 * Auto-scaling (arlo.md §8, §12 items 30–32): target tracking on p98 (out at 0.95·SLO onto the longest runtime,
 * in at < 0.5·SLO every 60 s, releasing the least busy), its window and cooldown; headroom scaling for the baselines.
 */
import type { Clock } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { HeadroomScaler, type InstanceView, leastBusy, TargetTrackingScaler } from '../src/index.js';

function manualClock(): Clock & { t: number } {
  const c = { t: 0, now: () => c.t };
  return c;
}

const inst = (id: string, outstanding: number, capacity = 10): InstanceView => ({ id, runtime: 0, outstanding, capacity, state: 'active' });

describe('TargetTrackingScaler', () => {
  it('adds one instance of the longest runtime when p98 ≥ 0.95·SLO, then waits out the cooldown (§12 item 30)', () => {
    const clock = manualClock();
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 7, clock, cooldownMs: 5000 });
    for (let k = 0; k < 100; k++) s.record(k < 97 ? 10 : 96);
    // p98 of 100 samples is the 98th smallest: 96 ≥ 95.
    expect(s.recentTail()).toBe(96);
    const d = s.tick([inst('a', 1)]);
    expect(d).toMatchObject({ action: 'out', runtime: 7 });
    clock.t = 1000;
    expect(s.tick([inst('a', 1)])).toBeNull();
    clock.t = 5000;
    expect(s.tick([inst('a', 1)])).toMatchObject({ action: 'out' });
  });

  it('does not scale out just under the threshold', () => {
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 0, clock: manualClock() });
    for (let k = 0; k < 100; k++) s.record(k < 97 ? 10 : 94.9);
    expect(s.tick([inst('a', 1)])).toBeNull();
  });

  it('removes the least busy instance at a 60 s tick when p98 < 0.5·SLO (§12 item 31)', () => {
    const clock = manualClock();
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 0, clock });
    const fleet = [inst('a', 5), inst('b', 1, 4), inst('c', 2, 20)];
    clock.t = 59_000;
    for (let k = 0; k < 50; k++) s.record(20);
    expect(s.tick(fleet)).toBeNull(); // not yet 60 s
    clock.t = 60_000;
    expect(s.tick(fleet)).toMatchObject({ action: 'in', instanceId: 'c' }); // 2/20 is the lowest congestion
    clock.t = 61_000;
    expect(s.tick(fleet)).toBeNull(); // the next check is 60 s later
    expect(s.tick([inst('a', 0)])).toBeNull();
  });

  it('only counts recent requests: old slow ones leave the window', () => {
    const clock = manualClock();
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 0, clock, windowMs: 10_000, windowCount: 50 });
    for (let k = 0; k < 50; k++) s.record(200);
    clock.t = 20_000;
    expect(Number.isNaN(s.recentTail())).toBe(true);
    for (let k = 0; k < 60; k++) s.record(k < 10 ? 500 : 5); // the ring keeps the last 50: all 5 ms
    expect(s.recentTail()).toBe(5);
  });

  it('respects min and max instances', () => {
    const clock = manualClock();
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 0, clock, maxInstances: 1, minInstances: 1 });
    s.record(1000);
    expect(s.tick([inst('a', 0)])).toBeNull();
    expect(() => new TargetTrackingScaler({ sloMs: 100, longestRuntime: 0, inAt: 0.9, outAt: 0.5 })).toThrow(/inAt/);
    expect(() => s.record(-1)).toThrow(/latency/);
  });
});

describe('HeadroomScaler (baselines)', () => {
  it('scales out above 1 − headroom and in after utilisation stays low for the hold time', () => {
    const clock = manualClock();
    const s = new HeadroomScaler({ longestRuntime: 0, clock, cooldownMs: 0 });
    const fleet = [inst('a', 3), inst('b', 0)];
    expect(s.tick(0.85, fleet)).toMatchObject({ action: 'out', runtime: 0 });
    expect(s.tick(0.5, fleet)).toBeNull();
    clock.t = 1000;
    expect(s.tick(0.2, fleet)).toBeNull();
    clock.t = 60_999;
    expect(s.tick(0.2, fleet)).toBeNull();
    clock.t = 61_000;
    expect(s.tick(0.2, fleet)).toMatchObject({ action: 'in', instanceId: 'b' });
    clock.t = 62_000;
    expect(s.tick(0.5, fleet)).toBeNull();
  });

  it('leastBusy breaks ties by order', () => {
    expect(leastBusy([inst('x', 1), inst('y', 1)])!.id).toBe('x');
    expect(leastBusy([])).toBeUndefined();
  });
});

describe('scale-in keeps the longest runtime', () => {
  const at = (id: string, runtime: number, outstanding: number): InstanceView => ({ id, runtime, outstanding, capacity: 10, state: 'active' });

  it('target tracking: the idle last instance of the longest runtime is not released', () => {
    const clock = manualClock();
    const s = new TargetTrackingScaler({ sloMs: 100, longestRuntime: 2, clock, scaleInEveryMs: 1000 });
    for (let k = 0; k < 100; k++) s.record(10);
    clock.t = 1000;
    expect(s.tick([at('short', 0, 3), at('long', 2, 0)])).toBeNull();
    // With a second long instance, the idle one goes.
    clock.t = 2000;
    expect(s.tick([at('short', 0, 3), at('long', 2, 0), at('long-2', 2, 1)])).toMatchObject({ action: 'in', instanceId: 'long' });
  });

  it('headroom: the same', () => {
    const clock = manualClock();
    const s = new HeadroomScaler({ longestRuntime: 1, clock, holdMs: 1000, cooldownMs: 0 });
    expect(s.tick(0.05, [at('short', 0, 2), at('long', 1, 0)])).toBeNull();
    clock.t = 1000;
    expect(s.tick(0.05, [at('short', 0, 2), at('long', 1, 0)])).toBeNull();
    clock.t = 2000;
    expect(s.tick(0.05, [at('short', 0, 2), at('long', 1, 0), at('long-2', 1, 1)])).toMatchObject({ action: 'in', instanceId: 'long' });
  });
});
