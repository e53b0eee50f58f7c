/**
 * The shapes that cross between a frontend, the scheduler and the engine hosts. Everything here is plain
 * structured-clone / JSON data, so the same messages travel through a function call (in-process), a worker
 * thread's postMessage, or a BullMQ job and a Redis stream (distributed).
 *
 *   frontend ──submit/cancel──▶ scheduler ──add/cancel (Placement)──▶ host
 *   host ──token/finish/error──▶ the request's stream ──▶ frontend (deduplicated by ClientStream)
 *   host ──finish/error/evicted──▶ scheduler (capacity freed, migration)
 *   host ──HostLoad (with a TTL when distributed)──▶ scheduler (placement; a silent host is lost)
 */
import type { FinishReason, SerializedError, TokenLogprobs } from '@tessera/core';

/** Sampling parameters, as the batcher takes them. */
export interface SamplingOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  seed?: number;
  /** Prompt tokens' log-probabilities with this many alternatives, on the first token's `logprobs.prompt` (core's StepSamplingParams.promptLogprobs). */
  promptLogprobs?: number;
}

/** A generation request. `id` is the idempotency key: submitting the same id twice runs it once. */
export interface GenerateRequest {
  id: string;
  /** A registered adapter's name, or null for the base model. */
  adapter: string | null;
  /** Prompt token ids (BOS included when the tokenizer's template adds it). */
  prompt: number[];
  /** Most tokens to generate (EOS included), counted over every placement of the request. */
  maxTokens: number;
  sampling: SamplingOptions;
  stop: string[];
  ignoreEos: boolean;
  /** Report each token's log-probability and this many most likely alternatives (0..20); absent: none. */
  logprobs?: number;
}

/**
 * One placement of a request on a host. A request is placed again when its host runs out of KV (migration) or
 * disappears; each placement has the next `attempt`. The host prefills `prompt ++ generated` (recompute, Punica
 * §7.4) and continues at token index `generated.length`: it never re-emits the tokens the client already has.
 */
export interface Placement extends HostPlacement<GenerateRequest> {
  /** Tokens already delivered to the client by earlier attempts (empty on the first placement). */
  generated: number[];
}

export type { FinishReason, SerializedError } from '@tessera/core';

export interface FinishedResult {
  id: string;
  /** Every generated token id over all attempts (an ending EOS included). */
  tokens: number[];
  text: string;
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
}

// ─── The host protocol ──────────────────────────────────────────────────────────────────────────────────────────
// One wire contract between a front end and an engine, whatever carries it (a function call, a worker thread's
// postMessage, a BullMQ job and a Redis stream): a request submitted with an idempotent id becomes an ordered
// stream of events, each carrying the placement's `attempt` and, for the request's output items, their absolute
// `index`; the stream ends with one `finish` (the result) or one `error` (core's serializeError, rebuilt with
// deserializeError). Besides requests: `cancel(id)` and named admin calls with typed error replies. Punica's
// GenerateRequest / HostEvent is one instance (items are tokens); PetS's classify is another (per-input results).

/** What every event about one request carries. */
export interface RequestEventBase {
  id: string;
  /** The placement that produced it (0, then 1, 2, … after migrations); a client ignores superseded attempts. */
  attempt: number;
}

/** One output item of a request: the `index`-th (0-based, absolute across attempts). `kind` names the item type. */
export type ItemEvent<Kind extends string = string, Fields extends object = object> = RequestEventBase & { kind: Kind; index: number } & Fields;

/** The event that ends a request: its result, or its typed error. */
export type EndEvent<Result> =
  | (RequestEventBase & { kind: 'finish'; result: Result })
  | (RequestEventBase & { kind: 'error'; error: SerializedError });

/** The events of one request on the host protocol: items in index order, then one end event. */
export type ProtocolEvent<Item extends ItemEvent, Result> = Item | EndEvent<Result>;

/** A request as a host receives it: the app's request (with its idempotent id) and the placement's attempt. */
export interface HostPlacement<Request extends { id: string } = { id: string }> {
  request: Request;
  /** 0 for the first placement, then 1, 2, … Events carry it; a client ignores events of a superseded attempt. */
  attempt: number;
}

/**
 * The engine side of the host protocol, as any transport drives it: submit a placement (its events go to `sink`,
 * in order), cancel by id. {@link HostEngine} is Punica's instance; the worker-thread transport serves any.
 */
export interface ProtocolEngine<Placed extends HostPlacement, Event> {
  /** Queues a placement; its events go to `sink`. Throws a typed error (nothing changed) for a request it cannot take. */
  submit(placement: Placed, sink: (event: Event) => void): void;
  /** Drops a request by id; false if it holds none. */
  cancel(id: string): boolean;
}

/** Named admin calls of an engine: name → its argument and result. */
export type AdminCalls = Record<string, { args: unknown; result: unknown }>;

