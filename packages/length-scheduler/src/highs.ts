/**
 * The allocation program on HiGHS (the `highs` WebAssembly build, MIT), §6.3 b. HiGHS solves MILPs, not the
 * non-linear program, so the cost N·g(C/N) (the perspective of g) is bounded below by tangent planes at chosen
 * loads r: T_i ≥ g'(r)·C_i + (g(r) − r·g'(r))·N_i, valid wherever g is convex. The min and max of Eqs. 4–5 are
 * exact with one binary per runtime. An outer-approximation loop solves, prices the answer with the true
 * objective, adds a tangent at each realised load and solves again until the certified gap
 * (best true objective − MILP bound) / best is within `relGap`. The greedy allocation is the first incumbent and
 * the final polish, and the answer when the time limit or the solver fails first.
 *
 * HiGHS runs synchronously on the calling thread; a server that must not block for the solve runs the Runtime
 * Scheduler in a worker. The time limit bounds each call.
 */
import { type Clock, systemClock } from '@tessera/core';
import type { Highs } from 'highs';

import {
  type AllocationProblem,
  type AllocationResult,
  type AllocationSolver,
  DpSolver,
  type PreparedProblem,
  type SolveOptions,
  evaluateAllocation,
  greedyAllocation,
  loadCost,
  localSearch,
  prepareProblem,
  toResult,
} from './allocation.js';

let highsPromise: Promise<Highs> | undefined;

/** Loads the HiGHS WebAssembly module once per process (about 3 MB of wasm, compiled on first use). */
export function loadHighsSolver(): Promise<Highs> {
  highsPromise ??= import('highs')
    .then(async (mod) => {
      const load = (mod as unknown as { default: (settings?: object) => Promise<Highs> }).default;
      return load();
    })
    .catch((err: unknown) => {
      // A failed load is not cached: the next solve tries again (and falls back to greedy meanwhile).
      highsPromise = undefined;
      throw err;
    });
  return highsPromise;
}

export interface HighsSolverOptions {
  clock?: Clock;
  /** Tangent points per runtime in the first MILP (default 24). */
  initialTangents?: number;
  /** Outer-approximation iterations at most (default 12). */
  maxIterations?: number;
  /** Default time limit per solve (ms) when the call gives none (default 10 000, §9-D). */
  timeLimitMs?: number;
}

const MODEL_STATUS_OPTIMAL = 7;
const MODEL_STATUS_TIME_LIMIT = 13;

/** Linearised MILP on HiGHS with the outer-approximation loop and greedy polish. */
export class HighsSolver implements AllocationSolver {
  readonly name = 'highs-oa' as const;
  private readonly clock: Clock;
  private readonly initialTangents: number;
  private readonly maxIterations: number;
  private readonly defaultTimeLimitMs: number;

  constructor(options: HighsSolverOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.initialTangents = options.initialTangents ?? 24;
    this.maxIterations = options.maxIterations ?? 12;
    this.defaultTimeLimitMs = options.timeLimitMs ?? 10_000;
  }

  async solve(problem: AllocationProblem, options: SolveOptions = {}): Promise<AllocationResult> {
    const t0 = this.clock.now();
    const p = prepareProblem(problem);
    const relGap = options.relGap ?? 1e-4;
    const deadline = t0 + (options.timeLimitMs ?? this.defaultTimeLimitMs);
    let best = greedyAllocation(p);
    let bestObj = evaluateAllocation(p, best).objective;
    let highs: Highs;
    try {
      highs = await loadHighsSolver();
    } catch (err) {
      return toResult(p, best, 'greedy-ls', this.clock.now() - t0, { fallback: `highs failed to load: ${(err as Error).message}` });
    }
    const tangents = initialTangentPoints(p, this.initialTangents);
    let bound = -Infinity;
    let solvedOnce = false;
    let fallback: string | undefined;
    for (let iter = 0; iter < this.maxIterations; iter++) {
      const leftMs = deadline - this.clock.now();
      if (leftMs <= 0) {
        fallback = 'time-limit';
        break;
      }
      let out: MilpOutcome;
      try {
        out = solveMilp(highs, p, tangents, leftMs / 1000, relGap / 4, best);
      } catch (err) {
        fallback = `highs failed: ${(err as Error).message}`;
        break;
      }
      if (Number.isFinite(out.dualBound)) bound = Math.max(bound, out.dualBound);
      if (out.n === null) {
        fallback = out.status === MODEL_STATUS_TIME_LIMIT ? 'time-limit' : `highs status ${out.status}`;
        break;
      }
      solvedOnce = true;
      const obj = evaluateAllocation(p, out.n).objective;
      if (obj < bestObj) {
        best = out.n;
        bestObj = obj;
      }
      if (out.status === MODEL_STATUS_TIME_LIMIT) {
        fallback = 'time-limit';
        break;
      }
      if (bestObj - bound <= relGap * Math.abs(bestObj) + 1e-9) break;
      // Tangents at the loads the MILP chose and at the best allocation's loads: where the bound was loose.
      let added = 0;
      for (const alloc of [{ n: out.n, c: out.served }, { n: best, c: evaluateAllocation(p, best).served }]) {
        for (let i = 0; i < p.I; i++) {
          const ni = alloc.n[i]!;
          if (ni <= 0) continue;
          if (addTangent(tangents[i]!, alloc.c[i]! / ni)) added++;
        }
      }
      if (added === 0) break;
    }
    best = localSearch(p, Int32Array.from(best));
    bestObj = evaluateAllocation(p, best).objective;
    const extra: { lowerBound?: number; fallback?: string } = {};
    if (Number.isFinite(bound)) extra.lowerBound = Math.min(bound, bestObj);
    if (fallback !== undefined && !solvedOnce) extra.fallback = fallback;
    else if (fallback !== undefined) extra.fallback = `${fallback} (after a MILP solution; best found returned)`;
    return toResult(p, best, solvedOnce ? 'highs-oa' : 'greedy-ls', this.clock.now() - t0, extra);
  }
}

