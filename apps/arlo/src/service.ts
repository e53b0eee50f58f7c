/**
 * Arlo's serving loop on one machine, composed from @tessera/length-scheduler's policies:
 *
 *   request → LengthEstimator.observe (by ideal runtime) → MultiLevelDispatcher.dispatch (Algorithm 1) → the
 *   chosen instance's FIFO → its Runtime (a worker thread, or an emulated executor) → dispatcher.complete
 *
 * The Runtime Scheduler re-solves the allocation every period (and on demand); a new allocation is carried out by
 * planReplacement/ReplacementRun: an instance to move is drained (no new requests, its queue finishes), retargeted
 * to its new length (an ORT instance loads that length's graph), and returned to service, in small batches that
 * keep at least one instance serving.
 */
import { type Clock, systemClock } from '@tessera/core';
import { type AllocationDecision, type AllocationSolver, AutoSolver, type DispatchPolicy, LengthEstimator, MultiLevelDispatcher, planReplacement } from '@tessera/length-scheduler';
import { ReplacementRun, RequestTooLongError, RuntimeScheduler, type RuntimeProfile } from '@tessera/length-scheduler';

import { type Runtime, RuntimeInputError, RuntimeUnavailableError } from './runtimes/runtime.js';
import { ThreadRuntime } from './runtimes/thread-runtime.js';

export interface ArloServiceOptions {
  /** ℓ_i, ascending. */
  lengths: readonly number[];
  /** One per runtime length (t_i, M_i, 𝓛_i). */
  profiles: readonly RuntimeProfile[];
  /** The instances, each already shaped to one of `lengths`. */
  instances: readonly Runtime[];
  sloMs: number;
  /** Expected Q_i before any traffic (default: an even split of one request per SLO window per instance). */
  priorQ?: readonly number[];
  policy?: DispatchPolicy;
  solver?: AllocationSolver;
  periodMs?: number;
  clock?: Clock;
}

export interface InferResult {
  logits: number[] | null;
  /** The instance that ran it, its runtime length, and the times. */
  instance: string;
  runtime: number;
  paddedTo: number;
  queueMs: number;
  execMs: number;
}

type Job = { ids: readonly number[]; enqueuedAt: number; resolve: (r: InferResult) => void; reject: (e: unknown) => void };

/** An instance: its runtime, its FIFO, whether a batch is running, and the ms it has spent executing. */
type Slot = { runtime: Runtime; queue: Job[]; busy: boolean; busyMs: number; served: number };

/** Counters /metrics reads (cumulative): requests per runtime, real and padded tokens. */
export type ServiceTotals = { requests: number[]; realTokens: number; paddedTokens: number };

export class ArloService {
  readonly lengths: readonly number[];
  readonly sloMs: number;
  readonly estimator: LengthEstimator;
  readonly dispatcher: MultiLevelDispatcher;
  readonly scheduler: RuntimeScheduler;
  readonly totals: ServiceTotals;
  readonly startedAt: number;
  private readonly solver: AllocationSolver;
  private readonly slots = new Map<string, Slot>();
  private readonly clock: Clock;
  private waiters: (() => void)[] = [];
  /** The replacements in order (never rejects: a failure is kept in `replacementError` for the next solve to throw). */
  private replacing: Promise<void> = Promise.resolve();
  private replacementError: unknown = null;
  private last: AllocationDecision | null = null;
  private closed = false;
  /** Why a runtime stopped serving (a worker that crashed); null while all are up. */
  failure: Error | null = null;

