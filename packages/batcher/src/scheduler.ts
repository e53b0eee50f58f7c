/**
 * Scheduler: the decision half of Punica's per-accelerator step loop (§5, pseudocode §9.6) and the two baseline
 * batching policies of its text-generation evaluation (§9.9), split from execution the way vLLM splits its
 * scheduler from its model runner. It is pure: no tensor, no model, no engine; it runs unchanged under the real
 * clock beside the engine's StepRunner and under simulated time in `@tessera/sim`.
 *
 * One step = plan → (a runner executes it) → complete:
 *   1. plan(): start loads for queued requests whose adapter is not resident (they wait; nothing else does);
 *      price the running decodes' KV growth, and while it does not fit preempt the newest running request (its
 *      pages are freed; it goes back to the head of the queue with its generated tokens and is later re-admitted
 *      by prefilling prompt + generated: recompute, as Punica's migration does; or, kvExhaustion 'evict', it is
 *      handed back to a cluster scheduler); admit by policy (a prefill needs a resident adapter, a free batch row
 *      and KV pages for its whole input); reserve the step's pages; return the {@link StepPlan}: prefills first,
 *      then the decodes grouped by adapter, and the adapter segments over the rows;
 *   2. complete(outcome): take back each sequence's sampled token and finish reason (or its failure), stream the
 *      tokens, let finished requests leave at once and free their pages (the static policy keeps a finished
 *      member's row until its batch ends: that row is planned as a 'wasted' recompute of its last position).
 * Nothing here reads time except through the injected Clock (two reads per step: at plan and at complete).
 */
import {
  AdapterLoadError,
  type Clock,
  InvalidArgumentError,
  type KvPageAllocator,
  type KvReservation,
  type ModelLimits,
  type PlannedSequence,
  type StepOutcome,
  type StepPlan,
  type StepSegment,
  type StopReason,
  systemClock,
  TesseraError,
} from '@tessera/core';
import { BatcherStateError, RequestValidationError } from './errors.js';
import { FAIRNESS_POLICIES, type FairnessPolicy, VirtualTokenCounter, type VtcWeights } from './serving/fairness.js';
import { PrefixKeyChain } from './serving/prefix-keys.js';
import type {
  AdapterResidency,
  BatchPolicy,
  BatcherFinishReason,
  BatcherRequest,
  KvExhaustionPolicy,
  SchedulerEvent,
  SchedulerStats,
  StepReport,
} from './types.js';

export const DEFAULT_MAX_BATCH = 32;
export const BATCH_POLICIES: readonly BatchPolicy[] = ['punica', 'same-adapter', 'static'];

export interface SchedulerOptions {
  /** The KV page accounting the scheduler plans on (the engine's `cache.allocator`, or a bare allocator in sim). */
  pages: KvPageAllocator;
  /** The model's vocabulary and positions (requests are validated against them). */
  limits: ModelLimits;
  /** Adapter residency; without it every adapter name is assumed to be known to the runner. */
  adapters?: AdapterResidency;
  /** Default 'punica'. */
  policy?: BatchPolicy;
  /** Most sequences in one forward (rows of the static batch included); default 32. */
  maxBatch?: number;
  /** Default systemClock. */
  clock?: Clock;
  /** Default 'requeue'. */
  kvExhaustion?: KvExhaustionPolicy;
  /**
   * Where requests' events go (tokens, finishes, failures, evictions), synchronously, in the order they happen.
   * An exception thrown here is counted (`listenerErrors`) and cancels that request (at the end of the step).
   */
  onEvent?: (event: SchedulerEvent) => void;
  /** Called when work may have become runnable: a submit, a cancel, an adapter load settling (the host loop's wake-up). */
  wake?: () => void;
  /**
   * Prefix caching: full KV pages of a prompt are published under a key of their tokens, the tokens before them and
   * the adapter's identity (name and weights version, `adapters.identity`), and a later request of the same base +
   * adapter with the same leading tokens attaches them instead of prefilling them. Never across adapters. Not with
   * the 'static' policy (its wasted rows rewrite their last position). Default false.
   */
  prefixCache?: boolean;
  /** 'fcfs' (default) or 'vtc': S-LoRA's virtual token counter across tenants ('punica' policy only). */
  fairness?: FairnessPolicy;
  /** VTC's service weights per input and output token (default 1 and 2). */
  vtcWeights?: Partial<VtcWeights>;
}

/**
 * queued: waiting for admission (maybe for its adapter); running: admitted, has KV; occupying: static policy only,
 * finished but still holding its row and pages until its batch ends; done: gone (finished, cancelled or failed).
 */
type Phase = 'queued' | 'running' | 'occupying' | 'done';

