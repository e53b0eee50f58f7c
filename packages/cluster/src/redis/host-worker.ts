/**
 * The worker-process side of a distributed engine host. It consumes its own BullMQ queue (`host.<hostId>`, one job
 * at a time, so placements and cancels apply in the order the scheduler sent them), runs placements on a
 * HostEngine, and reports back through Redis only:
 *
 *   every HostEvent           → XADD (NOMKSTREAM) to the request's stream, which clients read
 *   finish / error / evicted  → a 'host-event' job on the scheduler's inbox (frees capacity, triggers migration)
 *   its HostLoad              → SET P:load:<hostId> with a PX TTL (+ SADD P:hosts), every reportEveryMs and after
 *                               each capacity change; the key expiring is how the scheduler learns the host died
 *
 * Jobs are delivered at least once; the placements run through an InProcessEngineHost, which makes them idempotent
 * (an 'add' at or below the newest attempt this host was given is ignored).
 */
import { type Job, Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

import { ClusterArgumentError } from '../errors.js';
import { InProcessEngineHost } from '../in-process/in-process-host.js';
import type { HostEngine, HostEvent, Placement } from '../types.js';
import { CLOSE_WAIT_MS, connectRedis, isConnectionError, type RedisOptions, resolveRedisOptions, settleWithin } from './connection.js';
import { checkHostId, CLUSTER_JOB_OPTIONS, EVENT_FIELD, hostQueueName, jobIds, redisKeys, SCHEDULER_QUEUE } from './keys.js';
import { encodeEvent } from './stream-events.js';

export interface HostWorkerOptions extends RedisOptions {
  /** Names the host's queue and load key: 1-64 characters of [A-Za-z0-9_.-]. */
  hostId: string;
  engine: HostEngine;
  /** Load report period (default 500 ms). */
  reportEveryMs?: number;
  /** TTL of each load report: the host counts as dead this long after its last report (default 3000 ms). */
  reportTtlMs?: number;
}

export interface HostWorkerHandle {
  readonly hostId: string;
  /**
   * Stops taking jobs, drops the placements it holds (their engine requests are cancelled, their events no longer
   * sent) and deletes the load key, so the scheduler re-places them at once. The engine itself stays the caller's.
   */
  close(): Promise<void>;
}

export const DEFAULT_REPORT_EVERY_MS = 500;
export const DEFAULT_REPORT_TTL_MS = 3000;

export async function startHostWorker(options: HostWorkerOptions): Promise<HostWorkerHandle> {
  const hostId = checkHostId(options.hostId);
  const { prefix } = resolveRedisOptions(options);
  const { engine } = options;
  const reportEveryMs = options.reportEveryMs ?? DEFAULT_REPORT_EVERY_MS;
  const reportTtlMs = options.reportTtlMs ?? DEFAULT_REPORT_TTL_MS;
  if (!(Number.isFinite(reportEveryMs) && reportEveryMs > 0)) throw new ClusterArgumentError(`reportEveryMs must be a positive number, got ${reportEveryMs}`);
  if (!(Number.isFinite(reportTtlMs) && reportTtlMs > reportEveryMs)) {
    throw new ClusterArgumentError(`reportTtlMs must exceed reportEveryMs (${reportEveryMs}), got ${reportTtlMs}`);
  }
  const keys = redisKeys(prefix);
  const redis = await connectRedis(options, `host-${hostId}`);
  return new HostWorker(hostId, engine, redis, prefix, keys, reportEveryMs, reportTtlMs).start();
}

class HostWorker implements HostWorkerHandle {
  private readonly inbox: Queue;
  private worker: Worker | null = null;
  /** Runs the placements on the engine (idempotent add, cancel by attempt); its events go to emit(). */
  private readonly host: InProcessEngineHost;
  private reportTimer: NodeJS.Timeout | null = null;
  private reportPending = false;
  private closed = false;

  constructor(
    readonly hostId: string,
    engine: HostEngine,
    private readonly redis: Redis,
    private readonly prefix: string,
    private readonly keys: ReturnType<typeof redisKeys>,
    private readonly reportEveryMs: number,
    private readonly reportTtlMs: number,
  ) {
    this.host = new InProcessEngineHost(hostId, engine, (_hostId, event) => this.emit(event));
    this.inbox = new Queue(SCHEDULER_QUEUE, { connection: redis, prefix, defaultJobOptions: CLUSTER_JOB_OPTIONS });
    this.inbox.on('error', (err) => this.warn('inbox queue', err));
  }

  async start(): Promise<this> {
    const worker = new Worker(hostQueueName(this.hostId), (job) => this.process(job), {
      connection: this.redis,
      prefix: this.prefix,
      concurrency: 1,
      removeOnComplete: { age: CLUSTER_JOB_OPTIONS.removeOnComplete.age },
      removeOnFail: { age: CLUSTER_JOB_OPTIONS.removeOnFail.age },
    });
    worker.on('error', (err) => this.warn('worker', err));
    this.worker = worker;
    try {
      await worker.waitUntilReady();
      await this.publishLoad();
    } catch (err) {
      await this.close();
      throw err;
    }
    this.reportTimer = setInterval(() => this.scheduleReport(), this.reportEveryMs);
    // Back from a Redis outage: report at once, so the scheduler does not count this host as gone.
    this.redis.on('ready', () => this.scheduleReport());
    return this;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.reportTimer) clearInterval(this.reportTimer);
    if (this.worker) await settleWithin(this.worker.close(), CLOSE_WAIT_MS);
    // The scheduler re-places what this host held once the load key is gone; the engine must not keep them.
    this.host.cancelAll();
    // With Redis away these would wait for it forever; the key then simply expires (the slower way to be lost).
    const goodbye = this.redis.multi().del(this.keys.load(this.hostId)).srem(this.keys.hosts, this.hostId).exec();
    await settleWithin(goodbye, CLOSE_WAIT_MS);
    await settleWithin(this.inbox.close(), CLOSE_WAIT_MS);
    await settleWithin(this.redis.quit(), CLOSE_WAIT_MS);
    this.redis.disconnect();
  }

  private async process(job: Job): Promise<void> {
    if (this.closed) return;
    if (job.name === 'add') this.add(job.data as Placement);
    else if (job.name === 'cancel') this.cancel(job.data as { id: string; attempt: number });
  }

  private add(placement: Placement): void {
    this.host.add(placement);
    this.scheduleReport();
  }

  private cancel({ id, attempt }: { id: string; attempt: number }): void {
    this.host.cancel(id, attempt);
  }

  /** Sends one host event: to the request's stream always, to the scheduler when it changes the placement. */
  private emit(event: HostEvent): void {
    if (this.closed) return;
    const { id, attempt } = event;
    this.redis.xadd(this.keys.stream(id), 'NOMKSTREAM', '*', EVENT_FIELD, encodeEvent(event)).catch((err) => this.warn('stream write', err));
    if (event.kind === 'token') return;
    this.inbox
      .add('host-event', { hostId: this.hostId, event }, { jobId: jobIds.hostEvent(id, attempt, event.kind) })
      .catch((err) => this.warn('host event', err));
    this.scheduleReport();
  }

  /** Coalesces report requests (a burst of finishes sends one report). */
  private scheduleReport(): void {
    if (this.reportPending || this.closed) return;
    this.reportPending = true;
    setImmediate(() => {
      this.reportPending = false;
      // While Redis is away the report would only be stale by the time it is sent; the next tick sends a fresh one.
      if (this.closed || this.redis.status !== 'ready') return;
      this.publishLoad().catch((err) => this.warn('load report', err));
    });
  }

  private async publishLoad(): Promise<void> {
    const load = this.host.load();
    await this.redis
      .multi()
      .set(this.keys.load(this.hostId), JSON.stringify(load), 'PX', this.reportTtlMs)
      .sadd(this.keys.hosts, this.hostId)
      .exec();
  }

  private warn(what: string, err: unknown): void {
    if (this.closed || isConnectionError(err)) return;
    process.emitWarning(`tessera host ${this.hostId}: ${what} failed: ${(err as Error)?.message ?? String(err)}`);
  }
}

