/**
 * ContinuousBatcher: the per-accelerator step loop of Punica (§5, pseudocode §9.6) and the two baseline
 * batching policies of its text-generation evaluation (§9.9), on one DecoderModel and one PagedKvCache.
 *
 * One step = plan, one model forward, sample, deliver:
 *   1. start loads for queued requests whose adapter is not resident (they wait; nothing else does);
 *   2. price the running decodes' KV growth; while it does not fit, preempt the newest running request (its
 *      pages are freed, it goes back to the head of the queue with its generated tokens, and is later re-admitted
 *      by prefilling prompt + generated: recompute, as Punica's migration does);
 *   3. admit by policy (a prefill needs a resident adapter, a free batch row and KV pages for its whole input);
 *   4. rows: the prefills first, then the decodes grouped by adapter; ONE SegmentLayout for the whole forward,
 *      handed to every hook site of every layer;
 *   5. sample each sequence's next token (its own seeded sampler), run the StopChecker, stream the token; a
 *      finished request leaves at once and frees its KV pages (the static policy keeps its row until the batch
 *      ends: that row's decode is computed and thrown away, counted as wasted).
 * Nothing here reads the wall clock except through the injected Clock.
 */
import { InvalidArgumentError } from '@tessera/native';
import {
  type DecoderSequence,
  type ModelDelta,
  type PagedKvCache,
  type Sampler,
  SegmentLayout,
  StopChecker,
  createSampler,
  pagesForLength,
  UnknownAdapterError,
} from '@tessera/engine';
import { type Clock, systemClock } from './clock.js';
import { AdapterLoadError, BatcherStateError, RequestValidationError } from './errors.js';
import type {
  AdapterResidency,
  BatchPolicy,
  BatcherModel,
  BatcherFinishReason,
  BatcherRequest,
  BatcherStats,
  ContinuousBatcherOptions,
  FinishedRequest,
  KvExhaustionPolicy,
  RequestListener,
  StepReport,
} from './types.js';

export const DEFAULT_MAX_BATCH = 32;
export const BATCH_POLICIES: readonly BatchPolicy[] = ['punica', 'same-adapter', 'static'];

/**
 * queued: waiting for admission (maybe for its adapter); running: admitted, has KV; occupying: static policy only,
 * finished but still holding its row and pages until its batch ends; done: gone (finished, cancelled or failed).
 */
type Phase = 'queued' | 'running' | 'occupying' | 'done';

