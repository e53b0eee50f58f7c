/**
 * The Runtime Scheduler (arlo.md §6.5, §12 item 32): periodic solves on the clock, on-demand solves, the new
 * instance count after a scaling step, the cold-start prior, and the listener.
 */
import type { Clock } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { type AllocationDecision, DpSolver, LengthEstimator, LengthSchedulerArgumentError, makeRuntimeProfile, RuntimeScheduler } from '../src/index.js';

function manualClock(): Clock & { t: number } {
  const c = { t: 0, now: () => c.t };
  return c;
}

const lengths = [64, 128, 256];
const profiles = lengths.map((l, i) => makeRuntimeProfile({ maxLength: l, serviceMs: 1 + i, overheadMs: 0.8, sloMs: 150 }));

describe('RuntimeScheduler', () => {
  it('solves from the prior at cold start, then every period from the observed lengths', async () => {
    const clock = manualClock();
    const estimator = new LengthEstimator(lengths, { sloMs: 150, clock, prior: { q: [100, 10, 1], weightMs: 1000 } });
    const seen: AllocationDecision[] = [];
    const rs = new RuntimeScheduler({ profiles, estimator, instances: 6, clock, periodMs: 120_000, solver: new DpSolver(clock), onAllocation: (d) => seen.push(d) });
    const cold = await rs.solveNow();
    expect(cold.reason).toBe('on-demand');
    expect(cold.snapshot.q).toEqual([100, 10, 1]);
    expect(cold.result.instances.reduce((a, b) => a + b, 0)).toBe(6);
    expect(cold.result.instances[0]).toBeGreaterThanOrEqual(2);
    expect(rs.poll()).toBeNull();
    // A window of long requests only: the next period moves instances to the longest runtime.
    for (let k = 0; k < 120_000; k++) estimator.observe(200);
    clock.t = 119_999;
    expect(rs.poll()).toBeNull();
    clock.t = 120_000;
    const next = await rs.poll()!;
    expect(next.reason).toBe('period');
    expect(next.result.instances[2]).toBeGreaterThan(cold.result.instances[2]!);
    expect(rs.current).toBe(next);
    expect(seen).toEqual([cold, next]);
    expect(rs.nextDueMs).toBe(240_000);
  });

  it('uses the new instance count after a scaling step (§12 item 32)', async () => {
    const clock = manualClock();
    const estimator = new LengthEstimator(lengths, { sloMs: 150, clock, prior: { q: [10, 10, 10] } });
    const rs = new RuntimeScheduler({ profiles, estimator, instances: 3, clock, solver: new DpSolver(clock) });
    expect((await rs.solveNow()).instances).toBe(3);
    rs.setInstances(5);
    clock.t = 120_000;
    const d = await rs.poll()!;
    expect(d.instances).toBe(5);
    expect(d.result.instances.reduce((a, b) => a + b, 0)).toBe(5);
  });

  it('shares a solve in flight, and refuses mismatched profiles', async () => {
    const clock = manualClock();
    const estimator = new LengthEstimator(lengths, { sloMs: 150, clock });
    const rs = new RuntimeScheduler({ profiles, estimator, instances: 3, clock });
    const a = rs.solveNow();
    expect(rs.solveNow()).toBe(a);
    clock.t = 1e9;
    expect(rs.poll()).toBeNull();
    await a;
    const due = rs.poll();
    expect(due).not.toBeNull();
    await due;
    expect(() => new RuntimeScheduler({ profiles: profiles.slice(1), estimator, instances: 3 })).toThrow(LengthSchedulerArgumentError);
    expect(() => new RuntimeScheduler({ profiles: [...profiles].reverse(), estimator, instances: 3 })).toThrow(/length/);
    expect(() => rs.setInstances(0)).toThrow(/instances/);
  });

  it('allocates with a new profile after setProfiles (POST /v1/profile), and refuses a mismatched one', async () => {
    const clock = manualClock();
    const estimator = new LengthEstimator(lengths, { sloMs: 150, clock, prior: { q: [10, 10, 10] } });
    const rs = new RuntimeScheduler({ profiles, estimator, instances: 6, clock, solver: new DpSolver(clock) });
    const before = await rs.solveNow();
    // The longest runtime re-profiled 8x slower: it needs more of the instances for the same load.
    const slower = lengths.map((l, i) => makeRuntimeProfile({ maxLength: l, serviceMs: i === 2 ? 24 : 1 + i, overheadMs: 0.8, sloMs: 150 }));
    rs.setProfiles(slower);
    expect(rs.profiles).toBe(slower);
    const after = await rs.solveNow();
    expect(after.result.instances[2]).toBeGreaterThan(before.result.instances[2]!);
    expect(() => rs.setProfiles(slower.slice(1))).toThrow(LengthSchedulerArgumentError);
    expect(rs.profiles).toBe(slower);
  });
});
