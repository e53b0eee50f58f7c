/**
 * SimGpu: one virtual GPU. The real batcher Scheduler (policy 'punica', kvExhaustion 'evict', the virtual clock)
 * on a bare KvPageAllocator (the page budget is real, with no memory behind it), its plans executed by a
 * {@link SimulatedRunner}, composed by @tessera/cluster's EngineLoop and exposed to the cluster as a
 * {@link HostEngine} through its own `batcherEngine`: the same objects a server runs, with the model replaced by a
 * step-latency model.
 *
 * Time: the GPU steps itself on the event queue. A step runs loop.step() at virtual time t (all of the step's
 * bookkeeping happens then), prices the step with the latency model, and holds back the host events the step
 * produced (tokens, finishes) until t + latency, when it delivers them and starts its next step. So the scheduler
 * learns of a finish, and reuses its batch slot, when the step that produced it would really have ended.
 * Evictions are the exception: the batcher evicts before the forward, as a real engine notices KV exhaustion
 * before it launches the step, so those are delivered at t and the request is re-placed at once. A placement
 * that arrives mid-step waits for the next step (a request never joins the step in flight).
 *
 * load() is the batcher's live state (cached until the GPU's state changes); batch counts are the scheduler's
 * own, so they change when the events are delivered.
 */
import { batcherEngine, EngineLoop, type HostEngine, type HostEvent, type HostEventSink, type HostLoad, type Placement } from '@tessera/cluster';
import { KV_PAGE_SIZE, KvPageAllocator } from '@tessera/core';
import type { EventQueue } from './clock.js';
import { SimArgumentError } from './errors.js';
import type { LatencyModel } from './latency.js';
import { SimulatedRunner } from './simulated-runner.js';

export interface SimGpuOptions {
  id: string;
  queue: EventQueue;
  latency: LatencyModel;
  /** KV budget in tokens; the cache gets floor(kvTokens / 16) pages. */
  kvTokens: number;
  /** Batch cap (default 32). */
  maxBatch?: number;
  /** Longest sequence the simulated model accepts (default 2^20). */
  maxPositions?: number;
}

/** A stretch of time with nothing running on the GPU; endMs null while it lasts. */
export interface IdlePeriod {
  startMs: number;
  endMs: number | null;
}

export class SimGpu implements HostEngine {
  readonly id: string;
  readonly maxBatch: number;
  /** The GPU's KV pages (accounting only). */
  readonly cache: KvPageAllocator;
  readonly runner: SimulatedRunner;
  readonly loop: EngineLoop;
  private readonly engine: HostEngine;
  private readonly queue: EventQueue;
  private readonly latency: LatencyModel;

  private stepScheduled = false;
  /** A step ran and its events are held until its end; also true while they are delivered. */
  private inFlight = false;
  private readonly heldSinks: HostEventSink[] = [];
  private readonly heldEvents: HostEvent[] = [];
  private cachedLoad: Omit<HostLoad, 'hostId'> | null = null;
  private readonly stepDone = () => this.completeStep();

  /** Batch size of the step in flight (0 when idle), and when it started and ends. */
  currentBatch = 0;
  private stepStartMs = 0;
  private stepEndMs = 0;
  /** Σ batch × ms over completed steps. */
  private batchMsDone = 0;

  /** Steps run, token events delivered, evictions reported, time busy and time running at the cap. */
  steps = 0;
  tokens = 0;
  evictions = 0;
  busyMs = 0;
  atCapMs = 0;
  /** Busy time by batch size: msByBatch[b] = ms spent running steps of b sequences (index 0 unused). */
  readonly msByBatch: Float64Array;
  readonly idlePeriods: IdlePeriod[];

  constructor(options: SimGpuOptions) {
    const { id, queue, latency, kvTokens } = options;
    this.maxBatch = options.maxBatch ?? 32;
    if (!Number.isSafeInteger(kvTokens) || kvTokens < KV_PAGE_SIZE) throw new SimArgumentError(`SimGpu ${id}: kvTokens must be an integer >= ${KV_PAGE_SIZE}, got ${kvTokens}`);
    this.id = id;
    this.queue = queue;
    this.latency = latency;
    this.runner = new SimulatedRunner(options.maxPositions === undefined ? {} : { maxPositions: options.maxPositions });
    this.cache = new KvPageAllocator(Math.floor(kvTokens / KV_PAGE_SIZE));
    this.loop = new EngineLoop({
      runner: this.runner,
      pages: this.cache,
      policy: 'punica',
      maxBatch: this.maxBatch,
      clock: queue.clock,
      kvExhaustion: 'evict',
    });
    this.engine = batcherEngine(this.loop, { clock: queue.clock });
    this.idlePeriods = [{ startMs: queue.now(), endMs: null }];
    this.msByBatch = new Float64Array(this.maxBatch + 1);
  }

