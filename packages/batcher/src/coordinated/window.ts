/**
 * Online coordinated batching (pets.md §11 #19): CB plans a pool, so a server collects queries into a window,
 * bounded by count (`maxQueries`) and by time (the oldest query waits at most `maxWaitMs`), plans the window and
 * runs its macro-batches one after another.
 *
 * Windows never overlap. While a window's batches run, new queries keep queueing; when the window is done the next
 * one starts at once if its count or time bound has been reached meanwhile (or a flush asked for it), otherwise a
 * timer is armed for the oldest query's deadline. So under load a window can start later than `maxWaitMs` after
 * its oldest query arrived: by at most the previous window's run time. A window holds at most `maxQueries`
 * queries, oldest first.
 *
 * Time is read only through the injected Clock and timers come from the injected WindowTimer (decision 6), so the
 * window runs under simulated time in tests and in `@tessera/sim`.
 */
import type { Clock } from '../clock.js';
import { BatchWindowClosedError, PlanError } from './errors.js';
import type { BatchPlan, CbQuery, MacroBatch } from './types.js';

/** One-shot timers. The package's Clock only reads time, so the window takes its timers separately. */
export interface WindowTimer {
  /** Calls `callback` once, `delayMs` from now; returns a handle for clear(). */
  set(delayMs: number, callback: () => void): unknown;
  /** Cancels a timer that has not fired (a handle that already fired or was cleared is ignored). */
  clear(handle: unknown): void;
}

