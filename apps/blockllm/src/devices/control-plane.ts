/**
 * The control plane of a multi-device server: placement jobs — deploy a block instance on a device, evict one,
 * migrate one to another device, re-place every served chain by a policy — queued and run one at a time between
 * steps, with their status kept for the placement routes. Two implementations of one interface: in-process (a
 * promise chain; the default) and BullMQ on Redis (`--redis`: a queue `placement` under the server's prefix, its
 * worker in the engine thread, job states from BullMQ), as ARCHITECTURE decision 7 asks: no home-made RPC.
 */
import { Queue, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

import { connectRedis } from '@tessera/cluster';

export type PlacementJob =
  | { kind: 'deploy'; block: string; device: string }
  | { kind: 'evict'; block: string }
  | { kind: 'migrate'; block: string; device: string }
  | { kind: 'place'; policy?: 'locality' | 'frag-min' | undefined };

export type JobState = 'waiting' | 'active' | 'completed' | 'failed';

export interface JobStatus {
  id: string;
  job: PlacementJob;
  state: JobState;
  /** What a completed job did (the instances it deployed and evicted). */
  result: unknown;
  /** Why a failed job failed. */
  error: string | null;
  transport: 'in-process' | 'bullmq';
}

export type JobHandler = (job: PlacementJob) => Promise<unknown>;

export interface ControlPlane {
  readonly transport: 'in-process' | 'bullmq';
  submit(job: PlacementJob): Promise<JobStatus>;
  get(id: string): Promise<JobStatus | null>;
  /** The latest jobs, newest first. */
  list(limit?: number): Promise<JobStatus[]>;
  close(): Promise<void>;
}

/** Jobs kept for status (older ones are forgotten). */
const KEEP = 200;

export class InProcessControlPlane implements ControlPlane {
  readonly transport = 'in-process' as const;
  private readonly jobs = new Map<string, JobStatus>();
  private next = 0;
  private tail: Promise<void> = Promise.resolve();

  constructor(private readonly handler: JobHandler) {}

  async submit(job: PlacementJob): Promise<JobStatus> {
    const status: JobStatus = { id: String(++this.next), job, state: 'waiting', result: null, error: null, transport: this.transport };
    this.jobs.set(status.id, status);
    if (this.jobs.size > KEEP) this.jobs.delete(this.jobs.keys().next().value!);
    this.tail = this.tail.then(async () => {
      status.state = 'active';
      try {
        status.result = await this.handler(job);
        status.state = 'completed';
      } catch (err) {
        status.error = (err as Error).message;
        status.state = 'failed';
      }
    });
    return { ...status };
  }

  async get(id: string): Promise<JobStatus | null> {
    const s = this.jobs.get(id);
    return s ? { ...s } : null;
  }

  async list(limit = 50): Promise<JobStatus[]> {
    return [...this.jobs.values()].reverse().slice(0, limit).map((s) => ({ ...s }));
  }

  async close(): Promise<void> {
    await this.tail;
  }
}

export interface BullmqControlPlaneOptions {
  url: string;
  prefix: string;
}

export class BullmqControlPlane implements ControlPlane {
  readonly transport = 'bullmq' as const;

  private constructor(
    private readonly queue: Queue<PlacementJob, unknown>,
    private readonly worker: Worker<PlacementJob, unknown>,
    private readonly connections: Redis[],
  ) {}

  /** Connects (failing fast with RedisUnavailableError when Redis does not answer) and starts the job worker. */
  static async start(options: BullmqControlPlaneOptions, handler: JobHandler): Promise<BullmqControlPlane> {
    const redis = { url: options.url, prefix: options.prefix };
    const queueConnection = await connectRedis(redis, 'blockllm-placement-queue');
    let workerConnection: Redis;
    try {
      workerConnection = await connectRedis(redis, 'blockllm-placement-worker');
    } catch (err) {
      queueConnection.disconnect();
      throw err;
    }
    const queue = new Queue<PlacementJob, unknown>('placement', { connection: queueConnection, prefix: options.prefix });
    // One job at a time: each changes the placement the next one is checked against.
    const worker = new Worker<PlacementJob, unknown>('placement', (job) => handler(job.data), { connection: workerConnection, prefix: options.prefix, concurrency: 1 });
    await worker.waitUntilReady();
    return new BullmqControlPlane(queue, worker, [queueConnection, workerConnection]);
  }

  async submit(job: PlacementJob): Promise<JobStatus> {
    const j = await this.queue.add(job.kind, job, { removeOnComplete: { count: KEEP }, removeOnFail: { count: KEEP } });
    return { id: j.id!, job, state: 'waiting', result: null, error: null, transport: this.transport };
  }

  async get(id: string): Promise<JobStatus | null> {
    // The state first, then the job: a job read before it finished would lack its result or failure reason.
    const state = await this.queue.getJobState(id);
    const j = await this.queue.getJob(id);
    if (!j || state === 'unknown') return null;
    return this.statusOf(j.id!, j.data, state, j.returnvalue, j.failedReason);
  }

  async list(limit = 50): Promise<JobStatus[]> {
    const jobs = await this.queue.getJobs(['waiting', 'active', 'completed', 'failed', 'delayed', 'prioritized'], 0, limit - 1, false);
    const out = await Promise.all(jobs.filter((j) => j?.id).map(async (j) => this.statusOf(j.id!, j.data, await j.getState(), j.returnvalue, j.failedReason)));
    return out.sort((a, b) => Number(b.id) - Number(a.id));
  }

  private statusOf(id: string, job: PlacementJob, state: string, result: unknown, failedReason: string | undefined): JobStatus {
    const s: JobState = state === 'completed' ? 'completed' : state === 'failed' ? 'failed' : state === 'active' ? 'active' : 'waiting';
    return { id, job, state: s, result: s === 'completed' ? (result ?? null) : null, error: s === 'failed' ? (failedReason ?? 'failed') : null, transport: this.transport };
  }

  async close(): Promise<void> {
    await this.worker.close();
    await this.queue.close();
    for (const c of this.connections) c.disconnect();
  }
}
