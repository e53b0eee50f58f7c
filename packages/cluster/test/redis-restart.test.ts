/**
 * Redis restarts mid-run and no request is lost: a redis-server of this test's own (append-only file, no RDB) is
 * shut down (SIGTERM: a clean shutdown that flushes the file) while hosts are generating and clients are reading,
 * more requests are submitted while it is away, and it comes back on the same port and directory. Every request
 * must finish with exactly its reference tokens, streamed once each, in order. Whether a host's load key outlives
 * the outage decides which path a request takes (kept, or fenced and re-placed); both must give the same tokens.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, expect, it } from 'vitest';

import {
  type ClientStream,
  connectClusterClient,
  type GenerateRequest,
  type RedisClusterClient,
  type SchedulerService,
  startSchedulerService,
} from '../src/index.js';
import { collect, freePort, HostProcess, makeTinyModel, range, PrivateRedis, type TinyModel, waitFor } from './support/redis-harness.js';

const prefix = 'tessera-restart';
let tiny: TinyModel;
let dataDir: string;
let redis: PrivateRedis;
let service: SchedulerService;
let client: RedisClusterClient;
const hosts: HostProcess[] = [];

beforeAll(async () => {
  tiny = makeTinyModel();
  dataDir = mkdtempSync(join(tmpdir(), 'tessera-redis-data-'));
  redis = new PrivateRedis(await freePort(), { dir: dataDir });
  await redis.start();
  service = await startSchedulerService({ url: redis.url, prefix, pollMs: 50 });
  client = await connectClusterClient({ url: redis.url, prefix });
  const started = await Promise.all(
    ['h1', 'h2'].map((hostId) => HostProcess.start({ modelDir: tiny.dir, hostId, url: redis.url, prefix, maxBatch: 2, stepDelayMs: 10, reportTtlMs: 1000 })),
  );
  hosts.push(...started);
  await waitFor('the scheduler to see both hosts', () => service.scheduler.hostIds().length === 2);
});

afterAll(async () => {
  await Promise.all(hosts.map((h) => h.stop()));
  await client?.close();
  await service?.close();
  await redis?.stop();
  tiny?.dispose();
  rmSync(dataDir, { recursive: true, force: true });
});

/**
 * Submits four requests, takes Redis away once each has streamed a few tokens, submits two more while it is
 * away, brings it back after `outageMs`, and checks every result.
 */
async function runThroughRestart(tag: string, outageMs: number): Promise<void> {
  const before: GenerateRequest[] = range(4).map((i) => tiny.request(`${tag}-before-${i}`, 6, 30, seed++));
  const during: GenerateRequest[] = range(2).map((i) => tiny.request(`${tag}-during-${i}`, 6, 12, seed++));
  const counts = new Map<string, number>();
  const read = (r: GenerateRequest, stream: ClientStream) => collect(stream, (n) => counts.set(r.id, n));

  const results = before.map((r) => read(r, client.submit(r)));
  await waitFor('every request to stream 2 tokens', () => before.every((r) => (counts.get(r.id) ?? 0) >= 2));
  await redis.stop();
  const atStop = before.map((r) => counts.get(r.id) ?? 0);
  // Issued while Redis is away: the submit jobs wait in the client's offline queue.
  results.push(...during.map((r) => read(r, client.submit(r))));
  // Setting up the outage's length, not asserting anything about time.
  await new Promise((resolve) => setTimeout(resolve, outageMs));
  await redis.start();

  const collected = await Promise.all(results);
  [...before, ...during].forEach((r, i) => {
    const want = tiny.reference(r);
    expect(collected[i]!.tokens).toEqual(want);
    expect(collected[i]!.indices).toEqual(range(want.length));
    expect(collected[i]!.result.finishReason).toBe('length');
  });
  // The outage really was mid-generation.
  for (const n of atStop) expect(n).toBeLessThan(30);
  // Every request left the scheduler, and both hosts are back.
  await waitFor('the scheduler to settle', () => service.scheduler.snapshot().requests === 0 && service.scheduler.hostIds().length === 2);
}

let seed = 500;

it('loses no request when Redis restarts at once (the hosts stay placed; their writes wait and are sent)', async () => {
  await runThroughRestart('short', 0);
});

it('loses no request when Redis stays away past the load TTL (hosts may be fenced and their requests re-placed)', async () => {
  await runThroughRestart('long', 1500);
});
