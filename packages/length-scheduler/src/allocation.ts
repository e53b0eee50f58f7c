/**
 * The Runtime Scheduler's allocation program (arlo.md §6.1–§6.3): how many of the G instances run each runtime.
 *
 *   min Σ_i N_i·g_i(C_i/N_i)       g_i(B) = B·𝓛_i(B): total latency of one SLO window
 *   R_0 = 0, R_i = max(R_{i−1} + Q_i − N_i·M_i, 0)        overflow demoted to runtime i+1 (Eq. 4)
 *   C_i = min(R_{i−1} + Q_i, N_i·M_i) (i < I), C_I = R_{I−1} + Q_I     served by runtime i (Eq. 5)
 *   Σ N_i = G,  N_i ≥ ⌊Q_i/M_i⌋,  N_I ≥ 1                   (Eqs. 2, 3, 7)
 *
 * A runtime with no instance costs 0 and passes its whole bin upward. When the lower bounds exceed G the program
 * is infeasible as printed: the bounds are dropped (N_I ≥ 1 kept), it is solved anyway and the result says
 * `overloaded: true` (a scale-out signal). This module has the evaluator and the two dependency-free solvers: the
 * exact dynamic programme (the test oracle, and the default for small clusters) and greedy marginal allocation
 * with pairwise local search (the warm start, the polish, and the fallback under a time limit). `highs.ts` has
 * the MILP solver.
 */
import { type Clock, systemClock } from '@tessera/core';

import { AllocationInfeasibleError, LengthSchedulerArgumentError } from './errors.js';
import type { RuntimeProfile } from './profile.js';

export interface AllocationProblem {
  /** G: instances to allocate (one runtime instance per GPU or worker). */
  instances: number;
  /** Q_i: average requests per SLO window whose ideal runtime is i (ascending max length). */
  q: readonly number[];
  /** One profile per runtime, in the same order (M_i = capacity, 𝓛_i = latencyAtLoad). */
  profiles: readonly RuntimeProfile[];
}

export type SolverName = 'dp' | 'highs-oa' | 'greedy-ls' | 'even' | 'proportional' | 'single' | 'auto';

export interface AllocationResult {
  /** N_i: instances per runtime; sums to G. */
  instances: number[];
  /** The objective: Σ N_i·g_i(C_i/N_i), total latency (ms × requests) of one SLO window. */
  objective: number;
  /** objective / ΣQ: the predicted mean latency (ms); 0 when there is no load. */
  meanLatencyMs: number;
  /** C_i: requests per SLO window each runtime serves. */
  served: number[];
  /** R_i: requests per SLO window demoted from runtime i to i+1 (0 for the last). */
  demoted: number[];
  /** A proven lower bound on the optimum, where the solver has one (the DP's is its optimum). */
  lowerBound?: number;
  /** The lower bounds ⌊Q_i/M_i⌋ (with N_I ≥ 1) did not fit in G and were dropped: scale out. */
  overloaded: boolean;
  /** The solver that produced this allocation. */
  solver: SolverName;
  /** Why the requested solver's answer is not the one returned ('time-limit' or the solver's error). */
  fallback?: string;
  solveMs: number;
}

export interface SolveOptions {
  /** Wall-clock budget (ms); past it, solvers return the greedy allocation with `fallback: 'time-limit'`. */
  timeLimitMs?: number;
  /** Relative gap at which the HiGHS outer-approximation loop stops (default 1e-4). */
  relGap?: number;
}

/** One of the interchangeable solvers (§6.3). */
export interface AllocationSolver {
  readonly name: SolverName;
  solve(problem: AllocationProblem, options?: SolveOptions): Promise<AllocationResult>;
}

/** The validated problem with its lower bounds. */
export interface PreparedProblem {
  G: number;
  I: number;
  q: Float64Array;
  capacity: Float64Array;
  profiles: readonly RuntimeProfile[];
  lowerBounds: Int32Array;
  overloaded: boolean;
  totalLoad: number;
}

