/**
 * The device budget and the upload limit: a load that does not fit is a 507 that changes nothing (a registration
 * with `load: true` is not kept either), a classify that would auto-load it is a 507 too, an oversized upload is a
 * 413; the tasks registered before keep serving.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { MIB } from '../src/engine/client.js';
import { type Fixture, makeFixture, multipartBody, serve } from './support/fixture.js';
import { makeReference } from './support/reference.js';

let fixture: Fixture;
let app: FastifyInstance;
let sharedBytes: number;
let adapterBytes: number;
let maskbertBytes: number;
let paramsLimit: number;
let budget: number;

beforeAll(async () => {
  fixture = makeFixture();
  // Measure the footprints in this thread, then give the server room for the shared model and the MaskBert task
  // plus half the adapter task: the adapter fits, the MaskBert task fits alone but not beside the adapter.
  const reference = makeReference(fixture);
  const memory = reference.manager.memory();
  sharedBytes = memory.sharedBytes;
  adapterBytes = reference.manager.task('sentiment').deviceBytes!;
  maskbertBytes = reference.manager.task('topic').deviceBytes!;
  reference.dispose();
  expect(maskbertBytes).toBeGreaterThan(adapterBytes);
  budget = sharedBytes + maskbertBytes + Math.floor(adapterBytes / 2);
  paramsLimit = Math.max(fixture.bytes.get('sentiment')!.byteLength, fixture.bytes.get('topic')!.byteLength) + 16;
  app = await serve(fixture, { budgetMiB: budget / MIB, maxParamsMiB: paramsLimit / MIB, windowMs: 1 });
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

async function list(): Promise<{ id: string; state: string }[]> {
  return ((await app.inject({ method: 'GET', url: '/v1/tasks' })).json() as { data: { id: string; state: string }[] }).data.map(({ id, state }) => ({ id, state }));
}

describe('the device budget', () => {
  it('holds the shared model and the adapter task', async () => {
    const res = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'adapter', id: 'sentiment', path: 'sentiment.safetensors', load: true } });
    expect(res.statusCode, res.body).toBe(201);
    const memory = ((await app.inject({ method: 'GET', url: '/v1/tasks/sentiment' })).json() as { memory: { shared_bytes: number; pet_bytes: number; budget_bytes: number } }).memory;
    expect(memory).toMatchObject({ shared_bytes: sharedBytes, pet_bytes: adapterBytes });
    expect(memory.budget_bytes).toBe(budget);
    expect(budget).toBeLessThan(sharedBytes + adapterBytes + maskbertBytes);
  });

  it('register with load: true that does not fit → 507, and the task is not kept', async () => {
    const before = await list();
    const res = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'maskbert', id: 'topic', path: 'topic.safetensors', load: true } });
    expect(res.statusCode, res.body).toBe(507);
    expect(res.json()).toMatchObject({ error: { code: 'budget_exceeded', type: 'capacity_error' } });
    expect((res.json() as { error: { message: string } }).error.message).toMatch(/--budget-mb/);
    expect(await list()).toEqual(before);
  });

  it('a registered task that does not fit: load → 507, classify (auto-load) → 507; it stays registered', async () => {
    const reg = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'maskbert', id: 'topic', path: 'topic.safetensors' } });
    expect(reg.statusCode, reg.body).toBe(201);
    const before = await list();
    const load = await app.inject({ method: 'POST', url: '/v1/tasks/topic/load' });
    expect(load.statusCode).toBe(507);
    expect(load.json()).toMatchObject({ error: { code: 'budget_exceeded', budget_bytes: budget, requested_bytes: maskbertBytes } });
    const classify = await app.inject({ method: 'POST', url: '/v1/tasks/topic/classify', payload: { input: 'markets rallied' } });
    expect(classify.statusCode).toBe(507);
    expect(await list()).toEqual(before);
    expect((await app.inject({ method: 'POST', url: '/v1/tasks/sentiment/classify', payload: { input: 'fine' } })).statusCode).toBe(200);
  });

  it('fits once the adapter task is unloaded', async () => {
    expect((await app.inject({ method: 'POST', url: '/v1/tasks/sentiment/unload' })).statusCode).toBe(200);
    const res = await app.inject({ method: 'POST', url: '/v1/tasks/topic/classify', payload: { input: 'markets rallied' } });
    expect(res.statusCode, res.body).toBe(200);
    expect(await list()).toEqual([
      { id: 'sentiment', state: 'registered' },
      { id: 'topic', state: 'loaded' },
    ]);
  });
});

describe('the upload limit (--max-params-mb)', () => {
  it('an upload over the limit → 413 naming the limit; nothing changes', async () => {
    const before = await list();
    const big = new Uint8Array(paramsLimit + 1024);
    const { body, headers } = multipartBody({ pet_type: 'maskbert', id: 'big' }, big);
    const res = await app.inject({ method: 'POST', url: '/v1/tasks', payload: body, headers });
    expect(res.statusCode, res.body).toBe(413);
    expect(res.json()).toMatchObject({ error: { code: 'params_too_large', param: 'params', limit: paramsLimit } });
    writeFileSync(join(fixture.paramsDir, 'big.safetensors'), big);
    const byPath = await app.inject({ method: 'POST', url: '/v1/tasks', payload: { pet_type: 'maskbert', id: 'big', path: 'big.safetensors' } });
    expect(byPath.statusCode).toBe(413);
    expect(byPath.json()).toMatchObject({ error: { code: 'params_too_large', param: 'path', limit: paramsLimit } });
    expect(await list()).toEqual(before);
  });
});
