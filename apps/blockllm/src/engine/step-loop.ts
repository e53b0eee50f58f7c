/**
 * The step loop: BlockLLM's requests as a host-protocol engine over one ChainExecutor. Each iteration admits
 * waiting requests (up to `maxBatch` running, in arrival order) and runs ONE chain step for every running
 * sequence: the newly admitted ones prefill (prompt, plus any tokens an earlier placement generated), the others
 * decode their last token. Inside the step the executor walks the chains block by block and runs every block once
 * over the rows of all the applications whose chains use it (per-block batching, design note §4.2). Each sequence's
 * logits then go through its own sampler and StopChecker (OpenAI semantics: EOS, stop strings, max tokens).
 *
 * KV: a step that finds a block's cache full is rolled back by the executor (all or nothing); the loop then
 * retries without the newest admitted request (it waits for pages to free), one at a time, and, when the running
 * ones alone do not fit, puts the newest running one back at the head of the queue (it is recomputed from its
 * tokens later).
 * A request whose pages could never fit one block's cache is refused at submit (KvTooSmall, 400).
 *
 * Cohorts (`cohorts` > 1, an asynchronous executor over several devices): the running sequences are split into
 * cohorts, each with its own step in flight, so that while one cohort's blocks run on one device another's run on
 * the next — the pipelining BlockLLM's per-block agents give, where a lockstep step over all sequences leaves each
 * device idle while the others run their part. A new request joins a cohort with room (each takes up to an even
 * split of the live and waiting sequences); a sequence stays in its cohort.
 *
 * A zoo re-partition (an ingest that cuts a block some loaded chain uses) needs a new executor: admission pauses,
 * the running sequences finish, then `rebuild` swaps the executor.
 */
import { serializeError } from '@tessera/cluster';
import type { FinishedResult, HostEvent, Placement, ProtocolEngine } from '@tessera/cluster';
import { KvCacheExhaustedError } from '@tessera/core';
import type { ChainSequence } from '@tessera/block-zoo/chain';
import { createSampler, type Sampler, StopChecker, tokenLogprobs } from '@tessera/engine';

import { BlockllmRequestError } from '../errors.js';

/** Tokens per KV page of a block's cache (the engine's PagedKvCache page). */
const PAGE_TOKENS = 16;

interface Sequence {
  placement: Placement;
  app: string;
  sink: (event: HostEvent) => void;
  sampler: Sampler;
  stop: StopChecker;
  /** Every generated token (earlier placements' first). */
  generated: number[];
  text: string;
  /** True once prefilled in the current executor. */
  started: boolean;
  /** Engine sequence id: request id + a counter, so a recompute never meets its old pages. */
  seqId: string;
  /** Cancelled while a step that carries it was in flight (its result is dropped). */
  gone: boolean;
}

/**
 * What the loop steps: block-zoo's ChainExecutor (one device, synchronous) or the multi-device executor (a step is
 * a round of programs on device workers, asynchronous; `prepare` deploys what the admitted applications need).
 */
export interface StepExecutor {
  load(app: string): unknown;
  /** One step of `sequences`, the sequences of one cohort (`cohort`: which, of how many; an executor may ignore it). */
  step(sequences: readonly ChainSequence[], cohort?: CohortRef): Float32Array[] | Promise<Float32Array[]>;
  release(id: string): void;
  dispose(): void;
  /** Before a step: deploy what `apps` need. Per application: 'wait' (not now: it stays queued) or its error. */
  prepare?(admitted: readonly string[], busy: ReadonlySet<string>): Promise<Map<string, 'wait' | Error>>;
}

/** A cohort of the loop: its index among `count` cohorts. */
export interface CohortRef {
  index: number;
  count: number;
}

/** One block run of a step, as the loop counts it. */
export interface BlockRunCount {
  rows: number;
  /** Applications whose rows were in the batch. */
  apps: number;
  copiedRows: number;
}

export interface StepLoopOptions {
  /** Running sequences at most, over all cohorts. */
  maxBatch: number;
  /** Cohorts with a step in flight at once (default 1: one lockstep step over every running sequence). */
  cohorts?: number;
  /** Pages of each block's cache (a request's whole length must fit one block's). */
  kvPages: number;
  eosTokenIds: readonly number[];
  decode: (ids: number[]) => string;
  /** The application exists (else the submit is refused with the zoo's not-found error). */
  checkApp: (app: string) => void;
  /** Prefix tokens an application's chain writes before the prompt. */
  prefixOf: (app: string) => number;
}

