/**
 * EngineLoop: one accelerator's step loop, composed from a pure Scheduler (`@tessera/batcher`: queue, admission,
 * preemption, residency waits, page accounting) and a runner that executes its plans (`@tessera/engine`'s
 * StepRunner, injected, so this package needs no engine at run time; or `@tessera/sim`'s simulated runner).
 *
 *   step():  plan = scheduler.plan() → outcome = runner.run(plan) → report = scheduler.complete(outcome)
 *   run():   step while there is work, yield between steps (injected; setImmediate by default) so submits,
 *            cancels and adapter loads land; with nothing to run, await a wake-up instead of spinning.
 *
 * Requests come in with a listener (onToken / onFinish / onError / onEvicted), as the scheduler's events come out;
 * the runner keeps each request's sampler and stop state from submit to its end. `batcherEngine(loop)` turns a
 * loop into the cluster's {@link HostEngine}.
 */
import {
  type AdapterResidency,
  type BatchPolicy,
  type FairnessPolicy,
  type VtcWeights,
  BatcherStateError,
  type BatcherRequest,
  type BatcherStats,
  type KvExhaustionPolicy,
  type RequestListener,
  RequestValidationError,
  Scheduler,
  type SchedulerEvent,
  type StepReport,
} from '@tessera/batcher';
import type { Clock, KvPageAllocator, StepExecutor, StepOutcome } from '@tessera/core';

export interface EngineLoopOptions {
  /** Executes the plans: the engine's StepRunner (model, KV tensor pool, deltas, decode) or a simulated runner. */
  runner: StepExecutor;
  /** The KV page accounting the scheduler plans on: the runner's pool's (`cache.allocator`), or a bare allocator. */
  pages: KvPageAllocator;
  /** Adapter residency (an AdapterCache); without it every adapter name is assumed to be known to the runner. */
  adapters?: AdapterResidency;
  /** Default 'punica'. */
  policy?: BatchPolicy;
  /** Most sequences in one forward (rows of the static batch included); default 32. */
  maxBatch?: number;
  /** Default systemClock (the scheduler's: step durations). */
  clock?: Clock;
  /** Default 'requeue'. */
  kvExhaustion?: KvExhaustionPolicy;
  /** How run() yields between steps; default a setImmediate turn of the event loop. */
  yieldToEventLoop?: () => Promise<void>;
  /** Reuse KV pages of shared prompt prefixes within one base + adapter (the Scheduler's `prefixCache`). Default false. */
  prefixCache?: boolean;
  /** 'fcfs' (default) or 'vtc' (the Scheduler's `fairness`: S-LoRA's virtual token counter across tenants). */
  fairness?: FairnessPolicy;
  vtcWeights?: Partial<VtcWeights>;
}

const setImmediateYield = () => new Promise<void>((resolve) => setImmediate(resolve));

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

export class EngineLoop {
  readonly scheduler: Scheduler;
  readonly runner: StepExecutor;
  private readonly listeners = new Map<string, RequestListener>();
  private readonly yieldToEventLoop: () => Promise<void>;
  private looping = false;
  private wakeUp: (() => void) | null = null;

  constructor(options: EngineLoopOptions) {
    this.runner = options.runner;
    this.yieldToEventLoop = options.yieldToEventLoop ?? setImmediateYield;
    this.scheduler = new Scheduler({
      pages: options.pages,
      limits: options.runner.limits,
      ...(options.adapters === undefined ? {} : { adapters: options.adapters }),
      ...(options.policy === undefined ? {} : { policy: options.policy }),
      ...(options.maxBatch === undefined ? {} : { maxBatch: options.maxBatch }),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
      ...(options.kvExhaustion === undefined ? {} : { kvExhaustion: options.kvExhaustion }),
      ...(options.prefixCache === undefined ? {} : { prefixCache: options.prefixCache }),
      ...(options.fairness === undefined ? {} : { fairness: options.fairness }),
      ...(options.vtcWeights === undefined ? {} : { vtcWeights: options.vtcWeights }),
      onEvent: (event) => this.deliver(event),
      wake: () => this.wakeUp?.(),
    });
  }

  get policy(): BatchPolicy {
    return this.scheduler.policy;
  }

