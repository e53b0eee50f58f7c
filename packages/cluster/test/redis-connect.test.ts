/**
 * Start-up against Redis: the URL from the environment, and failing fast (RedisUnavailableError, with the URL and
 * how to start Redis) when nothing answers, for every entry point.
 */
import { afterAll, describe, expect, it } from 'vitest';

import {
  ClusterArgumentError,
  connectClusterClient,
  connectRedis,
  RedisUnavailableError,
  redisUrlFromEnv,
  startHostWorker,
  startSchedulerService,
  type HostEngine,
} from '../src/index.js';
import { deleteKeys, freePort, REDIS_URL, uniquePrefix } from './support/redis-harness.js';

const idleEngine: HostEngine = {
  submit() {},
  cancel: () => false,
  load: () => ({ maxBatch: 1, kvPages: 1, pageTokens: 16, freeKvPages: 1, requests: [], adapters: [], residentAdapters: [], steps: 0, tokens: 0, at: 0 }),
};

describe('redisUrlFromEnv', () => {
  it('takes REDIS_URL when set, the local default otherwise', () => {
    expect(redisUrlFromEnv({ REDIS_URL: 'redis://cache:6380/2' })).toBe('redis://cache:6380/2');
    expect(redisUrlFromEnv({})).toBe('redis://127.0.0.1:6379');
    expect(redisUrlFromEnv({ REDIS_URL: '  ' })).toBe('redis://127.0.0.1:6379');
  });
});

describe('connectRedis', () => {
  const prefix = uniquePrefix('connect');
  afterAll(() => deleteKeys(REDIS_URL, prefix));

  it('connects to a live Redis', async () => {
    const redis = await connectRedis({ url: REDIS_URL, prefix }, 'test');
    try {
      expect(await redis.ping()).toBe('PONG');
      expect(redis.options.maxRetriesPerRequest).toBeNull();
    } finally {
      redis.disconnect();
    }
  });

  it('fails fast on a closed port: RedisUnavailableError within the deadline, naming the URL (password masked) and the fix', async () => {
    const port = await freePort();
    const url = `redis://:hunter2@127.0.0.1:${port}`;
    const started = Date.now();
    const err = await connectRedis({ url, connectTimeoutMs: 400 }, 'test').catch((e: unknown) => e);
    const elapsed = Date.now() - started;
    expect(err).toBeInstanceOf(RedisUnavailableError);
    const e = err as RedisUnavailableError;
    expect(e.code).toBe('TESSERA_REDIS_UNAVAILABLE');
    expect(e.url).toBe(url);
    expect(e.message).toContain(`127.0.0.1:${port}`);
    expect(e.message).not.toContain('hunter2');
    expect(e.message).toMatch(/redis-server/);
    expect(e.message).toMatch(/REDIS_URL/);
    // The deadline is 400 ms; the margin covers a loaded machine, not a retry loop that ignores the deadline.
    expect(elapsed).toBeLessThan(2400);
  });

  it('every entry point fails the same way', async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const options = { url, connectTimeoutMs: 300 };
    await expect(startSchedulerService(options)).rejects.toBeInstanceOf(RedisUnavailableError);
    await expect(connectClusterClient(options)).rejects.toBeInstanceOf(RedisUnavailableError);
    await expect(startHostWorker({ ...options, hostId: 'h1', engine: idleEngine })).rejects.toBeInstanceOf(RedisUnavailableError);
  });

  it('refuses bad options before connecting', async () => {
    await expect(startHostWorker({ url: REDIS_URL, prefix, hostId: 'a:b', engine: idleEngine })).rejects.toBeInstanceOf(ClusterArgumentError);
    await expect(connectRedis({ url: REDIS_URL, connectTimeoutMs: 0 }, 'test')).rejects.toBeInstanceOf(ClusterArgumentError);
    await expect(startHostWorker({ url: REDIS_URL, prefix, hostId: 'h1', engine: idleEngine, reportEveryMs: 500, reportTtlMs: 400 })).rejects.toBeInstanceOf(
      ClusterArgumentError,
    );
  });
});