export interface StepCounters {
  steps: number;
  tokens: number;
  blockRuns: number;
  blockRows: number;
  sharedBatches: number;
  copiedRows: number;
  kvExhausted: number;
  /** Executors replaced after a zoo re-partition. */
  rebuilds: number;
}

let nextSequence = 0;

/** A cohort: sequences stepped together, with at most one step in flight. */
interface Cohort {
  /** Admitted to the step in flight (not in `waiting` nor yet in `running`). */
  inflight: Sequence[];
  running: Sequence[];
  /** The step in flight, if any. */
  busy: Promise<void> | null;
}

export class ChainStepLoop implements ProtocolEngine<Placement, HostEvent> {
  readonly counters: StepCounters = { steps: 0, tokens: 0, blockRuns: 0, blockRows: 0, sharedBatches: 0, copiedRows: 0, kvExhausted: 0, rebuilds: 0 };
  private waiting: Sequence[] = [];
  private readonly cohorts: Cohort[];
  private wake: (() => void) | null = null;
  private rebuildWanted: (() => StepExecutor) | null = null;

  constructor(
    private executor: StepExecutor,
    private readonly options: StepLoopOptions,
  ) {
    const n = options.cohorts ?? 1;
    if (!Number.isSafeInteger(n) || n < 1) throw new BlockllmRequestError('TESSERA_PLACEMENT_INVALID', `cohorts must be a positive integer, got ${n}`);
    this.cohorts = Array.from({ length: n }, () => ({ inflight: [], running: [], busy: null }));
  }

  private get running(): Sequence[] {
    return this.cohorts.flatMap((c) => c.running);
  }

  /** What each block run of the executor reports (the executor's onBlockRun). */
  onBlockRun = (run: BlockRunCount): void => {
    if (run.rows > 0) {
      this.counters.blockRuns++;
      this.counters.blockRows += run.rows;
      if (run.apps > 1) this.counters.sharedBatches++;
    }
    this.counters.copiedRows += run.copiedRows;
  };

  get sizes(): { running: number; waiting: number } {
    return { running: this.running.length, waiting: this.waiting.length };
  }

  /** Swaps the executor once the running sequences finished (admission pauses until then). */
  requestRebuild(make: () => StepExecutor): void {
    this.rebuildWanted = make;
    this.wake?.();
  }

  submit(placement: Placement, sink: (event: HostEvent) => void): void {
    const r = placement.request;
    if (r.adapter === null) throw new BlockllmRequestError('TESSERA_UNSUPPORTED', 'a BlockLLM request names its application');
    // Resolving the chain now (its blocks made resident) turns a chain that cannot be served into this request's
    // error, not one of a whole step. While a rebuild is pending the old executor must not load new chains.
    if (this.rebuildWanted) this.options.checkApp(r.adapter);
    else this.executor.load(r.adapter);
    if (r.sampling.promptLogprobs !== undefined) throw new BlockllmRequestError('TESSERA_UNSUPPORTED', 'prompt logprobs are not served by BlockLLM');
    const tokens = this.options.prefixOf(r.adapter) + r.prompt.length + r.maxTokens;
    const pages = Math.ceil(tokens / PAGE_TOKENS);
    if (pages > this.options.kvPages) {
      throw new BlockllmRequestError('TESSERA_KV_TOO_SMALL', `request ${r.id} needs up to ${pages} KV pages in a block, more than each block's ${this.options.kvPages}`);
    }
    const stop = new StopChecker({ eosTokenIds: this.options.eosTokenIds, stopStrings: r.stop, maxTokens: r.maxTokens, decode: this.options.decode, ignoreEos: r.ignoreEos });
    // Tokens an earlier placement delivered go through the checker again, so its text state continues them.
    let text = '';
    for (const t of placement.generated) text += stop.push(t).text;
    const { temperature, topK, topP, seed } = r.sampling;
    this.waiting.push({ placement, app: r.adapter, sink, sampler: createSampler({ temperature, topK, topP, seed }), stop, generated: [...placement.generated], text, started: false, seqId: `${r.id}#${nextSequence++}`, gone: false });
    this.wake?.();
  }