/** The process's timers (setTimeout / clearTimeout); pair with the package's systemClock. */
export const systemTimer: WindowTimer = {
  set: (delayMs, callback) => setTimeout(callback, delayMs),
  clear: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** What failed: the window's plan (no batch of it ran) or one macro-batch's execute (the others still run). */
export interface BatchWindowErrorContext<Q extends CbQuery> {
  stage: 'plan' | 'execute';
  /** 0-based index of the window. */
  window: number;
  /** 'plan': every query of the window; 'execute': the queries of the failed batch, in row order. */
  queries: Q[];
  /** 'execute' only: the failed batch. */
  batch?: MacroBatch;
}

export interface BatchWindowOptions<Q extends CbQuery> {
  /** Count bound: a window starts when this many queries are waiting (and holds at most this many). */
  maxQueries: number;
  /** Time bound: a window starts when the oldest waiting query has waited this long (Infinity: no time bound). */
  maxWaitMs: number;
  clock: Clock;
  /** Default: systemTimer. Must run on the same time base as `clock`. */
  timer?: WindowTimer;
  /** Plans one window, usually `(qs) => planBatches(qs, {...})`; its batches must hold each query exactly once. */
  plan: (queries: Q[]) => BatchPlan;
  /** Runs one macro-batch; `queries` are its queries in row order (mini-batch by mini-batch). */
  execute: (batch: MacroBatch, queries: Q[]) => Promise<void>;
  /**
   * Told about a failed plan or execute; the window goes on. Without it failures are only counted in stats(),
   * so a server should resolve its queries' results from here (a failed batch's queries got no result).
   */
  onError?: (error: unknown, context: BatchWindowErrorContext<Q>) => void;
}

export interface BatchWindowStats {
  /** Windows taken (planned or failed to plan). */
  windows: number;
  /** Macro-batches whose execute resolved. */
  batches: number;
  /** Queries in those batches. */
  queries: number;
  /** Windows whose plan threw or did not cover the window. */
  failedWindows: number;
  /** Macro-batches whose execute threw or rejected. */
  failedBatches: number;
  /** onError listeners that threw (swallowed). */
  listenerErrors: number;
  /** Queries waiting for a window. */
  pending: number;
  /** A window is planning or executing. */
  running: boolean;
}

interface Entry<Q> {
  q: Q;
  /** clock.now() at add(). */
  at: number;
  /** Position in add() order. */
  seq: number;
}

export class BatchWindow<Q extends CbQuery> {
  private readonly maxQueries: number;
  private readonly maxWaitMs: number;
  private readonly clock: Clock;
  private readonly timer: WindowTimer;
  private readonly planWindow: (queries: Q[]) => BatchPlan;
  private readonly executeBatch: (batch: MacroBatch, queries: Q[]) => Promise<void>;
  private readonly onError: ((error: unknown, context: BatchWindowErrorContext<Q>) => void) | undefined;

  private queue: Entry<Q>[] = [];
  private head = 0;
  private nextSeq = 0;
  /** Every query with seq < doneSeq has been through a window. */
  private doneSeq = 0;
  /** Queries with seq < forcedSeq are due now (flush / close). */
  private forcedSeq = 0;
  private waiters: { seq: number; resolve: () => void }[] = [];
  private loopRunning = false;
  private timerHandle: unknown = null;
  private timerDueAt = Infinity;
  private closing: Promise<void> | null = null;
  private counters = { windows: 0, batches: 0, queries: 0, failedWindows: 0, failedBatches: 0, listenerErrors: 0 };

  constructor(options: BatchWindowOptions<Q>) {
    if (options === null || typeof options !== 'object') throw invalid('options must be an object');
    const { maxQueries, maxWaitMs, clock, plan, execute, onError } = options;
    if (typeof maxQueries !== 'number' || !Number.isInteger(maxQueries) || maxQueries < 1) {
      throw invalid(`maxQueries must be an integer >= 1, got ${String(maxQueries)}`);
    }
    if (typeof maxWaitMs !== 'number' || !(maxWaitMs >= 0)) throw invalid(`maxWaitMs must be a number >= 0 (or Infinity), got ${String(maxWaitMs)}`);
    if (clock === null || typeof clock !== 'object' || typeof clock.now !== 'function') throw invalid('clock must be a Clock (now())');
    const timer = options.timer ?? systemTimer;
    if (timer === null || typeof timer !== 'object' || typeof timer.set !== 'function' || typeof timer.clear !== 'function') {
      throw invalid('timer must be a WindowTimer (set(delayMs, callback), clear(handle))');
    }
    if (typeof plan !== 'function') throw invalid('plan must be a function');
    if (typeof execute !== 'function') throw invalid('execute must be a function');
    if (onError !== undefined && typeof onError !== 'function') throw invalid('onError must be a function');
    this.maxQueries = maxQueries;
    this.maxWaitMs = maxWaitMs;
    this.clock = clock;
    this.timer = timer;
    this.planWindow = plan;
    this.executeBatch = execute;
    this.onError = onError;
  }

  /** Queries waiting for a window (not counting the one running). */
  get pending(): number {
    return this.queue.length - this.head;
  }

  /** Queues a query; the window starts asynchronously when a bound is reached. Throws after close(). */
  add(query: Q): void {
    if (this.closing !== null) throw new BatchWindowClosedError('BatchWindow.add: the window is closed');
    this.queue.push({ q: query, at: this.clock.now(), seq: this.nextSeq++ });
    this.schedule();
  }

  /** Runs every query added so far (in windows of at most maxQueries) and resolves when their batches are done. */
  flush(): Promise<void> {
    this.forcedSeq = this.nextSeq;
    const done = this.waitFor(this.nextSeq);
    this.schedule();
    return done;
  }

  /** Refuses new queries, runs every waiting one, and resolves when all are done (idempotent). */
  close(): Promise<void> {
    this.closing ??= this.flush().then(() => this.clearTimer());
    return this.closing;
  }

  stats(): BatchWindowStats {
    return { ...this.counters, pending: this.pending, running: this.loopRunning };
  }

  private isDue(): boolean {
    if (this.pending === 0) return false;
    const oldest = this.queue[this.head]!;
    return this.pending >= this.maxQueries || oldest.seq < this.forcedSeq || this.clock.now() - oldest.at >= this.maxWaitMs;
  }

  /** Starts the loop if a window is due, else arms the timer for the oldest query's deadline. */
  private schedule(): void {
    if (this.loopRunning) return; // the loop re-checks after its window
    if (this.isDue()) {
      this.loopRunning = true;
      this.clearTimer();
      void this.loop();
      return;
    }
    if (this.pending === 0 || this.maxWaitMs === Infinity) {
      this.clearTimer();
      return;
    }
    const dueAt = this.queue[this.head]!.at + this.maxWaitMs;
    if (this.timerHandle !== null && this.timerDueAt === dueAt) return;
    this.clearTimer();
    this.timerDueAt = dueAt;
    this.timerHandle = this.timer.set(Math.max(0, dueAt - this.clock.now()), () => {
      this.timerHandle = null;
      this.timerDueAt = Infinity;
      this.schedule();
    });
  }

  private clearTimer(): void {
    if (this.timerHandle !== null) this.timer.clear(this.timerHandle);
    this.timerHandle = null;
    this.timerDueAt = Infinity;
  }

  private async loop(): Promise<void> {
    try {
      // Let the caller's synchronous add()s of this tick join the window (bounded by maxQueries anyway).
      await Promise.resolve();
      while (this.isDue()) {
        const take = Math.min(this.pending, this.maxQueries);
        const entries = this.queue.slice(this.head, this.head + take);
        this.head += take;
        if (this.head > 1024 && this.head * 2 > this.queue.length) {
          this.queue = this.queue.slice(this.head);
          this.head = 0;
        }
        await this.runWindow(entries.map((e) => e.q));
        this.doneSeq = entries[entries.length - 1]!.seq + 1;
        this.resolveWaiters();
      }
    } finally {
      this.loopRunning = false;
    }
    this.schedule();
  }

  private async runWindow(queries: Q[]): Promise<void> {
    const window = this.counters.windows++;
    let plan: BatchPlan;
    try {
      plan = this.planWindow(queries);
      checkCoverage(plan, queries);
    } catch (error) {
      this.counters.failedWindows++;
      this.report(error, { stage: 'plan', window, queries });
      return;
    }
    for (const batch of plan.batches) {
      const rows: Q[] = [];
      // checkCoverage proved every query of the plan is one of this window's Q objects.
      for (const mb of batch.miniBatches) for (const q of mb.queries) rows.push(q as Q);
      try {
        await this.executeBatch(batch, rows);
        this.counters.batches++;
        this.counters.queries += rows.length;
      } catch (error) {
        this.counters.failedBatches++;
        this.report(error, { stage: 'execute', window, queries: rows, batch });
      }
    }
  }

  private report(error: unknown, context: BatchWindowErrorContext<Q>): void {
    if (this.onError === undefined) return;
    try {
      this.onError(error, context);
    } catch {
      this.counters.listenerErrors++;
    }
  }

  private waitFor(seq: number): Promise<void> {
    if (this.doneSeq >= seq) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ seq, resolve }));
  }

  private resolveWaiters(): void {
    const still: { seq: number; resolve: () => void }[] = [];
    for (const w of this.waiters) {
      if (this.doneSeq >= w.seq) w.resolve();
      else still.push(w);
    }
    this.waiters = still;
  }
}

