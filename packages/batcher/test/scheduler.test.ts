/**
 * The Scheduler alone, on a bare KV page allocator and a fake runner (a token per sampled row, no model): its
 * plans are what the policy says (one prefill per step, prefill rows first, decodes grouped by adapter, pages
 * reserved for the step), preemption by recompute when pages run out, residency waits, cancellation (no page
 * leaks), and the static policy's wasted rows. Pure: no engine, no native addon.
 */
import { AdapterLoadError, KvPageAllocator, type StepPlan, TesseraError } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import { fakeRun } from './support/fake-runner.js';
import { type AdapterResidency, type BatcherRequest, type BatchPolicy, Scheduler, type SchedulerEvent } from '../src/index.js';

const limits = { vocabSize: 100, maxPositions: 4096 };

function setup(options: { numPages?: number; policy?: BatchPolicy; maxBatch?: number; adapters?: AdapterResidency; kvExhaustion?: 'requeue' | 'evict' } = {}) {
  const pages = new KvPageAllocator(options.numPages ?? 64);
  const events: SchedulerEvent[] = [];
  const { numPages: _n, ...rest } = options;
  const scheduler = new Scheduler({ pages, limits, ...rest, onEvent: (e) => events.push(e) });
  const produced = new Map<string, number>();
  const maxTokens = new Map<string, number>();
  const submit = (r: BatcherRequest) => {
    maxTokens.set(r.id, r.maxTokens);
    produced.set(r.id, r.generated?.length ?? 0);
    scheduler.submit(r);
  };
  const step = () => {
    const plan = scheduler.plan();
    if (!plan) return null;
    return { plan, report: scheduler.complete(fakeRun(plan, produced, maxTokens))! };
  };
  const drain = () => {
    const steps: NonNullable<ReturnType<typeof step>>[] = [];
    for (let s = step(); s; s = step()) {
      steps.push(s);
      if (steps.length > 5000) throw new Error('no progress');
    }
    return steps;
  };
  return { pages, scheduler, events, submit, step, drain };
}

const req = (id: string, adapter: string | null, promptLength: number, maxTokens: number): BatcherRequest => ({
  id,
  adapter,
  prompt: Array.from({ length: promptLength }, (_, i) => (i * 7) % 90),
  maxTokens,
});

