/**
 * A block instance's agent (design note §4.2, algorithm 5.6): its queue with two classes — RETURNING (requests
 * whose state for this block is resident here: auto-regressive requests coming back for their next token) and NEW —
 * a countdown clock per request that left and is expected back, and loose per-block batching: when the instance is
 * free, rows are packed in priority order (RETURNING FIFO, then NEW FIFO) up to the block's batch cap and the
 * memory bound for request data. The agent decides when its block runs and whose rows go in; it returns the batch
 * as plain data and is told when the batch finished. Time comes from the injected Clock.
 */
import type { Clock } from '@tessera/core';

import type { BlockId } from '../ids.js';
import { type BatchShape, type BlockBytes, type ComputeProfile, computeMs } from './cost-model.js';
import { checkInteger, checkNonNegative, ServingCapacityError, ServingInvalidError, ServingNotFoundError, ServingStateError } from './errors.js';

export type QueueClass = 'returning' | 'new';

/** A request's rows arriving at the instance for one chain position of one iteration. */
export interface AgentArrival {
  requestId: string;
  /** The generated-token iteration (0 = prefill). */
  iteration: number;
  /** The index of this block in the request's chain. */
  position: number;
  /** New tokens of this step: the prompt at iteration 0, 1 after. */
  tokens: number;
  /** Tokens before these (the context whose KV the block needs). */
  contextTokens: number;
}

export interface QueuedRow extends AgentArrival {
  cls: QueueClass;
  enqueuedAt: number;
  /** Request data this row needs on the device while it runs (§4.8): activations, new KV, and missing KV. */
  bytes: number;
  /** Whether the block's KV for the context must be brought here first (migrated or recomputed, algorithm 5.7). */
  needsKv: boolean;
}

export interface AgentBatchPlan {
  planId: number;
  instance: string;
  block: BlockId;
  startedAt: number;
  rows: readonly QueuedRow[];
  /** Σ tokens of the rows. */
  tokens: number;
  /** Σ bytes of the rows (≤ the memory bound). */
  bytes: number;
}

/** What became of one row after its batch ran. */
export interface RowOutcome {
  requestId: string;
  /** The request is done (EOS, length): its state here is released. */
  finished: boolean;
  /** Expected time until it is back at this instance (the countdown, ms; design note 5.0 `countdown`). */
  returnInMs?: number;
}

export interface AgentOptions {
  instance: string;
  block: BlockBytes;
  clock: Clock;
  /** The block's upper batch-size limit (rows). */
  maxBatch: number;
  /** Device bytes available to this instance's request data (activations and KV). */
  memoryBytes: number;
  /**
   * A row that does not fit (cap or memory) is skipped and later rows may still go in ('skip', design note A15), or
   * packing stops at it ('stop', strict FIFO). Default 'skip'.
   */
  packing?: 'skip' | 'stop';
  /**
   * Countdown-aware loose batching (§4.2: the instance prioritises the return of its in-flight auto-regressive
   * requests): when a resident request that is away is due back within this many ms, the batch waits for it (so
   * the block's weights are read once for both) — but never once the oldest queued row has waited this long, and
   * never for an overdue countdown. Default 0: a batch runs as soon as the instance is free.
   */
  holdForReturningMs?: number;
}

export interface AgentStats {
  batches: number;
  rows: number;
  returningRows: number;
  newRows: number;
}

/** The packing rule on its own: which of `queue` (already in priority order) go in, given the cap and the bound. */
export function packRows(queue: readonly QueuedRow[], maxBatch: number, memoryBytes: number, packing: 'skip' | 'stop'): QueuedRow[] {
  const batch: QueuedRow[] = [];
  let bytes = 0;
  for (const r of queue) {
    if (batch.length + 1 <= maxBatch && bytes + r.bytes <= memoryBytes) {
      batch.push(r);
      bytes += r.bytes;
    } else if (packing === 'stop' || batch.length >= maxBatch) break;
  }
  return batch;
}

export class BlockAgent {
  readonly instance: string;
  readonly block: BlockBytes;
  readonly maxBatch: number;
  readonly memoryBytes: number;
  private readonly clock: Clock;
  private readonly packing: 'skip' | 'stop';
  private readonly returning: QueuedRow[] = [];
  private readonly fresh: QueuedRow[] = [];
  /** Requests whose state for this block is here (KV for an attention block), with its tokens. */
  private readonly resident = new Map<string, number>();
  /** Expected return time of each resident request that is away. */
  private readonly countdowns = new Map<string, number>();
  private running: AgentBatchPlan | null = null;
  private readonly holdMs: number;
  private holdingUntil: number | null = null;
  private nextPlan = 1;
  private readonly counters: AgentStats = { batches: 0, rows: 0, returningRows: 0, newRows: 0 };