/** The host's implementation of its admin calls. A rejection is serialized and rebuilt on the caller's side. */
export type AdminHandlers<A extends AdminCalls> = { [K in keyof A]: (args: A[K]['args']) => Promise<A[K]['result']> | A[K]['result'] };

/** The worker-thread transport, front → host (postMessage, structured clone). */
export type ToWorkerHost<Placed> =
  | { type: 'submit'; placement: Placed }
  | { type: 'cancel'; id: string }
  | { type: 'admin'; callId: number; name: string; args: unknown }
  /** Stop serving: the host's own shutdown (drain or cancel what it holds, free the engine), then a reply. */
  | { type: 'shutdown'; callId: number }
  /** Exit now with `code`, abandoning everything (a crash at a safe point, for watchdogs and tests). */
  | { type: 'exit'; code: number };

/**
 * The worker-thread transport, host → front. `Notice` is what belongs to no request (an adapter loaded, the task
 * set changed): notices travel in the same ordered batches as request events.
 */
export type FromWorkerHost<Event, Notice, Ready> =
  | { type: 'progress'; line: string }
  | { type: 'ready'; info: Ready }
  | { type: 'init-failed'; error: SerializedError }
  /** Request events and notices of one engine step, in the order they happened. */
  | { type: 'events'; events: HostMessage<Event, Notice>[] }
  | { type: 'reply'; callId: number; ok: true; value: unknown }
  | { type: 'reply'; callId: number; ok: false; error: SerializedError }
  | { type: 'fatal'; error: SerializedError };

export type HostMessage<Event, Notice> = { event: Event } | { notice: Notice };

// ─── Punica's instance ─────────────────────────────────────────────────────────────────────────────────────────

/** A generated token: `index` is its position in the whole generated sequence (0-based, across attempts). */
export type TokenEvent = ItemEvent<'token', { token: number; text: string; logprobs?: TokenLogprobs }>;

/**
 * What a host emits about one placement. `index` is the token's position in the whole generated sequence
 * (0-based, across attempts), which is what makes at-least-once delivery safe: a client keeps a token only if its
 * index is the next one it expects.
 */
export type HostEvent =
  | ProtocolEvent<TokenEvent, FinishedResult>
  /** The host ran out of KV pages and dropped this placement (its newest); `generated` = every token so far. */
  | (RequestEventBase & { kind: 'evicted'; generated: number[] });

/**
 * What a client's stream carries: host events, plus `placed` written by the scheduler before it dispatches an
 * attempt. A `placed` marker fences the earlier attempts: their later events (a host that was declared lost but
 * is still running, a redelivered job) are dropped.
 */
export type StreamEvent = HostEvent | { kind: 'placed'; id: string; attempt: number; hostId: string; generated: number };

/** A host's state as the scheduler sees it. Published periodically (distributed, with a TTL) or read live. */
export interface HostLoad {
  hostId: string;
  /** The host's own batch cap (the scheduler uses the smaller of this and its own). */
  maxBatch: number;
  /** KV pages in the host's cache, and tokens per page. */
  kvPages: number;
  pageTokens: number;
  /**
   * Pages free for new work: free pages minus what the host's queued (not yet admitted) placements will need
   * for their prefill. The scheduler subtracts its own not-yet-reported placements from this.
   */
  freeKvPages: number;
  /** The placements the host holds (queued or running), by request id and attempt. */
  requests: { id: string; attempt: number }[];
  /** Registered adapter names, and those resident on the device. */
  adapters: string[];
  residentAdapters: string[];
  /** Engine steps run so far and tokens generated so far (monotonic counters, for throughput over time). */
  steps: number;
  tokens: number;
  /** Clock time of the report (host clock; only the scheduler's own receipt time is used for liveness). */
  at: number;
}

/**
 * The scheduler's handle on one engine host. In-process it calls the engine directly; distributed it enqueues
 * a BullMQ job on the host's queue. Calls are fire-and-forget and must be delivered in order per host.
 */
export interface EngineHost {
  readonly id: string;
  /** Starts (or, for a redelivered placement of the same id and attempt, ignores) a placement. */
  add(placement: Placement): void;
  /** Drops a placement (frees its KV). Unknown ids and superseded attempts are ignored. */
  cancel(id: string, attempt: number): void;
  /** The latest load (live in-process; the last report when distributed); null when none is known yet. */
  load(): HostLoad | null;
}

/** What a placement's events are delivered to, on the host side. */
export type HostEventSink = (event: HostEvent) => void;

/**
 * The engine a host runs: a ContinuousBatcher in this thread ({@link batcherEngine}), an engine worker thread
 * (apps/punica), or a simulated GPU (`@tessera/sim`). Its batcher must evict, not requeue, on KV exhaustion, so
 * the scheduler can re-place the evicted request on any host.
 */
export interface HostEngine extends ProtocolEngine<Placement, HostEvent> {
  /** Live load (hostId is filled in by the host). */
  load(): Omit<HostLoad, 'hostId'>;
}