describe('Scheduler plans (punica)', () => {
  it('one prefill per step, prefill rows first, decodes grouped by adapter with the prefill’s adapter first', () => {
    const t = setup();
    const adapters = ['b', null, 'a', 'b', null, 'c'];
    adapters.forEach((a, i) => t.submit(req(`r${i}`, a, 3 + i, 20)));
    const plans: StepPlan[] = [];
    for (let k = 0; k < 8; k++) plans.push(t.step()!.plan);
    plans.forEach((plan, k) => {
      const prefills = plan.sequences.filter((s) => s.kind === 'prefill');
      expect(prefills.length).toBeLessThanOrEqual(1);
      if (k < adapters.length) expect(prefills[0]!.requestId).toBe(`r${k}`);
      // Prefill first (position 0, the whole prompt); then decodes, one token each at their committed length.
      plan.sequences.forEach((s, i) => {
        if (s.kind === 'prefill') expect(i).toBe(0);
        else expect(s.tokens).toHaveLength(1);
      });
      // Segments tile the rows and each adapter appears in one segment only.
      const keys = plan.segments.map((g) => g.key);
      expect(new Set(keys).size).toBe(keys.length);
      expect(plan.segments.reduce((n, g) => n + g.count, 0)).toBe(plan.rows);
      let at = 0;
      for (const g of plan.segments) {
        expect(g.start).toBe(at);
        at += g.count;
      }
      if (prefills.length === 1) expect(plan.segments[0]!.key).toBe(prefills[0]!.adapter);
      // Decodes after the lead group are in adapter order (base model first).
      const decodeKeys = plan.sequences.filter((s) => s.kind === 'decode' && s.adapter !== plan.sequences[0]!.adapter).map((s) => s.adapter);
      const sorted = [...decodeKeys].sort((x, y) => (x === y ? 0 : x === null ? -1 : y === null ? 1 : x < y ? -1 : 1));
      expect(decodeKeys).toEqual(sorted);
    });
    // Pages: a prefill of n tokens reserves ceil(n / 16) pages up front; the KV pages of the plan are in the allocator.
    expect(plans[0]!.reserved).toEqual([{ seqId: plans[0]!.sequences[0]!.seqId, length: 3, pages: [0] }]);
    t.drain();
    expect(t.pages.usedPages).toBe(0);
    expect(t.events.filter((e) => e.kind === 'finish')).toHaveLength(6);
  });

  it('preempts the newest request when the decodes’ growth does not fit, and re-admits it by prefilling prompt + generated', () => {
    // Two requests of 16 + 20 tokens need 3 pages each at their end; 5 pages hold one and a half.
    const t = setup({ numPages: 5 });
    t.submit(req('old', 'a', 16, 20));
    t.submit(req('new', 'b', 16, 20));
    const steps = t.drain();
    const preempting = steps.find((s) => s.report.preempted.length > 0)!;
    expect(preempting.report.preempted).toEqual(['new']);
    const readmit = steps.find((s) => s.plan.step > preempting.plan.step && s.plan.sequences.some((q) => q.kind === 'prefill' && q.requestId === 'new'))!;
    const prefill = readmit.plan.sequences.find((q) => q.kind === 'prefill')!;
    expect(prefill.tokens.length).toBeGreaterThan(16);
    expect(prefill.tokens.slice(0, 16)).toEqual(req('new', 'b', 16, 20).prompt);
    // The released pages were reported in a plan.
    expect(steps.some((s) => s.plan.released.length > 0)).toBe(true);
    const finishes = t.events.filter((e) => e.kind === 'finish');
    expect(finishes.map((e) => e.kind === 'finish' && e.tokens.length)).toEqual([20, 20]);
    expect(t.scheduler.stats()).toMatchObject({ preemptions: 1, kvPagesUsed: 0 });
    // The tokens streamed for 'new' are each generated once, in order (no repeat after the recompute).
    const streamed = t.events.filter((e) => e.kind === 'token' && e.id === 'new').map((e) => (e.kind === 'token' ? e.token : -1));
    expect(streamed).toEqual((finishes.find((e) => e.id === 'new') as Extract<SchedulerEvent, { kind: 'finish' }>).tokens);
  });

  it("kvExhaustion 'evict' hands the newest request back with its tokens (no requeue)", () => {
    const t = setup({ numPages: 5, kvExhaustion: 'evict' });
    t.submit(req('old', 'a', 16, 20));
    t.submit(req('new', 'b', 16, 20));
    t.drain();
    const evicted = t.events.find((e) => e.kind === 'evicted')!;
    expect(evicted).toMatchObject({ id: 'new' });
    expect(t.scheduler.stats()).toMatchObject({ preemptions: 1, queued: 0, kvPagesUsed: 0, finished: 1 });
  });

  it('a load refused for capacity (an adapter larger than the whole budget) reaches its waiters as it is, not as a retryable AdapterLoadError', async () => {
    class TooLarge extends TesseraError {
      static override readonly kind = 'capacity' as const;
    }
    const adapters: AdapterResidency = {
      isResident: () => false,
      ensureResident: () => Promise.reject(new TooLarge('TESSERA_ADAPTER_TOO_LARGE', 'adapter "huge" needs more than the whole device budget')),
      pin: () => {},
      unpin: () => {},
    };
    const t = setup({ adapters });
    t.submit(req('h1', 'huge', 4, 3));
    t.submit(req('h2', 'huge', 4, 3));
    expect(t.step()).toBeNull();
    await new Promise((r) => setImmediate(r));
    const errors = t.events.filter((e) => e.kind === 'error');
    expect(errors.map((e) => e.id)).toEqual(['h1', 'h2']);
    for (const e of errors) {
      expect(e.kind === 'error' && e.error).toBeInstanceOf(TooLarge);
      expect(e.kind === 'error' && (e.error as TesseraError).kind).toBe('capacity');
    }
  });

  it('waits for a non-resident adapter without delaying others; a rejected load fails its waiters with AdapterLoadError', async () => {
    const resident = new Set(['a']);
    const pins = new Map<string, number>();
    let rejectLoad!: (e: Error) => void;
    let resolveLoad!: () => void;
    const adapters: AdapterResidency = {
      isResident: (n) => resident.has(n),
      ensureResident: (n) =>
        n === 'slow'
          ? new Promise<void>((resolve) => (resolveLoad = () => (resident.add('slow'), resolve())))
          : new Promise<void>((_, reject) => (rejectLoad = reject)),
      pin: (n) => pins.set(n, (pins.get(n) ?? 0) + 1),
      unpin: (n) => pins.set(n, pins.get(n)! - 1),
    };
    const t = setup({ adapters });
    t.submit(req('s', 'slow', 4, 3));
    t.submit(req('x', 'broken', 4, 3));
    t.submit(req('a', 'a', 4, 6));
    const first = t.step()!;
    expect(first.report.admitted).toEqual(['a']);
    expect(t.scheduler.stats()).toMatchObject({ waitingForAdapter: 2, adapterLoads: 2 });
    rejectLoad(new Error('bad file'));
    await new Promise((r) => setImmediate(r));
    const failed = t.events.find((e) => e.kind === 'error')!;
    expect(failed.kind === 'error' && failed.id).toBe('x');
    expect(failed.kind === 'error' && failed.error).toBeInstanceOf(AdapterLoadError);
    expect(t.step()!.report.admitted).toEqual([]);
    resolveLoad();
    await new Promise((r) => setImmediate(r));
    expect(t.step()!.report.admitted).toEqual(['s']);
    t.drain();
    expect([...pins.values()].every((n) => n === 0)).toBe(true);
  });

  it('cancel frees a queued or running request at once, and at the end of the step from an event handler; no page leaks', () => {
    const pages = new KvPageAllocator(32);
    const events: SchedulerEvent[] = [];
    let scheduler!: Scheduler;
    scheduler = new Scheduler({
      pages,
      limits,
      onEvent: (e) => {
        events.push(e);
        if (e.kind === 'token' && e.id === 'self') expect(scheduler.cancel('self')).toBe(true);
      },
    });
    for (const id of ['run', 'self', 'queued']) scheduler.submit(req(id, null, 20, 10));
    const produced = new Map<string, number>();
    const max = new Map([['run', 10], ['self', 10], ['queued', 10]]);
    scheduler.complete(fakeRun(scheduler.plan()!, produced, max));
    expect(scheduler.cancel('queued')).toBe(true);
    expect(events.at(-1)).toMatchObject({ kind: 'finish', id: 'queued', finishReason: 'cancelled', tokens: [] });
    expect(pages.usedPages).toBe(2);
    expect(scheduler.cancel('run')).toBe(true);
    expect(pages.usedPages).toBe(0);
    // 'self' cancels itself from its first token: applied when complete() returns.
    const plan = scheduler.plan()!;
    expect(plan.sequences.map((s) => s.requestId)).toEqual(['self']);
    expect(plan.released).toHaveLength(1);
    scheduler.complete(fakeRun(plan, produced, max));
    expect(events.at(-1)).toMatchObject({ kind: 'finish', id: 'self', finishReason: 'cancelled' });
    expect(pages.usedPages).toBe(0);
    expect(pages.sequenceIds()).toEqual([]);
    expect(scheduler.plan()).toBeNull();
    expect(scheduler.stats()).toMatchObject({ cancelled: 3, running: 0, queued: 0 });
  });

  it('static: a batch is prefilled together; a finished member keeps its row as a wasted recompute until the batch ends', () => {
    const t = setup({ policy: 'static' });
    t.submit(req('a', 'x', 5, 2));
    t.submit(req('b', 'x', 6, 4));
    t.submit(req('c', 'y', 7, 1));
    const steps = t.drain();
    expect(steps[0]!.plan.sequences.map((s) => s.kind)).toEqual(['prefill', 'prefill']);
    // After a's second token (step 2) its row is wasted in steps 3 and 4, recomputing its last position.
    const wasted = steps[2]!.plan.sequences.find((s) => s.requestId === 'a')!;
    // a wrote prompt (5) + its first token (1) = 6 positions; its wasted row recomputes position 5.
    expect(wasted).toMatchObject({ kind: 'wasted', position: 5 });
    expect(steps.reduce((n, s) => n + s.report.wastedRows, 0)).toBe(2);
    expect(steps[4]!.plan.sequences.map((s) => s.requestId)).toEqual(['c']);
    expect(t.pages.usedPages).toBe(0);
  });

  it('validates: typed errors with a code, nothing changes; plan() inside a step is refused', () => {
    const t = setup({ numPages: 4 });
    const codes = (r: Partial<BatcherRequest>) => {
      try {
        t.scheduler.check({ ...req('v', null, 3, 4), ...r });
        return 'ok';
      } catch (err) {
        return (err as { code: string }).code;
      }
    };
    expect(codes({})).toBe('ok');
    expect(codes({ prompt: [] })).toBe('TESSERA_EMPTY_PROMPT');
    expect(codes({ prompt: [100] })).toBe('TESSERA_TOKEN_OUT_OF_VOCAB');
    expect(codes({ maxTokens: 0 })).toBe('TESSERA_INVALID_MAX_TOKENS');
    expect(codes({ prompt: Array(4090).fill(1), maxTokens: 7 })).toBe('TESSERA_CONTEXT_TOO_LONG');
    expect(codes({ prompt: Array(40).fill(1), maxTokens: 26 })).toBe('TESSERA_KV_TOO_SMALL');
    expect(codes({ generated: [1, 2, 3, 4] })).toBe('TESSERA_INVALID_MAX_TOKENS');
    t.submit(req('v', null, 3, 4));
    expect(codes({})).toBe('TESSERA_DUPLICATE_REQUEST');
    t.scheduler.plan();
    expect(() => t.scheduler.plan()).toThrow(/in flight/);
    expect(() => new Scheduler({ pages: t.pages, limits, maxBatch: 0 })).toThrow(/maxBatch/);
  });
});