/**
 * Initial tangent loads per runtime: r = 0, half of K spread evenly over (0, M_i] and half closing in on M_i
 * geometrically (M_i·(1 − 0.6^k)), where a queueing 𝓛 bends hardest; the last runtime also gets points up to ΣQ
 * (it takes any overflow).
 */
function initialTangentPoints(p: PreparedProblem, K: number): number[][] {
  const out: number[][] = [];
  const even = Math.ceil(K / 2);
  for (let i = 0; i < p.I; i++) {
    const m = p.capacity[i]!;
    const pts = [0];
    for (let k = 1; k <= even; k++) pts.push((m * k) / even);
    for (let k = 1; k <= K - even; k++) pts.push(m * (1 - 0.6 ** k));
    if (i === p.I - 1 && p.totalLoad > m) {
      // Geometric spacing from M to ΣQ: the overload region is steep, a few tangents bound it well.
      const steps = 8;
      for (let k = 1; k <= steps; k++) pts.push(m * (p.totalLoad / m) ** (k / steps));
    }
    out.push(pts);
  }
  return out;
}

function addTangent(points: number[], r: number): boolean {
  if (!Number.isFinite(r) || r < 0) return false;
  for (const x of points) if (Math.abs(x - r) <= 1e-7 * Math.max(1, r)) return false;
  points.push(r);
  return true;
}

/** g'(r) by central difference (one-sided at 0); at a kink of a convex g this is a subgradient, so still a valid cut. */
function slopeAt(profile: PreparedProblem['profiles'][number], r: number): number {
  const h = Math.max(1e-6, 1e-6 * r);
  if (r - h < 0) return (loadCost(profile, r + h) - loadCost(profile, r)) / h;
  return (loadCost(profile, r + h) - loadCost(profile, r - h)) / (2 * h);
}

interface MilpOutcome {
  status: number;
  n: Int32Array | null;
  served: number[];
  dualBound: number;
}

function num(x: number): string {
  // LP-format numbers: finite, no "Infinity"; exponent form is accepted.
  return Number.isFinite(x) ? String(x) : '0';
}

function term(coef: number, name: string): string {
  if (coef === 0) return '';
  return coef < 0 ? ` - ${num(-coef)} ${name}` : ` + ${num(coef)} ${name}`;
}

/** Every column's value for an allocation: C and R from Eqs. 4–5, z = [R > 0], T at its tightest tangent. */
function incumbentColumns(p: PreparedProblem, tangents: number[][], n: ArrayLike<number>): { names: string[]; values: number[] } {
  const ev = evaluateAllocation(p, n);
  const names: string[] = [];
  const values: number[] = [];
  for (let i = 0; i < p.I; i++) {
    const c = ev.served[i]!;
    const ni = n[i]!;
    let t = 0;
    for (const r of tangents[i]!) {
      const slope = slopeAt(p.profiles[i]!, r);
      t = Math.max(t, slope * c + (loadCost(p.profiles[i]!, r) - r * slope) * ni);
    }
    names.push(`n${i}`, `c${i}`, `t${i}`);
    values.push(ni, c, t);
    if (i < p.I - 1) {
      const r = ev.demoted[i]!;
      names.push(`r${i}`, `z${i}`);
      values.push(r, r > 0 ? 1 : 0);
    }
  }
  return { names, values };
}

