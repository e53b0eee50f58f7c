/**
 * Distributed mode (arlo.md §14): one BullMQ queue per instance, each served by one worker with concurrency 1.
 * The frontend's dispatcher picks the instance and enqueues on *its* queue (a shared pull queue would bypass
 * Algorithm 1), and keeps the outstanding counts itself (increment on enqueue, decrement on the job's completion)
 * instead of polling Redis. A retarget is a job on the same queue, so it runs after the instance has drained.
 */
import { connectRedis } from '@tessera/cluster';
import { Queue, QueueEvents, Worker } from 'bullmq';
import type { Redis } from 'ioredis';

import { checkBatch, type InferOutput, type Runtime, type RuntimeKind, RuntimeUnavailableError } from '../runtimes/runtime.js';
import { ThreadRuntime } from '../runtimes/thread-runtime.js';

type JobData = { op: 'infer'; ids: number[][] } | { op: 'retarget'; length: number };
type JobResult = { logits: number[][] | null; execMs: number };

export interface ClusterInstancesOptions {
  redisUrl: string;
  prefix: string;
  instanceIds: readonly string[];
  /** The length each instance is set to first. */
  placement: readonly number[];
  maxBatch: number;
  vocabSize: number;
}

/** An instance on the far side of its queue. */
class QueueRuntime implements Runtime {
  readonly kind = 'remote' as const;
  constructor(
    readonly id: string,
    public length: number,
    readonly maxBatch: number,
    private readonly vocabSize: number,
    private readonly queue: Queue<JobData, JobResult>,
    private readonly events: QueueEvents,
    private readonly connections: readonly Redis[],
  ) {}

  private async run(data: JobData): Promise<JobResult> {
    const job = await this.queue.add(data.op, data, { removeOnComplete: true, removeOnFail: 100 });
    try {
      return (await job.waitUntilFinished(this.events)) as JobResult;
    } catch (err) {
      throw new RuntimeUnavailableError(`instance ${this.id}: ${(err as Error).message}`, { cause: err });
    }
  }

  async infer(batch: readonly (readonly number[])[]): Promise<InferOutput> {
    checkBatch(batch, this.length, this.maxBatch, this.vocabSize);
    const r = await this.run({ op: 'infer', ids: batch.map((s) => [...s]) });
    return { logits: r.logits ? r.logits.map((row) => Float32Array.from(row)) : null, execMs: r.execMs };
  }

  async retarget(length: number): Promise<void> {
    await this.run({ op: 'retarget', length });
    this.length = length;
  }

  async close(): Promise<void> {
    await Promise.allSettled([this.events.close(), this.queue.close()]);
    for (const c of this.connections) c.disconnect();
  }
}

/** The frontend's side: one queue (and its completion events) per instance, each set to its first length. */
export async function connectClusterInstances(options: ClusterInstancesOptions): Promise<Runtime[]> {
  const redis = { url: options.redisUrl, prefix: options.prefix };
  const out: QueueRuntime[] = [];
  for (const [k, id] of options.instanceIds.entries()) {
    const connection = await connectRedis(redis, `arlo-frontend-${id}`);
    const eventsConnection = await connectRedis(redis, `arlo-events-${id}`);
    const queue = new Queue<JobData, JobResult>(id, { connection, prefix: options.prefix });
    const events = new QueueEvents(id, { connection: eventsConnection, prefix: options.prefix });
    await events.waitUntilReady();
    const runtime = new QueueRuntime(id, options.placement[k]!, options.maxBatch, options.vocabSize, queue, events, [connection, eventsConnection]);
    await runtime.retarget(options.placement[k]!);
    out.push(runtime);
  }
  return out;
}

export interface ClusterWorkerOptions {
  redisUrl: string;
  prefix: string;
  instanceIds: readonly string[];
  kind: RuntimeKind;
  modelDir: string;
  /** The length the instances start at (the frontend retargets them). */
  length: number;
  maxBatch: number;
}

/** A worker process: one runtime worker thread and one BullMQ worker (concurrency 1) per instance id. */
export async function startClusterWorker(options: ClusterWorkerOptions): Promise<{ close: () => Promise<void> }> {
  if (options.kind === 'native') process.env.TESSERA_THREADS = '1';
  const redis = { url: options.redisUrl, prefix: options.prefix };
  const runtimes: ThreadRuntime[] = [];
  const workers: Worker<JobData, JobResult>[] = [];
  const connections: Redis[] = [];
  for (const id of options.instanceIds) {
    const runtime = await ThreadRuntime.start({ id, kind: options.kind, modelDir: options.modelDir, length: options.length, maxBatch: options.maxBatch });
    runtimes.push(runtime);
    const connection = await connectRedis(redis, `arlo-worker-${id}`);
    connections.push(connection);
    workers.push(
      new Worker<JobData, JobResult>(
        id,
        async (job) => {
          if (job.data.op === 'retarget') {
            await runtime.retarget(job.data.length);
            return { logits: null, execMs: 0 };
          }
          const out = await runtime.infer(job.data.ids);
          return { logits: out.logits!.map((row) => Array.from(row)), execMs: out.execMs };
        },
        { connection, prefix: options.prefix, concurrency: 1 },
      ),
    );
  }
  return {
    close: async () => {
      await Promise.allSettled(workers.map((w) => w.close()));
      await Promise.allSettled(runtimes.map((r) => r.close()));
      for (const c of connections) c.disconnect();
    },
  };
}