/** Validates a problem and computes its lower bounds, relaxing them under overload (§6.2). */
export function prepareProblem(problem: AllocationProblem): PreparedProblem {
  const G = problem.instances;
  const I = problem.profiles.length;
  if (I === 0) throw new LengthSchedulerArgumentError('allocation needs at least one runtime profile');
  if (problem.q.length !== I) throw new LengthSchedulerArgumentError(`q has ${problem.q.length} entries for ${I} runtimes`);
  if (!Number.isInteger(G) || G < 0) throw new LengthSchedulerArgumentError(`instances must be a non-negative integer, got ${G}`);
  if (G < 1) throw new AllocationInfeasibleError(G);
  const q = new Float64Array(I);
  const capacity = new Float64Array(I);
  let totalLoad = 0;
  for (let i = 0; i < I; i++) {
    const qi = problem.q[i]!;
    if (!(Number.isFinite(qi) && qi >= 0)) throw new LengthSchedulerArgumentError(`q[${i}] must be finite and >= 0, got ${qi}`);
    const m = problem.profiles[i]!.capacity;
    if (!(Number.isInteger(m) && m >= 1)) throw new LengthSchedulerArgumentError(`profile ${i} capacity must be a positive integer, got ${m}`);
    q[i] = qi;
    capacity[i] = m;
    totalLoad += qi;
  }
  const lowerBounds = new Int32Array(I);
  let sum = 0;
  for (let i = 0; i < I; i++) {
    // The small slack keeps an exact multiple (Q = 2M computed as 1.9999999) from losing an instance to rounding.
    lowerBounds[i] = Math.floor(q[i]! / capacity[i]! + 1e-9);
    if (i === I - 1) lowerBounds[i] = Math.max(lowerBounds[i]!, 1);
    sum += lowerBounds[i]!;
  }
  const overloaded = sum > G;
  if (overloaded) {
    lowerBounds.fill(0);
    lowerBounds[I - 1] = 1;
  }
  return { G, I, q, capacity, profiles: problem.profiles, lowerBounds, overloaded, totalLoad };
}

/** g_i(B) = B·𝓛_i(B); 0 at no load. */
export function loadCost(profile: RuntimeProfile, load: number): number {
  return load <= 0 ? 0 : load * profile.latencyAtLoad(load);
}

export interface AllocationEvaluation {
  objective: number;
  served: number[];
  demoted: number[];
}

/** The true objective of an allocation N, with C and R: Infinity when the last runtime has load and no instance. */
export function evaluateAllocation(p: PreparedProblem, n: ArrayLike<number>): AllocationEvaluation {
  const served: number[] = new Array<number>(p.I);
  const demoted: number[] = new Array<number>(p.I);
  const objective = objectiveOf(p, n, served, demoted);
  return { objective, served, demoted };
}

function objectiveOf(p: PreparedProblem, n: ArrayLike<number>, served?: number[], demoted?: number[]): number {
  let R = 0;
  let total = 0;
  const last = p.I - 1;
  for (let i = 0; i <= last; i++) {
    const load = R + p.q[i]!;
    const ni = n[i]!;
    let C: number;
    if (i < last) {
      C = Math.min(load, ni * p.capacity[i]!);
      R = load - C;
    } else {
      C = load;
      R = 0;
    }
    if (served) served[i] = C;
    if (demoted) demoted[i] = R;
    if (ni === 0) {
      if (C > 0) return Infinity;
    } else total += ni * loadCost(p.profiles[i]!, C / ni);
  }
  return total;
}

/** Packs an allocation into a result. */
export function toResult(p: PreparedProblem, n: ArrayLike<number>, solver: SolverName, solveMs: number, extra: { lowerBound?: number; fallback?: string } = {}): AllocationResult {
  const ev = evaluateAllocation(p, n);
  return {
    instances: Array.from(n),
    objective: ev.objective,
    meanLatencyMs: p.totalLoad > 0 ? ev.objective / p.totalLoad : 0,
    served: ev.served,
    demoted: ev.demoted,
    ...(extra.lowerBound === undefined ? {} : { lowerBound: extra.lowerBound }),
    overloaded: p.overloaded,
    solver,
    ...(extra.fallback === undefined ? {} : { fallback: extra.fallback }),
    solveMs,
  };
}

