/**
 * Graceful shutdown: closing the app (what SIGINT / SIGTERM trigger through close-with-grace) stops accepting
 * connections, answers the classify still waiting in the batch window, and only then stops the engine worker.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, nativeAddonLoadedHere, serve } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;

beforeAll(async () => {
  fixture = makeFixture();
  app = await serve(fixture, { windowMs: 400 });
  const res = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'lora', id: 'intent', path: 'intent.safetensors', load: true } });
  expect(res.statusCode).toBe(201);
});

afterAll(() => fixture?.cleanup());

describe('app.close()', () => {
  it('drains a classify waiting in the window, refuses new connections, then stops the engine', async () => {
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    const order: string[] = [];
    const pending = fetch(`${address}/v1/tasks/intent/classify`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'where is my parcel' }),
    }).then(async (res) => {
      order.push(`classify ${res.status}`);
      return res;
    });
    await expect.poll(() => app.engine.inFlight, { timeout: 5_000, interval: 5 }).toBe(1);
    const closed = app.close().then(() => order.push('closed'));
    await expect
      .poll(async () => fetch(`${address}/health`).then((r) => `status ${r.status}`, (err: Error) => (err.cause as { code?: string } | undefined)?.code ?? err.message), {
        timeout: 5_000,
        interval: 10,
      })
      .toBe('ECONNREFUSED');
    const res = await pending;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: unknown[] }).data).toHaveLength(1);
    // Everything native ran in the engine worker: this (the HTTP) thread never loaded the addon.
    expect(nativeAddonLoadedHere()).toBe(false);
    await closed;
    expect(order).toEqual(['classify 200', 'closed']);
    expect(app.engine.healthy).toBe(false);
    expect(app.engine.failure?.message).toMatch(/shut down/);
  });
});

describe('a crashed engine worker', () => {
  it('turns /health 503 and answers requests with 503 engine_unavailable', async () => {
    const crashed = await serve(fixture);
    try {
      await crashed.engine.terminate();
      expect(crashed.engine.healthy).toBe(false);
      const health = await crashed.inject({ method: 'GET', url: '/health' });
      expect(health.statusCode).toBe(503);
      expect(health.json()).toMatchObject({ status: 'unhealthy', ready: false });
      const res = await crashed.inject({ method: 'POST', url: '/v1/tasks/intent/classify', payload: { input: 'hello' } });
      expect(res.statusCode).toBe(503);
      expect(res.json()).toMatchObject({ error: { code: 'engine_unavailable', type: 'service_unavailable_error' } });
      expect((await crashed.inject({ method: 'GET', url: '/v1/tasks' })).statusCode).toBe(503);
      const metrics = (await crashed.inject({ method: 'GET', url: '/metrics' })).body;
      expect(metrics).toMatch(/^tessera_engine_healthy 0$/m);
    } finally {
      await crashed.close();
    }
  });
});
