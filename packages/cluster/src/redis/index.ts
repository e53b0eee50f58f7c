/**
 * The distributed engine hosts (ARCHITECTURE decision 7: BullMQ on Redis, no home-made RPC).
 *
 *   frontend  connectClusterClient ──'submit'/'cancel' jobs──▶ queue `scheduler`
 *   scheduler startSchedulerService: PunicaScheduler ──'add'/'cancel' jobs──▶ queue `host.<hostId>`
 *   host      startHostWorker: HostEngine ──XADD events──▶ stream P:stream:<id> ──XREAD──▶ ClientStream
 *                                         ──'host-event' jobs (finish/error/evicted)──▶ queue `scheduler`
 *                                         ──SET P:load:<hostId> PX ttl──▶ scheduler's poll loop
 *
 * Key and queue layout: see keys.ts. Jobs are at least once and idempotent by job id and by (request id,
 * attempt); tokens reach the client exactly once through token indices and the attempt fences in the stream.
 */
export {
  connectRedis,
  DEFAULT_CONNECT_TIMEOUT_MS,
  DEFAULT_REDIS_URL,
  type RedisOptions,
  redisUrlFromEnv,
} from './connection.js';
export { DEFAULT_PREFIX, redisKeys, type RedisKeys } from './keys.js';
export {
  DEFAULT_REPORT_EVERY_MS,
  DEFAULT_REPORT_TTL_MS,
  type HostWorkerHandle,
  type HostWorkerOptions,
  runRedisHost,
  type RunnableHost,
  startHostWorker,
} from './host-worker.js';
export {
  DEFAULT_POLL_MS,
  RedisEngineHost,
  type SchedulerService,
  type SchedulerServiceOptions,
  startSchedulerService,
} from './scheduler-service.js';
export { connectClusterClient, type RedisClusterClient } from './cluster-client.js';
