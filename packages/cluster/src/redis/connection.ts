/**
 * The one way this package connects to Redis: fail fast at start-up (a missing Redis is a configuration error
 * the operator should see at once, with how to fix it), then never give up (a Redis restart must not lose work:
 * commands issued while it is away wait in ioredis' offline queue and are sent when it is back).
 */
import { Redis } from 'ioredis';

import { ClusterArgumentError, RedisUnavailableError } from '../errors.js';
import { checkPrefix, DEFAULT_PREFIX } from './keys.js';

export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';
export const DEFAULT_CONNECT_TIMEOUT_MS = 5000;

export interface RedisOptions {
  /** Default process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'. */
  url?: string;
  /** Namespace for every key and BullMQ queue (default 'tessera'). */
  prefix?: string;
  /** Fail-fast deadline at start-up (default 5000 ms). */
  connectTimeoutMs?: number;
}

/** REDIS_URL when set (and not blank), else the local default. */
export function redisUrlFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  const url = env.REDIS_URL?.trim();
  return url ? url : DEFAULT_REDIS_URL;
}

/** The options with their defaults filled in and checked. */
export function resolveRedisOptions(options: RedisOptions): { url: string; prefix: string; connectTimeoutMs: number } {
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
  if (!(Number.isFinite(connectTimeoutMs) && connectTimeoutMs > 0)) {
    throw new ClusterArgumentError(`connectTimeoutMs must be a positive number, got ${connectTimeoutMs}`);
  }
  return { url: options.url ?? redisUrlFromEnv(), prefix: checkPrefix(options.prefix ?? DEFAULT_PREFIX), connectTimeoutMs };
}

/** The URL with its password masked, for messages and logs. */
export function redactRedisUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return url;
  }
}

/** Delay between start-up attempts inside the deadline. */
const STARTUP_RETRY_MS = 100;

/**
 * An ioredis connection for `label` (used in the connection name and in errors). Rejects with
 * RedisUnavailableError when Redis does not answer within connectTimeoutMs; once connected it reconnects forever
 * (maxRetriesPerRequest: null, offline queue on). The caller owns it (quit() or disconnect()).
 */
export async function connectRedis(options: RedisOptions, label: string): Promise<Redis> {
  const { url, connectTimeoutMs } = resolveRedisOptions(options);
  const deadline = Date.now() + connectTimeoutMs;
  let connected = false;
  const failure: { last: Error | null } = { last: null };
  let redis: Redis;
  try {
    redis = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: null,
      enableOfflineQueue: true,
      connectTimeout: connectTimeoutMs,
      connectionName: `tessera-${label}`.replace(/[^A-Za-z0-9_.-]/g, '-'),
      retryStrategy: (times) => {
        if (connected) return Math.min(50 * times, 1000);
        return Date.now() + STARTUP_RETRY_MS < deadline ? STARTUP_RETRY_MS : null;
      },
    });
  } catch (err) {
    throw new ClusterArgumentError(`${label}: bad Redis URL ${JSON.stringify(redactRedisUrl(url))}`, { cause: err });
  }
  // Without a listener ioredis prints every failed reconnect; reconnecting is automatic, the last error goes into
  // the start-up failure's message.
  redis.on('error', (err: Error) => {
    failure.last = err;
  });
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => finish(new Error(`no answer within ${connectTimeoutMs} ms`)), connectTimeoutMs);
      const onReady = () => finish(null);
      const onEnd = () => finish(failure.last ?? new Error('connection closed'));
      function finish(err: Error | null) {
        clearTimeout(timer);
        redis.off('ready', onReady);
        redis.off('end', onEnd);
        if (err) reject(err);
        else resolve();
      }
      redis.once('ready', onReady);
      redis.once('end', onEnd);
      // connect() rejects on the first failed try; the retries above continue until ready, or 'end' at the deadline.
      redis.connect().catch(() => {});
    });
  } catch (err) {
    redis.disconnect();
    const shown = redactRedisUrl(url);
    const why = failure.last?.message ?? (err as Error).message;
    throw new RedisUnavailableError(
      url,
      `${label}: Redis is not reachable at ${shown} (${why}). Start one (\`redis-server --appendonly yes\`, or ` +
        `\`docker run -p 6379:6379 redis:7\`) or point REDIS_URL at yours.`,
      { cause: failure.last ?? err },
    );
  }
  connected = true;
  return redis;
}

/**
 * Errors that only say the connection is down or being re-established. ioredis reconnects by itself and BullMQ
 * retries, so these are not worth a warning each (a Redis restart would print dozens).
 */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  const message = typeof e?.message === 'string' ? e.message : '';
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ENOTCONN', 'EHOSTUNREACH'].includes(code) ||
    /Connection is closed|ECONNREFUSED|ECONNRESET|Stream isn't writeable|LOADING/.test(message)
  );
}

/** How long a close() waits for each of its last exchanges with Redis (it may be away) before dropping them. */
export const CLOSE_WAIT_MS = 2000;

/** Resolves when `promise` settles or after `ms`, whichever comes first; never rejects. */
export function settleWithin(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.then(
      () => {},
      () => {},
    ),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]).finally(() => clearTimeout(timer));
}
