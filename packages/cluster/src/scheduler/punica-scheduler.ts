/**
 * Punica's cluster scheduler (paper §5.1 and §5.3; design notes §7 and pseudocode §9.7), clock-agnostic and
 * transport-agnostic: it holds placement state and calls {@link EngineHost}s, which are direct calls in-process,
 * BullMQ jobs on Redis, or simulated GPUs in `@tessera/sim`. It never reads the wall clock (decision 6).
 *
 *   place(r):     candidates = hosts with batch < cap and free KV ≥ kvNeeded(r);
 *                 pick the largest batch, ties to the highest host id; none → FCFS queue
 *   freed:        (finish, error, cancel, eviction, new host, load report) → place the queue's head while it fits
 *   evicted(r):   the host ran out of KV and dropped its newest request → r is placed like a new request
 *                 (another host preferred), prefilling prompt + generated tokens (migration by recompute)
 *   host lost:    every request on it is placed again the same way, from the tokens its client has
 *   autoscale():  "need a host" when no host is lightly loaded (or requests queue); "releasable" hosts idle ≥ τ
 *
 * Batch sizes are the scheduler's own (requests it assigned); free KV comes from the host's last load report
 * minus the placements that report does not include yet, so a burst of placements between two reports cannot
 * oversubscribe a host.
 */
import { EventEmitter } from 'node:events';

import { type Clock, pagesForLength, systemClock } from '@tessera/core';
import { ClusterArgumentError } from '../errors.js';
import type { EngineHost, GenerateRequest, HostEvent, HostLoad, Placement } from '../types.js';

export const DEFAULT_SCHEDULER_MAX_BATCH = 32;

export interface PunicaSchedulerOptions {
  /** Most requests per host (the paper's max batch size; default 32). A host's own smaller cap wins. */
  maxBatch?: number;
  /** A host is "lightly loaded" while its batch is below this fraction of the cap (default 0.5). */
  lightlyLoadedFraction?: number;
  /** A host with no requests for this long is releasable (default 60 s). */
  idleReleaseMs?: number;
  /** Default systemClock. */
  clock?: Clock;
}

export interface AutoscaleSignal {
  /** No host is lightly loaded, or requests are queued: ask for another host. */
  needHost: boolean;
  /** Hosts with batch 0 for at least idleReleaseMs (highest id first: the placement order's last choices). */
  releasable: string[];
  /** Hosts below the lightly-loaded threshold. */
  lightlyLoaded: string[];
}

export interface SchedulerHostView {
  id: string;
  /** Requests assigned by the scheduler. */
  batch: number;
  cap: number;
  /** Free KV pages as the scheduler counts them (report minus unreported placements); null without a report. */
  freeKvPages: number | null;
  kvPages: number | null;
  requests: string[];
  /** Clock time since when the host has had no request; null while it has some. */
  idleSince: number | null;
}

export interface SchedulerSnapshot {
  hosts: SchedulerHostView[];
  /** Request ids waiting for a host, in FCFS order. */
  queue: string[];
  /** Requests the scheduler tracks (queued + placed). */
  requests: number;
}

export interface SchedulerEvents {
  /** A placement was decided; emitted before the host's add() is called. */
  placed: [{ id: string; hostId: string; attempt: number; generated: number; migrated: boolean; at: number }];
  /** No host could take the request now; it waits in FCFS order. */
  queued: [{ id: string; attempt: number; at: number }];
  /** A host dropped the request on KV exhaustion; it is being placed again. */
  evicted: [{ id: string; hostId: string; attempt: number; generated: number; at: number }];
  /** The request left the scheduler. */
  done: [{ id: string; reason: 'finished' | 'failed' | 'cancelled'; hostId: string | null; at: number }];
  /** A host was removed; its requests were placed again (or queued). */
  'host-lost': [{ hostId: string; requests: string[]; at: number }];
}