interface RequestState {
  readonly id: string;
  readonly adapter: string | null;
  /** Who VTC charges: the request's tenant, else its adapter, else '' (the base model). */
  readonly tenant: string;
  /** Prefix caching: may this request attach cached pages (no prompt logprobs: those need every prompt row). */
  readonly prefixReuse: boolean;
  /** Prefix-cache keys of the request's fed tokens (null until admitted with prefix caching on). */
  prefixKeys: PrefixKeyChain | null;
  /** Leading pages of the current admission that are published (or attached). */
  publishedPages: number;
  readonly prompt: readonly number[];
  readonly maxTokens: number;
  /** Every generated token (those the request was submitted with included). */
  readonly generated: number[];
  phase: Phase;
  /** KV sequence of the current admission ('' when it has none). A fresh one per admission. */
  seqId: string;
  /** Admission order of the current admission: the largest is the newest (the preemption victim). */
  admission: number;
  pinned: boolean;
  /** Input of the pending prefill: prompt, plus the generated tokens after a preemption. */
  prefillTokens: number[] | null;
  /** The last sampled token: the next decode's input. */
  nextToken: number;
  /** The token at the last written KV position (a static batch's wasted row re-feeds it). */
  lastFed: number;
  cancelRequested: boolean;
}

/** The monotonic counters of {@link SchedulerStats}, kept as the scheduler goes. */
type Counters = Pick<
  SchedulerStats,
  | 'steps' | 'rows' | 'tokensGenerated' | 'promptTokens' | 'recomputedTokens' | 'wastedRows' | 'preemptions'
  | 'layoutBuilds' | 'adapterLoads' | 'submitted' | 'finished' | 'cancelled' | 'failed' | 'listenerErrors'
  | 'prefixLookupTokens' | 'prefixHitTokens'
>;

/** The plan in flight and what complete() needs to read its outcome. */
interface InFlight {
  readonly plan: StepPlan;
  readonly t0: number;
  readonly order: readonly RequestState[];
  readonly byId: ReadonlyMap<string, RequestState>;
  readonly prefills: ReadonlySet<RequestState>;
  readonly preempted: readonly string[];
}

let nextInstance = 0;

/** Working-set order: base model first, then adapters by name; within an adapter, oldest admission first. */
function byAdapterThenAdmission(a: RequestState, b: RequestState): number {
  if (a.adapter !== b.adapter) {
    if (a.adapter === null) return -1;
    if (b.adapter === null) return 1;
    return a.adapter < b.adapter ? -1 : 1;
  }
  return a.admission - b.admission;
}

export class Scheduler {
  readonly policy: BatchPolicy;
  readonly maxBatch: number;
  readonly kvExhaustion: KvExhaustionPolicy;
  readonly pages: KvPageAllocator;
  readonly limits: ModelLimits;
  readonly prefixCache: boolean;
  readonly fairness: FairnessPolicy;
  private readonly vtc: VirtualTokenCounter | null;
  private readonly adapters: AdapterResidency | undefined;
  private readonly clock: Clock;
  private readonly onEvent: (event: SchedulerEvent) => void;
  private readonly wakeHook: (() => void) | undefined;
  private readonly instance = nextInstance++;

  /** FCFS; preempted requests go back to the front. */
  private readonly queue: RequestState[] = [];
  /** The working set, kept sorted by adapter (static: finished members still occupying rows too). */
  private running: RequestState[] = [];
  /** Queued and running requests by id (what a duplicate id collides with). */
  private readonly live = new Map<string, RequestState>();
  /** Adapter loads in flight, one per adapter. */
  private readonly loads = new Map<string, Promise<void>>();
  /** Queued requests within the load-ahead horizon whose adapter is reserved (adapters.reserve) until they are pinned. */
  private readonly reservations = new Set<RequestState>();
  /** KV sequences released since the last plan (the plan reports them). */
  private released: string[] = [];
  private admissionCounter = 0;
  private readonly histogram = new Map<number, number>();
  private readonly counters: Counters = {
    steps: 0,
    rows: 0,
    tokensGenerated: 0,
    promptTokens: 0,
    recomputedTokens: 0,
    wastedRows: 0,
    preemptions: 0,
    layoutBuilds: 0,
    adapterLoads: 0,
    submitted: 0,
    finished: 0,
    cancelled: 0,
    failed: 0,
    listenerErrors: 0,
    prefixLookupTokens: 0,
    prefixHitTokens: 0,
  };
  /** True from the start of plan() to the end of complete() (or of a plan() that found nothing to run). */
  private inStep = false;
  private inFlight: InFlight | null = null;
  private readonly deferredCancels: RequestState[] = [];