  cancel(id: string): boolean {
    for (const c of this.cohorts) {
      const inflight = c.inflight.find((s) => s.placement.request.id === id && !s.gone && !c.running.includes(s));
      if (!inflight) continue;
      // Admitted to the step in flight (an asynchronous step): answered now, its result dropped when the step ends.
      inflight.gone = true;
      this.executor.release(inflight.seqId);
      this.finish(inflight, 'cancelled');
      return true;
    }
    for (const list of [this.waiting, ...this.cohorts.map((c) => c.running)]) {
      const i = list.findIndex((s) => s.placement.request.id === id);
      if (i < 0) continue;
      const [s] = list.splice(i, 1);
      s!.gone = true;
      this.executor.release(s!.seqId);
      this.finish(s!, 'cancelled');
      return true;
    }
    return false;
  }

  /**
   * Runs until `signal` aborts: each cohort with work steps (one chain step at a time per cohort, the cohorts' steps
   * in flight together), yielding to the event loop between steps; returns once the steps in flight ended.
   */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const idle = this.cohorts.every((c) => c.busy === null);
      if (this.rebuildWanted && idle && this.running.length === 0) {
        const make = this.rebuildWanted;
        this.rebuildWanted = null;
        this.executor.dispose();
        this.executor = make();
        this.counters.rebuilds++;
        for (const s of this.waiting) s.started = false;
      }
      let started = false;
      for (const c of this.cohorts) {
        if (c.busy !== null) continue;
        const admits = this.waiting.length > 0 && !this.rebuildWanted;
        if (c.running.length === 0 && !(admits && this.room(c) > 0)) continue;
        started = true;
        c.busy = this.step(c).finally(() => {
          c.busy = null;
          this.wake?.();
        });
      }
      const busy = this.cohorts.filter((c) => c.busy !== null).map((c) => c.busy!);
      if (started && busy.length === this.cohorts.length) {
        // Every cohort has a step in flight: wait for one to end.
        await Promise.race(busy);
      } else if (!started) {
        // Nothing to start: wait for a submit, a cancel, a step's end or the abort.
        const woken = new Promise<void>((resolve) => (this.wake = resolve));
        const onAbort = () => this.wake?.();
        signal.addEventListener('abort', onAbort, { once: true });
        await woken;
        signal.removeEventListener('abort', onAbort);
        this.wake = null;
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
    await Promise.allSettled(this.cohorts.map((c) => c.busy));
  }

  /** Cancels everything held and frees the executor (shutdown, after run() returned). */
  dispose(): void {
    for (const s of [...this.running, ...this.waiting]) this.cancel(s.placement.request.id);
    this.executor.dispose();
  }

  /**
   * Sequences a cohort may still admit: up to an even split of the live and waiting sequences over the cohorts (a
   * burst fills them all), at most its share of maxBatch.
   */
  private room(c: Cohort): number {
    const n = this.cohorts.length;
    const live = this.cohorts.reduce((k, o) => k + o.running.length + (o === c ? 0 : o.inflight.length), 0);
    const even = Math.ceil((live + this.waiting.length) / n);
    const share = Math.ceil(this.options.maxBatch / n);
    return Math.max(0, Math.min(even - c.running.length, share - c.running.length, this.options.maxBatch - live));
  }

  private async step(c: Cohort): Promise<void> {
    try {
      await this.stepOnce(c);
    } finally {
      c.inflight = [];
    }
  }