interface TrackedRequest {
  readonly request: GenerateRequest;
  generated: number[];
  attempt: number;
  hostId: string | null;
  /** Host to avoid on the next placement (the host that just evicted it). */
  avoid: string | null;
  kvNeeded: number;
}

interface TrackedHost {
  readonly host: EngineHost;
  readonly assigned: Set<string>;
  idleSince: number | null;
}

export class PunicaScheduler extends EventEmitter<SchedulerEvents> {
  readonly maxBatch: number;
  readonly lightlyLoadedFraction: number;
  readonly idleReleaseMs: number;
  private readonly clock: Clock;
  private readonly hosts = new Map<string, TrackedHost>();
  private readonly requests = new Map<string, TrackedRequest>();
  private readonly queue: string[] = [];

  constructor(options: PunicaSchedulerOptions = {}) {
    super();
    this.maxBatch = options.maxBatch ?? DEFAULT_SCHEDULER_MAX_BATCH;
    if (!Number.isSafeInteger(this.maxBatch) || this.maxBatch < 1) throw new ClusterArgumentError(`maxBatch must be a positive integer, got ${this.maxBatch}`);
    this.lightlyLoadedFraction = options.lightlyLoadedFraction ?? 0.5;
    if (!(this.lightlyLoadedFraction > 0 && this.lightlyLoadedFraction <= 1)) {
      throw new ClusterArgumentError(`lightlyLoadedFraction must be in (0, 1], got ${this.lightlyLoadedFraction}`);
    }
    this.idleReleaseMs = options.idleReleaseMs ?? 60_000;
    if (!(this.idleReleaseMs >= 0)) throw new ClusterArgumentError(`idleReleaseMs must be >= 0, got ${this.idleReleaseMs}`);
    this.clock = options.clock ?? systemClock;
  }

  // ─── hosts ─────────────────────────────────────────────────────────────────────────────────────────────────

  /** Adds a host; it takes requests once its load() is known. Queued requests are placed if it fits them. */
  addHost(host: EngineHost): void {
    if (this.hosts.has(host.id)) throw new ClusterArgumentError(`host ${JSON.stringify(host.id)} is already added`);
    this.hosts.set(host.id, { host, assigned: new Set(), idleSince: this.clock.now() });
    this.drain();
  }

  hasHost(hostId: string): boolean {
    return this.hosts.has(hostId);
  }

  hostIds(): string[] {
    return [...this.hosts.keys()].sort();
  }

  /**
   * Removes a host that is gone (its load report expired, its process died, or it is released). Each request it
   * held is placed again like a new one, continuing after `generatedOf(id)`: the tokens its client already has.
   */
  removeHost(hostId: string, generatedOf: (id: string) => readonly number[] = () => []): string[] {
    const h = this.hosts.get(hostId);
    if (!h) return [];
    this.hosts.delete(hostId);
    const orphans = [...h.assigned];
    const at = this.clock.now();
    for (const id of orphans) {
      const r = this.requests.get(id)!;
      const generated = [...generatedOf(id)];
      if (generated.length > r.generated.length) r.generated = generated;
      r.hostId = null;
      r.avoid = null;
    }
    this.emit('host-lost', { hostId, requests: orphans, at });
    // Re-placed in their original FCFS order (arrival order = insertion order of the map).
    for (const id of orphans) this.placeOrQueue(this.requests.get(id)!, true);
    this.drain();
    return orphans;
  }

  // ─── requests ──────────────────────────────────────────────────────────────────────────────────────────────

  /** Places a new request, or queues it (FCFS). False, changing nothing, when the id is already tracked. */
  submit(request: GenerateRequest): boolean {
    if (this.requests.has(request.id)) return false;
    const r: TrackedRequest = { request, generated: [], attempt: -1, hostId: null, avoid: null, kvNeeded: 0 };
    this.requests.set(request.id, r);
    // Strict FCFS: a newcomer never overtakes the queue.
    if (this.queue.length > 0) this.enqueue(r);
    else this.placeOrQueue(r, false);
    return true;
  }

