/**
 * Cohorts (--cohorts): the running sequences split into cohorts whose steps are in flight at once, so that one
 * cohort's blocks run on one device while another's run on the other. Two cohorts give every request the tokens of
 * its chain run alone, their steps really overlap on the devices, and KV exhaustion in one cohort waits for the
 * other's pages instead of failing; one cohort never overlaps (nor, with variant batching off, batches variants). The step gate: steps run side by side, a placement
 * change runs alone and holds back the steps asked for after it.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { StepGate } from '../src/devices/device-set.js';
import { APPS, makeFixture, serve } from './support/fixture.js';

const fixture = makeFixture();
const servers: FastifyInstance[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
  fixture.cleanup();
});

const promptOf = (i: number) => Array.from({ length: 2 + (i % 5) * 3 }, (_, t) => (29 * i + 13 * t + 5) % 1000);

async function served(app: FastifyInstance, model: string, prompt: number[], maxTokens: number, id: string): Promise<number[]> {
  const stream = app.engine.submit({ request: { id, adapter: model, prompt, maxTokens, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });
  for await (const ev of stream) {
    if (ev.type === 'finish') return ev.result.tokens;
    if (ev.type === 'error') throw ev.error;
  }
  throw new Error(`request ${id} ended without a result`);
}

describe('cohorts pipelined across two devices', () => {
  let two: FastifyInstance;
  let one: FastifyInstance;
  // Each device holds about 77 % of the zoo's unique bytes, so chains cross devices.
  beforeAll(async () => {
    two = (await serve(fixture, { devices: 2, deviceBytes: 880_000, cohorts: 2, kvPages: 2 })).app;
    servers.push(two);
    one = (await serve(fixture, { devices: 2, deviceBytes: 880_000, cohorts: 1, kvPages: 2, variantBatching: false })).app;
    servers.push(one);
  });

  it('gives every request the tokens of its chain alone, with steps in flight together', async () => {
    const n = 2 * APPS.length;
    const jobs = Array.from({ length: n }, (_, i) => ({ model: APPS[i % APPS.length]!, prompt: promptOf(i), maxTokens: 6 + (i % 4) * 3 }));
    const alone = await Promise.all(jobs.map((j) => two.engine.call('alone', { app: j.model, prompt: j.prompt, maxTokens: j.maxTokens })));
    const before = (await two.engine.call('stats', null)).devices!;
    const got = await Promise.all(jobs.map((j, i) => served(two, j.model, j.prompt, j.maxTokens, `cohort-${i}`)));
    expect(got).toEqual(alone);
    const after = await two.engine.call('stats', null);
    expect(after.devices!.overlappedSteps).toBeGreaterThan(before.overlappedSteps);
    expect(after.devices!.crossBytes).toBeGreaterThan(before.crossBytes);
    // 14 sequences of up to 2 pages do not fit the 2 pages a variant adds to a block's cache: a cohort waited for the
    // other's pages.
    expect(after.kvExhausted).toBeGreaterThan(0);
    expect(after.running + after.waiting).toBe(0);

    // One cohort, without variant batching: the same tokens, no step overlaps another, no variants batch together.
    const single = await Promise.all(jobs.map((j, i) => served(one, j.model, j.prompt, j.maxTokens, `single-${i}`)));
    expect(single).toEqual(alone);
    const oneStats = (await one.engine.call('stats', null)).devices!;
    expect(oneStats.overlappedSteps).toBe(0);
    expect(oneStats.variantBatches).toBe(0);
    expect(after.devices!.variantBatches).toBeGreaterThan(0);
  });
});

describe('StepGate', () => {
  const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

  it('runs steps side by side; a change waits for them and holds back the steps asked for after it', async () => {
    const gate = new StepGate();
    const log: string[] = [];
    const hold = (name: string, release: Promise<void>) =>
      gate.step(async () => {
        log.push(`${name}+`);
        await release;
        log.push(`${name}-`);
      });
    let endA!: () => void;
    let endB!: () => void;
    const a = hold('a', new Promise((r) => (endA = r)));
    const b = hold('b', new Promise((r) => (endB = r)));
    await tick();
    expect(gate.steps).toBe(2);
    const change = gate.alone(async () => {
      log.push(`change(${gate.steps})`);
    });
    const c = hold('c', Promise.resolve());
    await tick();
    expect(log).toEqual(['a+', 'b+']);
    endA();
    await tick();
    expect(log).toEqual(['a+', 'b+', 'a-']);
    endB();
    await Promise.all([a, b, change, c]);
    expect(log).toEqual(['a+', 'b+', 'a-', 'b-', 'change(0)', 'c+', 'c-']);
  });

  it('runs changes one at a time, in order, and goes on after one fails', async () => {
    const gate = new StepGate();
    const log: string[] = [];
    const first = gate.alone(async () => {
      await tick();
      log.push('first');
      throw new Error('boom');
    });
    const second = gate.alone(async () => {
      log.push('second');
    });
    await expect(first).rejects.toThrow('boom');
    await second;
    expect(await gate.step(async () => 'ran')).toBe('ran');
    expect(log).toEqual(['first', 'second']);
  });
});