  constructor(options: AgentOptions) {
    this.instance = options.instance;
    this.block = options.block;
    this.clock = options.clock;
    this.maxBatch = checkInteger(options.maxBatch, `maxBatch of instance ${options.instance}`, 1);
    this.memoryBytes = checkNonNegative(options.memoryBytes, `memoryBytes of instance ${options.instance}`);
    this.packing = options.packing ?? 'skip';
    this.holdMs = checkNonNegative(options.holdForReturningMs ?? 0, `holdForReturningMs of instance ${options.instance}`);
    if (this.packing !== 'skip' && this.packing !== 'stop') throw new ServingInvalidError(`packing must be 'skip' or 'stop', got ${JSON.stringify(options.packing)}`);
  }

  /** Queues arriving rows (onArrive). A request may be queued or running here once at a time. */
  arrive(arrivals: readonly AgentArrival[]): QueuedRow[] {
    const now = this.clock.now();
    const made: QueuedRow[] = [];
    const seen = new Set<string>();
    for (const a of arrivals) {
      checkInteger(a.iteration, `iteration of ${a.requestId}`);
      checkInteger(a.position, `position of ${a.requestId}`);
      checkInteger(a.tokens, `tokens of ${a.requestId}`, 1);
      checkInteger(a.contextTokens, `contextTokens of ${a.requestId}`);
      if (seen.has(a.requestId) || this.isQueued(a.requestId) || this.running?.rows.some((r) => r.requestId === a.requestId)) {
        throw new ServingStateError(`request ${a.requestId} is already queued or running at instance ${this.instance}`);
      }
      seen.add(a.requestId);
      const here = this.resident.get(a.requestId);
      const needsKv = this.block.kvBytesPerToken > 0 && a.contextTokens > 0 && here !== a.contextTokens;
      const bytes = a.tokens * (this.block.activationBytesPerToken + this.block.kvBytesPerToken) + (needsKv ? a.contextTokens * this.block.kvBytesPerToken : 0);
      if (bytes > this.memoryBytes) {
        throw new ServingCapacityError(bytes, this.memoryBytes, `request ${a.requestId} needs ${bytes} bytes at instance ${this.instance}, more than its whole memory bound ${this.memoryBytes}`);
      }
      made.push({ ...a, cls: here !== undefined ? 'returning' : 'new', enqueuedAt: now, bytes, needsKv });
    }
    for (const r of made) {
      (r.cls === 'returning' ? this.returning : this.fresh).push(r);
      this.countdowns.delete(r.requestId);
    }
    return made;
  }

  /** The queue in priority order: RETURNING FIFO, then NEW FIFO. */
  queue(): QueuedRow[] {
    return [...this.returning, ...this.fresh];
  }

  get queueLength(): number {
    return this.returning.length + this.fresh.length;
  }

  /**
   * When the last {@link plan} returned null to wait for a returning request: the time to plan again (the driver
   * calls plan() then, or sooner when a row arrives). Null otherwise.
   */
  get holdUntil(): number | null {
    return this.holdingUntil;
  }

  get busy(): boolean {
    return this.running !== null;
  }

  /** The rows of the batch running now (empty when idle). */
  runningRows(): readonly QueuedRow[] {
    return this.running?.rows ?? [];
  }

  /**
   * The next batch, or null when the instance is running one or nothing is queued (or, with holdForReturningMs, it
   * waits for a returning request: see {@link holdUntil}). An arriving batch on an empty, free instance runs at once
   * unless a resident request is due back within the hold; otherwise queued neighbours are packed up to the limits.
   * `holdForReturningMs` overrides the instance's hold for this call (e.g. scaled by the device's current sharing).
   */
  plan(options: { holdForReturningMs?: number } = {}): AgentBatchPlan | null {
    this.holdingUntil = null;
    const holdMs = options.holdForReturningMs === undefined ? this.holdMs : checkNonNegative(options.holdForReturningMs, `holdForReturningMs of instance ${this.instance}`);
    if (this.running || this.queueLength === 0) return null;
    const rows = packRows(this.queue(), this.maxBatch, this.memoryBytes, this.packing);
    if (rows.length === 0) return null;
    if (holdMs > 0 && rows.length < this.maxBatch) {
      // Wait for a returning request due soon, within the hold bound of the oldest queued row.
      const now = this.clock.now();
      const oldest = Math.min(...this.queue().map((r) => r.enqueuedAt));
      const limit = oldest + holdMs;
      let due = Number.POSITIVE_INFINITY;
      for (const t of this.countdowns.values()) if (t > now && t <= limit && t < due) due = t;
      if (due !== Number.POSITIVE_INFINITY) {
        this.holdingUntil = due;
        return null;
      }
    }
    const taken = new Set(rows);
    for (const q of [this.returning, this.fresh]) {
      const keep = q.filter((r) => !taken.has(r));
      q.length = 0;
      q.push(...keep);
    }
    const plan: AgentBatchPlan = {
      planId: this.nextPlan++,
      instance: this.instance,
      block: this.block.blockId,
      startedAt: this.clock.now(),
      rows,
      tokens: rows.reduce((n, r) => n + r.tokens, 0),
      bytes: rows.reduce((n, r) => n + r.bytes, 0),
    };
    this.running = plan;
    this.counters.batches++;
    this.counters.rows += rows.length;
    for (const r of rows) this.counters[r.cls === 'returning' ? 'returningRows' : 'newRows']++;
    return plan;
  }