/** What {@link runRedisHost} runs: an engine, the loop that steps it, and how to free it. */
export interface RunnableHost {
  engine: HostEngine;
  loop: { run(signal: AbortSignal): Promise<void> };
  dispose(): void;
}

/**
 * A cluster host process's life: Redis is checked first (a host without it can do nothing, so it fails before
 * `start` loads a model), then `start` builds the engine, its loop runs, and the host worker takes placements.
 * close() stops taking placements, lets the loop finish its step, then frees the engine.
 */
export async function runRedisHost(options: Omit<HostWorkerOptions, 'engine'> & { start: () => Promise<RunnableHost> }): Promise<HostWorkerHandle> {
  const { start, ...workerOptions } = options;
  const probe = await connectRedis(options, `worker ${options.hostId}`);
  await probe.quit();
  const host = await start();
  const abort = new AbortController();
  const loop = host.loop.run(abort.signal);
  const stop = async () => {
    abort.abort();
    await loop;
    host.dispose();
  };
  let handle: HostWorkerHandle;
  try {
    handle = await startHostWorker({ ...workerOptions, engine: host.engine });
  } catch (err) {
    await stop();
    throw err;
  }
  let closing: Promise<void> | null = null;
  return {
    hostId: handle.hostId,
    close() {
      closing ??= handle.close().then(stop);
      return closing;
    },
  };
}
