/**
 * runClusterSimulation end to end on a small cluster (4 GPUs, 4 simulated minutes, short sequences, a KV budget
 * small enough that requests migrate): determinism, the timeline's accounts, exactly-once tokens across
 * migrations (T21 at scale), and consolidation on the ramp-down (T20 at scale).
 */
import { describe, expect, it } from 'vitest';
import { type ClusterSimulationOptions, SimArgumentError, generateTrace, rampProfile, runClusterSimulation } from '../src/index.js';

const durationMs = 240_000;
const small: ClusterSimulationOptions = {
  gpus: 4,
  durationMs,
  lengths: { kind: 'punica-synthetic', maxLength: 256 },
  kvTokensPerGpu: 4_000,
  arrivals: rampProfile({ peakPerSec: 40, durationMs }),
  sampleEveryMs: 10_000,
  idleReleaseMs: 20_000,
  seed: 5,
};
const result = runClusterSimulation(small);

describe('runClusterSimulation', () => {
  it('is deterministic: the same options give a deep-equal result; another seed another one', () => {
    expect(runClusterSimulation(small)).toEqual(result);
    const minute = (seed: number) => runClusterSimulation({ ...small, seed, durationMs: 60_000, arrivals: rampProfile({ peakPerSec: 40, durationMs: 60_000 }) });
    const a = minute(6);
    expect(minute(6)).toEqual(a);
    const b = minute(7);
    expect(b.totals.tokens).not.toBe(a.totals.tokens);
    expect(b.timeline.map((s) => s.arrivalsPerSec)).not.toEqual(a.timeline.map((s) => s.arrivalsPerSec));
  });

  it('every request completes with exactly its output length, across migrations (T21 at scale)', () => {
    const trace = generateTrace({ profile: small.arrivals!, lengths: small.lengths!, popularity: { kind: 'zipf', adapters: 100, alpha: 1.5 }, seed: 5 });
    const t = result.totals;
    expect(t.requests).toBe(trace.length);
    expect(t.completed).toBe(trace.length);
    expect(t.failed + t.unfinished).toBe(0);
    expect(t.migrations).toBeGreaterThan(0);
    expect(t.tokenCheck).toEqual({ checked: trace.length, exact: trace.length, mismatched: [] });
    expect(t.tokens).toBe(trace.reduce((a, r) => a + r.outputTokens, 0));
    expect(result.gpus.reduce((a, g) => a + g.evictions, 0)).toBe(t.migrations);
  });

  it('the timeline accounts for every arrival and token; batches stay within the cap', () => {
    const { timeline, totals, config } = result;
    let start = 0;
    let arrivals = 0;
    let tokens = 0;
    for (const s of timeline) {
      arrivals += (s.arrivalsPerSec * (s.tMs - start)) / 1000;
      tokens += (s.tokensPerSec * (s.tMs - start)) / 1000;
      start = s.tMs;
      expect(s.batch.length).toBe(4);
      for (const b of s.batch) {
        expect(b).toBeGreaterThanOrEqual(0);
        expect(b).toBeLessThanOrEqual(config.maxBatch);
      }
      expect(s.activeGpus).toBe(s.batch.filter((b) => b > 0).length);
    }
    expect(arrivals).toBeCloseTo(totals.requests, 6);
    expect(tokens).toBeCloseTo(totals.tokens, 6);
    expect(timeline.at(-1)!.tMs).toBeGreaterThanOrEqual(durationMs);
    expect(totals.meanBusyBatch).toBeGreaterThan(10);
    expect(totals.busyMsByBatch.reduce((a, b) => a + b, 0)).toBeCloseTo(result.gpus.reduce((a, g) => a + g.busyMs, 0), 6);
    expect(totals.gpuTimeIdleFraction).toBeGreaterThan(0);
    expect(totals.gpuTimeIdleFraction).toBeLessThan(1);
  });

  it('consolidates: GPUs released on the ramp-down are not needed again, and fewer run at the end than at the peak (T20 at scale)', () => {
    const { timeline, totals } = result;
    expect(totals.idleAfterPeak.releasable).toBeGreaterThan(0);
    expect(totals.idleAfterPeak.recalled).toBe(0);
    expect(totals.idleAfterPeak.fraction).toBe(1);
    const atPeak = timeline.filter((s) => s.tMs > totals.peakAtMs - 30_000 && s.tMs <= totals.peakAtMs).map((s) => s.activeGpus);
    const late = timeline.filter((s) => s.tMs > durationMs - 40_000 && s.tMs <= durationMs - 20_000).map((s) => s.activeGpus);
    expect(Math.max(...late)).toBeLessThan(Math.min(...atPeak));
    // The autoscaler saw spare GPUs (releasable) at both ends of the run.
    expect(timeline.at(-1)!.releasable).toBeGreaterThan(0);
  });

  it('rejects a KV budget that cannot hold the longest request', () => {
    expect(() => runClusterSimulation({ ...small, kvTokensPerGpu: 200 })).toThrow(SimArgumentError);
  });
});