interface RequestState {
  readonly id: string;
  readonly adapter: string | null;
  readonly prompt: readonly number[];
  readonly listener: RequestListener;
  readonly sampler: Sampler;
  readonly stop: StopChecker;
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

interface Counters {
  steps: number;
  rows: number;
  tokensGenerated: number;
  promptTokens: number;
  recomputedTokens: number;
  wastedRows: number;
  preemptions: number;
  layoutBuilds: number;
  adapterLoads: number;
  submitted: number;
  finished: number;
  cancelled: number;
  failed: number;
  listenerErrors: number;
}

/** A delta that can resolve a layout before the forward (SgmvLoraDelta has one). */
type PreparableDelta = ModelDelta & { prepare?: (layout: SegmentLayout) => void };

let nextInstance = 0;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Working-set order: base model first, then adapters by name; within an adapter, oldest admission first. */
function byAdapterThenAdmission(a: RequestState, b: RequestState): number {
  if (a.adapter !== b.adapter) {
    if (a.adapter === null) return -1;
    if (b.adapter === null) return 1;
    return a.adapter < b.adapter ? -1 : 1;
  }
  return a.admission - b.admission;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

export class ContinuousBatcher {
  readonly policy: BatchPolicy;
  readonly maxBatch: number;
  readonly kvExhaustion: KvExhaustionPolicy;
  private readonly model: BatcherModel;
  private readonly cache: PagedKvCache;
  private readonly deltas: readonly ModelDelta[];
  private readonly adapters: AdapterResidency | undefined;
  private readonly clock: Clock;
  private readonly decode: ((ids: number[]) => string) | undefined;
  private readonly instance = nextInstance++;

  /** FCFS; preempted requests go back to the front. */
  private readonly queue: RequestState[] = [];
  /** The working set, kept sorted by adapter (static: finished members still occupying rows too). */
  private running: RequestState[] = [];
  /** Queued and running requests by id (what a duplicate id collides with). */
  private readonly live = new Map<string, RequestState>();
  /** Adapter loads in flight, one per adapter. */
  private readonly loads = new Map<string, Promise<void>>();
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
  };
  private inStep = false;
  private readonly deferredCancels: RequestState[] = [];
  private looping = false;
  private wakeUp: (() => void) | null = null;

  constructor(options: ContinuousBatcherOptions) {
    const { model, cache } = options;
    const policy = options.policy ?? 'punica';
    if (!BATCH_POLICIES.includes(policy)) {
      throw new InvalidArgumentError(`ContinuousBatcher: policy must be one of ${BATCH_POLICIES.join(', ')}, got ${String(policy)}`);
    }
    const maxBatch = options.maxBatch ?? DEFAULT_MAX_BATCH;
    if (!Number.isSafeInteger(maxBatch) || maxBatch < 1) {
      throw new InvalidArgumentError(`ContinuousBatcher: maxBatch must be a positive integer, got ${maxBatch}`);
    }
    const c = model.config;
    if (cache.numLayers !== c.numLayers || cache.numKvHeads !== c.numKvHeads || cache.headDim !== c.headDim) {
      throw new InvalidArgumentError(
        `ContinuousBatcher: the KV cache (${cache.numLayers} layers, ${cache.numKvHeads} kv heads of ${cache.headDim}) does not fit the model ` +
          `(${c.numLayers} layers, ${c.numKvHeads} kv heads of ${c.headDim})`,
      );
    }
    this.model = model;
    this.cache = cache;
    this.deltas = options.deltas ?? [];
    this.adapters = options.adapters;
    this.policy = policy;
    this.maxBatch = maxBatch;
    this.clock = options.clock ?? systemClock;
    this.decode = options.decode;
    const kvExhaustion = options.kvExhaustion ?? 'requeue';
    if (kvExhaustion !== 'requeue' && kvExhaustion !== 'evict') {
      throw new InvalidArgumentError(`ContinuousBatcher: kvExhaustion must be 'requeue' or 'evict', got ${String(kvExhaustion)}`);
    }
    this.kvExhaustion = kvExhaustion;
  }

  // ─── requests in and out ──────────────────────────────────────────────────────────────────────────────────

  /**
   * Queues a request; it joins a step once admitted (never the step in flight). Throws RequestValidationError,
   * changing nothing, for a duplicate id, an empty prompt, tokens outside the vocabulary, maxTokens < 1, a
   * prompt + maxTokens past the model's positions, a request the whole KV cache could not hold, bad sampling
   * parameters or stop strings.
   */
  submit(request: BatcherRequest, listener: RequestListener = {}): void {
    const state = this.validate(request, listener);
    this.live.set(state.id, state);
    this.queue.push(state);
    this.counters.submitted++;
    this.startAdapterLoads();
    this.wake();
  }

  /**
   * Cancels a queued or running request: its KV pages are freed at once (at the end of the step when called
   * from a listener inside a step) and its listener gets onFinish with finishReason 'cancelled' and the tokens
   * generated so far. False when no queued or running request has this id.
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

  // ─── the step ──────────────────────────────────────────────────────────────────────────────────────────────

  /** Runs one model forward over the working set; null when nothing can run now (idle, or waiting). */
  step(): StepReport | null {
    if (this.inStep) throw new BatcherStateError('ContinuousBatcher: step() was called from a listener of the step in flight');
    this.inStep = true;
    try {
      return this.runStep();
    } finally {
      this.inStep = false;
      this.applyDeferredCancels();
    }
  }

  private runStep(): StepReport | null {
    const t0 = this.clock.now();
    this.startAdapterLoads();
    const preempted = this.makeRoomForDecodes();
    const admitted = this.admit(this.cache.freePages - this.decodeGrowth());
    if (this.running.length === 0) return null;

    const finished: string[] = [];
    const failed: string[] = [];
    const prefillSet = new Set(admitted);
    let batch = this.buildBatch(admitted, prefillSet);
    // A delta that can resolve a layout ahead of the forward (SgmvLoraDelta.prepare) is asked first, so an
    // adapter it cannot serve fails before any KV room is reserved. An error naming one adapter's key fails that
    // adapter's requests only, and the batch is rebuilt without them.
    let problem = this.prepareDeltas(batch.layout);
    while (problem?.key != null) {
      const key = problem.key;
      batch.layout.dispose();
      for (const s of batch.order) {
        if (s.adapter !== key || s.phase !== 'running') continue;
        failed.push(s.id);
        this.fail(s, problem.error);
      }
      this.endStaticBatchIfDone();
      if (this.running.length === 0) return null;
      batch = this.buildBatch(admitted.filter((s) => s.phase === 'running'), prefillSet);
      problem = this.prepareDeltas(batch.layout);
    }
    const { order, sequences, layout, decodes, wasted } = batch;

    let logits: Float32Array | null = null;
    try {
      if (problem) throw problem.error;
      // A finished member of a static batch recomputes its last position (same token, same slot): the row
      // costs a real decode without growing its KV, and its result is discarded.
      for (const s of order) if (s.phase === 'occupying') this.cache.commit(s.seqId, this.cache.length(s.seqId) - 1);
      const out = this.model.forward(sequences, { cache: this.cache, deltas: this.deltas, layout, logits: 'last' });
      try {
        logits = out.logits!.toArray() as Float32Array;
      } finally {
        out.logits?.dispose();
      }
    } catch (err) {
      for (const s of order) {
        if (s.phase === 'running') failed.push(s.id);
        this.fail(s, asError(err));
      }
    } finally {
      layout.dispose();
    }

    if (logits) {
      const vocab = this.model.config.vocabSize;
      order.forEach((s, b) => {
        if (s.phase !== 'running') return;
        const isPrefill = prefillSet.has(s);
        s.lastFed = isPrefill ? s.prefillTokens![s.prefillTokens!.length - 1]! : s.nextToken;
        s.prefillTokens = null;
        let token: number;
        let textDelta: string;
        let reason: BatcherFinishReason | null;
        try {
          token = s.sampler.sample(logits!.subarray(b * vocab, (b + 1) * vocab));
          const pushed = s.stop.push(token);
          textDelta = pushed.text;
          reason = pushed.finished;
        } catch (err) {
          failed.push(s.id);
          this.fail(s, asError(err));
          return;
        }
        s.nextToken = token;
        this.counters.tokensGenerated++;
        this.notify(s, (l) => l.onToken?.(token, textDelta));
        if (reason !== null) {
          finished.push(s.id);
          this.finish(s, reason);
        }
      });
    }
    this.endStaticBatchIfDone();

    const rows = layout.rows;
    const batchSize = order.length;
    const prefilled = order.filter((s) => prefillSet.has(s)).map((s) => s.id);
    this.counters.steps++;
    this.counters.rows += rows;
    this.counters.wastedRows += wasted;
    this.histogram.set(batchSize, (this.histogram.get(batchSize) ?? 0) + 1);
    return {
      step: this.counters.steps,
      rows,
      prefills: prefilled.length,
      decodes,
      wastedRows: wasted,
      batchSize,
      segments: layout.segments,
      admitted: prefilled,
      finished,
      preempted,
      failed,
      durationMs: this.clock.now() - t0,
    };
  }

  /**
   * The forward's sequences and its one SegmentLayout: prefills first, then decodes grouped by adapter (the
   * working set is sorted by adapter; the group of the first prefill's adapter goes first, so the prefill and
   * its adapter's decodes share one segment); a static batch's finished members re-feed their last token.
   */
  private buildBatch(admitted: readonly RequestState[], prefillSet: ReadonlySet<RequestState>) {
    const lead = admitted[0]?.adapter;
    const decoding = this.running.filter((s) => !prefillSet.has(s));
    const ordered =
      lead === undefined ? decoding : [...decoding.filter((s) => s.adapter === lead), ...decoding.filter((s) => s.adapter !== lead)];
    const order = [...admitted, ...ordered];
    const sequences: DecoderSequence[] = [];
    const runs: { key: string | null; count: number }[] = [];
    let decodes = 0;
    let wasted = 0;
    for (const s of order) {
      let tokens: number[];
      if (prefillSet.has(s)) {
        tokens = s.prefillTokens!;
      } else if (s.phase === 'occupying') {
        tokens = [s.lastFed];
        wasted++;
      } else {
        tokens = [s.nextToken];
        decodes++;
      }
      sequences.push({ id: s.seqId, tokens, key: s.adapter });
      const last = runs[runs.length - 1];
      if (last && last.key === s.adapter) last.count += tokens.length;
      else runs.push({ key: s.adapter, count: tokens.length });
    }
    this.counters.layoutBuilds++;
    return { order, sequences, layout: SegmentLayout.fromCounts(runs), decodes, wasted };
  }

  /** Runs the deltas' optional prepare(layout); the first error, with the adapter key it names if any. */
  private prepareDeltas(layout: SegmentLayout): { key: string | null; error: Error } | null {
    for (const delta of this.deltas as readonly PreparableDelta[]) {
      if (typeof delta.prepare !== 'function') continue;
      try {
        delta.prepare(layout);
      } catch (err) {
        // An UnknownAdapterError names the one adapter at fault; any other error fails the whole step's batch.
        const key = err instanceof UnknownAdapterError ? err.adapter : null;
        const named = key !== null && layout.segments.some((g) => g.key === key);
        return { key: named ? key : null, error: asError(err) };
      }
    }
    return null;
  }

  /** Pages the running decodes need to grow by one token each (a static batch's wasted rows need none). */
  private decodeGrowth(): number {
    let pages = 0;
    for (const s of this.running) {
      if (s.phase !== 'running') continue;
      pages += Math.max(0, pagesForLength(this.cache.length(s.seqId) + 1) - this.cache.pages(s.seqId).length);
    }
    return pages;
  }

  /** Preempts the newest running request until the decodes' growth fits the free pages. */
  private makeRoomForDecodes(): string[] {
    const preempted: string[] = [];
    while (this.decodeGrowth() > this.cache.freePages) {
      let victim: RequestState | undefined;
      for (const s of this.running) if (s.phase === 'running' && (!victim || s.admission > victim.admission)) victim = s;
      if (!victim) break;
      this.counters.preemptions++;
      preempted.push(victim.id);
      if (this.kvExhaustion === 'evict') {
        this.remove(victim);
        const generated = [...victim.stop.tokenIds];
        this.notify(victim, (l) => l.onEvicted?.(generated));
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
    switch (this.policy) {
      case 'punica': {
        // The first queued request whose adapter is ready; requests still loading are passed over (they wait,
        // nobody waits for them). FCFS among the ready ones: if that one does not fit the KV, nobody is admitted.
        const candidate = this.queue.find((s) => this.adapterReady(s.adapter));
        if (!candidate || pagesForLength(this.inputLength(candidate)) > freePages) return [];
        return [this.admitOne(candidate)];
      }
      case 'same-adapter': {
        // Head of line only, and only the running set's adapter (an empty set takes anything).
        const head = this.queue[0];
        if (!head || !this.adapterReady(head.adapter)) return [];
        if (this.running.length > 0 && this.running[0]!.adapter !== head.adapter) return [];
        if (pagesForLength(this.inputLength(head)) > freePages) return [];
        return [this.admitOne(head)];
      }
      case 'static': {
        // A new batch only when the previous one is over: the maximal run of consecutive same-adapter requests
        // from the head that fits the batch cap and the KV.
        if (this.running.length > 0) return [];
        const head = this.queue[0];
        if (!head || !this.adapterReady(head.adapter)) return [];
        const batch: RequestState[] = [];
        let pages = freePages;
        for (const s of this.queue) {
          if (s.adapter !== head.adapter || batch.length >= rowsFree) break;
          const need = pagesForLength(this.inputLength(s));
          if (need > pages) break;
          pages -= need;
          batch.push(s);
        }
        return batch.map((s) => this.admitOne(s));
      }
    }
  }

  /** Tokens a (re-)admission prefills: the prompt plus whatever was generated before a preemption. */
  private inputLength(s: RequestState): number {
    return s.prompt.length + s.stop.tokenIds.length;
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
    const generated = s.stop.tokenIds;
    s.prefillTokens = [...s.prompt, ...generated];
    if (generated.length > 0) this.counters.recomputedTokens += s.prefillTokens.length;
    else this.counters.promptTokens += s.prompt.length;
    let at = this.running.length;
    while (at > 0 && byAdapterThenAdmission(this.running[at - 1]!, s) > 0) at--;
    this.running.splice(at, 0, s);
    return s;
  }

  private adapterReady(adapter: string | null): boolean {
    return adapter === null || !this.adapters || this.adapters.isResident(adapter);
  }

  // ─── adapters ──────────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Starts a load for every non-resident adapter among the next maxBatch queued requests (the ones that could
   * join soon; loading further ahead would only churn a bounded adapter cache). One load per adapter at a time.
   */
  private startAdapterLoads(): void {
    const adapters = this.adapters;
    if (!adapters) return;
    const ahead = Math.min(this.queue.length, this.maxBatch);
    for (let i = 0; i < ahead; i++) {
      const name = this.queue[i]!.adapter;
      if (name === null || this.loads.has(name) || adapters.isResident(name)) continue;
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

  /** A load was rejected: every queued request waiting for that adapter fails; nothing else changes. */
  private failAdapterWaiters(name: string, cause: unknown): void {
    const message = cause instanceof Error ? cause.message : String(cause);
    for (const s of this.queue.filter((q) => q.adapter === name)) {
      this.fail(s, new AdapterLoadError(name, `request ${JSON.stringify(s.id)}: adapter ${JSON.stringify(name)} could not be loaded: ${message}`, { cause }));
    }
  }

  // ─── leaving ───────────────────────────────────────────────────────────────────────────────────────────────

  private releaseKv(s: RequestState): void {
    if (s.seqId !== '' && this.cache.hasSequence(s.seqId)) this.cache.release(s.seqId);
    s.seqId = '';
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
    s.phase = 'done';
    this.live.delete(s.id);
  }

  private finish(s: RequestState, reason: BatcherFinishReason): void {
    this.counters.finished++;
    if (this.policy === 'static') {
      // Inseparable batch: the row and its pages stay until the longest member is done.
      s.phase = 'occupying';
      this.live.delete(s.id);
    } else {
      this.remove(s);
    }
    const result = this.result(s, reason);
    this.notify(s, (l) => l.onFinish?.(result));
  }

  private fail(s: RequestState, err: Error): void {
    const wasLive = s.phase === 'queued' || s.phase === 'running';
    this.remove(s);
    if (!wasLive) return;
    this.counters.failed++;
    this.notify(s, (l) => l.onError?.(err));
  }

  private applyCancel(s: RequestState): void {
    if (s.phase !== 'queued' && s.phase !== 'running') return;
    this.remove(s);
    this.counters.cancelled++;
    this.endStaticBatchIfDone();
    const result = this.result(s, 'cancelled');
    this.notify(s, (l) => l.onFinish?.(result));
  }

  private applyDeferredCancels(): void {
    const pending = this.deferredCancels.splice(0);
    for (const s of pending) this.applyCancel(s);
    if (pending.length > 0) this.wake();
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

  private result(s: RequestState, finishReason: BatcherFinishReason): FinishedRequest {
    const tokens = [...s.stop.tokenIds];
    return { id: s.id, tokens, text: s.stop.fullText, finishReason, promptTokens: s.prompt.length, completionTokens: tokens.length };
  }

  /** Calls a listener; one that throws is counted and its request cancelled (at the end of the step). */
  private notify(s: RequestState, call: (listener: RequestListener) => void): void {
    try {
      call(s.listener);
    } catch {
      this.counters.listenerErrors++;
      if (s.phase === 'queued' || s.phase === 'running') this.cancel(s.id);
    }
  }

  // ─── the loop ──────────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Steps until `signal` aborts (it returns after the step in flight). Between steps it yields to the event loop
   * (setImmediate), so submits, cancels and adapter loads land; with nothing to run it awaits new work (a submit,
   * a cancel, an adapter load settling) instead of spinning.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.looping) throw new BatcherStateError('ContinuousBatcher: run() is already looping');
    this.looping = true;
    try {
      while (!signal?.aborted) {
        const report = this.step();
        if (signal?.aborted) break;
        if (report) await yieldToEventLoop();
        else await this.waitForWork(signal);
      }
    } finally {
      this.looping = false;
      this.wakeUp = null;
    }
  }

  private waitForWork(signal: AbortSignal | undefined): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        signal?.removeEventListener('abort', done);
        if (this.wakeUp === done) this.wakeUp = null;
        resolve();
      };
      this.wakeUp = done;
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  private wake(): void {
    this.wakeUp?.();
  }

  // ─── introspection ─────────────────────────────────────────────────────────────────────────────────────────

  stats(): BatcherStats {
    const adapters = this.adapters;
    return {
      policy: this.policy,
      maxBatch: this.maxBatch,
      ...this.counters,
      batchSizeHistogram: new Map([...this.histogram].sort((a, b) => a[0] - b[0])),
      running: this.running.filter((s) => s.phase === 'running').length,
      occupying: this.running.filter((s) => s.phase === 'occupying').length,
      queued: this.queue.length,
      waitingForAdapter: adapters ? this.queue.filter((s) => s.adapter !== null && !adapters.isResident(s.adapter)).length : 0,
      queuedInputPages: this.queue.reduce((sum, s) => sum + pagesForLength(this.inputLength(s)), 0),
      kvPagesUsed: this.cache.usedPages,
      kvPagesFree: this.cache.freePages,
    };
  }

  // ─── validation ────────────────────────────────────────────────────────────────────────────────────────────

  private validate(request: BatcherRequest, listener: RequestListener): RequestState {
    const id: unknown = request?.id;
    const bad = (code: ConstructorParameters<typeof RequestValidationError>[0], message: string, cause?: unknown) =>
      new RequestValidationError(code, id, `request ${typeof id === 'string' ? JSON.stringify(id) : String(id)}: ${message}`, cause === undefined ? undefined : { cause });
    if (typeof id !== 'string' || id.length === 0) throw bad('TESSERA_INVALID_REQUEST', 'id must be a non-empty string');
    if (this.live.has(id)) throw bad('TESSERA_DUPLICATE_REQUEST', 'another queued or running request has this id');
    const { adapter, prompt, maxTokens } = request;
    if (adapter !== null && (typeof adapter !== 'string' || adapter.length === 0)) {
      throw bad('TESSERA_INVALID_REQUEST', `adapter must be null (the base model) or a non-empty string, got ${JSON.stringify(adapter)}`);
    }
    if (!prompt || typeof prompt.length !== 'number') throw bad('TESSERA_INVALID_REQUEST', 'prompt must be an array of token ids');
    if (prompt.length === 0) throw bad('TESSERA_EMPTY_PROMPT', 'the prompt is empty');
    const c = this.model.config;
    for (let i = 0; i < prompt.length; i++) {
      const t = prompt[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= c.vocabSize) {
        throw bad('TESSERA_TOKEN_OUT_OF_VOCAB', `prompt token ${i} is ${t}, outside the vocabulary [0, ${c.vocabSize})`);
      }
    }
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) throw bad('TESSERA_INVALID_MAX_TOKENS', `maxTokens must be an integer >= 1, got ${maxTokens}`);
    if (prompt.length + maxTokens > c.maxPositions) {
      throw bad('TESSERA_CONTEXT_TOO_LONG', `prompt (${prompt.length}) + maxTokens (${maxTokens}) exceeds the model's ${c.maxPositions} positions`);
    }
    // The last sampled token is never fed back, so the KV holds at most prompt + maxTokens - 1 tokens.
    const pages = pagesForLength(prompt.length + maxTokens - 1);
    if (pages > this.cache.numPages) {
      throw bad('TESSERA_KV_TOO_SMALL', `it needs up to ${pages} KV pages, more than the cache's ${this.cache.numPages}`);
    }
    const stop = request.stop ?? [];
    if (stop.length > 0 && !this.decode) throw bad('TESSERA_INVALID_REQUEST', 'stop strings need the batcher to have a decode function');
    let sampler: Sampler;
    let checker: StopChecker;
    try {
      sampler = createSampler(request.sampling ?? {});
      checker = new StopChecker({
        eosTokenIds: c.eosTokenIds,
        stopStrings: stop,
        maxTokens,
        decode: this.decode ?? null,
        ignoreEos: request.ignoreEos ?? false,
      });
    } catch (err) {
      throw bad('TESSERA_INVALID_REQUEST', asError(err).message, err);
    }
    const generated = request.generated ?? [];
    if (!Array.isArray(generated) && !ArrayBuffer.isView(generated)) throw bad('TESSERA_INVALID_REQUEST', 'generated must be an array of token ids');
    if (generated.length >= maxTokens) {
      throw bad('TESSERA_INVALID_MAX_TOKENS', `it already generated ${generated.length} of its ${maxTokens} tokens; nothing is left to generate`);
    }
    for (let i = 0; i < generated.length; i++) {
      const t = generated[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= c.vocabSize) {
        throw bad('TESSERA_TOKEN_OUT_OF_VOCAB', `generated token ${i} is ${t}, outside the vocabulary [0, ${c.vocabSize})`);
      }
      // Replaying through the stop checker restores stop-string and text state; a resumed request must not be over.
      if (checker.push(t).finished !== null) {
        throw bad('TESSERA_INVALID_REQUEST', `generated token ${i} already ends the request (EOS or a stop string); nothing is left to generate`);
      }
    }
    return {
      id,
      adapter,
      prompt: Array.from(prompt),
      listener,
      sampler,
      stop: checker,
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
