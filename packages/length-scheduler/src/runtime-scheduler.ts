/**
 * The Runtime Scheduler (arlo.md §6, §6.5): every period (120 s in the paper) it closes the estimator's window,
 * solves the allocation program for the current instance count, and hands the allocation to its listener (which
 * plans and runs the replacement). It also solves on demand (an operator, an early re-solve after a cold start, a
 * scaling step). Time is the injected clock's: `poll()` solves when a period is due, so a server calls it from a
 * timer and the simulator from an event, with the same object.
 */
import { type Clock, systemClock } from '@tessera/core';

import type { AllocationResult, AllocationSolver } from './allocation.js';
import { LengthSchedulerArgumentError } from './errors.js';
import type { LengthEstimator, LengthSnapshot } from './estimator.js';
import { AutoSolver } from './highs.js';
import type { RuntimeProfile } from './profile.js';

export interface AllocationDecision {
  result: AllocationResult;
  /** The length estimate it was solved for. */
  snapshot: LengthSnapshot;
  /** Clock time of the solve's start. */
  atMs: number;
  /** Instances it allocated. */
  instances: number;
  reason: 'period' | 'on-demand';
}

export interface RuntimeSchedulerOptions {
  profiles: readonly RuntimeProfile[];
  estimator: LengthEstimator;
  /** G at the start; change it with `setInstances` after a scaling step. */
  instances: number;
  /** Default: {@link AutoSolver} on the wall clock (its time limit is about compute, not simulated time). */
  solver?: AllocationSolver;
  /** Periods are measured on this clock (a virtual one under @tessera/sim). */
  clock?: Clock;
  /** Allocation period (default 120 000 ms). */
  periodMs?: number;
  /** Solver time limit (default 10 000 ms; past it the greedy allocation is used). */
  timeLimitMs?: number;
  /** Called with each new allocation. */
  onAllocation?: (decision: AllocationDecision) => void;
}

export class RuntimeScheduler {
  private profileSet: readonly RuntimeProfile[];
  private readonly estimator: LengthEstimator;
  private readonly solver: AllocationSolver;
  private readonly clock: Clock;
  private readonly periodMs: number;
  private readonly timeLimitMs: number;
  private readonly onAllocation: ((decision: AllocationDecision) => void) | undefined;
  private instanceCount: number;
  private nextDue: number;
  private solving: Promise<AllocationDecision> | null = null;
  private last: AllocationDecision | null = null;

  constructor(options: RuntimeSchedulerOptions) {
    checkProfiles(options.profiles, options.estimator.lengths);
    this.profileSet = options.profiles;
    this.estimator = options.estimator;
    this.clock = options.clock ?? systemClock;
    // The solver keeps its own (wall) clock: its time limit bounds compute, which a virtual clock does not see.
    this.solver = options.solver ?? new AutoSolver();
    this.periodMs = options.periodMs ?? 120_000;
    this.timeLimitMs = options.timeLimitMs ?? 10_000;
    this.onAllocation = options.onAllocation;
    if (!(this.periodMs > 0)) throw new LengthSchedulerArgumentError(`periodMs must be > 0, got ${this.periodMs}`);
    this.instanceCount = this.checkInstances(options.instances);
    this.nextDue = this.clock.now() + this.periodMs;
  }

  /** A fresh profile (the profiler ran again): the next solve, periodic or on demand, allocates with it. */
  setProfiles(profiles: readonly RuntimeProfile[]): void {
    checkProfiles(profiles, this.estimator.lengths);
    this.profileSet = profiles;
  }

  /** The runtimes' service times and capacities the next solve uses. */
  get profiles(): readonly RuntimeProfile[] {
    return this.profileSet;
  }

  /** G for the next solve. */
  get instances(): number {
    return this.instanceCount;
  }

  /** After a scaling step: the next period solves for `count` instances. */
  setInstances(count: number): void {
    this.instanceCount = this.checkInstances(count);
  }

  /** The latest allocation, or null before the first solve. */
  get current(): AllocationDecision | null {
    return this.last;
  }

  /** Clock time at which the next periodic solve is due. */
  get nextDueMs(): number {
    return this.nextDue;
  }

  /** Solves when a period is due (and no solve is running); otherwise null. */
  poll(): Promise<AllocationDecision> | null {
    if (this.solving !== null || this.clock.now() < this.nextDue) return null;
    return this.run('period');
  }

  /** Solves now from the estimate so far; the period restarts from now. A solve already running is shared. */
  solveNow(): Promise<AllocationDecision> {
    return this.solving ?? this.run('on-demand');
  }

  private run(reason: AllocationDecision['reason']): Promise<AllocationDecision> {
    const atMs = this.clock.now();
    this.nextDue = atMs + this.periodMs;
    const snapshot = this.estimator.snapshot();
    const instances = this.instanceCount;
    const solving = this.solver
      .solve({ instances, q: snapshot.q, profiles: this.profiles }, { timeLimitMs: this.timeLimitMs })
      .then((result) => {
        const decision: AllocationDecision = { result, snapshot, atMs, instances, reason };
        this.last = decision;
        this.onAllocation?.(decision);
        return decision;
      })
      .finally(() => {
        this.solving = null;
      });
    this.solving = solving;
    return solving;
  }

  private checkInstances(count: number): number {
    if (!Number.isInteger(count) || count < 1) throw new LengthSchedulerArgumentError(`instances must be a positive integer, got ${count}`);
    return count;
  }
}

function checkProfiles(profiles: readonly RuntimeProfile[], lengths: readonly number[]): void {
  if (profiles.length !== lengths.length) throw new LengthSchedulerArgumentError(`${profiles.length} profiles for ${lengths.length} runtime lengths`);
  for (const [i, p] of profiles.entries()) {
    if (p.maxLength !== lengths[i]) throw new LengthSchedulerArgumentError(`profile ${i} is for length ${p.maxLength}, the estimator's runtime ${i} is ${lengths[i]}`);
  }
}