  constructor(options: ArloServiceOptions) {
    this.lengths = options.lengths;
    this.sloMs = options.sloMs;
    this.clock = options.clock ?? systemClock;
    this.startedAt = this.clock.now();
    const I = this.lengths.length;
    const G = options.instances.length;
    const prior = options.priorQ ?? new Array<number>(I).fill(G / I);
    this.estimator = new LengthEstimator(this.lengths, { sloMs: this.sloMs, clock: this.clock, prior: { q: prior } });
    this.dispatcher = new MultiLevelDispatcher({
      lengths: this.lengths,
      capacities: options.profiles.map((p) => p.capacity),
      oversize: 'reject',
      ...(options.policy ? { policy: options.policy } : {}),
    });
    for (const runtime of options.instances) {
      const index = this.lengths.indexOf(runtime.length);
      if (index < 0) throw new RuntimeInputError(`instance ${runtime.id} has length ${runtime.length}, not one of the runtimes ${this.lengths.join(', ')}`);
      this.dispatcher.add(runtime.id, index);
      this.slots.set(runtime.id, { runtime, queue: [], busy: false, busyMs: 0, served: 0 });
    }
    this.solver = options.solver ?? new AutoSolver();
    this.scheduler = new RuntimeScheduler({
      profiles: options.profiles,
      estimator: this.estimator,
      instances: G,
      solver: this.solver,
      clock: this.clock,
      ...(options.periodMs ? { periodMs: options.periodMs } : {}),
      onAllocation: (d) => this.apply(d),
    });
    this.totals = { requests: new Array<number>(I).fill(0), realTokens: 0, paddedTokens: 0 };
  }

  /** Dispatches one sequence (token ids, [CLS]/[SEP] included) and resolves with its logits once it has run. */
  infer(ids: readonly number[]): Promise<InferResult> {
    const longest = this.lengths[this.lengths.length - 1]!;
    if (ids.length === 0) throw new RuntimeInputError('the input has no tokens');
    if (ids.length > longest) throw new RequestTooLongError(ids.length, longest);
    this.estimator.observe(ids.length);
    const view = this.dispatcher.dispatch(ids.length);
    const slot = this.slots.get(view.id)!;
    return new Promise<InferResult>((resolve, reject) => {
      slot.queue.push({ ids, enqueuedAt: this.clock.now(), resolve, reject });
      this.pump(slot);
    });
  }

  /** Solves now: from the estimator, or for an explicit load `q` (requests per SLO window per runtime). Resolves after the replacement. */
  async solve(q?: readonly number[]): Promise<AllocationDecision> {
    let decision: AllocationDecision;
    if (q === undefined) decision = await this.scheduler.solveNow();
    else {
      const result = await this.solver.solve({ instances: this.slots.size, q: [...q], profiles: this.profiles }, { timeLimitMs: 10_000 });
      decision = { result, snapshot: { q: [...q], counts: q.map(() => 0), windowMs: 0, oversize: 0 }, atMs: this.clock.now(), instances: this.slots.size, reason: 'on-demand' };
      this.apply(decision);
    }
    await this.replacing;
    const failed = this.replacementError;
    this.replacementError = null;
    if (failed !== null) throw failed;
    return decision;
  }

  /** t_i, M_i and 𝓛_i per runtime: what the dispatcher's congestion test and the next solve use. */
  get profiles(): readonly RuntimeProfile[] {
    return this.scheduler.profiles;
  }

  /** A fresh profile (POST /v1/profile): the dispatcher's capacities change at once, the allocation at the next solve. */
  setProfiles(profiles: readonly RuntimeProfile[]): void {
    this.scheduler.setProfiles(profiles);
    this.dispatcher.setCapacities(profiles.map((p) => p.capacity));
  }

  /** The latest allocation decision (null before the first solve). */
  get allocation(): AllocationDecision | null {
    return this.last;
  }

  /** Every instance: its runtime, queue and busy time. */
  instances() {
    return [...this.slots.values()].map((s) => {
      const view = this.dispatcher.instance(s.runtime.id);
      return { id: s.runtime.id, kind: s.runtime.kind, runtime: view.runtime, length: this.lengths[view.runtime]!, state: view.state, outstanding: view.outstanding, queued: s.queue.length, busyMs: s.busyMs, served: s.served };
    });
  }

