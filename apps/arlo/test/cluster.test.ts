/**
 * Distributed mode on a private redis-server: a worker serving two instances (each its own BullMQ queue,
 * concurrency 1, a native runtime worker thread behind it) and the frontend app dispatching to those queues. The
 * dispatcher's choice is kept (each request runs on the instance it picked, at that instance's length), a solve
 * retargets the remote instances through their queues, and the logits equal the engine's unpadded forward.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { EncoderModel } from '@tessera/engine';
import { freePort, PrivateRedis } from '@tessera/test-utils';

import { buildServer, startClusterWorker } from '../src/index.js';
import { LENGTHS, loadEncoder, referenceLogits, relativeError, requestIds, tinyEncoder, TOLERANCE } from './support/harness.js';

let redis: PrivateRedis | undefined;
let app: FastifyInstance;
let worker: { close: () => Promise<void> };
let reference: EncoderModel;
let fixture: ReturnType<typeof tinyEncoder>;

beforeAll(async () => {
  fixture = tinyEncoder(5);
  const port = await freePort();
  redis = new PrivateRedis(port);
  await redis.start();
  const cluster = { redisUrl: `redis://127.0.0.1:${port}`, prefix: 'arlo-test', instanceIds: ['r0', 'r1'] };
  worker = await startClusterWorker({ ...cluster, kind: 'native', modelDir: fixture.modelDir, length: 128, maxBatch: 1 });
  app = await buildServer({ modelDir: fixture.modelDir, lengths: LENGTHS, serviceMs: [1, 2, 4], sloMs: 100, periodMs: 3_600_000, cluster });
  reference = loadEncoder(fixture.modelDir);
});

afterAll(async () => {
  await app?.close();
  await worker?.close();
  await redis?.stop();
  reference?.dispose();
  fixture?.cleanup();
});

describe('tessera-arlo over BullMQ (one queue per instance)', () => {
  it('dispatches to the chosen instance queues and returns the unpadded logits', async () => {
    const solved = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [40, 0, 1] } });
    expect(solved.statusCode).toBe(200);
    expect(solved.json().serving).toEqual([1, 0, 1]);
    const byLength = new Map<number, string>(solved.json().instances.map((i: { length: number; id: string }) => [i.length, i.id]));
    const lengths = [4, 30, 40, 128, 16, 70];
    const ids = lengths.map((len, k) => requestIds(len, 50 + k, fixture.vocabSize));
    const replies = await Promise.all(ids.map((input_ids) => app.inject({ method: 'POST', url: '/v1/infer', payload: { input_ids } })));
    replies.forEach((r, k) => {
      expect(r.statusCode).toBe(200);
      const json = r.json();
      const padded = lengths[k]! <= 32 ? 32 : 128;
      expect(json.paddedTo).toBe(padded);
      expect(json.instance).toBe(byLength.get(padded));
      expect(relativeError(json.logits, referenceLogits(reference, ids[k]!))).toBeLessThanOrEqual(TOLERANCE);
    });
    expect(solved.json().instances.every((i: { kind: string }) => i.kind === 'remote')).toBe(true);
  });
});
