/**
 * The app end to end with two onnxruntime-node runtime workers: one ONNX export per length with [1, ℓ] baked into
 * the graph, one intra-op thread each. Requests of mixed lengths land on the right runtime, and their logits equal
 * the native engine's unpadded forward (an independent implementation: same weights, different kernels). A solve
 * that moves an instance makes it load the graph of its new length.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { EncoderModel } from '@tessera/engine';

import { buildServer } from '../src/index.js';
import { LENGTHS, loadEncoder, referenceLogits, relativeError, requestIds, tinyEncoder, TOLERANCE } from './support/harness.js';

let app: FastifyInstance;
let reference: EncoderModel;
let fixture: ReturnType<typeof tinyEncoder>;

beforeAll(async () => {
  fixture = tinyEncoder(11);
  app = await buildServer({ modelDir: fixture.modelDir, lengths: LENGTHS, runtime: 'ort', workers: 2, serviceMs: [1, 2, 4], sloMs: 100, periodMs: 3_600_000 });
  reference = loadEncoder(fixture.modelDir);
});

afterAll(async () => {
  await app?.close();
  reference?.dispose();
  fixture?.cleanup();
});

async function check(lengths: readonly number[], expectPadded: (len: number) => number, seed: number): Promise<void> {
  const ids = lengths.map((len, k) => requestIds(len, seed + k, fixture.vocabSize));
  const replies = await Promise.all(ids.map((input_ids) => app.inject({ method: 'POST', url: '/v1/infer', payload: { input_ids } })));
  replies.forEach((r, k) => {
    expect(r.statusCode).toBe(200);
    const json = r.json();
    expect(json.paddedTo).toBe(expectPadded(lengths[k]!));
    expect(relativeError(json.logits, referenceLogits(reference, ids[k]!))).toBeLessThanOrEqual(TOLERANCE);
  });
}

describe('tessera-arlo with two ORT runtime workers (static graphs)', () => {
  it('serves mixed lengths on the allocated runtimes with the unpadded logits', async () => {
    const solved = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [40, 0, 1] } });
    expect(solved.json().serving).toEqual([1, 0, 1]);
    expect(solved.json().instances.every((i: { kind: string }) => i.kind === 'ort')).toBe(true);
    await check([1, 12, 32, 33, 90, 128], (len) => (len <= 32 ? 32 : 128), 300);
  });

  it('swaps an instance to another length (its graph) on a new allocation', async () => {
    const solved = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [0, 40, 1] } });
    expect(solved.json().serving).toEqual([0, 1, 1]);
    await check([5, 64, 65, 127], (len) => (len <= 64 ? 64 : 128), 400);
  });
});
