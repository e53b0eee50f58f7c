/**
 * The placement control plane on BullMQ with the real Redis at 127.0.0.1:6379 (a prefix of its own per run): jobs
 * go through the `placement` queue and their states come from BullMQ; a migration moves an instance between the two
 * devices and requests keep the tokens of one device; a job that fails when it runs reports why; bad jobs are 4xx.
 */
import { Redis } from 'ioredis';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { makeFixture, postJson, serve } from './support/fixture.js';
import { placementJob, type PlacementBody } from './support/placement.js';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const prefix = `blockllm-test-${process.pid}-${Date.now()}`;
const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
let redis: Redis;
beforeAll(async () => {
  redis = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await redis.connect();
  ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 1_400_000, redis: { url: REDIS_URL, prefix } }));
});
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
  if (redis) {
    const keys = await redis.keys(`${prefix}:*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  }
});

const PROMPT = [9, 8, 7, 6, 5, 4, 3];
const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;

describe('placement jobs on BullMQ', () => {
  it('runs a migration through the Redis queue; requests keep their tokens', async () => {
    const p = await placement();
    expect(p.transport).toBe('bullmq');
    const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');
    const free = (d: string) => p.devices.find((x) => x.id === d)!.budgetBytes - p.instances.filter((i) => i.device === d).reduce((n, i) => n + i.bytes, 0);
    const inst = p.instances.find((i) => i.bytes <= free(other(i.device)))!;
    const job = await placementJob(url, { kind: 'migrate', block: inst.instance, device: other(inst.device) });
    expect(job).toMatchObject({ state: 'completed', transport: 'bullmq' });
    expect((await placement()).instances.find((i) => i.instance === inst.instance)!.device).toBe(other(inst.device));
    // The job is BullMQ's, under this server's prefix.
    expect(await redis.exists(`${prefix}:placement:${job.id}`)).toBe(1);
    expect((await placement()).jobs.some((j) => j.id === job.id && j.state === 'completed')).toBe(true);
    for (const model of ['sql-lora', 'vicuna', 'persona']) {
      const alone = await app.engine.call('alone', { app: model, prompt: PROMPT, maxTokens: 6 });
      const r = await postJson(`${url}/v1/completions`, { model, prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true });
      expect(r.status, r.text).toBe(200);
      const served = await app.engine.submit({ request: { id: `redis-${model}`, adapter: model, prompt: PROMPT, maxTokens: 6, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();
      expect(served.tokens).toEqual(alone);
    }
  });

  it('refuses bad jobs with a 4xx before queueing, and reports a job that fails when it runs', async () => {
    const p = await placement();
    const bad = await postJson(`${url}/v1/placement/jobs`, { kind: 'migrate', block: p.instances[0]!.instance, device: 'gpu-7' });
    expect(bad.status).toBe(404);
    expect(bad.json.error.message).toMatch(/no device "gpu-7"/);
    // Two evictions of one instance posted together: the first evicts it; the second is refused at once (404) if
    // the first already ran, else it is queued and fails when it runs, with the reason in its status.
    const target = p.instances.at(-1)!.instance;
    const posts = await Promise.all([0, 1].map(() => postJson(`${url}/v1/placement/jobs`, { kind: 'evict', block: target })));
    expect(posts[0]!.status).toBe(202);
    const poll = async (id: string) => {
      for (;;) {
        const s = (await (await fetch(`${url}/v1/placement/jobs/${id}`)).json()) as { state: string; error: string | null };
        if (s.state === 'completed' || s.state === 'failed') return s;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    };
    expect((await poll(posts[0]!.json.id)).state).toBe('completed');
    if (posts[1]!.status === 202) {
      const second = await poll(posts[1]!.json.id);
      expect(second.state).toBe('failed');
      expect(second.error).toMatch(/no instance/);
    } else {
      expect(posts[1]!.status).toBe(404);
      expect(posts[1]!.json.error.message).toMatch(/no instance/);
    }
    const r = await postJson(`${url}/v1/completions`, { model: 'chat-lora', prompt: PROMPT, max_tokens: 4, temperature: 0 });
    expect(r.status).toBe(200);
  });
});
