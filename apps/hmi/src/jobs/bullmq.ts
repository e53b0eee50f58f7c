/**
 * Jobs on Redis: one BullMQ queue (`hmi-manager` under the configured prefix) and its worker in this process, with
 * concurrency 1. Status, progress, results and failures live in Redis, so any process on the same Redis can read
 * them; the registry of domains and tenants the jobs build is this server's (the worker that runs a job is the
 * server that serves its result).
 *
 * Cancelling a waiting job removes it from the queue and records it as cancelled; cancelling the running one aborts
 * its processor's signal through `Worker.cancelJob` (the processor then throws and registers nothing). Cancelled
 * jobs and the API codes of failures are kept in two small hashes beside the queue's keys.
 */
import { connectRedis, DEFAULT_PREFIX, type RedisOptions } from '@tessera/cluster';
import { type Job, Queue, UnrecoverableError, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

import { HmiConflictError, JobCancelledError, UnknownJobError } from '../errors.js';
import { clampProgress, type JobError, type JobFinished, type JobProcessor, type JobQueue, type JobSpec, type JobState, type JobView } from './queue.js';

export const MANAGER_QUEUE = 'hmi-manager';

/** Finished jobs BullMQ keeps (then the oldest go). */
const KEEP_FINISHED = 10_000;

export class BullJobQueue implements JobQueue {
  readonly mode = 'bullmq' as const;
  private worker: Worker<JobSpec> | null = null;
  private readonly cancelledKey: string;
  private readonly errorsKey: string;

  private constructor(
    private readonly queue: Queue<JobSpec>,
    private readonly connection: Redis,
    private readonly workerConnection: Redis,
    private readonly prefix: string,
    private readonly describe: (err: unknown) => JobError,
  ) {
    this.cancelledKey = `${prefix}:${MANAGER_QUEUE}:hmi-cancelled`;
    this.errorsKey = `${prefix}:${MANAGER_QUEUE}:hmi-errors`;
  }

  static async connect(redis: RedisOptions, describe: (err: unknown) => JobError): Promise<BullJobQueue> {
    const prefix = redis.prefix ?? DEFAULT_PREFIX;
    const connection = await connectRedis(redis, 'hmi-manager');
    let workerConnection: Redis;
    try {
      workerConnection = await connectRedis(redis, 'hmi-manager-worker');
    } catch (err) {
      connection.disconnect();
      throw err;
    }
    const queue = new Queue<JobSpec>(MANAGER_QUEUE, { connection, prefix });
    return new BullJobQueue(queue, connection, workerConnection, prefix, describe);
  }

  async start(processor: JobProcessor, onFinished?: JobFinished): Promise<void> {
    const worker = new Worker<JobSpec>(
      MANAGER_QUEUE,
      async (job, _token, signal) => {
        const id = job.id!;
        const ctx = { id, signal: signal ?? new AbortController().signal, progress: (p: number) => job.updateProgress(clampProgress(p)) };
        try {
          return await processor(job.data, ctx);
        } catch (err) {
          if (ctx.signal.aborted) throw new UnrecoverableError(new JobCancelledError(id).message);
          await this.connection.hset(this.errorsKey, id, JSON.stringify(this.describe(err)));
          // Manager errors are final: retrying a training run on the same input fails the same way.
          throw new UnrecoverableError(err instanceof Error ? err.message : String(err));
        }
      },
      { connection: this.workerConnection, prefix: this.prefix, concurrency: 1, removeOnComplete: { count: KEEP_FINISHED }, removeOnFail: { count: KEEP_FINISHED } },
    );
    const finished = async (job: Job<JobSpec> | undefined) => {
      if (!job?.id || !onFinished) return;
      const view = await this.get(job.id);
      if (view) onFinished(view);
    };
    worker.on('completed', (job) => void finished(job));
    worker.on('failed', (job) => void finished(job));
    worker.on('error', () => {}); // connection errors surface on the next call; BullMQ reconnects by itself
    await worker.waitUntilReady();
    this.worker = worker;
  }

  async add(spec: JobSpec): Promise<JobView> {
    const job = await this.queue.add(spec.op, spec, { attempts: 1 });
    return (await this.view(job))!;
  }

  async get(id: string): Promise<JobView | null> {
    const job = await this.queue.getJob(id);
    if (job) return this.view(job);
    const cancelled = await this.connection.hget(this.cancelledKey, id);
    return cancelled ? (JSON.parse(cancelled) as JobView) : null;
  }

  async cancel(id: string): Promise<JobView> {
    const job = await this.queue.getJob(id);
    if (!job) {
      if (await this.connection.hexists(this.cancelledKey, id)) throw new HmiConflictError('TESSERA_HMI_JOB_FINISHED', `job ${id} already finished (cancelled)`, { job: id, state: 'cancelled' });
      throw new UnknownJobError(id);
    }
    const before = await this.view(job);
    if (before === null) throw new UnknownJobError(id);
    if (before.state === 'queued') {
      const record: JobView = { ...before, state: 'cancelled', error: { message: `job ${id} was cancelled`, code: 'job_cancelled' }, finishedAt: new Date().toISOString() };
      await this.connection.hset(this.cancelledKey, id, JSON.stringify(record));
      try {
        await job.remove();
        return record;
      } catch {
        // It became active meanwhile (its lock stops the removal): cancel it as a running job.
        await this.connection.hdel(this.cancelledKey, id);
      }
    } else if (before.state !== 'running') {
      throw new HmiConflictError('TESSERA_HMI_JOB_FINISHED', `job ${id} already finished (${before.state})`, { job: id, state: before.state });
    }
    await this.connection.hset(this.cancelledKey, id, '');
    this.worker?.cancelJob(id, 'cancelled');
    // Until the processor has stopped, the job still reads 'running'; wait for it (it checks between steps).
    for (let i = 0; i < 600; i++) {
      const v = await this.get(id);
      if (v && v.state !== 'running') return v;
      await new Promise((r) => setTimeout(r, 50));
    }
    return (await this.get(id))!;
  }

  async counts(): Promise<{ queued: number; running: number }> {
    const c = await this.queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active');
    return { queued: (c.waiting ?? 0) + (c.prioritized ?? 0) + (c.delayed ?? 0), running: c.active ?? 0 };
  }

  async close(): Promise<void> {
    this.worker?.cancelAllJobs('the server shut down');
    await this.worker?.close();
    await this.queue.close();
    this.connection.disconnect();
    this.workerConnection.disconnect();
  }

  private async view(fetched: Job<JobSpec>): Promise<JobView | null> {
    const raw = await fetched.getState();
    if (raw === 'unknown') return null;
    // Fetched while it ran and finished since: read it again, for its result or failure.
    let job = fetched;
    if ((raw === 'completed' || raw === 'failed') && !fetched.finishedOn) {
      const again = await this.queue.getJob(fetched.id!);
      if (!again) return null;
      job = again;
    }
    const id = job.id!;
    let state: JobState;
    let error: JobError | null = null;
    if (raw === 'completed') state = 'done';
    else if (raw === 'failed') {
      const cancelled = await this.connection.hexists(this.cancelledKey, id);
      state = cancelled ? 'cancelled' : 'failed';
      const stored = cancelled ? null : await this.connection.hget(this.errorsKey, id);
      error = cancelled ? { message: `job ${id} was cancelled`, code: 'job_cancelled' } : stored ? (JSON.parse(stored) as JobError) : { message: job.failedReason, code: null };
    } else if (raw === 'active') state = 'running';
    else state = 'queued';
    const progress = typeof job.progress === 'number' ? job.progress : 0;
    return {
      id,
      op: job.data.op,
      target: job.data.target,
      state,
      progress: state === 'done' ? 1 : progress,
      result: state === 'done' ? (job.returnvalue ?? null) : null,
      error,
      createdAt: new Date(job.timestamp).toISOString(),
      finishedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : null,
    };
  }
}