  constructor(options: SchedulerOptions) {
    const policy = options.policy ?? 'punica';
    if (!BATCH_POLICIES.includes(policy)) {
      throw new InvalidArgumentError(`Scheduler: policy must be one of ${BATCH_POLICIES.join(', ')}, got ${String(policy)}`);
    }
    const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
    if (!Number.isSafeInteger(maxBatch) || maxBatch < 1) {
      throw new InvalidArgumentError(`Scheduler: maxBatch must be a positive integer, got ${maxBatch}`);
    }
    const kvExhaustion = options.kvExhaustion ?? 'requeue';
    if (kvExhaustion !== 'requeue' && kvExhaustion !== 'evict') {
      throw new InvalidArgumentError(`Scheduler: kvExhaustion must be 'requeue' or 'evict', got ${String(kvExhaustion)}`);
    }
    const { vocabSize, maxPositions } = options.limits;
    if (!Number.isSafeInteger(vocabSize) || vocabSize < 1 || !Number.isSafeInteger(maxPositions) || maxPositions < 1) {
      throw new InvalidArgumentError(`Scheduler: limits must be positive integers, got vocabSize ${vocabSize}, maxPositions ${maxPositions}`);
    }
    const fairness = options.fairness ?? 'fcfs';
    if (!FAIRNESS_POLICIES.includes(fairness)) {
      throw new InvalidArgumentError(`Scheduler: fairness must be one of ${FAIRNESS_POLICIES.join(', ')}, got ${String(fairness)}`);
    }
    if (fairness === 'vtc' && policy !== 'punica') {
      throw new InvalidArgumentError(`Scheduler: fairness 'vtc' chooses whom to admit each step, which only the 'punica' policy does (got policy '${policy}')`);
    }
    const prefixCache = options.prefixCache ?? false;
    if (prefixCache && policy === 'static') {
      throw new InvalidArgumentError(`Scheduler: prefixCache does not combine with the 'static' policy (its wasted rows rewrite cached positions)`);
    }
    this.policy = policy;
    this.maxBatch = maxBatch;
    this.prefixCache = prefixCache;
    this.fairness = fairness;
    this.vtc = fairness === 'vtc' ? new VirtualTokenCounter(options.vtcWeights) : null;
    this.kvExhaustion = kvExhaustion;
    this.pages = options.pages;
    this.limits = { vocabSize, maxPositions };
    this.adapters = options.adapters;
    this.clock = options.clock ?? systemClock;
    this.onEvent = options.onEvent ?? (() => {});
    this.wakeHook = options.wake;
  }

  // ─── requests in and out ──────────────────────────────────────────────────────────────────────────────────

  /**
   * Throws RequestValidationError, changing nothing, for what `submit` would refuse: a duplicate id, an empty
   * prompt, tokens outside the vocabulary, maxTokens < 1, a prompt + maxTokens past the model's positions, a
   * request the whole KV cache could not hold, or generated tokens that leave nothing to generate.
   */
  check(request: BatcherRequest): void {
    this.validate(request);
  }

  /**
   * Queues a request; it joins a step once admitted (never the step in flight). Throws RequestValidationError,
   * changing nothing (see {@link check}). Sampling parameters and stop strings are the runner's to check.
   */
  submit(request: BatcherRequest): void {
    const state = this.validate(request);
    this.live.set(state.id, state);
    this.queue.push(state);
    this.vtc?.arrive(state.tenant);
    this.counters.submitted++;
    this.startAdapterLoads();
    this.wake();
  }

  /**
   * Cancels a queued or running request: its KV pages are freed at once (at the end of the step when called
   * while a step is in flight, e.g. from an event handler) and a 'finish' event with reason 'cancelled' and the
   * tokens generated so far follows. False when no queued or running request has this id.
   */
  cancel(id: string): boolean {
    const state = this.live.get(id);
    if (!state) return false;
    if (this.inStep) {
      if (!state.cancelRequested) {
        state.cancelRequested = true;
        this.deferredCancels.push(state);
      }
      return true;
    }
    this.applyCancel(state);
    this.wake();
    return true;
  }

  /** True while a plan is out (between plan() and complete()). */
  get stepInFlight(): boolean {
    return this.inFlight !== null;
  }

  // ─── the step ──────────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Plans the next step: preemptions (their events are emitted now), admissions, the rows and segments, the KV
   * pages reserved. Null when nothing can run now (idle, or every queued request waits). A non-null plan must be
   * handed back to {@link complete} before the next plan.
   */
  plan(): StepPlan | null {
    if (this.inStep) throw new BatcherStateError('Scheduler: plan() was called while a step is in flight (from an event handler, or before complete())');
    this.inStep = true;
    let planned: StepPlan | null = null;
    try {
      planned = this.makePlan();
      return planned;
    } finally {
      if (planned === null) this.endStep();
    }
  }