  get healthy(): boolean {
    return !this.closed && this.failure === null && ![...this.slots.values()].some((s) => s.runtime.failure);
  }

  uptimeMs(): number {
    return this.clock.now() - this.startedAt;
  }

  /** The first instance that runs on a real worker thread (the profiler's), if any. */
  realInstance(): ThreadRuntime | undefined {
    for (const s of this.slots.values()) if (s.runtime instanceof ThreadRuntime) return s.runtime;
    return undefined;
  }

  /** Runs `fn` on instance `id` between two of its batches (its queue waits meanwhile): the profiler. */
  async exclusive<T>(id: string, fn: () => Promise<T>): Promise<T> {
    const slot = this.slots.get(id)!;
    while (slot.busy) await new Promise<void>((resolve) => this.waiters.push(resolve));
    slot.busy = true;
    try {
      return await fn();
    } finally {
      slot.busy = false;
      this.pump(slot);
    }
  }

  /** Periodic re-solve when due (the server calls this from a timer). */
  poll(): void {
    void this.scheduler.poll()?.catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const w of this.waiters.splice(0)) w();
    for (const slot of this.slots.values()) for (const job of slot.queue.splice(0)) job.reject(new RuntimeUnavailableError('the server is shutting down'));
    await Promise.allSettled([...this.slots.values()].map((s) => s.runtime.close()));
  }

  private pump(slot: Slot): void {
    if (slot.busy || slot.queue.length === 0 || this.closed) return;
    const view = this.dispatcher.instance(slot.runtime.id);
    if (view.state === 'loading') return; // swapping: resumes after retarget
    slot.busy = true;
    const jobs = slot.queue.splice(0, slot.runtime.maxBatch);
    const started = this.clock.now();
    const paddedTo = slot.runtime.length;
    slot.runtime.infer(jobs.map((j) => j.ids)).then(
      (out) => {
        slot.busyMs += out.execMs;
        jobs.forEach((job, b) => {
          this.totals.requests[view.runtime]!++;
          this.totals.realTokens += job.ids.length;
          this.totals.paddedTokens += paddedTo;
          job.resolve({ logits: out.logits ? Array.from(out.logits[b]!) : null, instance: slot.runtime.id, runtime: view.runtime, paddedTo, queueMs: started - job.enqueuedAt, execMs: out.execMs });
        });
      },
      (err: unknown) => {
        if (err instanceof RuntimeUnavailableError) this.failure ??= err;
        jobs.forEach((job) => job.reject(err));
      },
    ).finally(() => {
      for (const _ of jobs) this.dispatcher.complete(slot.runtime.id);
      slot.served += jobs.length;
      slot.busy = false;
      const waiters = this.waiters;
      this.waiters = [];
      for (const w of waiters) w();
      this.pump(slot);
    });
  }

  /** Carries out an allocation: plan the fewest moves, then drain → retarget → activate, batch by batch. */
  private apply(decision: AllocationDecision): void {
    this.last = decision;
    const target = decision.result.instances;
    const step = this.replacing.then(async () => {
      if (this.closed) return;
      const current = this.dispatcher.instances().map((v) => ({ id: v.id, runtime: v.runtime, outstanding: v.outstanding }));
      if (target.every((n, i) => n === this.dispatcher.activeCounts()[i])) return;
      const run = new ReplacementRun(this.dispatcher, planReplacement(current, target, { floor: current.length > 1 ? 1 : 0 }));
      run.start();
      while (!run.done && !this.closed) {
        const ready = run.drained();
        if (ready.length === 0) {
          await new Promise<void>((resolve) => this.waiters.push(resolve));
          continue;
        }
        await Promise.all(ready.map(async (move) => {
          await this.slots.get(move.id)!.runtime.retarget(this.lengths[move.to]!);
          run.swapped(move.id);
        }));
      }
    });
    this.replacing = step.catch((err: unknown) => {
      this.replacementError = err;
    });
  }
}