  // ─── HostEngine ────────────────────────────────────────────────────────────────────────────────────────────

  submit(placement: Placement, sink: HostEventSink): void {
    this.engine.submit(placement, (event) => this.emit(sink, event));
    this.cachedLoad = null;
    if (!this.inFlight && !this.stepScheduled) {
      this.stepScheduled = true;
      this.queue.schedule(this.queue.now(), () => {
        this.stepScheduled = false;
        this.runStep();
      });
    }
  }

  cancel(id: string): boolean {
    const had = this.engine.cancel(id);
    this.cachedLoad = null;
    return had;
  }

  load(): Omit<HostLoad, 'hostId'> {
    return (this.cachedLoad ??= this.engine.load());
  }

  // ─── introspection ─────────────────────────────────────────────────────────────────────────────────────────

  /** True while a step is in flight. */
  get busy(): boolean {
    return this.inFlight;
  }

  /** ∫ batch size dt (batch × ms) from the start up to `tMs` (≤ now + the step in flight's length). */
  batchMsUntil(tMs: number): number {
    if (!this.inFlight || tMs <= this.stepStartMs) return this.batchMsDone;
    return this.batchMsDone + this.currentBatch * (Math.min(tMs, this.stepEndMs) - this.stepStartMs);
  }

  /** Nothing to free (the pages are accounting only); kept so callers can treat it as a host. */
  dispose(): void {}

  // ─── the step loop ─────────────────────────────────────────────────────────────────────────────────────────

  private emit(sink: HostEventSink, event: HostEvent): void {
    if (event.kind === 'evicted') this.evictions++;
    if (this.inFlight) {
      this.heldSinks.push(sink);
      this.heldEvents.push(event);
      return;
    }
    if (event.kind === 'token') this.tokens++;
    sink(event);
  }

  private runStep(): void {
    const now = this.queue.now();
    const forwards = this.runner.forwards;
    this.inFlight = true;
    const report = this.loop.step();
    this.cachedLoad = null;
    // Evictions happened before the forward: the scheduler hears of them now (they are the first held events).
    let evicted = 0;
    while (evicted < this.heldEvents.length && this.heldEvents[evicted]!.kind === 'evicted') evicted++;
    if (evicted > 0) this.deliver(evicted);
    if (!report || this.runner.forwards === forwards) {
      // Nothing ran (idle), or the forward failed before touching the model: no time passes.
      this.inFlight = false;
      this.deliver(this.heldEvents.length);
      if (this.idlePeriods[this.idlePeriods.length - 1]!.endMs !== null) this.idlePeriods.push({ startMs: now, endMs: null });
      this.currentBatch = 0;
      return;
    }
    const last = this.idlePeriods[this.idlePeriods.length - 1]!;
    if (last.endMs === null) last.endMs = now;
    const ms = this.latency.stepMs(this.runner.last);
    this.steps++;
    this.currentBatch = report.batchSize;
    this.stepStartMs = now;
    this.stepEndMs = now + ms;
    this.busyMs += ms;
    if (report.batchSize >= this.maxBatch) this.atCapMs += ms;
    this.msByBatch[Math.min(report.batchSize, this.maxBatch)]! += ms;
    this.queue.schedule(this.stepEndMs, this.stepDone);
  }

  private completeStep(): void {
    this.batchMsDone += this.currentBatch * (this.stepEndMs - this.stepStartMs);
    // Still in flight while delivering: a placement made by the scheduler in reaction joins the next step, below.
    this.deliver(this.heldEvents.length);
    this.inFlight = false;
    this.runStep();
  }

  /** Delivers the first `count` held events (and any event held while delivering them, when count is all). */
  private deliver(count: number): void {
    const sinks = this.heldSinks;
    const events = this.heldEvents;
    const all = count === events.length;
    let i = 0;
    // Events held while these are delivered (a cancel's finish) are appended, and delivered too when `all`.
    for (; i < (all ? events.length : count); i++) {
      const event = events[i]!;
      if (event.kind === 'token') this.tokens++;
      sinks[i]!(event);
    }
    if (i === events.length) {
      sinks.length = 0;
      events.length = 0;
    } else {
      sinks.splice(0, i);
      events.splice(0, i);
    }
  }
}