  private makePlan(): StepPlan | null {
    const t0 = this.clock.now();
    this.startAdapterLoads();
    const preempted = this.makeRoomForDecodes();
    if (preempted.length > 0) this.startAdapterLoads();
    const admitted = this.admit(this.pages.freePages - this.decodeGrowth());
    if (this.running.length === 0) return null;

    // Prefills first; then the decodes grouped by adapter (the working set is sorted by adapter; the group of the
    // first prefill's adapter goes first, so the prefill and its adapter's decodes share one segment); a static
    // batch's finished members re-feed their last token.
    const prefills = new Set(admitted);
    const lead = admitted[0]?.adapter;
    const decoding = this.running.filter((s) => !prefills.has(s));
    const ordered =
      lead === undefined ? decoding : [...decoding.filter((s) => s.adapter === lead), ...decoding.filter((s) => s.adapter !== lead)];
    const order = [...admitted, ...ordered];
    const pages = this.pages;
    const sequences: PlannedSequence[] = [];
    const segments: StepSegment[] = [];
    const reserved: KvReservation[] = [];
    const byId = new Map<string, RequestState>();
    let rows = 0;
    for (const s of order) {
      byId.set(s.id, s);
      let tokens: number[];
      let position: number;
      let kind: PlannedSequence['kind'];
      let added = 0;
      if (prefills.has(s)) {
        const input = s.prefillTokens!;
        pages.addSequence(s.seqId);
        position = this.attachCachedPrefix(s);
        tokens = position === 0 ? input : input.slice(position);
        kind = 'prefill';
        added = pages.reserve(s.seqId, input.length);
      } else if (s.phase === 'occupying') {
        // The row recomputes its last position (same token, same slot): a real decode that grows nothing.
        tokens = [s.lastFed];
        position = pages.length(s.seqId) - 1;
        kind = 'wasted';
        pages.commit(s.seqId, position);
      } else {
        tokens = [s.nextToken];
        position = pages.length(s.seqId);
        kind = 'decode';
        added = pages.reserve(s.seqId, position + 1);
      }
      if (added > 0) {
        const held = pages.pages(s.seqId);
        reserved.push({ seqId: s.seqId, length: position + tokens.length, pages: held.slice(held.length - added) });
      }
      sequences.push({ requestId: s.id, seqId: s.seqId, adapter: s.adapter, kind, tokens, position });
      const last = segments[segments.length - 1];
      if (last && last.key === s.adapter) last.count += tokens.length;
      else segments.push({ key: s.adapter, start: rows, count: tokens.length });
      rows += tokens.length;
    }
    const released = this.released;
    this.released = [];
    this.counters.layoutBuilds++;
    const plan: StepPlan = { step: this.counters.steps + 1, sequences, segments, rows, reserved, released };
    this.inFlight = { plan, t0, order, byId, prefills, preempted };
    return plan;
  }

  /**
   * Takes back what the runner did with the plan: tokens are streamed ('token' events), finished requests leave
   * ('finish'), failed ones too ('error'). Returns the step's report, or null when no forward ran (every row
   * failed before it).
   */
  complete(outcome: StepOutcome): StepReport | null {
    const flight = this.inFlight;
    if (!flight) throw new BatcherStateError('Scheduler: complete() without a plan in flight');
    this.inFlight = null;
    try {
      return this.applyOutcome(flight, outcome);
    } finally {
      this.endStep();
    }
  }

  private applyOutcome(flight: InFlight, outcome: StepOutcome): StepReport | null {
    const { plan, order, byId, prefills } = flight;
    const excluded = new Set(outcome.excluded);
    const failedIds = new Set<string>();
    for (const r of outcome.results) if (r.kind === 'failed') failedIds.add(r.requestId);
    // The KV positions the step wrote (an engine forward has committed them already; a simulated one has not).
    const pages = this.pages;
    for (const p of plan.sequences) {
      if (failedIds.has(p.requestId) || !pages.hasSequence(p.seqId)) continue;
      const end = p.position + p.tokens.length;
      if (pages.length(p.seqId) !== end) pages.commit(p.seqId, end);
      if (this.prefixCache && p.kind !== 'wasted') this.publishFullPages(byId.get(p.requestId)!, end);
    }

    const finished: string[] = [];
    const failed: string[] = [];
    for (const r of outcome.results) {
      const s = byId.get(r.requestId);
      if (!s) continue;
      if (r.kind === 'failed') {
        if (s.phase === 'running') failed.push(s.id);
        this.fail(s, r.error);
        continue;
      }
      if (s.phase !== 'running') continue;
      s.lastFed = prefills.has(s) ? s.prefillTokens![s.prefillTokens!.length - 1]! : s.nextToken;
      s.prefillTokens = null;
      s.nextToken = r.token;
      s.generated.push(r.token);
      this.counters.tokensGenerated++;
      this.vtc?.chargeOutput(s.tenant, 1);
      this.emit(s, r.logprobs ? { kind: 'token', id: s.id, token: r.token, text: r.text, logprobs: r.logprobs } : { kind: 'token', id: s.id, token: r.token, text: r.text });
      if (r.finish !== null) {
        finished.push(s.id);
        this.finish(s, r.finish);
      }
    }
    this.endStaticBatchIfDone();
    if (!outcome.ran) return null;

    const ran = order.filter((s) => !excluded.has(s.id));
    let decodes = 0;
    let wasted = 0;
    const admitted: string[] = [];
    for (const p of plan.sequences) {
      if (excluded.has(p.requestId)) continue;
      if (p.kind === 'prefill') admitted.push(p.requestId);
      else if (p.kind === 'decode') decodes++;
      else wasted++;
    }
    const batchSize = ran.length;
    this.counters.steps++;
    this.counters.rows += outcome.rows;
    this.counters.wastedRows += wasted;
    this.histogram.set(batchSize, (this.histogram.get(batchSize) ?? 0) + 1);
    return {
      step: this.counters.steps,
      rows: outcome.rows,
      prefills: admitted.length,
      decodes,
      wastedRows: wasted,
      batchSize,
      segments: outcome.segments,
      admitted,
      finished,
      preempted: [...flight.preempted],
      failed,
      durationMs: this.clock.now() - flight.t0,
    };
  }