/**
 * Greedy marginal allocation then pairwise local search (§6.3 c): start from the lower bounds, give each remaining
 * instance to the runtime where it lowers the objective most (ties to the longer runtime, which can serve any
 * request), then move one instance from a to b while any move improves. Returns N.
 */
export function greedyAllocation(p: PreparedProblem, start?: ArrayLike<number>): Int32Array {
  const n = new Int32Array(p.I);
  if (start) n.set(Array.from(start));
  else {
    n.set(p.lowerBounds);
    let left = p.G - n.reduce((a, b) => a + b, 0);
    while (left > 0) {
      let bestI = p.I - 1;
      let bestObj = Infinity;
      for (let i = p.I - 1; i >= 0; i--) {
        n[i]!++;
        const obj = objectiveOf(p, n);
        n[i]!--;
        if (obj < bestObj) {
          bestObj = obj;
          bestI = i;
        }
      }
      n[bestI]!++;
      left--;
    }
  }
  return localSearch(p, n);
}

/**
 * Best-improvement "move k instances from a to b" (k = 1..3) until no move lowers the objective (bounded by 4·G
 * moves). Moves of two or three matter: a runtime that is better off with two instances than with none can be
 * worse off with one (it would run at its capacity), which single moves cannot cross.
 */
export function localSearch(p: PreparedProblem, n: Int32Array): Int32Array {
  let current = objectiveOf(p, n);
  for (let step = 0; step < 4 * p.G + 16; step++) {
    let bestObj = current;
    let bestFrom = -1;
    let bestTo = -1;
    let bestK = 0;
    for (let a = 0; a < p.I; a++) {
      const spare = n[a]! - p.lowerBounds[a]!;
      for (let k = 1; k <= Math.min(3, spare); k++) {
        for (let b = 0; b < p.I; b++) {
          if (b === a) continue;
          n[a]! -= k;
          n[b]! += k;
          const obj = objectiveOf(p, n);
          n[a]! += k;
          n[b]! -= k;
          if (obj < bestObj - 1e-12 * Math.abs(bestObj)) {
            bestObj = obj;
            bestFrom = a;
            bestTo = b;
            bestK = k;
          }
        }
      }
    }
    if (bestFrom < 0) break;
    n[bestFrom]! -= bestK;
    n[bestTo]! += bestK;
    current = bestObj;
  }
  return n;
}

/** The greedy solver as an {@link AllocationSolver}. */
export class GreedySolver implements AllocationSolver {
  readonly name = 'greedy-ls' as const;
  constructor(private readonly clock: Clock = systemClock) {}

  async solve(problem: AllocationProblem): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const n = greedyAllocation(p);
    return toResult(p, n, 'greedy-ls', this.clock.now() - t0);
  }
}

/**
 * The exact dynamic programme (§6.3 a). Demotion only flows upward, so the problem is sequential with state
 * (instances used, R_i) after runtime i. Future cost never falls as R grows (g is non-decreasing), so for each
 * count of instances used only the Pareto frontier of (R, cost so far) matters: lower R and lower cost. Partial
 * costs at or above the greedy allocation's objective are pruned (every later cost is ≥ 0). Requires g
 * non-decreasing; exact for any such g, convex or not. Returns N, or null when `deadline` passes first.
 */