  /** Cancels a queued or placed request (client disconnect): the host drops it, all state goes. */
  cancel(id: string): boolean {
    const r = this.requests.get(id);
    if (!r) return false;
    const hostId = r.hostId;
    if (hostId !== null) {
      const h = this.hosts.get(hostId);
      this.unassign(r);
      h?.host.cancel(id, r.attempt);
    } else {
      const at = this.queue.indexOf(id);
      if (at >= 0) this.queue.splice(at, 1);
    }
    this.requests.delete(id);
    this.emit('done', { id, reason: 'cancelled', hostId, at: this.clock.now() });
    this.drain();
    return true;
  }

  /**
   * What a host reported about a placement. Events of a superseded attempt, of another host, or of an unknown
   * request (already finished or cancelled: at-least-once delivery repeats them) are ignored.
   */
  onHostEvent(hostId: string, event: HostEvent): void {
    const r = this.requests.get(event.id);
    if (!r || r.hostId !== hostId || r.attempt !== event.attempt) return;
    switch (event.kind) {
      case 'token':
        return;
      case 'finish':
      case 'error':
        this.unassign(r);
        this.requests.delete(r.request.id);
        this.emit('done', { id: r.request.id, reason: event.kind === 'finish' ? 'finished' : 'failed', hostId, at: this.clock.now() });
        this.drain();
        return;
      case 'evicted': {
        // Migration (§7.4): the host already dropped it and freed its pages (cancel precedes add); place it again
        // like a new request, preferring another host, prefilling prompt + generated on the target.
        this.unassign(r);
        if (event.generated.length > r.generated.length) r.generated = [...event.generated];
        r.avoid = hostId;
        this.emit('evicted', { id: r.request.id, hostId, attempt: r.attempt, generated: r.generated.length, at: this.clock.now() });
        this.placeOrQueue(r, true);
        this.drain();
        return;
      }
    }
  }

  /** Call when hosts' loads changed outside the scheduler (a load report arrived): places queued requests that now fit. */
  capacityChanged(): void {
    this.drain();
  }

  // ─── elasticity (§7.3) ─────────────────────────────────────────────────────────────────────────────────────

  autoscale(): AutoscaleSignal {
    const now = this.clock.now();
    const lightlyLoaded: string[] = [];
    const releasable: string[] = [];
    for (const [id, h] of this.hosts) {
      if (h.assigned.size < this.lightlyLoadedFraction * this.capOf(h)) lightlyLoaded.push(id);
      if (h.assigned.size === 0 && h.idleSince !== null && now - h.idleSince >= this.idleReleaseMs) releasable.push(id);
    }
    lightlyLoaded.sort();
    releasable.sort().reverse();
    return { needHost: this.queue.length > 0 || lightlyLoaded.length === 0, releasable, lightlyLoaded };
  }

  // ─── introspection ─────────────────────────────────────────────────────────────────────────────────────────

  get queued(): number {
    return this.queue.length;
  }

  /** Where a request is: its host and attempt, or null host while queued; null when not tracked. */
  locate(id: string): { hostId: string | null; attempt: number; generated: number } | null {
    const r = this.requests.get(id);
    return r ? { hostId: r.hostId, attempt: r.attempt, generated: r.generated.length } : null;
  }

  snapshot(): SchedulerSnapshot {
    return {
      hosts: this.hostIds().map((id) => {
        const h = this.hosts.get(id)!;
        const load = h.host.load();
        return {
          id,
          batch: h.assigned.size,
          cap: this.capOf(h),
          freeKvPages: load ? this.freeKv(h, load) : null,
          kvPages: load?.kvPages ?? null,
          requests: [...h.assigned],
          idleSince: h.idleSince,
        };
      }),
      queue: [...this.queue],
      requests: this.requests.size,
    };
  }

