/**
 * The allocation program (arlo.md §6, §12 items 8–15): the exact DP against brute force, HiGHS (linearised MILP
 * with the outer-approximation loop) against the DP, greedy + local search near the DP, the constraints, overload
 * (lower bounds relaxed, flagged), infeasible input (typed errors), and the time-limit fallback.
 */
import { mulberry32, type Random } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import {
  type AllocationProblem,
  AllocationInfeasibleError,
  DpSolver,
  EvenSolver,
  evaluateAllocation,
  GreedySolver,
  HighsSolver,
  AutoSolver,
  LengthSchedulerArgumentError,
  makeRuntimeProfile,
  prepareProblem,
  ProportionalSolver,
  type RuntimeProfile,
  SingleRuntimeSolver,
  tableLatency,
} from '../src/index.js';

/** Profiles with service time growing with length (BERT-like), SLO 150 ms. */
function profiles(I: number, sloMs = 150, model: 'md1' | 'batch-arrival' = 'md1'): RuntimeProfile[] {
  return Array.from({ length: I }, (_, i) => makeRuntimeProfile({ maxLength: 64 * (i + 1), serviceMs: 1.15 + 0.53 * i * (8 / I), overheadMs: 0.8, sloMs, latency: model }));
}

function randomProblem(rand: Random, G: number, I: number, loadFactor: number): AllocationProblem {
  const ps = profiles(I);
  // Load as a fraction of what G instances of the middle runtime could take, skewed towards short bins.
  const total = loadFactor * G * ps[Math.floor(I / 2)]!.capacity;
  const weights = Array.from({ length: I }, (_, i) => rand() * Math.exp(-i / 2) + (rand() < 0.2 ? 0 : 0.05));
  const sum = weights.reduce((a, b) => a + b, 0) || 1;
  return { instances: G, q: weights.map((w) => (w / sum) * total), profiles: ps };
}

/** Every allocation with Σ N = G and the (relaxed) lower bounds; the plain reference for the DP. */
function bruteForce(problem: AllocationProblem): { n: number[]; objective: number } {
  const p = prepareProblem(problem);
  let best = { n: [] as number[], objective: Infinity };
  const n = new Array<number>(p.I).fill(0);
  const rec = (i: number, left: number): void => {
    if (i === p.I - 1) {
      if (left < p.lowerBounds[i]!) return;
      n[i] = left;
      const obj = evaluateAllocation(p, n).objective;
      if (obj < best.objective) best = { n: [...n], objective: obj };
      return;
    }
    for (let k = p.lowerBounds[i]!; k <= left; k++) {
      n[i] = k;
      rec(i + 1, left - k);
    }
  };
  rec(0, p.G);
  return best;
}

function checkConstraints(problem: AllocationProblem, n: number[]): void {
  const p = prepareProblem(problem);
  expect(n.reduce((a, b) => a + b, 0)).toBe(problem.instances);
  for (let i = 0; i < p.I; i++) expect(n[i]).toBeGreaterThanOrEqual(p.lowerBounds[i]!);
  expect(n[p.I - 1]).toBeGreaterThanOrEqual(1);
}

