/**
 * The contract between a scheduler and a step runner (vLLM's scheduler / model-runner split, ARCHITECTURE
 * "Scheduler and runner"). A scheduler (pure: queues, admission, preemption, residency waits, page accounting)
 * returns one {@link StepPlan} per step; a runner (the engine's StepRunner, or the simulator's latency model)
 * executes it and hands back a {@link StepOutcome}: one sampled token per sequence, or the failure of the rows
 * that could not run. Plain data only, so a plan can cross a thread or be replayed.
 */
import type { FinishReason } from './finish-reason.js';

/** prefill: a new (or re-admitted) sequence's whole input; decode: one token; wasted: a static batch's finished
 * member recomputing its last position (computed and thrown away, never sampled). */
export type PlannedRowKind = 'prefill' | 'decode' | 'wasted';

export interface PlannedSequence {
  /** The request the row serves. */
  requestId: string;
  /** KV sequence of the request's current admission (a fresh one after each preemption). */
  seqId: string;
  /** Adapter (SegmentLayout key); null = the base model. */
  adapter: string | null;
  kind: PlannedRowKind;
  /** Input tokens of this step: the prompt (+ generated tokens on a re-admission), or the one token to decode. */
  tokens: readonly number[];
  /** KV position of tokens[0]: the sequence's committed length when the forward starts. */
  position: number;
}

/** A run of consecutive token rows that use one adapter. */
export interface StepSegment {
  key: string | null;
  /** First row. */
  start: number;
  /** Rows. */
  count: number;
}

/** Pages the scheduler took for a sequence this step (in its page allocator, which the tensor pool sits on). */
export interface KvReservation {
  seqId: string;
  /** The length the sequence's pages now hold. */
  length: number;
  /** The page ids added this step. */
  pages: readonly number[];
}

export interface StepPlan {
  /** 1-based step number of the scheduler. */
  step: number;
  /** Forward order: prefills first, then decodes grouped by adapter (a static batch's wasted rows among them). */
  sequences: readonly PlannedSequence[];
  /** The adapter segments over the token rows, in row order (one SegmentLayout for the whole forward). */
  segments: readonly StepSegment[];
  /** Token rows: Σ tokens over the sequences. */
  rows: number;
  /** KV pages reserved for this step (new pages only; sequences whose pages already hold the step add nothing). */
  reserved: readonly KvReservation[];
  /** KV sequences released since the previous plan (finished, cancelled, failed, preempted). */
  released: readonly string[];
}

/** Why a runner ended a sequence: FinishReason less 'cancelled' (which only a scheduler decides). */
export type StopReason = Exclude<FinishReason, 'cancelled'>;

/**
 * Log-probabilities of one sampled token: the log-softmax (in float64) of the raw logits row it was sampled from,
 * before temperature, top-k and top-p (vLLM's default `logprobs_mode`). Only for a request opened with `logprobs`.
 */
export interface TokenLogprobs {
  /** The sampled token's log-probability. */
  logprob: number;
  /** The request's `logprobs` most likely tokens, most likely first (ties: lower id first). */
  top: { token: number; logprob: number }[];
  /**
   * Only on a request's first token, when it was opened with `sampling.promptLogprobs` (vLLM's `prompt_logprobs`):
   * one entry per prompt token, in order; entry 0 is null (nothing precedes it), entry i the log-softmax of the
   * logits at position i − 1 for prompt token i, with `promptLogprobs` alternatives.
   */
  prompt?: readonly (TokenLogprobs | null)[] | undefined;
}

/** Most alternatives a request may ask for per token (OpenAI's and vLLM's default cap). */
export const MAX_TOP_LOGPROBS = 20;

export type RowResult =
  /**
   * The sequence sampled `token`; `text` is what became safe to show; `finish` ends the request; `logprobs` is
   * there when the request was opened with `logprobs`.
   */
  | { kind: 'token'; requestId: string; token: number; text: string; finish: StopReason | null; logprobs?: TokenLogprobs | undefined }
  /** The sequence could not run (its adapter could not be resolved, the forward threw, sampling threw). */
  | { kind: 'failed'; requestId: string; error: Error };

export interface StepOutcome {
  /** False when no forward ran (every row failed before it). */
  ran: boolean;
  /** Token rows the forward ran, and its segments (rows whose adapter failed before the forward are left out). */
  rows: number;
  segments: readonly StepSegment[];
  /**
   * Requests whose rows were left out of the forward (their adapter failed before it; each also has a 'failed'
   * result). Every other row of the plan was in the forward.
   */
  excluded: readonly string[];
  /** In the order they happened: failures before the forward, then one entry per sampled or failed row in plan order. */
  results: readonly RowResult[];
}

/** Sampling parameters of a request (the engine's SamplingParams, HF semantics; greedy by default). */
export interface StepSamplingParams {
  temperature?: number | undefined;
  topK?: number | undefined;
  topP?: number | undefined;
  seed?: number | undefined;
  /**
   * Report the prompt tokens' log-probabilities with this many alternatives each (0..MAX_TOP_LOGPROBS; vLLM's
   * `prompt_logprobs`, e.g. for `echo` with `logprobs`): the prefill computes the logits of every prompt row, and
   * the first token's `logprobs.prompt` carries them (its `logprobs` is then there even without `logprobs`).
   */
  promptLogprobs?: number | undefined;
}

/** What a runner keeps per request across steps: its sampler stream and stop conditions. */
export interface RunnerRequest {
  id: string;
  maxTokens: number;
  sampling?: StepSamplingParams | undefined;
  stop?: readonly string[] | undefined;
  ignoreEos?: boolean | undefined;
  /** Tokens generated before (a migrated or resumed request): replayed through the stop conditions. */
  generated?: readonly number[] | undefined;
  /** Report each sampled token's log-probability and this many most likely alternatives (0..MAX_TOP_LOGPROBS); absent: none. */
  logprobs?: number | undefined;
}

/** The model limits a scheduler validates requests against. */
export interface ModelLimits {
  vocabSize: number;
  maxPositions: number;
}

/**
 * What a host loop needs of a runner: the engine's StepRunner, or a simulated one. `open` validates and keeps a
 * request's per-request state (it throws for bad sampling parameters or stop strings, changing nothing);
 * `text` is the request's text so far; `close` forgets it; `run` executes one plan.
 */
export interface StepExecutor {
  readonly limits: ModelLimits;
  open(request: RunnerRequest): void;
  text(requestId: string): string;
  close(requestId: string): void;
  run(plan: StepPlan): StepOutcome;
}