  private endStep(): void {
    this.inStep = false;
    const pending = this.deferredCancels.splice(0);
    for (const s of pending) this.applyCancel(s);
    // Admissions, finishes and cancels moved the horizon: load ahead for the requests that entered it.
    this.startAdapterLoads();
    if (pending.length > 0) this.wake();
  }

  /** Pages the running decodes need to grow by one token each (a static batch's wasted rows need none). */
  private decodeGrowth(): number {
    const pages = this.pages;
    let needed = 0;
    for (const s of this.running) {
      if (s.phase !== 'running') continue;
      needed += Math.max(0, pages.pagesForLength(pages.length(s.seqId) + 1) - pages.pages(s.seqId).length);
    }
    return needed;
  }

  /** Preempts the newest running request until the decodes' growth fits the free pages. */
  private makeRoomForDecodes(): string[] {
    const preempted: string[] = [];
    while (this.decodeGrowth() > this.pages.freePages) {
      let victim: RequestState | undefined;
      for (const s of this.running) if (s.phase === 'running' && (!victim || s.admission > victim.admission)) victim = s;
      if (!victim) break;
      this.counters.preemptions++;
      preempted.push(victim.id);
      if (this.kvExhaustion === 'evict') {
        this.remove(victim);
        this.emit(victim, { kind: 'evicted', id: victim.id, generated: [...victim.generated] });
        continue;
      }
      this.releaseKv(victim);
      this.running = this.running.filter((s) => s !== victim);
      victim.phase = 'queued';
      this.queue.unshift(victim);
    }
    if (preempted.length > 0) this.endStaticBatchIfDone();
    return preempted;
  }

  // ─── admission policies ────────────────────────────────────────────────────────────────────────────────────

  private admit(freePages: number): RequestState[] {
    const rowsFree = this.maxBatch - this.running.length;
    if (rowsFree <= 0) return [];
    const pages = this.pages;
    switch (this.policy) {
      case 'punica': {
        // The first queued request whose adapter is ready; requests still loading are passed over (they wait,
        // nobody waits for them). FCFS among the ready ones: if that one does not fit the KV, nobody is admitted.
        // With VTC, the ready request of the tenant with the least service first.
        const candidate = this.admissionOrder().find((s) => this.adapterReady(s.adapter));
        if (!candidate || pages.pagesForLength(this.inputLength(candidate)) > freePages) return [];
        return [this.admitOne(candidate)];
      }
      case 'same-adapter': {
        // Head of line only, and only the running set's adapter (an empty set takes anything).
        const head = this.queue[0];
        if (!head || !this.adapterReady(head.adapter)) return [];
        if (this.running.length > 0 && this.running[0]!.adapter !== head.adapter) return [];
        if (pages.pagesForLength(this.inputLength(head)) > freePages) return [];
        return [this.admitOne(head)];
      }
      case 'static': {
        // A new batch only when the previous one is over: the maximal run of consecutive same-adapter requests
        // from the head that fits the batch cap and the KV.
        if (this.running.length > 0) return [];
        const head = this.queue[0];
        if (!head || !this.adapterReady(head.adapter)) return [];
        const batch: RequestState[] = [];
        let free = freePages;
        for (const s of this.queue) {
          if (s.adapter !== head.adapter || batch.length >= rowsFree) break;
          const need = pages.pagesForLength(this.inputLength(s));
          if (need > free) break;
          free -= need;
          batch.push(s);
        }
        return batch.map((s) => this.admitOne(s));
      }
    }
  }

  /** Tokens a (re-)admission prefills: the prompt plus whatever was generated before a preemption. */
  private inputLength(s: RequestState): number {
    return s.prompt.length + s.generated.length;
  }