describe('the exact DP', () => {
  it('equals brute force on random instances with G ≤ 10 and I ≤ 5, for both latency models', async () => {
    const rand = mulberry32(16);
    const dp = new DpSolver();
    for (let trial = 0; trial < 120; trial++) {
      const G = 1 + Math.floor(rand() * 10);
      const I = 1 + Math.floor(rand() * 5);
      const problem = randomProblem(rand, G, I, 0.2 + rand() * 1.4);
      if (trial % 3 === 0) problem.profiles = profiles(I, 150, 'batch-arrival');
      const ref = bruteForce(problem);
      const got = await dp.solve(problem);
      const unpruned = await new DpSolver(undefined, { pruneWithGreedy: false }).solve(problem);
      expect(unpruned.objective).toBeCloseTo(ref.objective, 6);
      expect(got.solver).toBe('dp');
      expect(got.objective).toBeCloseTo(ref.objective, 6);
      expect(got.objective).toBeLessThanOrEqual(ref.objective * (1 + 1e-12));
      checkConstraints(problem, got.instances);
      expect(got.lowerBound).toBe(got.objective);
    }
  });

  it('is exact for a non-convex but non-decreasing cost, where tangents would not bound it', async () => {
    // A step in 𝓛 (a staircase in latency against load) makes g non-convex; the DP only needs it non-decreasing.
    const step = (t: number) => (B: number) => t * (1 + Math.floor(B / 5));
    const ps = [0, 1, 2].map((i) => ({ maxLength: 64 * (i + 1), serviceMs: 1 + i, capacity: 20 - 5 * i, latencyAtLoad: step(1 + i) }));
    const rand = mulberry32(7);
    for (let trial = 0; trial < 30; trial++) {
      const problem = { instances: 2 + Math.floor(rand() * 7), q: ps.map(() => rand() * 30), profiles: ps };
      expect((await new DpSolver().solve(problem)).objective).toBeCloseTo(bruteForce(problem).objective, 9);
    }
  });

  it('never gets worse with one more instance (§12 item 14)', async () => {
    const rand = mulberry32(3);
    const dp = new DpSolver();
    for (let trial = 0; trial < 20; trial++) {
      const base = randomProblem(rand, 4, 4, 0.6);
      let prev = Infinity;
      for (let G = 4; G <= 14; G++) {
        const got = await dp.solve({ ...base, instances: G });
        if (!got.overloaded) {
          expect(got.objective).toBeLessThanOrEqual(prev * (1 + 1e-12));
          prev = got.objective;
        }
      }
    }
  });
});

describe('HiGHS with the outer-approximation loop', () => {
  it('reaches the DP optimum on random small instances, with a lower bound at or under it', async () => {
    const rand = mulberry32(2024);
    const highs = new HighsSolver();
    for (let trial = 0; trial < 25; trial++) {
      const G = 2 + Math.floor(rand() * 40);
      const I = 2 + Math.floor(rand() * 5);
      const problem = randomProblem(rand, G, I, 0.3 + rand());
      // The DP without the greedy incumbent: an oracle that shares no code path with HiGHS's warm start and polish.
      const [h, d] = [await highs.solve(problem), await new DpSolver(undefined, { pruneWithGreedy: false }).solve(problem)];
      expect(h.solver).toBe('highs-oa');
      expect(h.fallback).toBeUndefined();
      checkConstraints(problem, h.instances);
      expect(Math.abs(h.objective - d.objective) / d.objective).toBeLessThanOrEqual(1e-3);
      expect(h.lowerBound!).toBeLessThanOrEqual(d.objective * (1 + 1e-6));
      // The loop certified its answer: the MILP bound closed to within the relative gap (1e-4), not just the polish.
      expect((h.objective - h.lowerBound!) / h.objective).toBeLessThanOrEqual(2e-4);
    }
  });

  it('matches the DP at G = 90 and G = 300 on the paper-like 8-runtime setting (§12 item 12)', async () => {
    const rand = mulberry32(90);
    for (const G of [90, 300]) {
      const problem = randomProblem(rand, G, 8, 0.7);
      const h = await new HighsSolver().solve(problem);
      const d = await new DpSolver().solve(problem);
      expect(Math.abs(h.objective - d.objective) / d.objective).toBeLessThanOrEqual(1e-3);
      expect(h.lowerBound!).toBeLessThanOrEqual(d.objective * (1 + 1e-6));
    }
  });

  it('handles a measured (table) latency: convex envelope, same optimum as the DP', async () => {
    const ps = [0, 1, 2, 3].map((i) => {
      const t = 1.5 + i;
      const M = Math.floor(150 / t);
      const pts = Array.from({ length: 8 }, (_, k) => {
        const B = ((k + 1) / 8) * M;
        const rho = (B * t) / 150;
        return { load: B, ms: (t + (rho * t) / (2 * (1 - Math.min(rho, 0.95)))) * (1 + 0.03 * Math.sin(k * 7 + i)) };
      });
      return { maxLength: 128 * (i + 1), serviceMs: t, capacity: M, latencyAtLoad: tableLatency(pts) };
    });
    const problem = { instances: 30, q: [400, 120, 60, 20], profiles: ps };
    const h = await new HighsSolver().solve(problem);
    const d = await new DpSolver().solve(problem);
    expect(Math.abs(h.objective - d.objective) / d.objective).toBeLessThanOrEqual(1e-3);
  });

  it('falls back to the greedy allocation when the time limit leaves no time to solve', async () => {
    const problem = randomProblem(mulberry32(5), 50, 8, 0.8);
    const got = await new HighsSolver().solve(problem, { timeLimitMs: 0 });
    expect(got.solver).toBe('greedy-ls');
    expect(got.fallback).toBe('time-limit');
    checkConstraints(problem, got.instances);
    const dpTimedOut = await new DpSolver().solve(problem, { timeLimitMs: -1 });
    expect(dpTimedOut.solver).toBe('greedy-ls');
    expect(dpTimedOut.fallback).toBe('time-limit');
  });
});

