/**
 * `--role scheduler`: the Punica scheduler of the cluster, as one process. It places requests from the frontends'
 * inbox on worker hosts (largest batch below the cap with KV room, ties to the highest host id), queues FCFS,
 * migrates evicted requests, re-places the requests of a worker whose load report expired, and logs the
 * autoscale signals ("need a host", "releasable hosts") as they change.
 */
import { type PunicaSchedulerOptions, type RedisOptions, type SchedulerService, startSchedulerService } from '@tessera/cluster';

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
  const log = options.log ?? (() => {});
  const { redis, autoscaleEveryMs, log: _log, ...schedulerOptions } = options;
  const service = await startSchedulerService({ ...redis, ...schedulerOptions });
  const s = service.scheduler;
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
  }, autoscaleEveryMs ?? 5_000);
  timer.unref();
  return {
    service,
    async close() {
      clearInterval(timer);
      await service.close();
    },
  };
}