  /**
   * The running batch finished. Every row's state stays here (its KV grew by its tokens) unless it finished; a row
   * that will be back gets a countdown. Rows without an outcome are treated as continuing with no countdown.
   */
  complete(planId: number, outcomes: readonly RowOutcome[] = []): void {
    const plan = this.running;
    if (!plan || plan.planId !== planId) throw new ServingStateError(`instance ${this.instance} is not running plan ${planId}${plan ? ` (it runs ${plan.planId})` : ''}`);
    const byId = new Map(outcomes.map((o) => [o.requestId, o]));
    for (const id of byId.keys()) if (!plan.rows.some((r) => r.requestId === id)) throw new ServingNotFoundError('request', id, `request ${id} was not in plan ${planId} of instance ${this.instance}`);
    const now = this.clock.now();
    for (const r of plan.rows) {
      const o = byId.get(r.requestId);
      if (o?.finished) {
        this.resident.delete(r.requestId);
        this.countdowns.delete(r.requestId);
        continue;
      }
      this.resident.set(r.requestId, r.contextTokens + r.tokens);
      if (o?.returnInMs !== undefined) this.countdowns.set(r.requestId, now + checkNonNegative(o.returnInMs, `returnInMs of ${r.requestId}`));
    }
    this.running = null;
  }

  /** The request's state moved in (KV migrated or recomputed here) with `tokens` tokens. */
  adopt(requestId: string, tokens: number): void {
    this.resident.set(requestId, checkInteger(tokens, `tokens of ${requestId}`));
  }

  /** The request's state here is gone (migrated away, freed by the redundancy scan, finished elsewhere). */
  evict(requestId: string): void {
    this.resident.delete(requestId);
    this.countdowns.delete(requestId);
  }

  /** Removes a queued (not running) request; true when it was queued. */
  withdraw(requestId: string): boolean {
    for (const q of [this.returning, this.fresh]) {
      const i = q.findIndex((r) => r.requestId === requestId);
      if (i >= 0) {
        q.splice(i, 1);
        return true;
      }
    }
    return false;
  }

  isQueued(requestId: string): boolean {
    return this.returning.some((r) => r.requestId === requestId) || this.fresh.some((r) => r.requestId === requestId);
  }

  /** Tokens of the request's state here, or null. */
  residentTokens(requestId: string): number | null {
    return this.resident.get(requestId) ?? null;
  }

  /** When the request is expected back (ms on the clock), or null when it has no countdown here. */
  countdown(requestId: string): number | null {
    return this.countdowns.get(requestId) ?? null;
  }

  /** Whether the request's state must be kept: it is away and its countdown has not expired (design note A13). */
  retained(requestId: string): boolean {
    const t = this.countdowns.get(requestId);
    return t !== undefined && t > this.clock.now();
  }

  /** Away requests whose countdown expired: candidates for eviction or proactive migration, most overdue first. */
  overdue(): { requestId: string; dueAt: number }[] {
    const now = this.clock.now();
    return [...this.countdowns].filter(([, t]) => t <= now).map(([requestId, dueAt]) => ({ requestId, dueAt })).sort((a, b) => a.dueAt - b.dueAt || (a.requestId < b.requestId ? -1 : 1));
  }

  /** The queue as the batches it would run as (greedy packing of the current queue), for T_queue. */
  queuedBatches(): BatchShape[] {
    const out: BatchShape[] = [];
    let rest = this.queue();
    while (rest.length > 0) {
      const rows = packRows(rest, this.maxBatch, this.memoryBytes, this.packing);
      if (rows.length === 0) break;
      out.push({ rows: rows.length, tokens: rows.reduce((n, r) => n + r.tokens, 0) });
      const taken = new Set(rows);
      rest = rest.filter((r) => !taken.has(r));
    }
    return out;
  }

  /** Time to drain the queue (Σ profiled compute of its batches): the speculation ranking (design note A17). */
  drainMs(profile: ComputeProfile): number {
    return this.queuedBatches().reduce((t, b) => t + computeMs(profile, b), 0);
  }

  stats(): AgentStats {
    return { ...this.counters };
  }
}

/**
 * Groups the rows leaving an instance by the destination chosen for each, one message per destination, in order of
 * first appearance (design note A14: deterministic packing instead of a broadcast).
 */
export function packOutbox<T extends { dest: string }>(items: readonly T[]): { dest: string; items: T[] }[] {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const list = out.get(item.dest);
    if (list) list.push(item);
    else out.set(item.dest, [item]);
  }
  return [...out].map(([dest, list]) => ({ dest, items: list }));
}
