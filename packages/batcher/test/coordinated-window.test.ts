/**
 * BatchWindow (online CB, pets.md §11 #19) on virtual time: the count bound, the time bound, sequential batches and
 * non-overlapping windows, error isolation (plan and execute failures go to onError; the window goes on), flush()
 * and close() draining.
 */
import { describe, expect, it } from 'vitest';
import {
  BatchWindow, BatchWindowClosedError, type BatchWindowErrorContext, type BatchWindowOptions, type CbQuery, type Clock,
  type MacroBatch, PlanError, type WindowTimer, analyticCostModel, planBatches, systemClock,
} from '../src/index.js';

/** A clock and one-shot timers on virtual time; advance() fires due timers in time order. */
class ManualTime implements Clock, WindowTimer {
  private t = 0;
  private nextId = 0;
  readonly timers = new Map<number, { at: number; callback: () => void }>();

  now(): number {
    return this.t;
  }

  set(delayMs: number, callback: () => void): unknown {
    const id = ++this.nextId;
    this.timers.set(id, { at: this.t + delayMs, callback });
    return id;
  }

  clear(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  /** Moves time forward by ms, firing every timer due on the way (and letting promise chains settle after each). */
  async advance(ms: number): Promise<void> {
    const until = this.t + ms;
    for (;;) {
      let due: [number, { at: number; callback: () => void }] | null = null;
      for (const entry of this.timers) if (entry[1].at <= until && (due === null || entry[1].at < due[1].at)) due = entry;
      if (due === null) break;
      this.timers.delete(due[0]);
      this.t = due[1].at;
      due[1].callback();
      await settle();
    }
    this.t = until;
    await settle();
  }
}

/** Lets pending promise callbacks (the window's loop) run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Q extends CbQuery {
  id: string;
}
const cost = analyticCostModel({ a0: 5, a1: 0.1, a2: 0, k: { x: 10 }, m: { x: 0.01 } });
const planCb = (qs: Q[]) => planBatches(qs, { strategy: 'cb', cost, petTypeOf: () => 'x' });
let counter = 0;
const query = (task = 'a', length = 8): Q => ({ id: `q${counter++}`, task, length });

interface Harness {
  time: ManualTime;
  window: BatchWindow<Q>;
  windows: Q[][];
  executed: Q[][];
  errors: [unknown, BatchWindowErrorContext<Q>][];
}

function harness(options: Partial<BatchWindowOptions<Q>> = {}): Harness {
  const time = new ManualTime();
  const windows: Q[][] = [];
  const executed: Q[][] = [];
  const errors: [unknown, BatchWindowErrorContext<Q>][] = [];
  const window = new BatchWindow<Q>({
    maxQueries: 4, maxWaitMs: 10, clock: time, timer: time,
    plan: (qs) => {
      windows.push([...qs]);
      return planCb(qs);
    },
    execute: async (_batch, qs) => {
      executed.push(qs);
    },
    onError: (error, context) => errors.push([error, context]),
    ...options,
  });
  return { time, window, windows, executed, errors };
}

describe('BatchWindow bounds', () => {
  it('starts a window when maxQueries are waiting', async () => {
    const h = harness();
    for (let i = 0; i < 3; i++) h.window.add(query());
    await settle();
    expect(h.windows).toHaveLength(0);
    expect(h.window.pending).toBe(3);
    h.window.add(query());
    await settle();
    expect(h.windows.map((w) => w.length)).toEqual([4]);
    expect(h.executed.flat()).toHaveLength(4);
    expect(h.window.pending).toBe(0);
    expect(h.time.timers.size).toBe(0); // nothing waiting, no timer armed
    expect(h.window.stats()).toMatchObject({ windows: 1, queries: 4, failedBatches: 0, pending: 0, running: false });
  });

  it('starts a window when the oldest query has waited maxWaitMs', async () => {
    const h = harness({ maxQueries: 100 });
    h.window.add(query());
    h.window.add(query());
    await h.time.advance(5);
    h.window.add(query()); // arrives at t = 5: its own deadline is later, the oldest's is t = 10
    await h.time.advance(4.9);
    expect(h.windows).toHaveLength(0);
    await h.time.advance(0.1);
    expect(h.time.now()).toBe(10);
    expect(h.windows.map((w) => w.length)).toEqual([3]);
    h.window.add(query()); // t = 10: a fresh deadline at t = 20
    await h.time.advance(9.99);
    expect(h.windows).toHaveLength(1);
    await h.time.advance(0.01);
    expect(h.windows.map((w) => w.length)).toEqual([3, 1]);
  });

  it('caps a window at maxQueries, oldest first; the rest waits for its own bound', async () => {
    const h = harness();
    const qs = Array.from({ length: 10 }, () => query());
    for (const q of qs) h.window.add(q);
    await settle();
    expect(h.windows).toEqual([qs.slice(0, 4), qs.slice(4, 8)]);
    expect(h.window.pending).toBe(2);
    await h.time.advance(10);
    expect(h.windows[2]).toEqual(qs.slice(8));
  });

  it('treats maxWaitMs = Infinity as no time bound', async () => {
    const h = harness({ maxWaitMs: Infinity });
    h.window.add(query());
    await h.time.advance(1e9);
    expect(h.windows).toHaveLength(0);
    expect(h.time.timers.size).toBe(0);
    await h.window.flush();
    expect(h.windows).toHaveLength(1);
  });
});

describe('BatchWindow execution', () => {
  it('runs the batches of a window one at a time, and the next window only after them', async () => {
    const gates: (() => void)[] = [];
    const log: string[] = [];
    const time = new ManualTime();
    // Pure padding cost and β-only: every task its own macro-batch, so a window of 3 tasks runs 3 batches.
    const heavy = analyticCostModel({ a0: 0, a1: 1, a2: 0, k: { x: 0 }, m: { x: 0 } });
    const window = new BatchWindow<Q>({
      maxQueries: 3, maxWaitMs: 10, clock: time, timer: time,
      plan: (qs) => {
        log.push(`plan ${qs.map((q) => q.id).join(',')}`);
        return planBatches(qs, { strategy: 'beta-only', cost: heavy, petTypeOf: () => 'x' });
      },
      execute: (_batch, qs) => {
        log.push(`start ${qs.map((q) => q.id).join(',')}`);
        return new Promise<void>((resolve) => gates.push(() => {
          log.push(`end ${qs.map((q) => q.id).join(',')}`);
          resolve();
        }));
      },
    });
    const [a, b, c, d, e, f] = [query('A', 4), query('B', 64), query('C', 128), query('A', 4), query('B', 8), query('C', 16)];
    for (const q of [a, b, c]) window.add(q!);
    await settle();
    for (const q of [d, e, f]) window.add(q!); // the second window is due, but must wait for the first
    await settle();
    expect(log).toEqual([`plan ${a!.id},${b!.id},${c!.id}`, `start ${a!.id}`]);
    expect(gates).toHaveLength(1);
    gates.shift()!();
    await settle();
    expect(log.slice(2)).toEqual([`end ${a!.id}`, `start ${b!.id}`]);
    gates.shift()!();
    await settle();
    gates.shift()!();
    await settle();
    expect(log.slice(4)).toEqual([`end ${b!.id}`, `start ${c!.id}`, `end ${c!.id}`, `plan ${d!.id},${e!.id},${f!.id}`, `start ${d!.id}`]);
    while (gates.length > 0) {
      gates.shift()!();
      await settle();
    }
    expect(window.stats()).toMatchObject({ windows: 2, batches: 6, queries: 6, running: false, pending: 0 });
  });

  it('hands execute the batch and its queries in row order', async () => {
    const seen: [MacroBatch, Q[]][] = [];
    const h = harness({ maxQueries: 5, execute: async (batch, qs) => void seen.push([batch, qs]) });
    const qs = [query('A', 8), query('B', 10), query('A', 30), query('B', 31), query('A', 9)];
    for (const q of qs) h.window.add(q);
    await settle();
    expect(seen).toHaveLength(1); // the toy example: one macro-batch
    const [batch, rows] = seen[0]!;
    expect(rows).toEqual(batch.miniBatches.flatMap((m) => m.queries));
    expect(new Set(rows)).toEqual(new Set(qs)); // the very objects added
  });
});

describe('BatchWindow errors', () => {
  it('reports a failed execute to onError and runs the other batches and windows', async () => {
    const heavy = analyticCostModel({ a0: 0, a1: 1, a2: 0, k: { x: 0 }, m: { x: 0 } });
    const boom = new Error('engine failed');
    const h = harness({
      maxQueries: 3,
      plan: (qs) => planBatches(qs, { strategy: 'beta-only', cost: heavy, petTypeOf: () => 'x' }),
      execute: async (_batch, qs) => {
        if (qs.some((q) => q.task === 'bad')) throw boom;
        h.executed.push(qs);
      },
    });
    const good1 = query('g1', 4);
    const bad = query('bad', 16);
    const good2 = query('g2', 64);
    for (const q of [good1, bad, good2]) h.window.add(q);
    await settle();
    expect(h.executed).toEqual([[good1], [good2]]);
    expect(h.errors).toHaveLength(1);
    const [error, context] = h.errors[0]!;
    expect(error).toBe(boom);
    expect(context.stage).toBe('execute');
    expect(context.window).toBe(0);
    expect(context.queries).toEqual([bad]);
    expect(context.batch!.miniBatches[0]!.queries).toEqual([bad]);
    const later = query('g3', 4);
    h.window.add(later);
    await h.window.flush();
    expect(h.executed.at(-1)).toEqual([later]);
    expect(h.window.stats()).toMatchObject({ windows: 2, batches: 3, queries: 3, failedBatches: 1, failedWindows: 0 });
  });

  it('a synchronous throw from execute is isolated too', async () => {
    const h = harness({ maxQueries: 1, execute: () => { throw new Error('sync'); } });
    h.window.add(query());
    h.window.add(query());
    await settle();
    expect(h.errors.map(([e]) => (e as Error).message)).toEqual(['sync', 'sync']);
    expect(h.window.stats()).toMatchObject({ windows: 2, failedBatches: 2 });
  });

  it('reports a failed plan with every query of the window, then goes on', async () => {
    const h = harness({
      maxQueries: 2,
      plan: (qs) => planBatches(qs, { strategy: 'cb', cost, petTypeOf: (t) => { if (t === 'ghost') throw new Error('unknown'); return 'x'; } }),
    });
    const [g, ok] = [query('ghost'), query('a')];
    h.window.add(g);
    h.window.add(ok);
    await settle();
    expect(h.errors).toHaveLength(1);
    expect(h.errors[0]![1]).toEqual({ stage: 'plan', window: 0, queries: [g, ok] });
    expect((h.errors[0]![0] as PlanError).code).toBe('TESSERA_UNKNOWN_TASK');
    const [x, y] = [query('a'), query('a')];
    h.window.add(x);
    h.window.add(y);
    await settle();
    expect(h.executed.flat()).toEqual(expect.arrayContaining([x, y]));
    expect(h.window.stats()).toMatchObject({ windows: 2, failedWindows: 1, batches: 1, queries: 2 });
  });

  it('refuses a plan that does not hold each window query exactly once', async () => {
    const cases: ((qs: Q[]) => ReturnType<typeof planCb>)[] = [
      (qs) => planCb(qs.slice(1)), // drops one
      (qs) => planCb([...qs, query()]), // adds a stranger
      (qs) => {
        const plan = planCb(qs);
        plan.batches.push(plan.batches[0]!); // runs one twice
        return plan;
      },
    ];
    for (const plan of cases) {
      const h = harness({ maxQueries: 2, plan });
      h.window.add(query());
      h.window.add(query());
      await settle();
      expect(h.executed).toEqual([]);
      expect((h.errors[0]![0] as PlanError).code).toBe('TESSERA_PLAN_MISMATCH');
    }
  });

  it('survives an onError listener that throws, and counts it', async () => {
    const h = harness({ maxQueries: 1, execute: () => Promise.reject(new Error('x')), onError: () => { throw new Error('listener'); } });
    h.window.add(query());
    h.window.add(query());
    await settle();
    expect(h.window.stats()).toMatchObject({ windows: 2, failedBatches: 2, listenerErrors: 2 });
  });
});

describe('BatchWindow flush and close', () => {
  it('flush() runs everything waiting (in windows of maxQueries) and resolves when it is done', async () => {
    const h = harness({ maxQueries: 3, maxWaitMs: 1000 });
    const qs = Array.from({ length: 7 }, () => query());
    for (const q of qs.slice(0, 2)) h.window.add(q);
    await h.window.flush();
    expect(h.windows).toEqual([qs.slice(0, 2)]);
    for (const q of qs.slice(2)) h.window.add(q); // 3 go at once (count bound), 2 wait
    await h.window.flush();
    expect(h.windows).toEqual([qs.slice(0, 2), qs.slice(2, 5), qs.slice(5)]);
    expect(h.time.now()).toBe(0); // no time passed: flush did not wait for the time bound
    await h.window.flush(); // nothing waiting: resolves at once
  });

  it('flush() waits for the window already running', async () => {
    let release!: () => void;
    const h = harness({ maxQueries: 1, execute: () => new Promise<void>((resolve) => (release = resolve)) });
    h.window.add(query());
    await settle();
    expect(h.window.stats().running).toBe(true);
    let flushed = false;
    const done = h.window.flush().then(() => (flushed = true));
    await settle();
    expect(flushed).toBe(false);
    release();
    await done;
    expect(h.window.stats().running).toBe(false);
  });

  it('close() drains what is waiting, clears the timer, refuses new queries, and is idempotent', async () => {
    const h = harness({ maxQueries: 10 });
    const qs = [query(), query(), query()];
    for (const q of qs) h.window.add(q);
    expect(h.time.timers.size).toBe(1);
    const closing = h.window.close();
    expect(h.window.close()).toBe(closing);
    expect(() => h.window.add(query())).toThrow(BatchWindowClosedError);
    await closing;
    expect(h.windows).toEqual([qs]);
    expect(h.executed.flat()).toHaveLength(3);
    expect(h.time.timers.size).toBe(0);
    expect(h.window.pending).toBe(0);
  });

  it('validates its options', () => {
    const base = { maxQueries: 4, maxWaitMs: 10, clock: systemClock, plan: planCb, execute: async () => {} };
    for (const bad of [{ maxQueries: 0 }, { maxQueries: 2.5 }, { maxWaitMs: -1 }, { maxWaitMs: Number.NaN }, { clock: {} }, { timer: {} }, { plan: 1 }, { execute: null }, { onError: 'x' }]) {
      expect(() => new BatchWindow({ ...base, ...bad } as unknown as BatchWindowOptions<Q>)).toThrow(PlanError);
    }
  });

  it('works on the real clock and timers by default', async () => {
    let resolveDone!: (qs: Q[]) => void;
    const done = new Promise<Q[]>((resolve) => (resolveDone = resolve));
    const window = new BatchWindow<Q>({ maxQueries: 100, maxWaitMs: 2, clock: systemClock, plan: planCb, execute: async (_b, qs) => resolveDone(qs) });
    const q = query();
    window.add(q);
    expect(await done).toEqual([q]);
    await window.close();
  });
});
