/** The batcher's public shapes (contract C4). Plain data; the step-plan contract itself is @tessera/core's. */
import type { FinishReason, StepSamplingParams, StepSegment, TokenLogprobs } from '@tessera/core';

/**
 * Where adapter weights live. The batcher asks it whether an adapter is on the device, starts loads, and pins an
 * adapter while a request uses it. `@tessera/adapter-swap`'s AdapterCache satisfies it structurally.
 */
export interface AdapterResidency {
  isResident(name: string): boolean;
  /** Makes the adapter resident (async); rejects when it cannot be loaded. */
  ensureResident(name: string): Promise<unknown>;
  /** A pinned adapter is never evicted. Pins are counted: one unpin per pin. */
  pin(name: string): void;
  unpin(name: string): void;
  /**
   * Optional soft pin: the scheduler reserves the adapter of each queued request it is loading ahead for (the
   * requests it can admit within its horizon), and unreserves it once the request is pinned, leaves the horizon
   * or is gone. A reserved adapter is not evicted to make room for another reserved one (AdapterCache's
   * semantics), so adapters loaded for waiting requests do not evict each other. Counted, like pins.
   */
  reserve?(name: string): void;
  unreserve?(name: string): void;
  /**
   * Optional: a string that names the adapter's current weights (AdapterCache: the name and its registration's
   * version). The prefix cache keys pages by it, so a same-name re-registration never reuses stale K/V; without
   * it the name alone is the key.
   */
  identity?(name: string): string;
}

/**
 * 'punica': any adapter mix, at most one prefill per step plus every running decode (Punica §5).
 * 'same-adapter': continuous batching that only admits the running set's adapter (vLLM-like baseline, §9.9).
 * 'static': a run of consecutive same-adapter requests prefilled together and decoded until the longest finishes
 * (HF / DeepSpeed / FasterTransformer-like baseline, §9.9).
 */
export type BatchPolicy = 'punica' | 'same-adapter' | 'static';

export interface BatcherRequest {
  /** Unique among the batcher's queued and running requests. */
  id: string;
  /** Adapter (SegmentLayout key); null = the base model. */
  adapter: string | null;
  /** Prompt token ids (bos included, as the tokenizer's template adds it). */
  prompt: readonly number[];
  /** Generated tokens at most (EOS included). */
  maxTokens: number;
  /** Sampling parameters (the runner's sampler: HF semantics, greedy by default). */
  sampling?: StepSamplingParams;
  /** Stop strings (needs the runner's `decode`). */
  stop?: readonly string[];
  /** Keep going past EOS (benchmarks that force a length). */
  ignoreEos?: boolean;
  /**
   * Tokens this request already generated elsewhere (a migrated request, Punica §7.4). They are prefilled after
   * the prompt (recompute), count toward maxTokens and stop strings, and are not streamed again: the first
   * onToken is the token after them.
   */
  generated?: readonly number[];
  /** Report each token's log-probability and this many alternatives (the runner's RunnerRequest.logprobs). */
  logprobs?: number;
  /** Who the fairness policy charges for this request (default: its adapter, or '' for the base model). */
  tenant?: string;
}

/** @tessera/core's FinishReason. */
export type BatcherFinishReason = FinishReason;

export interface FinishedRequest {
  id: string;
  /** Every generated token id (an ending EOS included). */
  tokens: number[];
  /** The generated text (stop string and what follows cut off); '' without a `decode`. */
  text: string;
  finishReason: BatcherFinishReason;
  promptTokens: number;
  completionTokens: number;
}

/** Callbacks of one request. They run synchronously inside step(); an exception thrown by one cancels the request. */
export interface RequestListener {
  /** Each generated token, once, in order, with the text it made safe to show ('' while held back). */
  onToken?(token: number, textDelta: string, logprobs?: TokenLogprobs): void;
  onFinish?(result: FinishedRequest): void;
  /** The request failed (its adapter could not be loaded, or its step's forward threw); nothing more follows. */
  onError?(err: Error): void;
  /**
   * kvExhaustion 'evict' only: the KV cache could not grow, and this request (the newest running) was dropped
   * before the step's forward, its pages freed. `generated` is every token it produced (the `generated` it was
   * submitted with included); nothing more follows. Its scheduler re-places it (migration by recompute).
   */
  onEvicted?(generated: number[]): void;
}