  private async stepOnce(c: Cohort): Promise<void> {
    let admitted: Sequence[] = [];
    if (!this.rebuildWanted) for (let room = this.room(c); room > 0 && this.waiting.length > 0; room--) admitted.push(this.waiting.shift()!);
    c.inflight = admitted;
    if (this.executor.prepare && admitted.length > 0) {
      // Deploy what the admitted applications need; one that must wait goes back to the queue (in order), one that
      // cannot be served ends with its error.
      // Busy: the applications any cohort runs or is about to (a model they need must stay).
      const busy = new Set(this.cohorts.flatMap((o) => (o === c ? o.running : [...o.running, ...o.inflight])).map((s) => s.app));
      const verdicts = await this.executor.prepare(admitted.map((s) => s.app), busy);
      const back: Sequence[] = [];
      admitted = admitted.filter((s) => {
        const v = verdicts.get(s.app);
        if (s.gone) return false;
        if (v === 'wait') back.push(s);
        else if (v !== undefined) this.fail(s, v);
        return v === undefined;
      });
      this.waiting.unshift(...back);
      c.inflight = admitted;
      if (admitted.length === 0 && c.running.length === 0) {
        // Nothing can run until a model frees its device: wait for a submit, a cancel or a finish elsewhere.
        if (back.length > 0) await new Promise((resolve) => setTimeout(resolve, 1));
        return;
      }
    }
    let batch = [...c.running, ...admitted];
    let logits: Float32Array[] | null = null;
    while (logits === null) {
      try {
        const cohort = { index: this.cohorts.indexOf(c), count: this.cohorts.length };
        logits = await this.executor.step(batch.map((s) => ({ app: s.app, id: s.seqId, tokens: s.started ? [s.generated.at(-1)!] : [...s.placement.request.prompt, ...s.generated] })), cohort);
      } catch (err) {
        if (!(err instanceof KvCacheExhaustedError)) {
          // Not a capacity problem of this step: every request in it ends with the error, the loop goes on.
          for (const s of batch) this.fail(s, err);
          c.running = [];
          return;
        }
        this.counters.kvExhausted++;
        // Another cohort holds pages: what does not fit now may once they free.
        const othersHold = this.cohorts.some((o) => o !== c && o.running.length + o.inflight.length > 0);
        if (admitted.length === 1 && c.running.length === 0 && !othersHold) {
          // Alone in empty caches and still too big: waiting would not help.
          this.fail(admitted[0]!, err);
          return;
        } else if (admitted.length > 0) {
          // The newest admitted request waits for pages to free; the step is retried without it.
          this.waiting.unshift(admitted.pop()!);
        } else if (c.running.length > 1 || (c.running.length === 1 && othersHold)) {
          // Preempt the newest running request: its pages are freed, it is recomputed from its tokens later.
          const victim = c.running.pop()!;
          this.executor.release(victim.seqId);
          victim.started = false;
          victim.seqId = `${victim.placement.request.id}#${nextSequence++}`;
          this.waiting.unshift(victim);
        } else {
          for (const s of batch) this.fail(s, err);
          c.running = [];
          return;
        }
        batch = [...c.running, ...admitted];
        if (batch.length === 0) {
          // Everything went back to the queue for another cohort's pages: give that cohort time to free them.
          await new Promise((resolve) => setTimeout(resolve, 1));
          return;
        }
      }
    }
    // Cancelled while the step ran: already answered, and released.
    const rows = logits.filter((_, b) => !batch[b]!.gone);
    batch = batch.filter((s) => !s.gone);
    c.running = batch;
    this.counters.steps++;
    const done = new Set<Sequence>();
    batch.forEach((s, b) => {
      s.started = true;
      const row = rows[b]!;
      const token = s.sampler.sample(row);
      const { request, attempt } = s.placement;
      const step = s.stop.push(token);
      s.generated.push(token);
      s.text += step.text;
      this.counters.tokens++;
      const logprobs = request.logprobs !== undefined ? tokenLogprobs(row, token, request.logprobs) : undefined;
      s.sink({ kind: 'token', id: request.id, attempt, index: s.generated.length - 1, token, text: step.text, ...(logprobs ? { logprobs } : {}) });
      if (step.finished) {
        done.add(s);
        this.finish(s, step.finished);
      }
    });
    if (done.size > 0) {
      for (const s of done) this.executor.release(s.seqId);
      c.running = c.running.filter((s) => !done.has(s));
    }
  }

  private finish(s: Sequence, finishReason: FinishedResult['finishReason']): void {
    const { request, attempt } = s.placement;
    const result: FinishedResult = { id: request.id, tokens: s.generated, text: s.text, finishReason, promptTokens: request.prompt.length, completionTokens: s.generated.length };
    s.sink({ kind: 'finish', id: request.id, attempt, result });
  }

  private fail(s: Sequence, err: unknown): void {
    this.executor.release(s.seqId);
    if (s.gone) return;
    s.sink({ kind: 'error', id: s.placement.request.id, attempt: s.placement.attempt, error: serializeError(err) });
  }
}