  // ─── placement ─────────────────────────────────────────────────────────────────────────────────────────────

  private capOf(h: TrackedHost): number {
    const load = h.host.load();
    return load ? Math.min(this.maxBatch, load.maxBatch) : this.maxBatch;
  }

  /** The report's free pages minus this scheduler's placements the report does not include yet. */
  private freeKv(h: TrackedHost, load: HostLoad): number {
    const reported = new Set(load.requests.map((p) => `${p.id}\u0000${p.attempt}`));
    let free = load.freeKvPages;
    for (const id of h.assigned) {
      const r = this.requests.get(id)!;
      if (!reported.has(`${id}\u0000${r.attempt}`)) free -= r.kvNeeded;
    }
    return free;
  }

  /** Pages the request holds at its longest: prompt + maxTokens − 1 (the last token is never fed back). */
  private kvAtMostOf(r: TrackedRequest): number {
    return pagesForLength(r.request.prompt.length + r.request.maxTokens - 1);
  }

  /** kvNeeded(r) = pages(len(prompt ++ generated) + 1) (§9.7). */
  private kvNeededOf(r: TrackedRequest): number {
    return pagesForLength(r.request.prompt.length + r.generated.length + 1);
  }

  /**
   * The best host for r: largest batch below the cap with KV room, ties to the highest id; null if none. The
   * host that just evicted r is passed over unless it is the only host (a migration moves the request).
   */
  private pick(r: TrackedRequest, need: number): TrackedHost | null {
    let best: TrackedHost | null = null;
    for (const [id, h] of this.hosts) {
      if (id === r.avoid && this.hosts.size > 1) continue;
      const load = h.host.load();
      if (!load || h.assigned.size >= this.capOf(h) || this.freeKv(h, load) < need) continue;
      // A host whose whole cache could never hold the finished request would only refuse it (hosts may differ).
      if (load.kvPages < this.kvAtMostOf(r)) continue;
      if (!best || h.assigned.size > best.assigned.size || (h.assigned.size === best.assigned.size && id > best.host.id)) best = h;
    }
    return best;
  }

  private tryPlace(r: TrackedRequest, migrated: boolean): boolean {
    const need = this.kvNeededOf(r);
    const h = this.pick(r, need);
    if (!h) return false;
    r.attempt++;
    r.kvNeeded = need;
    r.hostId = h.host.id;
    r.avoid = null;
    h.assigned.add(r.request.id);
    h.idleSince = null;
    const placement: Placement = { request: r.request, generated: [...r.generated], attempt: r.attempt };
    this.emit('placed', { id: r.request.id, hostId: h.host.id, attempt: r.attempt, generated: r.generated.length, migrated, at: this.clock.now() });
    h.host.add(placement);
    return true;
  }

  private placeOrQueue(r: TrackedRequest, migrated: boolean): void {
    if (this.tryPlace(r, migrated)) return;
    // Once queued it is an ordinary FCFS entry: any host may take it.
    r.avoid = null;
    this.enqueue(r);
  }

  private enqueue(r: TrackedRequest): void {
    this.queue.push(r.request.id);
    this.emit('queued', { id: r.request.id, attempt: r.attempt + 1, at: this.clock.now() });
  }

  /** Strict FCFS: place the head while it fits; the first that does not fit blocks the rest. */
  private drain(): void {
    while (this.queue.length > 0) {
      const r = this.requests.get(this.queue[0]!)!;
      // Placed before (attempt >= 0): this placement moves it.
      if (!this.tryPlace(r, r.attempt >= 0)) return;
      this.queue.shift();
    }
  }

  private unassign(r: TrackedRequest): void {
    if (r.hostId === null) return;
    const h = this.hosts.get(r.hostId);
    r.hostId = null;
    if (!h) return;
    h.assigned.delete(r.request.id);
    if (h.assigned.size === 0) h.idleSince = this.clock.now();
  }
}