/**
 * What the batcher does with the newest running request when the running decodes' KV growth does not fit:
 * 'requeue' puts it back at the head of its own queue (recompute on this engine, the single-host default);
 * 'evict' drops it and tells its listener (onEvicted), so a cluster scheduler can re-place it on any host.
 */
export type KvExhaustionPolicy = 'requeue' | 'evict';

/**
 * What a Scheduler tells its host about a request, synchronously, in order: each generated token with the text
 * it made safe to show, then exactly one of finish (eos, stop, length or cancelled; `text` is the runner's to
 * add), error (an adapter that could not be loaded, a failed forward) or evicted (kvExhaustion 'evict').
 */
export type SchedulerEvent =
  | { kind: 'token'; id: string; token: number; text: string; logprobs?: TokenLogprobs }
  | { kind: 'finish'; id: string; finishReason: BatcherFinishReason; tokens: number[]; promptTokens: number; completionTokens: number }
  | { kind: 'error'; id: string; error: Error }
  | { kind: 'evicted'; id: string; generated: number[] };

/** What one step did. */
export interface StepReport {
  /** 1-based step number. */
  step: number;
  /** Token rows of the forward (prefill tokens + one per decode + one per wasted row). */
  rows: number;
  /** Sequences prefilled this step (first admissions and re-admissions after preemption). */
  prefills: number;
  /** Running sequences that decoded one token. */
  decodes: number;
  /** Static policy: rows of finished members still occupying the batch (computed and discarded). */
  wastedRows: number;
  /** Sequences in the forward: prefills + decodes + wastedRows. */
  batchSize: number;
  /** The step's segments (rows grouped by adapter; prefill rows first): its SegmentLayout's. */
  segments: readonly StepSegment[];
  /** Request ids prefilled this step. */
  admitted: string[];
  /** Request ids that finished this step (eos, stop or length). */
  finished: string[];
  /** Request ids preempted before the forward because the KV cache could not grow (requeued or evicted). */
  preempted: string[];
  /** Request ids failed because the forward threw (each got onError). */
  failed: string[];
  /** Clock time of the whole step (planning, forward, sampling, callbacks): from plan() to complete(). */
  durationMs: number;
}

export interface SchedulerStats {
  policy: BatchPolicy;
  maxBatch: number;
  steps: number;
  /** Token rows run through the model. */
  rows: number;
  /** Tokens sampled and delivered. */
  tokensGenerated: number;
  /** Prompt tokens prefilled (first admissions). */
  promptTokens: number;
  /** Tokens prefilled again after a preemption (prompt + generated so far). */
  recomputedTokens: number;
  /** Sequences per forward → number of steps with that many. */
  batchSizeHistogram: Map<number, number>;
  /** Static policy: decode rows of finished members, computed and thrown away. */
  wastedRows: number;
  preemptions: number;
  /** Plans issued, each with one segment list, i.e. one SegmentLayout per step. */
  layoutBuilds: number;
  /** ensureResident calls started. */
  adapterLoads: number;
  submitted: number;
  /** Requests that ended by eos, stop or length. */
  finished: number;
  cancelled: number;
  failed: number;
  /** Event handlers (request listeners) that threw. */
  listenerErrors: number;
  /** Admitted, unfinished requests. */
  running: number;
  /** Static policy: finished members still holding a row (and their KV pages) until the batch ends. */
  occupying: number;
  /** Requests waiting for admission (including those waiting for their adapter). */
  queued: number;
  /** Queued requests whose adapter is not resident. */
  waitingForAdapter: number;
  /** KV pages the queued requests' prefills will take when admitted (prompt + generated tokens each). */
  queuedInputPages: number;
  kvPagesUsed: number;
  kvPagesFree: number;
  /** Tokens per KV page. */
  kvPageTokens: number;
  /** Prefix cache: tokens of every prefill input (first admissions and re-admissions) while it is on. */
  prefixLookupTokens: number;
  /** Prefix cache: of those, tokens whose K/V were attached from cached pages instead of computed. */
  prefixHitTokens: number;
  /** Published KV pages (held or evictable), and cached pages evicted to make room so far. */
  prefixCachedPages: number;
  prefixEvictions: number;
}

/** The stats of a Scheduler (and of the host loop that drives it). */
export type BatcherStats = SchedulerStats;
