/**
 * Distributed mode on a private redis-server: a worker serving two instances (each its own BullMQ queue,
 * concurrency 1, a native runtime worker thread behind it) and the frontend app dispatching to those queues. The
 * dispatcher's choice is kept (each request runs on the instance it picked, at that instance's length), a solve
 * retargets the remote instances through their queues, and the logits equal the engine's unpadded forward.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { EncoderModel } from '@tessera/engine';

import { buildServer, startClusterWorker } from '../src/index.js';
import { LENGTHS, loadEncoder, referenceLogits, relativeError, requestIds, tinyEncoder, TOLERANCE } from './support/harness.js';

let redis: ChildProcess;
let app: FastifyInstance;
let worker: { close: () => Promise<void> };
let reference: EncoderModel;
let fixture: ReturnType<typeof tinyEncoder>;

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

beforeAll(async () => {
  fixture = tinyEncoder(5);
  const port = await freePort();
  redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: ['ignore', 'pipe', 'pipe'] });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    redis.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (/Ready to accept connections/.test(out)) resolve();
    });
    redis.once('exit', (code) => reject(new Error(`redis-server exited (${code}): ${out}`)));
  });
  const cluster = { redisUrl: `redis://127.0.0.1:${port}`, prefix: 'arlo-test', instanceIds: ['r0', 'r1'] };
  worker = await startClusterWorker({ ...cluster, kind: 'native', modelDir: fixture.modelDir, length: 128, maxBatch: 1 });
  app = await buildServer({ modelDir: fixture.modelDir, lengths: LENGTHS, serviceMs: [1, 2, 4], sloMs: 100, periodMs: 3_600_000, cluster });
  reference = loadEncoder(fixture.modelDir);
});

afterAll(async () => {
  await app?.close();
  await worker?.close();
  redis?.kill('SIGTERM');
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
