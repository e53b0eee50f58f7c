/**
 * The scheduler process of the distributed cluster: one PunicaScheduler fed by Redis.
 *
 *   inbox queue 'scheduler' (BullMQ, one job at a time): 'submit' (a GenerateRequest), 'cancel' {id},
 *     'host-event' {hostId, event}
 *   poll loop over P:hosts / P:load:<hostId>: a new key → addHost(new RedisEngineHost); a changed one →
 *     capacityChanged(); a key gone (its TTL ran out: the host died) → fence and re-place its requests
 *   RedisEngineHost.add: XADD the `placed` marker to the request's stream, then the 'add' job on `host.<hostId>`
 *
 * Inbox jobs and poll ticks run strictly one at a time (an async mutex), so the scheduler sees one consistent
 * order of events, as it does in-process.
 *
 * Re-placing a lost host's request must continue after exactly the tokens its client has. The fence gives that:
 * a `placed` marker with the next attempt goes into the stream first; the stream up to the marker, reduced with
 * ClientStream's rules, is what every client has or will have, since clients drop whatever the old attempt
 * writes after the marker.
 */
import { type Job, Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

import { type Clock, systemClock } from '@tessera/core';
import { ClusterArgumentError, ClusterError } from '../errors.js';
import { PunicaScheduler, type PunicaSchedulerOptions } from '../scheduler/punica-scheduler.js';
import type { EngineHost, GenerateRequest, HostEvent, HostLoad, Placement, StreamEvent } from '../types.js';
import { CLOSE_WAIT_MS, connectRedis, isConnectionError, type RedisOptions, resolveRedisOptions, settleWithin } from './connection.js';
import { CLUSTER_JOB_OPTIONS, DONE_STREAM_TTL_MS, hostQueueName, jobIds, type RedisKeys, redisKeys, SCHEDULER_QUEUE } from './keys.js';
import { appendEvent, decodeEntry, readEntries, reduceEntries, type StreamEntry } from './stream-events.js';

export interface SchedulerServiceOptions extends RedisOptions, PunicaSchedulerOptions {
  /** Period of the load-key poll (default 250 ms). */
  pollMs?: number;
  /**
   * A host whose load report has not changed for this long (by the scheduler's clock) counts as lost even while
   * its key lives. Default: only the key's own TTL (set by the host, HostWorkerOptions.reportTtlMs) decides.
   */
  hostTtlMs?: number;
  /** An operator's log: placements, queueing, migrations, lost hosts, and the autoscale signal when it changes. */
  log?: (line: string) => void;
  /** How often the autoscale signal is checked for changes, with `log` (default 5 s). */
  autoscaleEveryMs?: number;
}

export interface SchedulerService {
  readonly scheduler: PunicaScheduler;
  /** Stops the inbox worker and the poll loop, and closes the connections. Placements already sent keep running. */
  close(): Promise<void>;
}

export const DEFAULT_POLL_MS = 250;

/** Removes a host from the hosts set only if its load key is (still) gone: a host reporting again keeps its entry. */
const FORGET_HOST_SCRIPT = `if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('SREM', KEYS[2], ARGV[1]) end return 0`;

/**
 * The scheduler's handle on a host worker in another process: add and cancel become jobs on the host's queue,
 * sent in call order; load() is the host's last report as the poll loop read it.
 */
export class RedisEngineHost implements EngineHost {
  readonly id: string;
  private readonly redis: Redis;
  private readonly keys: RedisKeys;
  private readonly queue: Queue;
  private report: HostLoad | null = null;
  /** Stale placements already cancelled (attempt NUL id), while the host still reports them. */
  private readonly staleCancelled = new Set<string>();
  /** The chain that keeps this host's marker and job writes in call order. */
  private tail: Promise<void> = Promise.resolve();
  private readonly onError: (err: unknown) => void;

  constructor(id: string, redis: Redis, keys: RedisKeys, onError: (err: unknown) => void = () => {}) {
    this.id = id;
    this.redis = redis;
    this.keys = keys;
    this.onError = onError;
    this.queue = new Queue(hostQueueName(id), { connection: redis, prefix: keys.prefix, defaultJobOptions: CLUSTER_JOB_OPTIONS });
    this.queue.on('error', onError);
  }

  /** Writes the `placed` marker (the fence of earlier attempts), then enqueues the 'add' job. */
  add(placement: Placement): void {
    const { id } = placement.request;
    const marker: StreamEvent = { kind: 'placed', id, attempt: placement.attempt, hostId: this.id, generated: placement.generated.length };
    this.inOrder(async () => {
      await appendEvent(this.redis, this.keys.stream(id), marker);
      await this.queue.add('add', placement, { jobId: jobIds.add(id, placement.attempt) });
    });
  }

  cancel(id: string, attempt: number): void {
    this.inOrder(async () => {
      await this.queue.add('cancel', { id, attempt }, { jobId: jobIds.cancelPlacement(id, attempt) });
    });
  }

  load(): HostLoad | null {
    return this.report;
  }

  /**
   * Cancels placements this host reports but the scheduler no longer gives it, once each (a report lists them
   * again until the host has dropped them).
   */
  cancelStale(placements: readonly { id: string; attempt: number }[]): void {
    const current = new Set(placements.map(({ id, attempt }) => `${attempt}\u0000${id}`));
    for (const key of this.staleCancelled) if (!current.has(key)) this.staleCancelled.delete(key);
    for (const { id, attempt } of placements) {
      const key = `${attempt}\u0000${id}`;
      if (this.staleCancelled.has(key)) continue;
      this.staleCancelled.add(key);
      this.cancel(id, attempt);
    }
  }

  /** The poll loop's newest report; null takes the host out of placement (it is being given up for lost). */
  setLoad(load: HostLoad | null): void {
    this.report = load;
  }

  /** Resolves when every add and cancel issued so far is in Redis. */
  flushed(): Promise<void> {
    return this.tail;
  }

  async close(): Promise<void> {
    await this.tail;
    await this.queue.close();
  }

  private inOrder(write: () => Promise<void>): void {
    this.tail = this.tail.then(write).catch((err) => this.onError(err));
  }
}

interface TrackedReport {
  host: RedisEngineHost;
  raw: string;
  /** Scheduler clock time the report last changed. */
  changedAt: number;
}

export async function startSchedulerService(options: SchedulerServiceOptions): Promise<SchedulerService> {
  const { prefix } = resolveRedisOptions(options);
  const pollMs = options.pollMs ?? DEFAULT_POLL_MS;
  if (!(Number.isFinite(pollMs) && pollMs > 0)) throw new ClusterArgumentError(`pollMs must be a positive number, got ${pollMs}`);
  const hostTtlMs = options.hostTtlMs;
  if (hostTtlMs !== undefined && !(Number.isFinite(hostTtlMs) && hostTtlMs > pollMs)) {
    throw new ClusterArgumentError(`hostTtlMs must exceed pollMs (${pollMs}), got ${hostTtlMs}`);
  }
  const scheduler = new PunicaScheduler(options);
  const redis = await connectRedis(options, 'scheduler');
  const service = new RedisSchedulerService(scheduler, redis, redisKeys(prefix), pollMs, hostTtlMs ?? null, options.clock ?? systemClock);
  try {
    await service.start();
  } catch (err) {
    await service.close();
    throw err;
  }
  if (!options.log) return service;
  const stopLog = logSchedulerEvents(scheduler, options.log, options.autoscaleEveryMs ?? 5_000);
  return {
    scheduler,
    async close() {
      stopLog();
      await service.close();
    },
  };
}

/** Logs the scheduler's decisions, and its autoscale signal whenever it changes; returns the stop function. */
function logSchedulerEvents(s: PunicaScheduler, log: (line: string) => void, everyMs: number): () => void {
  s.on('placed', (e) => log(`placed ${e.id} on ${e.hostId} (attempt ${e.attempt}${e.migrated ? `, resuming after ${e.generated} tokens` : ''})`));
  s.on('queued', (e) => log(`queued ${e.id}: no host has a batch slot and KV room`));
  s.on('evicted', (e) => log(`${e.hostId} ran out of KV: migrating ${e.id} after ${e.generated} tokens`));
  s.on('host-lost', (e) => log(`host ${e.hostId} stopped reporting: re-placing ${e.requests.length} request(s)`));
  let last = '';
  const timer = setInterval(() => {
    const a = s.autoscale();
    const line = `autoscale: ${s.hostIds().length} host(s), ${s.queued} queued, need host: ${a.needHost ? 'yes' : 'no'}, releasable: ${a.releasable.join(', ') || 'none'}`;
    if (line !== last) log(line);
    last = line;
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

class RedisSchedulerService implements SchedulerService {
  private readonly hosts = new Map<string, TrackedReport>();
  /** Placed requests cancelled on their host, until the host's finish (or eviction) for that attempt arrives. */
  private readonly cancelling = new Map<string, { hostId: string; attempt: number }>();
  private worker: Worker | null = null;
  private pollTimer: NodeJS.Timeout | null = null;
  /** The async mutex: every inbox job and poll tick runs after the previous one settled. */
  private serial: Promise<unknown> = Promise.resolve();
  /** Clock time of the last poll that read Redis (a gap means Redis was away: no report could change then). */
  private lastPollAt: number | null = null;
  private closed = false;

  constructor(
    readonly scheduler: PunicaScheduler,
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly pollMs: number,
    private readonly hostTtlMs: number | null,
    private readonly clock: Clock,
  ) {
    scheduler.on('done', ({ id }) => {
      this.redis.pexpire(this.keys.stream(id), DONE_STREAM_TTL_MS).catch((err) => this.warn('stream expiry', err));
    });
  }

  async start(): Promise<void> {
    await this.exclusive(() => this.poll());
    const worker = new Worker(SCHEDULER_QUEUE, (job) => this.exclusive(() => this.process(job)), {
      connection: this.redis,
      prefix: this.keys.prefix,
      concurrency: 1,
      removeOnComplete: { age: CLUSTER_JOB_OPTIONS.removeOnComplete.age },
      removeOnFail: { age: CLUSTER_JOB_OPTIONS.removeOnFail.age },
    });
    worker.on('error', (err) => this.warn('inbox worker', err));
    this.worker = worker;
    await worker.waitUntilReady();
    this.schedulePoll();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.pollTimer) clearTimeout(this.pollTimer);
    if (this.worker) await settleWithin(this.worker.close(), CLOSE_WAIT_MS);
    await settleWithin(this.serial, CLOSE_WAIT_MS);
    await Promise.all([...this.hosts.values()].map((t) => settleWithin(t.host.close(), CLOSE_WAIT_MS)));
    this.hosts.clear();
    await settleWithin(this.redis.quit(), CLOSE_WAIT_MS);
    this.redis.disconnect();
  }

  private exclusive<T>(task: () => Promise<T>): Promise<T> {
    const run = this.serial.then(task);
    this.serial = run.catch(() => {});
    return run;
  }

  private schedulePoll(): void {
    if (this.closed) return;
    this.pollTimer = setTimeout(() => {
      this.exclusive(() => this.poll())
        .catch((err) => this.warn('host poll', err))
        .finally(() => this.schedulePoll());
    }, this.pollMs);
  }

  // ─── inbox ─────────────────────────────────────────────────────────────────────────────────────────────────

  private async process(job: Job): Promise<void> {
    // Failed, the job is retried (by the next scheduler to run) rather than completed unprocessed.
    if (this.closed) throw new ClusterError('TESSERA_CLUSTER_CLOSED', 'the scheduler service is closing');
    switch (job.name) {
      case 'submit':
        return this.submit(job.data as GenerateRequest);
      case 'cancel':
        return this.cancel((job.data as { id: string }).id);
      case 'host-event': {
        const { hostId, event } = job.data as { hostId: string; event: HostEvent };
        const cancelling = this.cancelling.get(event.id);
        if (cancelling && cancelling.hostId === hostId && cancelling.attempt === event.attempt && event.kind !== 'token') {
          this.cancelling.delete(event.id);
          // Evicted before the cancel reached the host: no 'cancelled' finish will come from there.
          if (event.kind === 'evicted') await this.finishCancelled(event.id, event.attempt);
        }
        this.scheduler.onHostEvent(hostId, event);
        return;
      }
    }
  }

  private async submit(request: GenerateRequest): Promise<void> {
    if (!request || typeof request.id !== 'string' || request.id.length === 0) return;
    if (this.scheduler.locate(request.id)) return;
    // Its stream exists: it already ran (or was cancelled) within the stream's window. Same id, same run.
    if ((await this.redis.exists(this.keys.stream(request.id))) > 0) return;
    this.scheduler.submit(request);
  }

  private async cancel(id: string): Promise<void> {
    const where = this.scheduler.locate(id);
    if (where && where.hostId !== null) {
      // Placed: the host's engine cancels it and its 'cancelled' finish reaches the stream. Remembered until the
      // host answers, in case it evicts the request first or dies.
      this.cancelling.set(id, { hostId: where.hostId, attempt: where.attempt });
      this.scheduler.cancel(id);
      return;
    }
    if (!where && (await this.redis.exists(this.keys.stream(id))) > 0) return; // finished or cancelled already
    // Queued (or not submitted yet): nothing runs it, so the scheduler ends the stream itself, at the attempt it
    // would have been placed with (at or after every fence the client saw).
    await this.finishCancelled(id, where ? where.attempt + 1 : 0);
    if (where) this.scheduler.cancel(id);
  }

  /** Ends a request's stream with a 'cancelled' finish carrying the tokens its client has, and lets it expire. */
  private async finishCancelled(id: string, attempt: number): Promise<void> {
    const key = this.keys.stream(id);
    const stream = reduceEntries(id, await readEntries(this.redis, key));
    if (stream.done) return;
    const tokens = [...stream.delivered];
    await appendEvent(this.redis, key, {
      kind: 'finish',
      id,
      attempt: Math.max(attempt, stream.attempt),
      result: { id, tokens, text: '', finishReason: 'cancelled', promptTokens: 0, completionTokens: tokens.length },
    });
    await this.redis.pexpire(key, DONE_STREAM_TTL_MS);
  }

  // ─── hosts ─────────────────────────────────────────────────────────────────────────────────────────────────

  private async poll(): Promise<void> {
    if (this.closed) return;
    const members = await this.redis.smembers(this.keys.hosts);
    const raws = members.length > 0 ? await this.redis.mget(members.map((m) => this.keys.load(m))) : [];
    const now = this.clock.now();
    // Redis was away (no poll for a report's lifetime): report ages restart now rather than all expiring at once.
    if (this.hostTtlMs !== null && this.lastPollAt !== null && now - this.lastPollAt >= this.hostTtlMs) {
      for (const t of this.hosts.values()) t.changedAt = now;
    }
    this.lastPollAt = now;
    const present = new Set<string>();
    let changed = false;
    for (let i = 0; i < members.length; i++) {
      const hostId = members[i]!;
      const raw = raws[i] ?? null;
      if (raw === null) {
        await this.redis.eval(FORGET_HOST_SCRIPT, 2, this.keys.load(hostId), this.keys.hosts, hostId);
        continue;
      }
      const load = parseLoad(raw, hostId);
      if (!load) continue;
      const tracked = this.hosts.get(hostId);
      if (tracked && tracked.raw === raw) {
        if (this.hostTtlMs === null || now - tracked.changedAt < this.hostTtlMs) present.add(hostId);
        continue;
      }
      present.add(hostId);
      changed = true;
      if (tracked) {
        tracked.raw = raw;
        tracked.changedAt = now;
        tracked.host.setLoad(load);
      } else {
        const host = new RedisEngineHost(hostId, this.redis, this.keys, (err) => this.warn(`host ${hostId}`, err));
        host.setLoad(load);
        this.hosts.set(hostId, { host, raw, changedAt: now });
        this.scheduler.addHost(host);
      }
      this.cancelStalePlacements(this.hosts.get(hostId)!.host, load);
    }
    for (const hostId of [...this.hosts.keys()]) {
      if (!present.has(hostId)) await this.loseHost(hostId);
    }
    if (changed) this.scheduler.capacityChanged();
  }

  /**
   * Placements a host reports that the scheduler no longer gives it (a superseded attempt, a request re-placed
   * while the host was counted lost, one cancelled meanwhile) are cancelled there, freeing their KV. The host
   * ignores a cancel whose attempt it does not hold, so a report older than the scheduler's state is harmless.
   */
  private cancelStalePlacements(host: RedisEngineHost, load: HostLoad): void {
    const stale: { id: string; attempt: number }[] = [];
    for (const { id, attempt } of load.requests) {
      const where = this.scheduler.locate(id);
      if (!where || where.hostId !== host.id || where.attempt !== attempt) stale.push({ id, attempt });
    }
    host.cancelStale(stale);
  }

  /** The host's key is gone: fence each of its requests, learn what its client has, re-place it from there. */
  private async loseHost(hostId: string): Promise<void> {
    const tracked = this.hosts.get(hostId)!;
    this.hosts.delete(hostId);
    // No placement on it from here on, and its pending writes first: a marker in flight must not follow the fence.
    tracked.host.setLoad(null);
    await tracked.host.flushed();
    const requests = this.scheduler.snapshot().hosts.find((h) => h.id === hostId)?.requests ?? [];
    const delivered = new Map<string, number[]>();
    for (const id of requests) {
      const where = this.scheduler.locate(id)!;
      const key = this.keys.stream(id);
      const fenceId = await appendEvent(this.redis, key, { kind: 'placed', id, attempt: where.attempt + 1, hostId: '', generated: where.generated });
      const entries = await readEntries(this.redis, key, fenceId);
      delivered.set(id, [...reduceEntries(id, entries).delivered]);
      // Its finish (or error) reached the stream before the host died, ahead of its inbox job: it is done, not
      // re-placed. (The host takes no placement meanwhile: its load was cleared above.)
      const ending = endingOf(entries, id, where.attempt);
      if (ending) this.scheduler.onHostEvent(hostId, ending);
    }
    this.scheduler.removeHost(hostId, (id) => delivered.get(id) ?? []);
    // Requests cancelled on this host that it never confirmed: their clients get the finish from here.
    for (const [id, cancelling] of [...this.cancelling]) {
      if (cancelling.hostId !== hostId) continue;
      this.cancelling.delete(id);
      await this.finishCancelled(id, cancelling.attempt + 1);
    }
    await tracked.host.close().catch((err) => this.warn(`host ${hostId} close`, err));
  }

  private warn(what: string, err: unknown): void {
    if (this.closed || isConnectionError(err)) return;
    process.emitWarning(`tessera scheduler: ${what} failed: ${(err as Error)?.message ?? String(err)}`);
  }
}

function parseLoad(raw: string, hostId: string): HostLoad | null {
  try {
    const load = JSON.parse(raw) as HostLoad;
    if (!load || typeof load !== 'object' || !Array.isArray(load.requests) || typeof load.maxBatch !== 'number') return null;
    return { ...load, hostId };
  } catch {
    return null;
  }
}

/** The finish or error of this attempt among the entries, if any: the request ended on its host. */
function endingOf(entries: readonly StreamEntry[], id: string, attempt: number): HostEvent | null {
  for (const entry of entries) {
    const event = decodeEntry(entry);
    if (event && event.id === id && event.attempt === attempt && (event.kind === 'finish' || event.kind === 'error')) return event;
  }
  return null;
}