  private admitOne(s: RequestState): RequestState {
    this.queue.splice(this.queue.indexOf(s), 1);
    s.phase = 'running';
    s.admission = ++this.admissionCounter;
    s.seqId = `batcher${this.instance}:${s.admission}:${s.id}`;
    if (this.adapters && s.adapter !== null) {
      this.adapters.pin(s.adapter);
      s.pinned = true;
    }
    this.unreserve(s);
    s.prefillTokens = [...s.prompt, ...s.generated];
    if (s.generated.length > 0) this.counters.recomputedTokens += s.prefillTokens.length;
    else {
      this.counters.promptTokens += s.prompt.length;
      // A re-admission's recompute is the scheduler's doing, not the tenant's: VTC charges the prompt once.
      this.vtc?.chargeInput(s.tenant, s.prompt.length);
    }
    let at = this.running.length;
    while (at > 0 && byAdapterThenAdmission(this.running[at - 1]!, s) > 0) at--;
    this.running.splice(at, 0, s);
    return s;
  }

  /** Queue order for admission and load-ahead: FCFS, or with VTC by tenant counter (FCFS within a tenant and on ties). */
  private admissionOrder(): readonly RequestState[] {
    const vtc = this.vtc;
    if (!vtc || this.queue.length < 2) return this.queue;
    const counter = new Map<string, number>();
    for (const s of this.queue) if (!counter.has(s.tenant)) counter.set(s.tenant, vtc.counter(s.tenant));
    // Array.prototype.sort is stable: queue order survives within a counter.
    return [...this.queue].sort((a, b) => counter.get(a.tenant)! - counter.get(b.tenant)!);
  }

  // ─── prefix cache ──────────────────────────────────────────────────────────────────────────────────────────

  /**
   * At a prefill: attaches the cached pages of the longest published prefix of the input (at most up to its
   * second-to-last token: the last one is always computed, it yields the logits to sample from). Returns the
   * position the forward starts at (0 without a hit).
   */
  private attachCachedPrefix(s: RequestState): number {
    s.publishedPages = 0;
    if (!this.prefixCache) return 0;
    const input = s.prefillTokens!;
    const identity = s.adapter === null ? null : (this.adapters?.identity?.(s.adapter) ?? s.adapter);
    if (s.prefixKeys === null || s.prefixKeys.identity !== identity) s.prefixKeys = new PrefixKeyChain(identity, this.pages.pageSize);
    this.counters.prefixLookupTokens += input.length;
    if (!s.prefixReuse) return 0;
    const keys = s.prefixKeys.upTo(Math.floor((input.length - 1) / this.pages.pageSize), (p) => input[p]!);
    const attached = this.pages.attachPrefix(s.seqId, keys);
    s.publishedPages = attached;
    this.counters.prefixHitTokens += attached * this.pages.pageSize;
    return attached * this.pages.pageSize;
  }

  /** After a forward wrote the sequence's K/V up to `length`: publishes its pages that became full. */
  private publishFullPages(s: RequestState, length: number): void {
    const chain = s.prefixKeys;
    if (!chain) return;
    const full = Math.floor(length / this.pages.pageSize);
    if (full <= s.publishedPages) return;
    const promptLength = s.prompt.length;
    const keys = chain.upTo(full, (p) => (p < promptLength ? s.prompt[p]! : s.generated[p - promptLength]!));
    for (let i = s.publishedPages; i < full; i++) this.pages.publishPage(s.seqId, i, keys[i]!);
    s.publishedPages = full;
  }

  private adapterReady(adapter: string | null): boolean {
    return adapter === null || !this.adapters || this.adapters.isResident(adapter);
  }

  // ─── adapters ──────────────────────────────────────────────────────────────────────────────────────────────

  /**
   * The queued requests that could be admitted within the next few steps, in queue order: as many as the batch
   * has free rows (at least the head of the queue, so its load overlaps the running decodes), while their prefill
   * pages fit the free KV (the head always counts). Loading further ahead would only churn a bounded adapter cache:
   * adapters loaded for requests that wait longer would evict each other before anyone pins them (issue 19).
   */
  private loadHorizon(): Set<RequestState> {
    const horizon = new Set<RequestState>();
    const head = this.queue[0];
    // The head-only policies admit nobody but the head: while its adapter is not resident, the adapters reserved
    // for requests behind it could hold the room its load waits for, so only the head holds a reservation.
    if (head && this.policy !== 'punica' && !this.adapterReady(head.adapter)) return new Set([head]);
    const rows = Math.max(1, this.maxBatch - this.running.length);
    const pages = this.pages;
    let free = pages.freePages - this.decodeGrowth();
    for (const s of this.admissionOrder()) {
      if (horizon.size >= rows) break;
      const need = pages.pagesForLength(this.inputLength(s));
      if (horizon.size > 0 && need > free) break;
      free -= need;
      horizon.add(s);
    }
    return horizon;
  }