export function dpAllocation(
  p: PreparedProblem,
  clock: Clock = systemClock,
  deadline = Infinity,
  options: { pruneWithGreedy?: boolean } = {},
): { n: Int32Array; objective: number } | null {
  const { G, I } = p;
  const sumLbAfter = new Int32Array(I + 1);
  for (let i = I - 1; i >= 0; i--) sumLbAfter[i] = sumLbAfter[i + 1]! + p.lowerBounds[i]!;
  const prune = options.pruneWithGreedy ?? true;
  const greedy = prune ? greedyAllocation(p) : null;
  const incumbent = greedy === null ? Infinity : objectiveOf(p, greedy);
  const cutoff = greedy === null ? Infinity : incumbent + 1e-9 * Math.abs(incumbent) + 1e-12;

  // Per stage and instances-used g: the frontier entries (R, cost, parent g, parent index, n).
  type Frontier = { R: number[]; cost: number[]; parentG: number[]; parentIdx: number[]; n: number[] };
  const empty = (): Frontier => ({ R: [], cost: [], parentG: [], parentIdx: [], n: [] });
  const stages: (Frontier | undefined)[][] = [];
  let prev: (Frontier | undefined)[] = new Array<Frontier | undefined>(G + 1);
  prev[0] = { R: [0], cost: [0], parentG: [-1], parentIdx: [-1], n: [0] };
  const last = I - 1;
  for (let i = 0; i <= last; i++) {
    const next: (Frontier | undefined)[] = new Array<Frontier | undefined>(G + 1);
    const qi = p.q[i]!;
    const mi = p.capacity[i]!;
    const profile = p.profiles[i]!;
    for (let g = 0; g <= G; g++) {
      const f = prev[g];
      if (f === undefined) continue;
      if (clock.now() > deadline) return null;
      const lo = i < last ? p.lowerBounds[i]! : G - g;
      const hi = i < last ? G - g - sumLbAfter[i + 1]! : G - g;
      if (i === last && lo < p.lowerBounds[last]!) continue;
      for (let k = 0; k < f.R.length; k++) {
        const load = f.R[k]! + qi;
        const base = f.cost[k]!;
        for (let n = lo; n <= hi; n++) {
          let C: number;
          let R: number;
          if (i < last) {
            C = Math.min(load, n * mi);
            R = load - C;
          } else {
            C = load;
            R = 0;
          }
          let cost: number;
          if (n === 0) cost = C > 0 ? Infinity : 0;
          else cost = n * loadCost(profile, C / n);
          const total = base + cost;
          if (!(total < cutoff) || total === Infinity) continue;
          const target = (next[g + n] ??= empty());
          target.R.push(R);
          target.cost.push(total);
          target.parentG.push(g);
          target.parentIdx.push(k);
          target.n.push(n);
        }
      }
    }
    for (let g = 0; g <= G; g++) {
      const f = next[g];
      if (f !== undefined) next[g] = paretoPrune(f);
    }
    stages.push(next);
    prev = next;
  }
  const final = prev[G];
  let n: Int32Array;
  let objective: number;
  if (final === undefined || final.R.length === 0) {
    // Nothing beat the greedy incumbent by the pruning margin: the incumbent is optimal. (Without the incumbent
    // some allocation always survives: N_I = G − Σ lower bounds has a finite cost.)
    if (greedy === null) throw new Error('dpAllocation: no feasible allocation survived, which prepareProblem rules out');
    n = greedy;
    objective = incumbent;
  } else {
    let best = 0;
    for (let k = 1; k < final.cost.length; k++) if (final.cost[k]! < final.cost[best]!) best = k;
    objective = final.cost[best]!;
    n = new Int32Array(I);
    let g = G;
    let idx = best;
    for (let i = last; i >= 0; i--) {
      const f = stages[i]![g]!;
      n[i] = f.n[idx]!;
      const pg = f.parentG[idx]!;
      idx = f.parentIdx[idx]!;
      g = pg;
    }
    if (greedy !== null && incumbent <= objective) {
      n = greedy;
      objective = incumbent;
    }
  }
  return { n, objective };

  function paretoPrune(f: Frontier): Frontier {
    const order = f.R.map((_, k) => k).sort((a, b) => f.R[a]! - f.R[b]! || f.cost[a]! - f.cost[b]!);
    const out = empty();
    let bestCost = Infinity;
    for (const k of order) {
      if (f.cost[k]! < bestCost) {
        bestCost = f.cost[k]!;
        out.R.push(f.R[k]!);
        out.cost.push(f.cost[k]!);
        out.parentG.push(f.parentG[k]!);
        out.parentIdx.push(f.parentIdx[k]!);
        out.n.push(f.n[k]!);
      }
    }
    return out;
  }
}

