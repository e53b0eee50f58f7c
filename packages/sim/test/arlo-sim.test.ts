/**
 * runArloSimulation at small sizes: deterministic per seed, every request completes exactly once on a FIFO
 * single-server executor at its profiled service time, periodic re-allocation and replacement really move
 * instances, and the scheme orderings the paper reports hold where they follow from the model (Arlo below ST in
 * mean latency with the GPU penalty; padding waste ST > Arlo > DT = 0). No assertion depends on machine speed.
 */
import { describe, expect, it } from 'vitest';
import { type ArloSimulationOptions, SimArgumentError, generateArloTrace, measuredLatencyProfile, paperLatencyProfile, runArloSimulation } from '../src/index.js';

const trace = generateArloTrace({ kind: 'bursty', ratePerSec: 900, durationMs: 20_000, seed: 11 });
const base: ArloSimulationOptions = { scheme: 'arlo', instances: 10, trace, periodMs: 5_000 };

describe('runArloSimulation', () => {
  it('is deterministic per seed: same options → identical results; another seed → different ones', async () => {
    const a = await runArloSimulation({ ...base, recordRequests: true });
    const b = await runArloSimulation({ ...base, recordRequests: true });
    expect(b).toEqual(a);
    const otherTrace = generateArloTrace({ kind: 'bursty', ratePerSec: 900, durationMs: 20_000, seed: 12 });
    const c = await runArloSimulation({ ...base, trace: otherTrace });
    expect(c.latency.meanMs).not.toBe(a.latency.meanMs);
    expect(c.requests).not.toBe(a.requests);
    // The service jitter has its own seed.
    const d = await runArloSimulation({ ...base, seed: 99 });
    expect(d.requests).toBe(a.requests);
    expect(d.latency.meanMs).not.toBe(a.latency.meanMs);
  });

  it('completes every request exactly once, FIFO and one at a time per instance, at its profiled service time', async () => {
    const r = await runArloSimulation({ ...base, jitterSigma: 0, recordRequests: true });
    const log = r.requestLog!;
    const n = trace.arrivalMs.length;
    expect(r.requests).toBe(n);
    expect(r.completed).toBe(n);
    const profile = paperLatencyProfile('bert-base');
    const byInstance = new Map<number, number[]>();
    // Collect mismatches instead of one expect per request (18k requests).
    const bad: string[] = [];
    for (let k = 0; k < n; k++) {
      const padded = r.runtimeLengths[log.runtime[k]!]!;
      if (!Number.isFinite(log.finishMs[k]!)) bad.push(`${k}: not finished`);
      if (log.startMs[k]! < trace.arrivalMs[k]!) bad.push(`${k}: started before it arrived`);
      // Never on a runtime shorter than the request; service = static time at the padded length + 0.8 ms.
      if (padded < trace.length[k]!) bad.push(`${k}: length ${trace.length[k]} on runtime ${padded}`);
      if (Math.abs(log.serviceMs[k]! - (profile.staticMs(padded) + 0.8)) > 1e-9) bad.push(`${k}: service ${log.serviceMs[k]}`);
      if (Math.abs(log.finishMs[k]! - log.startMs[k]! - log.serviceMs[k]!) > 1e-6) bad.push(`${k}: finish - start != service`);
      const list = byInstance.get(log.instance[k]!) ?? [];
      list.push(k);
      byInstance.set(log.instance[k]!, list);
    }
    expect([...byInstance.keys()].every((i) => i >= 0 && i < 10)).toBe(true);
    for (const ks of byInstance.values()) {
      // Arrival order is FIFO order on one instance, and executions never overlap.
      for (let j = 1; j < ks.length; j++) if (log.startMs[ks[j]!]! < log.finishMs[ks[j - 1]!]! - 1e-9) bad.push(`${ks[j]}: overlaps ${ks[j - 1]}`);
    }
    expect(bad.slice(0, 5)).toEqual([]);
    const latencies = Array.from(log.finishMs, (f, k) => f - trace.arrivalMs[k]!).sort((x, y) => x - y);
    const mean = latencies.reduce((s, x) => s + x, 0) / n;
    expect(r.latency.meanMs).toBeCloseTo(mean, 9);
    expect(r.latency.p98Ms).toBe(latencies[Math.ceil(0.98 * n) - 1]);
    expect(r.latency.p50Ms).toBeLessThanOrEqual(r.latency.p98Ms);
    expect(r.latency.p98Ms).toBeLessThanOrEqual(r.latency.p99Ms);
    expect(r.latency.maxMs).toBe(latencies[n - 1]);
    expect(r.sloViolationFrac).toBe(latencies.filter((x) => x > 150).length / n);
    expect(r.perRuntime.reduce((s, p) => s + p.requests, 0)).toBe(n);
    expect(r.timeline.reduce((s, t) => s + (t.arrivalsPerSec * 1000) / 1000, 0)).toBe(n);
  });

  it('re-allocates every period through the RuntimeScheduler and replaces instances in batches', async () => {
    // Start from a prior that says every request is short, then send long ones: the allocation must move.
    const longTrace = generateArloTrace({ kind: 'stable', ratePerSec: 600, durationMs: 20_000, seed: 4, lengths: { median: 70 } });
    const r = await runArloSimulation({ ...base, trace: longTrace, priorLengths: { median: 8 }, swapMs: 500 });
    expect(r.allocations[0]!.reason).toBe('initial');
    const periodic = r.allocations.filter((a) => a.reason === 'period');
    expect(periodic.map((a) => a.atMs)).toEqual([5_000, 10_000, 15_000]);
    for (const a of r.allocations) expect(a.instances.reduce((s, x) => s + x, 0)).toBe(10);
    const first = r.allocations[0]!.instances;
    const last = r.allocations.at(-1)!.instances;
    const meanLength = (ns: number[]) => ns.reduce((s, x, i) => s + x * r.runtimeLengths[i]!, 0) / 10;
    expect(meanLength(last)).toBeGreaterThan(meanLength(first));
    expect(r.swaps).toBeGreaterThan(0);
    expect(r.swaps).toBe(r.allocations.reduce((s, a) => s + a.moves, 0));
    // The timeline sees the move: active instances per runtime follow the allocation.
    expect(r.timeline.at(-1)!.active).toEqual(last);
    // By default the prior is drawn from the trace's own length mix: the first allocation already leans long.
    const followed = await runArloSimulation({ ...base, trace: longTrace });
    expect(meanLength(followed.allocations[0]!.instances)).toBeGreaterThan(meanLength(first));
  });

  it('Arlo beats ST in mean latency with the GPU penalty; padding waste orders ST > Arlo > DT = 0', async () => {
    const [arlo, st, dt] = await Promise.all((['arlo', 'st', 'dt'] as const).map((scheme) => runArloSimulation({ ...base, scheme })));
    expect(arlo!.latency.meanMs).toBeLessThan(0.6 * st!.latency.meanMs);
    expect(arlo!.latency.meanMs).toBeLessThan(dt!.latency.meanMs);
    expect(st!.paddingWaste).toBeGreaterThan(arlo!.paddingWaste);
    expect(arlo!.paddingWaste).toBeGreaterThan(0);
    expect(dt!.paddingWaste).toBe(0);
    expect(st!.runtimeLengths).toEqual([512]);
    expect(st!.allocations[0]!.instances).toEqual([10]);
  });

  it('without the penalty (ORT on CPU) DT is no slower per request than Arlo', async () => {
    const [arlo, dt] = await Promise.all((['arlo', 'dt'] as const).map((scheme) => runArloSimulation({ ...base, scheme, dynamicPenalty: 'none' })));
    expect(dt!.meanServiceMs).toBeLessThanOrEqual(arlo!.meanServiceMs);
  });

  it('runs the ablations and baselines (ILB, IG, INFaaS-like, Even) on the same objects', async () => {
    for (const scheme of ['ilb', 'ig', 'infaas', 'even'] as const) {
      const r = await runArloSimulation({ ...base, scheme, trace: generateArloTrace({ kind: 'stable', ratePerSec: 500, durationMs: 6_000, seed: 1 }) });
      expect(r.completed).toBe(r.requests);
      expect(r.runtimeLengths).toHaveLength(8);
      expect(r.scheme).toBe(scheme);
      // Each scheme's own allocation: Even is ⌊G/I⌋ each with the remainder on the longest runtimes.
      if (scheme === 'even') for (const a of r.allocations) expect(a.instances).toEqual([1, 1, 1, 1, 1, 1, 2, 2]);
      else expect(r.allocations[0]!.solver).toBe(scheme === 'infaas' ? 'proportional' : 'dp');
    }
  });

  it('scales out under overload with the scheme’s scaler, and the allocation follows the new count', async () => {
    // 3 BERT-Large instances for a load that needs about 6: p98 passes 0.95 × SLO, target tracking adds instances.
    const heavy = generateArloTrace({ kind: 'stable', ratePerSec: 500, durationMs: 60_000, seed: 21 });
    const options: ArloSimulationOptions = { scheme: 'arlo', instances: 3, trace: heavy, profile: 'bert-large', periodMs: 10_000, autoscale: { provisionMs: 2_000 } };
    const r = await runArloSimulation(options);
    expect(r.completed).toBe(r.requests);
    const s = r.scaling!;
    expect(s.events.filter((e) => e.action === 'out').length).toBeGreaterThan(0);
    expect(s.maxInstances).toBeGreaterThan(3);
    expect(s.meanInstances).toBeGreaterThan(3);
    expect(s.meanInstances).toBeLessThanOrEqual(s.maxInstances);
    // Each added instance is a new one (the initial three are i0 … i2).
    const added = s.events.filter((x) => x.action === 'out').map((e) => Number(e.instanceId.slice(1)));
    expect(new Set(added).size).toBe(added.length);
    for (const id of added) expect(id).toBeGreaterThanOrEqual(3);
    // Every allocation is for the count serving when it was solved; the timeline shows the count growing.
    const counts = r.timeline.map((t) => t.instances);
    for (const a of r.allocations) expect(a.instances.reduce((x, y) => x + y, 0)).toBeLessThanOrEqual(s.maxInstances);
    expect(Math.max(...counts)).toBe(s.maxInstances);
    expect(r.allocations.at(-1)!.instances.reduce((x, y) => x + y, 0)).toBeGreaterThan(3);
    // Deterministic with scaling too.
    expect(await runArloSimulation(options)).toEqual(r);
    // ST scales with headroom on utilisation: out as well.
    const st = await runArloSimulation({ ...options, scheme: 'st' });
    expect(st.scaling!.maxInstances).toBeGreaterThan(3);
  });

  it('never scales in the last instance of the longest runtime (Fig. 8 at full size once drained it and stranded long requests)', async () => {
    // The bench's Fig. 8 setting at full length: 30 minutes of bursty BERT-Large load from 5 instances. The scalers
    // pick the least busy instance, often the idle long one; without the guard this run threw NoServingInstanceError.
    const trace = generateArloTrace({ kind: 'bursty', ratePerSec: 600, durationMs: 1_800_000, seed: 2024, burst: { meanSojournMs: 60_000 } });
    const r = await runArloSimulation({ scheme: 'arlo', instances: 5, trace, profile: 'bert-large', periodMs: 120_000, dynamicPenalty: 'gpu', autoscale: {} });
    expect(r.completed).toBe(r.requests);
    expect(r.waitedPlacements).toBe(0);
    expect(r.scaling!.events.filter((e) => e.action === 'in').length).toBeGreaterThan(0);
    const longest = r.runtimeLengths.length - 1;
    for (const sample of r.timeline) expect(sample.active[longest]!).toBeGreaterThanOrEqual(1);
  }, 60_000);

  it('scales in at light load, releasing an instance only after its last request', async () => {
    const light = generateArloTrace({ kind: 'stable', ratePerSec: 150, durationMs: 40_000, seed: 22 });
    const r = await runArloSimulation({
      ...base,
      trace: light,
      periodMs: 10_000,
      recordRequests: true,
      autoscale: { targetTracking: { scaleInEveryMs: 5_000 } },
    });
    expect(r.completed).toBe(r.requests);
    const released = r.scaling!.events.filter((e) => e.action === 'in');
    expect(released.length).toBeGreaterThan(0);
    expect(r.timeline.at(-1)!.instances).toBeLessThan(10);
    expect(r.scaling!.meanInstances).toBeLessThan(10);
    const log = r.requestLog!;
    for (const e of released) {
      const index = Number(e.instanceId.slice(1));
      for (let k = 0; k < r.requests; k++) if (log.instance[k] === index) expect(log.finishMs[k]!).toBeLessThanOrEqual(e.atMs);
    }
  });

  it('instances on shared cores slow each other down, re-timed as processor sharing (concurrencySlowdown)', async () => {
    // Two instances, one runtime, 10 ms per request alone; request 0 at t = 0, request 1 at t = 5 (the other
    // instance), request 2 at t = 40 (alone again).
    const hand = {
      ...generateArloTrace({ kind: 'stable', ratePerSec: 10, durationMs: 100, seed: 1, lengths: { scaleTo: 16 } }),
      arrivalMs: Float64Array.of(0, 5, 40),
      length: Int32Array.of(4, 4, 4),
    };
    const profile = measuredLatencyProfile('flat', [{ length: 8, batch: 1, ms: 10 }, { length: 16, batch: 1, ms: 10 }], { sloMs: 1000, maxLength: 16 });
    const opts: ArloSimulationOptions = { scheme: 'st', instances: 2, trace: hand, profile, runtimes: [16], overheadMs: 0, jitterSigma: 0, recordRequests: true };
    const alone = await runArloSimulation(opts);
    expect(Array.from(alone.requestLog!.finishMs)).toEqual([10, 15, 50]);
    const shared = await runArloSimulation({ ...opts, concurrencySlowdown: [1, 2] });
    // Request 0: 5 ms alone, then its last 5 ms at half speed → t = 15. Request 1: 5 ms of its work by t = 15
    // (half speed), the other 5 alone → t = 20. Request 2 runs alone.
    expect(Array.from(shared.requestLog!.finishMs)).toEqual([15, 20, 50]);
    expect(Array.from(shared.requestLog!.serviceMs)).toEqual([15, 15, 10]);
    expect(shared.requestLog!.instance[0]).not.toBe(shared.requestLog!.instance[1]);
    // A factor of 1 for two is the independent model.
    expect(Array.from((await runArloSimulation({ ...opts, concurrencySlowdown: [1, 1] })).requestLog!.finishMs)).toEqual([10, 15, 50]);
    await expect(runArloSimulation({ ...opts, concurrencySlowdown: [2] })).rejects.toThrow(/start with 1/);
    await expect(runArloSimulation({ ...opts, concurrencySlowdown: [1, 0.5] })).rejects.toThrow(SimArgumentError);
  });

  it('plans with the profile and executes at serviceProfile when they differ (a testbed whose speed drifted)', async () => {
    const hand = {
      ...generateArloTrace({ kind: 'stable', ratePerSec: 10, durationMs: 100, seed: 1, lengths: { scaleTo: 16 } }),
      arrivalMs: Float64Array.of(0, 5, 40),
      length: Int32Array.of(4, 4, 4),
    };
    const flat = (ms: number) => measuredLatencyProfile('flat', [{ length: 8, batch: 1, ms }, { length: 16, batch: 1, ms }], { sloMs: 1000, maxLength: 16 });
    const opts: ArloSimulationOptions = { scheme: 'st', instances: 2, trace: hand, profile: flat(10), runtimes: [16], overheadMs: 0, jitterSigma: 0, recordRequests: true };
    const slower = await runArloSimulation({ ...opts, serviceProfile: flat(20) });
    expect(Array.from(slower.requestLog!.finishMs)).toEqual([20, 25, 60]);
    // The plan is the profile's: the same allocation and predicted latency as without the drift.
    const planned = await runArloSimulation(opts);
    expect(slower.allocations[0]!.instances).toEqual(planned.allocations[0]!.instances);
    expect(slower.allocations[0]!.predictedMeanMs).toBe(planned.allocations[0]!.predictedMeanMs);
    const short = measuredLatencyProfile('short', [{ length: 8, batch: 1, ms: 10 }], { sloMs: 1000, maxLength: 8 });
    await expect(runArloSimulation({ ...opts, serviceProfile: short })).rejects.toThrow(/serviceProfile covers 8/);
  });

  it('rejects bad options with typed errors', async () => {
    await expect(runArloSimulation({ ...base, instances: 0 })).rejects.toThrow(SimArgumentError);
    await expect(runArloSimulation({ ...base, scheme: 'nope' as never })).rejects.toThrow(/nope/);
    await expect(runArloSimulation({ ...base, runtimes: [128, 1024] })).rejects.toThrow(/1024/);
  });
});