describe('greedy + local search', () => {
  it('is within 1 % of the DP on random instances (§12 item 13)', async () => {
    const rand = mulberry32(13);
    let worst = 0;
    for (let trial = 0; trial < 60; trial++) {
      const problem = randomProblem(rand, 2 + Math.floor(rand() * 30), 2 + Math.floor(rand() * 6), 0.2 + rand() * 1.2);
      const g = await new GreedySolver().solve(problem);
      const d = await new DpSolver().solve(problem);
      checkConstraints(problem, g.instances);
      expect(g.objective).toBeGreaterThanOrEqual(d.objective * (1 - 1e-12));
      worst = Math.max(worst, (g.objective - d.objective) / d.objective);
    }
    expect(worst).toBeLessThanOrEqual(0.01);
  });
});

describe('shape of the optimum and the edge cases', () => {
  it('puts most instances on runtime 1 when all load is in bin 1, and keeps one on the longest (§12 item 11)', async () => {
    const ps = profiles(4);
    const got = await new DpSolver().solve({ instances: 12, q: [ps[0]!.capacity * 9, 0, 0, 0], profiles: ps });
    expect(got.instances[3]).toBe(1);
    expect(got.instances[0]).toBeGreaterThanOrEqual(9);
    expect(got.overloaded).toBe(false);
  });

  it('puts every instance on the longest runtime when all load is in the last bin', async () => {
    const ps = profiles(4);
    for (const solver of [new DpSolver(), new HighsSolver(), new GreedySolver()]) {
      const got = await solver.solve({ instances: 9, q: [0, 0, 0, ps[3]!.capacity * 6], profiles: ps });
      expect(got.instances).toEqual([0, 0, 0, 9]);
    }
  });

  it('relaxes the lower bounds under overload and says so (§12 item 10)', async () => {
    const ps = profiles(3);
    const problem = { instances: 4, q: ps.map((p) => p.capacity * 3), profiles: ps };
    for (const solver of [new DpSolver(), new HighsSolver(), new GreedySolver()]) {
      const got = await solver.solve(problem);
      expect(got.overloaded).toBe(true);
      expect(got.instances.reduce((a, b) => a + b, 0)).toBe(4);
      expect(got.instances[2]).toBeGreaterThanOrEqual(1);
      expect(Number.isFinite(got.objective)).toBe(true);
    }
    expect((await new DpSolver().solve(problem)).objective).toBeCloseTo(bruteForce(problem).objective, 6);
  });

  it('reports the served and demoted requests (Eqs. 4–5) and a mean latency', async () => {
    const ps = profiles(2);
    const M = ps[0]!.capacity;
    const got = await new DpSolver().solve({ instances: 2, q: [M * 1.5, 0], profiles: ps });
    // One instance of runtime 1 cannot absorb 1.5 M: either it serves M and demotes 0.5 M, or it has none.
    expect(got.served[0]! + got.demoted[0]!).toBeCloseTo(M * 1.5, 9);
    expect(got.served[1]).toBeCloseTo(got.demoted[0]!, 9);
    expect(got.meanLatencyMs).toBeCloseTo(got.objective / (M * 1.5), 9);
  });

  it('gives zero load a zero objective with the spare instances on the longest runtime', async () => {
    const got = await new GreedySolver().solve({ instances: 5, q: [0, 0, 0], profiles: profiles(3) });
    expect(got.objective).toBe(0);
    expect(got.meanLatencyMs).toBe(0);
    expect(got.instances).toEqual([0, 0, 5]);
    expect((await new DpSolver().solve({ instances: 5, q: [0, 0, 0], profiles: profiles(3) })).objective).toBe(0);
  });

  it('rejects impossible input with typed errors', async () => {
    const ps = profiles(3);
    await expect(new DpSolver().solve({ instances: 0, q: [1, 1, 1], profiles: ps })).rejects.toBeInstanceOf(AllocationInfeasibleError);
    await expect(new HighsSolver().solve({ instances: 0, q: [1, 1, 1], profiles: ps })).rejects.toBeInstanceOf(AllocationInfeasibleError);
    await expect(new DpSolver().solve({ instances: 3, q: [1, 1], profiles: ps })).rejects.toBeInstanceOf(LengthSchedulerArgumentError);
    await expect(new DpSolver().solve({ instances: 3, q: [1, -1, 1], profiles: ps })).rejects.toThrow(/q\[1\]/);
    await expect(new DpSolver().solve({ instances: 2.5, q: [1, 1, 1], profiles: ps })).rejects.toThrow(/instances/);
    await expect(new DpSolver().solve({ instances: 3, q: [], profiles: [] })).rejects.toThrow(/at least one runtime/);
  });

  it('picks the DP for small clusters and HiGHS for large ones (AutoSolver)', async () => {
    const rand = mulberry32(77);
    const auto = new AutoSolver({ dpLimit: 100 });
    expect((await auto.solve(randomProblem(rand, 10, 8, 0.5))).solver).toBe('dp');
    expect((await auto.solve(randomProblem(rand, 40, 8, 0.5))).solver).toBe('highs-oa');
  });
});

