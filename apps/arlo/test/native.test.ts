/**
 * The app end to end with two real runtime workers (native encoder, padTo): a solve that places the two instances
 * on the 32 and 128 runtimes, requests of mixed lengths landing on the smallest serving runtime that fits them,
 * their logits equal to the engine's unpadded forward, /v1/allocation reflecting the solve, bad input answered
 * 4xx while the server keeps serving, and the metrics. Service times are given (not profiled) so nothing here
 * depends on the machine's speed.
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
  fixture = tinyEncoder();
  app = await buildServer({ modelDir: fixture.modelDir, lengths: LENGTHS, runtime: 'native', workers: 2, serviceMs: [1, 2, 4], sloMs: 100, periodMs: 3_600_000 });
  // After the workers: the native thread pool is created once, with their one thread.
  reference = loadEncoder(fixture.modelDir);
});

afterAll(async () => {
  await app?.close();
  reference?.dispose();
  fixture?.cleanup();
});

type Infer = { logits: number[]; runtime: number; paddedTo: number; instance: string; queueMs: number; execMs: number; tokens: number; label: string };

async function infer(body: object): Promise<{ status: number; json: Infer & { error?: { code: string; message: string; param: string | null } } }> {
  const r = await app.inject({ method: 'POST', url: '/v1/infer', payload: body });
  return { status: r.statusCode, json: r.json() };
}

describe('tessera-arlo with two native runtime workers', () => {
  it('solves an allocation for a given load and /v1/allocation reflects it', async () => {
    // Mostly short requests, a few long: one instance on 32, the longest keeps one (N_I ≥ 1), none on 64.
    const solved = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [40, 0, 1] } });
    expect(solved.statusCode).toBe(200);
    expect(solved.json().allocation.instances).toEqual([1, 0, 1]);
    const view = (await app.inject({ method: 'GET', url: '/v1/allocation' })).json();
    expect(view.allocation.instances).toEqual([1, 0, 1]);
    expect(view.allocation.reason).toBe('on-demand');
    expect(view.serving).toEqual([1, 0, 1]);
    expect(view.instances.map((i: { length: number }) => i.length).sort((a: number, b: number) => a - b)).toEqual([32, 128]);
    expect(view.profiles.map((p: { capacity: number }) => p.capacity)).toEqual([100, 50, 25]);
  });

  it('runs requests of mixed lengths on the right runtimes with the unpadded logits', async () => {
    const lengths = [3, 17, 32, 33, 50, 64, 65, 100, 128, 9, 31, 77];
    const ids = lengths.map((len, k) => requestIds(len, 100 + k, fixture.vocabSize));
    // All at once: two workers run side by side; nothing is congested (capacities 100 and 25), so none is demoted.
    const replies = await Promise.all(ids.map((input_ids) => infer({ input_ids })));
    replies.forEach(({ status, json }, k) => {
      expect(status).toBe(200);
      const len = lengths[k]!;
      // 64 has no instance: a request over 32 goes to 128.
      expect(json.paddedTo).toBe(len <= 32 ? 32 : 128);
      expect(json.runtime).toBe(len <= 32 ? 0 : 2);
      expect(json.tokens).toBe(len);
      expect(json.execMs).toBeGreaterThan(0);
      expect(json.queueMs).toBeGreaterThanOrEqual(0);
      expect(relativeError(json.logits, referenceLogits(reference, ids[k]!))).toBeLessThanOrEqual(TOLERANCE);
    });
    const servedBy = new Set(replies.map((r) => r.json.instance));
    expect(servedBy.size).toBe(2);
  });

  it('moves an instance when a new load calls for it, and requests follow', async () => {
    const solved = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [0, 40, 1] } });
    expect(solved.json().allocation.instances).toEqual([0, 1, 1]);
    expect(solved.json().serving).toEqual([0, 1, 1]);
    const short = requestIds(10, 5, fixture.vocabSize);
    const { json } = await infer({ input_ids: short });
    expect(json.paddedTo).toBe(64);
    expect(relativeError(json.logits, referenceLogits(reference, short))).toBeLessThanOrEqual(TOLERANCE);
  });

  it('tokenizes text', async () => {
    const { status, json } = await infer({ text: 'the quick brown fox' });
    expect(status).toBe(200);
    expect(json.tokens).toBeGreaterThan(2);
    expect(json.logits).toHaveLength(json.logits.length);
    expect(typeof json.label).toBe('string');
  });

  it('answers bad input with a 4xx naming the problem, and keeps serving', async () => {
    const cases: [object, string][] = [
      [{ input_ids: [] }, 'empty_input'],
      [{ input_ids: requestIds(129, 1, fixture.vocabSize) }, 'input_too_long'],
      [{ input_ids: [2, 5, fixture.vocabSize] }, 'token_out_of_vocab'],
      [{ input_ids: [2, -1] }, 'token_out_of_vocab'],
      [{ input_ids: [2, 3], text: 'both' }, 'bad_input'],
      [{}, 'bad_input'],
    ];
    for (const [body, code] of cases) {
      const { status, json } = await infer(body);
      expect(status, code).toBe(400);
      expect(json.error?.code).toBe(code);
    }
    const tooLong = await infer({ input_ids: requestIds(129, 1, fixture.vocabSize) });
    expect(tooLong.json.error?.message).toMatch(/129 tokens.*128/);
    const wrongType = await app.inject({ method: 'POST', url: '/v1/infer', payload: { input_ids: 'abc' } });
    expect(wrongType.statusCode).toBe(400);
    const badQ = await app.inject({ method: 'POST', url: '/v1/allocation/solve', payload: { q: [1, 2] } });
    expect(badQ.statusCode).toBe(400);
    expect(badQ.json().error.code).toBe('bad_q');
    const after = await infer({ input_ids: [2, 7, 9] });
    expect(after.status).toBe(200);
  });

  it('reports health, per-runtime queues, utilisation and padding waste', async () => {
    expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    expect(text).toMatch(/arlo_runtime_queue_length\{runtime="32"\} 0/);
    expect(text).toMatch(/arlo_instance_utilisation\{instance="i0",runtime="\d+",kind="native"\} [0-9.e-]+/);
    const real = Number(/arlo_tokens_total\{kind="real"\} (\d+)/.exec(text)![1]);
    const padded = Number(/arlo_tokens_total\{kind="padded"\} (\d+)/.exec(text)![1]);
    expect(padded).toBeGreaterThan(real);
    const waste = Number(/^arlo_padding_waste_ratio (\S+)$/m.exec(text)![1]);
    expect(waste).toBeCloseTo(1 - real / padded, 6);
  });

  it('profiles every runtime length on a real worker through the profiler', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/profile', payload: { reps: 2, batches: [1, 2] } });
    expect(r.statusCode).toBe(200);
    const body = r.json();
    expect(body.table.map((p: { length: number; batch: number }) => `${p.length}x${p.batch}`)).toEqual(['32x1', '64x1', '128x1', '32x2', '64x2', '128x2']);
    for (const p of body.table) expect(p.meanMs).toBeGreaterThan(0);
    expect(body.profiles).toHaveLength(3);
    // Applied: the allocation view, the dispatcher's capacities and the next solve use the measured profile.
    expect(body.applied).toBe(true);
    const view = (await app.inject({ method: 'GET', url: '/v1/allocation' })).json();
    expect(view.profiles).toEqual(body.profiles);
    expect(app.arlo.instances().map((i) => app.arlo.dispatcher.instance(i.id).capacity)).toEqual(app.arlo.instances().map((i) => body.profiles[i.runtime].capacity));
    // apply: false measures only.
    const dry = (await app.inject({ method: 'POST', url: '/v1/profile', payload: { reps: 1, apply: false } })).json();
    expect(dry.applied).toBe(false);
    expect((await app.inject({ method: 'GET', url: '/v1/allocation' })).json().profiles).toEqual(body.profiles);
  });

  it('reports unhealthy once a runtime worker is gone', async () => {
    await app.arlo.realInstance()!.close();
    const health = await app.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(503);
    expect(health.json().status).toBe('unhealthy');
  });
});
