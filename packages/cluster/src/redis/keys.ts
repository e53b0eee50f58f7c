/**
 * Where the distributed cluster keeps things in Redis. Everything lives under one prefix P (RedisOptions.prefix,
 * default 'tessera'), so several clusters (or parallel tests) share one Redis without meeting:
 *
 *   P:stream:<requestId>   Redis stream, one per request: StreamEvents as JSON in field `e`. The scheduler writes
 *                          `placed` markers (the attempt fences) and the `cancelled` finish of a queued request;
 *                          hosts append token/finish/error/evicted with XADD NOMKSTREAM (a host never creates a
 *                          stream, so a late event cannot resurrect one). Clients XREAD it. It gets an EXPIRE when
 *                          the request is done; until then it is also the record that makes a repeated submit a no-op.
 *   P:load:<hostId>        the host's last HostLoad (JSON), SET with a PX TTL: a host whose key expired is gone.
 *   P:hosts                set of host ids that have reported (the scheduler's and clients' index of load keys).
 *
 * BullMQ queues, with BullMQ's `prefix` option set to P (so their keys are P:<queue>:…; queue names hold no ':'):
 *
 *   scheduler              the scheduler's inbox: 'submit' (a GenerateRequest), 'cancel' {id}, 'host-event'
 *                          {hostId, event}.
 *   host.<hostId>          one per engine host: 'add' (a Placement), 'cancel' {id, attempt}.
 *
 * Job ids make at-least-once delivery idempotent within the completed-job window: 'submit.<id>', 'cancel.<id>',
 * '<id>.<attempt>' (add), '<id>.<attempt>.cancel', '<id>.<attempt>.<kind>' (host events), with ':' and '%' in a
 * request id percent-escaped (BullMQ refuses ':' in custom ids).
 */
import { ClusterArgumentError } from '../errors.js';

export const DEFAULT_PREFIX = 'tessera';
/** The scheduler's inbox queue. */
export const SCHEDULER_QUEUE = 'scheduler';
/** The stream entry field that holds one event's JSON. */
export const EVENT_FIELD = 'e';
/** How long a finished request's stream stays readable (late clients, duplicate-submit detection). */
export const DONE_STREAM_TTL_MS = 10 * 60_000;
/** Completed jobs are kept this long (seconds), so a repeated job id is still recognised and dropped. */
export const COMPLETED_JOB_AGE_S = 10 * 60;

/** Job options shared by the cluster's queues: completed jobs stay a while so a repeated job id is dropped. */
export const CLUSTER_JOB_OPTIONS = {
  removeOnComplete: { age: COMPLETED_JOB_AGE_S },
  removeOnFail: { age: COMPLETED_JOB_AGE_S * 6 },
  attempts: 3,
  backoff: { type: 'fixed', delay: 100 },
} as const;

const HOST_ID = /^[A-Za-z0-9_.-]{1,64}$/;

export function checkHostId(hostId: unknown): string {
  if (typeof hostId !== 'string' || !HOST_ID.test(hostId)) {
    throw new ClusterArgumentError(`host id must be 1-64 characters of [A-Za-z0-9_.-] (it names a BullMQ queue), got ${JSON.stringify(hostId)}`);
  }
  return hostId;
}

export function checkPrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix.length === 0 || /\s/.test(prefix)) {
    throw new ClusterArgumentError(`prefix must be a non-empty string without spaces, got ${JSON.stringify(prefix)}`);
  }
  return prefix;
}

export function hostQueueName(hostId: string): string {
  return `host.${hostId}`;
}

/** A request id made safe for a BullMQ job id. */
function jobIdPart(id: string): string {
  return id.replace(/%/g, '%25').replace(/:/g, '%3A');
}

export const jobIds = {
  submit: (id: string) => `submit.${jobIdPart(id)}`,
  cancel: (id: string) => `cancel.${jobIdPart(id)}`,
  add: (id: string, attempt: number) => `${jobIdPart(id)}.${attempt}`,
  cancelPlacement: (id: string, attempt: number) => `${jobIdPart(id)}.${attempt}.cancel`,
  hostEvent: (id: string, attempt: number, kind: string) => `${jobIdPart(id)}.${attempt}.${kind}`,
};

export interface RedisKeys {
  readonly prefix: string;
  stream(requestId: string): string;
  load(hostId: string): string;
  readonly hosts: string;
}

export function redisKeys(prefix: string): RedisKeys {
  return {
    prefix,
    stream: (requestId) => `${prefix}:stream:${requestId}`,
    load: (hostId) => `${prefix}:load:${hostId}`,
    hosts: `${prefix}:hosts`,
  };
}