describe('baseline allocations', () => {
  const ps = profiles(4);
  const problem = { instances: 10, q: [100, 50, 20, 5], profiles: ps };

  it('Even: ⌊G/I⌋ each, the remainder to the longest', async () => {
    expect((await new EvenSolver().solve(problem)).instances).toEqual([2, 2, 3, 3]);
  });

  it('Single: every instance on the longest runtime (ST, DT)', async () => {
    expect((await new SingleRuntimeSolver().solve(problem)).instances).toEqual([0, 0, 0, 10]);
  });

  it('Proportional (INFaaS-like): shares of the bin work, one at least on the longest', async () => {
    const got = await new ProportionalSolver().solve(problem);
    expect(got.instances.reduce((a, b) => a + b, 0)).toBe(10);
    expect(got.instances[3]).toBeGreaterThanOrEqual(1);
    const work = problem.q.map((q, i) => q * ps[i]!.serviceMs);
    const total = work.reduce((a, b) => a + b, 0);
    // Largest remainders: each runtime within one instance of its exact share of the 9 free instances (+1 on the last).
    for (let i = 0; i < 4; i++) expect(Math.abs(got.instances[i]! - (i === 3 ? 1 : 0) - (work[i]! / total) * 9)).toBeLessThan(1);
  });
});
