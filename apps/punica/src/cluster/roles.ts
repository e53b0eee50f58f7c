/**
 * The cluster's process roles besides the frontend (cluster/frontend.ts), on Redis with BullMQ (@tessera/cluster):
 *
 *   `--role scheduler`  the Punica scheduler as one process: places requests from the frontends' inbox on worker
 *                       hosts (largest batch below the cap with KV room, ties to the highest host id), queues FCFS,
 *                       migrates evicted requests, re-places the requests of a worker whose load report expired,
 *                       and logs its decisions and the autoscale signals as they change. It needs no model.
 *   `--role worker`     one engine host (no HTTP): the engine stack runs in this process, its loop evicts on KV
 *                       exhaustion so the scheduler can migrate the request, and the host worker feeds it from this
 *                       host's BullMQ queue, streams its tokens to Redis and publishes its load every half second.
 */
import { type HostWorkerHandle, type PunicaSchedulerOptions, type RedisOptions, runRedisHost, type SchedulerService, startSchedulerService } from '@tessera/cluster';

import { buildEngineStack, type EngineStackOptions } from '../engine/stack.js';

export interface ClusterSchedulerOptions extends PunicaSchedulerOptions {
  redis: RedisOptions;
  log?: (line: string) => void;
  /** How often the autoscale signal is checked for changes (default 5 s). */
  autoscaleEveryMs?: number;
}

export interface ClusterScheduler {
  readonly service: SchedulerService;
  close(): Promise<void>;
}

export async function startClusterScheduler(options: ClusterSchedulerOptions): Promise<ClusterScheduler> {
  const { redis, ...schedulerOptions } = options;
  const service = await startSchedulerService({ ...redis, ...schedulerOptions });
  return { service, close: () => service.close() };
}

export interface ClusterWorkerOptions extends Omit<EngineStackOptions, 'kvExhaustion'> {
  redis: RedisOptions;
  hostId: string;
  adapters: readonly { name: string; path: string }[];
  log?: (line: string) => void;
}

/** close(): stops taking placements, lets the engine loop finish its step, frees the model. */
export async function startClusterWorker(options: ClusterWorkerOptions): Promise<HostWorkerHandle> {
  const log = options.log ?? (() => {});
  const host = await runRedisHost({
    ...options.redis,
    hostId: options.hostId,
    async start() {
      const stack = buildEngineStack({ ...options, kvExhaustion: 'evict' });
      try {
        for (const { name, path } of options.adapters) await stack.register(name, path);
      } catch (err) {
        stack.dispose();
        throw err;
      }
      log(`engine ready: ${options.modelDir} on ${stack.model.backend.device}, ${stack.kv.numPages} KV pages, ${options.adapters.length} adapter(s)`);
      return { engine: stack.host, loop: stack.batcher, dispose: () => stack.dispose() };
    },
  });
  log(`host ${options.hostId} is taking placements`);
  return host;
}