function invalid(message: string): PlanError {
  return new PlanError('TESSERA_INVALID_PLAN_OPTIONS', `BatchWindow: ${message}`);
}

/** The plan's batches hold every window query exactly once and nothing else. */
function checkCoverage(plan: BatchPlan, queries: readonly CbQuery[]): void {
  if (plan === null || typeof plan !== 'object' || !Array.isArray(plan.batches)) {
    throw new PlanError('TESSERA_PLAN_MISMATCH', 'BatchWindow: plan() must return a BatchPlan with a batches array');
  }
  const inWindow = new Set<CbQuery>(queries);
  const seen = new Set<CbQuery>();
  for (const batch of plan.batches) {
    for (const mb of batch.miniBatches) {
      for (const q of mb.queries) {
        if (!inWindow.has(q)) throw new PlanError('TESSERA_PLAN_MISMATCH', `BatchWindow: the plan holds query ${String(q?.id)}, which is not in the window`);
        if (seen.has(q)) throw new PlanError('TESSERA_PLAN_MISMATCH', `BatchWindow: the plan holds query ${String(q.id)} twice`);
        seen.add(q);
      }
    }
  }
  if (seen.size !== inWindow.size) {
    throw new PlanError('TESSERA_PLAN_MISMATCH', `BatchWindow: the plan holds ${seen.size} of the window's ${inWindow.size} queries`);
  }
}