  /**
   * Keeps the adapters of the requests within the load horizon reserved (a soft pin, so loads ahead cannot evict
   * each other) and starts a load for each that is not resident, one load per adapter at a time; a queued request
   * that left the horizon gives its reservation back.
   */
  private startAdapterLoads(): void {
    const adapters = this.adapters;
    if (!adapters) return;
    const horizon = this.loadHorizon();
    for (const s of this.reservations) if (!horizon.has(s)) this.unreserve(s);
    for (const s of horizon) {
      const name = s.adapter;
      if (name === null) continue;
      if (!this.reservations.has(s) && adapters.reserve) {
        try {
          adapters.reserve(name);
          this.reservations.add(s);
        } catch {
          // An unknown adapter: its load below rejects and fails the request.
        }
      }
      if (this.loads.has(name) || adapters.isResident(name)) continue;
      let load: Promise<unknown>;
      try {
        load = adapters.ensureResident(name);
      } catch (err) {
        load = Promise.reject(err);
      }
      this.counters.adapterLoads++;
      this.loads.set(
        name,
        Promise.resolve(load).then(
          () => {
            this.loads.delete(name);
            this.wake();
          },
          (err: unknown) => {
            this.loads.delete(name);
            this.failAdapterWaiters(name, err);
            this.wake();
          },
        ),
      );
    }
  }

  private unreserve(s: RequestState): void {
    if (!this.reservations.delete(s)) return;
    try {
      this.adapters?.unreserve?.(s.adapter!);
    } catch {
      // The residency forgot the adapter (unregistered): nothing is held.
    }
  }

  /**
   * A load was rejected: every queued request waiting for that adapter fails with AdapterLoadError (the server's
   * adapter is unusable right now: a retryable 503); nothing else changes. A refusal of capacity (the adapter is
   * larger than the whole device budget, which no retry changes) reaches the requests as it is: a 507.
   */
  private failAdapterWaiters(name: string, cause: unknown): void {
    const message = cause instanceof Error ? cause.message : String(cause);
    const final = cause instanceof TesseraError && cause.kind === 'capacity';
    for (const s of this.queue.filter((q) => q.adapter === name)) {
      this.fail(s, final ? (cause as TesseraError) : new AdapterLoadError(name, `request ${JSON.stringify(s.id)}: adapter ${JSON.stringify(name)} could not be loaded: ${message}`, { cause }));
    }
  }

  // ─── leaving ───────────────────────────────────────────────────────────────────────────────────────────────

  private releaseKv(s: RequestState): void {
    if (s.seqId !== '' && this.pages.hasSequence(s.seqId)) {
      this.pages.release(s.seqId);
      this.released.push(s.seqId);
    }
    s.seqId = '';
    this.unreserve(s);
    if (s.pinned) {
      s.pinned = false;
      this.adapters!.unpin(s.adapter!);
    }
  }

  /** Takes a request out of the queue or the working set and frees what it holds. */
  private remove(s: RequestState): void {
    if (s.phase === 'queued') this.queue.splice(this.queue.indexOf(s), 1);
    else if (s.phase === 'running' || s.phase === 'occupying') this.running = this.running.filter((r) => r !== s);
    this.releaseKv(s);
    if (s.phase !== 'done') this.vtc?.leave(s.tenant);
    s.phase = 'done';
    this.live.delete(s.id);
  }

  private finish(s: RequestState, reason: StopReason): void {
    this.counters.finished++;
    if (this.policy === 'static') {
      // Inseparable batch: the row and its pages stay until the longest member is done.
      s.phase = 'occupying';
      this.live.delete(s.id);
    } else {
      this.remove(s);
    }
    this.emitFinish(s, reason);
  }

  private fail(s: RequestState, error: Error): void {
    const wasLive = s.phase === 'queued' || s.phase === 'running';
    this.remove(s);
    if (!wasLive) return;
    this.counters.failed++;
    this.emit(s, { kind: 'error', id: s.id, error });
  }

  private applyCancel(s: RequestState): void {
    if (s.phase !== 'queued' && s.phase !== 'running') return;
    this.remove(s);
    this.counters.cancelled++;
    this.endStaticBatchIfDone();
    this.emitFinish(s, 'cancelled');
  }

  /** Static policy: once every member has finished, the batch ends and all its rows and pages are released. */
  private endStaticBatchIfDone(): void {
    if (this.policy !== 'static' || this.running.length === 0) return;
    if (!this.running.every((s) => s.phase === 'occupying')) return;
    for (const s of this.running) {
      this.releaseKv(s);
      s.phase = 'done';
    }
    this.running = [];
  }

  private emitFinish(s: RequestState, finishReason: BatcherFinishReason): void {
    const tokens = [...s.generated];
    this.emit(s, { kind: 'finish', id: s.id, finishReason, tokens, promptTokens: s.prompt.length, completionTokens: tokens.length });
  }

  /** Emits an event; a handler that throws is counted and its request cancelled (at the end of the step). */
  private emit(s: RequestState, event: SchedulerEvent): void {
    try {
      this.onEvent(event);
    } catch {
      this.counters.listenerErrors++;
      if (s.phase === 'queued' || s.phase === 'running') this.cancel(s.id);
    }
  }

  private wake(): void {
    this.wakeHook?.();
  }

  // ─── introspection ─────────────────────────────────────────────────────────────────────────────────────────