/**
 * The exact DP as an {@link AllocationSolver}; past `timeLimitMs` it returns the greedy allocation.
 * `pruneWithGreedy: false` runs it without the greedy incumbent (slower; an oracle independent of the greedy code).
 */
export class DpSolver implements AllocationSolver {
  readonly name = 'dp' as const;
  constructor(
    private readonly clock: Clock = systemClock,
    private readonly options: { pruneWithGreedy?: boolean } = {},
  ) {}

  async solve(problem: AllocationProblem, options: SolveOptions = {}): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const deadline = options.timeLimitMs === undefined ? Infinity : t0 + options.timeLimitMs;
    const out = dpAllocation(p, this.clock, deadline, this.options);
    if (out === null) return toResult(p, greedyAllocation(p), 'greedy-ls', this.clock.now() - t0, { fallback: 'time-limit' });
    return toResult(p, out.n, 'dp', this.clock.now() - t0, { lowerBound: out.objective });
  }
}

/**
 * Even allocation (Table 3's "Even"): ⌊G/I⌋ each, the remainder to the longest runtimes. Blind to the lengths;
 * a baseline, not a recommendation.
 */
export class EvenSolver implements AllocationSolver {
  readonly name = 'even' as const;
  constructor(private readonly clock: Clock = systemClock) {}

  async solve(problem: AllocationProblem): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const n = new Int32Array(p.I).fill(Math.floor(p.G / p.I));
    for (let k = 0, extra = p.G % p.I; k < extra; k++) n[p.I - 1 - k]!++;
    return toResult(p, n, 'even', this.clock.now() - t0);
  }
}

/** Every instance on the last runtime: ST (everything padded to the longest) and DT (one dynamic-shape runtime). */
export class SingleRuntimeSolver implements AllocationSolver {
  readonly name = 'single' as const;
  constructor(private readonly clock: Clock = systemClock) {}

  async solve(problem: AllocationProblem): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const n = new Int32Array(p.I);
    n[p.I - 1] = p.G;
    return toResult(p, n, 'single', this.clock.now() - t0);
  }
}

/**
 * INFaaS-like allocation (§9-J, our interpretation): instances per variant in proportion to the work of its own
 * bin (Q_i·t_i), largest remainders first, at least one on the longest variant. Load-driven but blind to how
 * demotion and queueing trade off, which is what the allocation program optimises.
 */
export class ProportionalSolver implements AllocationSolver {
  readonly name = 'proportional' as const;
  constructor(private readonly clock: Clock = systemClock) {}

  async solve(problem: AllocationProblem): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const work = Array.from(p.q, (qi, i) => qi * p.profiles[i]!.serviceMs);
    const total = work.reduce((a, b) => a + b, 0);
    const n = new Int32Array(p.I);
    n[p.I - 1] = 1;
    const free = p.G - 1;
    if (total > 0 && free > 0) {
      const shares = work.map((w) => (w / total) * free);
      let used = 0;
      for (let i = 0; i < p.I; i++) {
        const whole = Math.floor(shares[i]! + 1e-9);
        n[i]! += whole;
        used += whole;
      }
      const byRemainder = shares.map((s, i) => ({ i, r: s - Math.floor(s + 1e-9) })).sort((a, b) => b.r - a.r || b.i - a.i);
      for (let k = 0; k < free - used; k++) n[byRemainder[k % p.I]!.i]!++;
    } else n[p.I - 1]! += free;
    return toResult(p, n, 'proportional', this.clock.now() - t0);
  }
}