/** Builds the linearised MILP in CPLEX LP format and solves it. */
function solveMilp(highs: Highs, p: PreparedProblem, tangents: number[][], timeLimitS: number, mipRelGap: number, incumbent: ArrayLike<number>): MilpOutcome {
  const { I, G } = p;
  const last = I - 1;
  const U = Math.max(p.totalLoad, 1);
  const lines: string[] = ['Minimize', ` obj:${Array.from({ length: I }, (_, i) => ` + t${i}`).join('')}`, 'Subject To'];
  lines.push(` sum:${Array.from({ length: I }, (_, i) => ` + n${i}`).join('')} = ${G}`);
  for (let i = 0; i < I; i++) {
    // Flow: C_i + R_i − R_{i−1} = Q_i.
    let flow = ` flow${i}: c${i}`;
    if (i < last) flow += ' + r' + i;
    if (i > 0) flow += ` - r${i - 1}`;
    lines.push(`${flow} = ${num(p.q[i]!)}`);
    const m = p.capacity[i]!;
    if (i < last) {
      lines.push(` cap${i}: c${i}${term(-m, `n${i}`)} <= 0`);
      lines.push(` ovf${i}: r${i}${term(-U, `z${i}`)} <= 0`);
      // Overflow ⇒ saturated: C_i ≥ M_i N_i − M_i G (1 − z_i); the big-M is M_i·G (ΣQ makes it infeasible).
      lines.push(` sat${i}: c${i}${term(-m, `n${i}`)}${term(-m * G, `z${i}`)} >= ${num(-m * G)}`);
    }
    const profile = p.profiles[i]!;
    tangents[i]!.forEach((r, k) => {
      const slope = slopeAt(profile, r);
      const intercept = loadCost(profile, r) - r * slope;
      lines.push(` tan${i}_${k}: t${i}${term(-slope, `c${i}`)}${term(-intercept, `n${i}`)} >= 0`);
    });
  }
  lines.push('Bounds');
  for (let i = 0; i < I; i++) {
    lines.push(` ${p.lowerBounds[i]!} <= n${i} <= ${G}`);
    lines.push(` c${i} >= 0`, ` t${i} >= 0`);
    if (i < last) lines.push(` r${i} >= 0`);
  }
  lines.push('General', ` ${Array.from({ length: I }, (_, i) => `n${i}`).join(' ')}`);
  if (last > 0) lines.push('Binary', ` ${Array.from({ length: last }, (_, i) => `z${i}`).join(' ')}`);
  lines.push('End');
  const lp = lines.join('\n');

  return highs.withModel({ format: 'lp', data: lp }, (model) => {
    model.options.set({ output_flag: false, time_limit: Math.max(timeLimitS, 0.001), mip_rel_gap: mipRelGap });
    // The best allocation so far as a MIP start: HiGHS prunes against it from the first node.
    const start = incumbentColumns(p, tangents, incumbent);
    model.setSolution({ indices: start.names.map((name) => model.getColByName(name)), values: start.values });
    model.run();
    const status = model.getModelStatus() as number;
    const dual = Number(model.info.get('mip_dual_bound'));
    const hasSolution = status === MODEL_STATUS_OPTIMAL || (status === MODEL_STATUS_TIME_LIMIT && Number(model.info.get('primal_solution_status')) === 2);
    if (!hasSolution) return { status, n: null, served: [], dualBound: status === MODEL_STATUS_TIME_LIMIT ? dual : -Infinity };
    const values = model.getSolution().colValue;
    const n = new Int32Array(I);
    const served: number[] = [];
    let sum = 0;
    let withinBounds = true;
    for (let i = 0; i < I; i++) {
      n[i] = Math.round(values[model.getColByName(`n${i}`)]!);
      sum += n[i]!;
      if (n[i]! < p.lowerBounds[i]!) withinBounds = false;
      served.push(Math.max(0, values[model.getColByName(`c${i}`)]!));
    }
    // Integrality tolerances could in principle round to an allocation off by one; never return one.
    if (sum !== G || !withinBounds) return { status: -1, n: null, served: [], dualBound: dual };
    return { status, n, served, dualBound: dual };
  });
}

export interface AutoSolverOptions extends HighsSolverOptions {
  /** Use the exact DP while G·I is at most this (default 4 000, §9-D); HiGHS above it. */
  dpLimit?: number;
}

/** The default solver (§9-D): the exact DP for small clusters, HiGHS with the OA loop for large ones. */
export class AutoSolver implements AllocationSolver {
  readonly name = 'auto' as const;
  private readonly dp: DpSolver;
  private readonly highs: HighsSolver;
  private readonly dpLimit: number;

  constructor(options: AutoSolverOptions = {}) {
    this.dp = new DpSolver(options.clock ?? systemClock);
    this.highs = new HighsSolver(options);
    this.dpLimit = options.dpLimit ?? 4000;
  }

  async solve(problem: AllocationProblem, options?: SolveOptions): Promise<AllocationResult> {
    const size = problem.instances * problem.profiles.length;
    return size <= this.dpLimit ? this.dp.solve(problem, options) : this.highs.solve(problem, options);
  }
}