  /** Whether anything is queued or running (a host loop with no work may sleep until `wake`). */
  get hasWork(): boolean {
    return this.queue.length > 0 || this.running.length > 0;
  }

  stats(): SchedulerStats {
    const adapters = this.adapters;
    const pages = this.pages;
    return {
      policy: this.policy,
      maxBatch: this.maxBatch,
      ...this.counters,
      batchSizeHistogram: new Map([...this.histogram].sort((a, b) => a[0] - b[0])),
      running: this.running.filter((s) => s.phase === 'running').length,
      occupying: this.running.filter((s) => s.phase === 'occupying').length,
      queued: this.queue.length,
      waitingForAdapter: adapters ? this.queue.filter((s) => s.adapter !== null && !adapters.isResident(s.adapter)).length : 0,
      queuedInputPages: this.queue.reduce((sum, s) => sum + pages.pagesForLength(this.inputLength(s)), 0),
      kvPagesUsed: pages.usedPages,
      kvPagesFree: pages.freePages,
      kvPageTokens: pages.pageSize,
      prefixCachedPages: pages.stats().cachedPages,
      prefixEvictions: pages.prefixEvictions,
    };
  }

  // ─── validation ────────────────────────────────────────────────────────────────────────────────────────────

  private validate(request: BatcherRequest): RequestState {
    const id: unknown = request?.id;
    const bad = (code: ConstructorParameters<typeof RequestValidationError>[0], message: string) =>
      new RequestValidationError(code, id, `request ${typeof id === 'string' ? JSON.stringify(id) : String(id)}: ${message}`);
    if (typeof id !== 'string' || id.length === 0) throw bad('TESSERA_INVALID_REQUEST', 'id must be a non-empty string');
    if (this.live.has(id)) throw bad('TESSERA_DUPLICATE_REQUEST', 'another queued or running request has this id');
    const { adapter, prompt, maxTokens } = request;
    if (adapter !== null && (typeof adapter !== 'string' || adapter.length === 0)) {
      throw bad('TESSERA_INVALID_REQUEST', `adapter must be null (the base model) or a non-empty string, got ${JSON.stringify(adapter)}`);
    }
    if (!prompt || typeof prompt.length !== 'number') throw bad('TESSERA_INVALID_REQUEST', 'prompt must be an array of token ids');
    if (prompt.length === 0) throw bad('TESSERA_EMPTY_PROMPT', 'the prompt is empty');
    const { vocabSize, maxPositions } = this.limits;
    for (let i = 0; i < prompt.length; i++) {
      const t = prompt[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
        throw bad('TESSERA_TOKEN_OUT_OF_VOCAB', `prompt token ${i} is ${t}, outside the vocabulary [0, ${vocabSize})`);
      }
    }
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) throw bad('TESSERA_INVALID_MAX_TOKENS', `maxTokens must be an integer >= 1, got ${maxTokens}`);
    if (prompt.length + maxTokens > maxPositions) {
      throw bad('TESSERA_CONTEXT_TOO_LONG', `prompt (${prompt.length}) + maxTokens (${maxTokens}) exceeds the model's ${maxPositions} positions`);
    }
    // The last sampled token is never fed back, so the KV holds at most prompt + maxTokens - 1 tokens.
    const pages = this.pages.pagesForLength(prompt.length + maxTokens - 1);
    if (pages > this.pages.numPages) {
      throw bad('TESSERA_KV_TOO_SMALL', `it needs up to ${pages} KV pages, more than the cache's ${this.pages.numPages}`);
    }
    const generated = request.generated ?? [];
    if (!Array.isArray(generated) && !ArrayBuffer.isView(generated)) throw bad('TESSERA_INVALID_REQUEST', 'generated must be an array of token ids');
    if (generated.length >= maxTokens) {
      throw bad('TESSERA_INVALID_MAX_TOKENS', `it already generated ${generated.length} of its ${maxTokens} tokens; nothing is left to generate`);
    }
    for (let i = 0; i < generated.length; i++) {
      const t = generated[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
        throw bad('TESSERA_TOKEN_OUT_OF_VOCAB', `generated token ${i} is ${t}, outside the vocabulary [0, ${vocabSize})`);
      }
    }
    const tenant = request.tenant ?? adapter ?? '';
    if (typeof tenant !== 'string') throw bad('TESSERA_INVALID_REQUEST', `tenant must be a string, got ${JSON.stringify(tenant)}`);
    return {
      id,
      adapter,
      tenant,
      prefixReuse: request.sampling?.promptLogprobs === undefined,
      prefixKeys: null,
      publishedPages: 0,
      prompt: Array.from(prompt),
      maxTokens,
      generated: Array.from(generated),
      phase: 'queued',
      seqId: '',
      admission: 0,
      pinned: false,
      prefillTokens: null,
      nextToken: -1,
      lastFed: -1,
      cancelRequested: false,
    };
  }
}