  get maxBatch(): number {
    return this.scheduler.maxBatch;
  }

  get kvExhaustion(): KvExhaustionPolicy {
    return this.scheduler.kvExhaustion;
  }

  // ─── requests in and out ──────────────────────────────────────────────────────────────────────────────────

  /**
   * Queues a request; it joins a step once admitted (never the step in flight). Throws RequestValidationError,
   * changing nothing: the scheduler's checks (id, prompt, vocabulary, maxTokens, positions, KV size, generated
   * tokens), then the runner's (sampling parameters, stop strings, generated tokens that already end it), as
   * TESSERA_INVALID_REQUEST.
   */
  submit(request: BatcherRequest, listener: RequestListener = {}): void {
    this.scheduler.check(request);
    const { id } = request;
    try {
      this.runner.open({
        id,
        maxTokens: request.maxTokens,
        sampling: request.sampling,
        stop: request.stop,
        ignoreEos: request.ignoreEos,
        generated: request.generated,
        logprobs: request.logprobs,
      });
    } catch (err) {
      throw new RequestValidationError('TESSERA_INVALID_REQUEST', id, `request ${JSON.stringify(id)}: ${asError(err).message}`, { cause: err });
    }
    this.listeners.set(id, listener);
    try {
      this.scheduler.submit(request);
    } catch (err) {
      this.leave(id);
      throw err;
    }
  }

  /**
   * Cancels a queued or running request: its KV pages are freed at once (at the end of the step when called
   * from a listener inside a step) and its listener gets onFinish with finishReason 'cancelled' and the tokens
   * generated so far. False when no queued or running request has this id.
   */
  cancel(id: string): boolean {
    return this.scheduler.cancel(id);
  }

  // ─── the step ──────────────────────────────────────────────────────────────────────────────────────────────

  /** Runs one step (one forward over the working set); null when nothing can run now (idle, or waiting). */
  step(): StepReport | null {
    const plan = this.scheduler.plan();
    if (!plan) return null;
    let outcome: StepOutcome;
    try {
      outcome = this.runner.run(plan);
    } catch (err) {
      // A runner that throws (rather than reporting failed rows) fails the whole step.
      const error = asError(err);
      outcome = {
        ran: true,
        rows: plan.rows,
        segments: plan.segments,
        excluded: [],
        results: plan.sequences.map((s) => ({ kind: 'failed' as const, requestId: s.requestId, error })),
      };
    }
    return this.scheduler.complete(outcome);
  }

  /**
   * Steps until `signal` aborts (it returns after the step in flight). Between steps it yields to the event loop,
   * so submits, cancels and adapter loads land; with nothing to run it awaits new work (a submit, a cancel, an
   * adapter load settling) instead of spinning.
   */
  async run(signal?: AbortSignal): Promise<void> {
    if (this.looping) throw new BatcherStateError('EngineLoop: run() is already looping');
    this.looping = true;
    try {
      while (!signal?.aborted) {
        const report = this.step();
        if (signal?.aborted) break;
        if (report) await this.yieldToEventLoop();
        else await this.waitForWork(signal);
      }
    } finally {
      this.looping = false;
      this.wakeUp = null;
    }
  }

  stats(): BatcherStats {
    return this.scheduler.stats();
  }

  // ─── events ────────────────────────────────────────────────────────────────────────────────────────────────

  /** Scheduler events → the request's listener (a listener that throws is the scheduler's to count and cancel). */
  private deliver(event: SchedulerEvent): void {
    const listener = this.listeners.get(event.id);
    switch (event.kind) {
      case 'token':
        listener?.onToken?.(event.token, event.text, event.logprobs);
        return;
      case 'finish': {
        const { id, tokens, finishReason, promptTokens, completionTokens } = event;
        const text = this.runner.text(id);
        this.leave(id);
        listener?.onFinish?.({ id, tokens, text, finishReason, promptTokens, completionTokens });
        return;
      }
      case 'error':
        this.leave(event.id);
        listener?.onError?.(event.error);
        return;
      case 'evicted':
        this.leave(event.id);
        listener?.onEvicted?.(event.generated);
        return;
    }
  }

  private leave(id: string): void {
    this.listeners.delete(id);
    this.runner.close(id);
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
}
