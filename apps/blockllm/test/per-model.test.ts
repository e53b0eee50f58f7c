/**
 * Per-model provisioning on two devices (the baseline of the real miniature): each application's whole model is
 * deployed on its own (one pool per model: nothing shared), one model fits a device, and models are swapped in and
 * out (least recently used, idle only) as requests for them come. Every application still gives the tokens of its
 * chain on one device; no block batch mixes applications.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { APPS, makeFixture, serve } from './support/fixture.js';
import type { PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 1_000_000, provisioning: 'per-model' })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const promptOf = (i: number) => Array.from({ length: 3 + 2 * i }, (_, t) => (37 * i + 11 * t + 3) % 1000);

describe('per-model provisioning', () => {
  it('serves every application with the tokens of one device, swapping whole models, never batching across applications', async () => {
    const alone = await Promise.all(APPS.map((model, i) => app.engine.call('alone', { app: model, prompt: promptOf(i), maxTokens: 8 })));
    const together = await Promise.all(
      APPS.map((model, i) => app.engine.submit({ request: { id: `pm-${i}`, adapter: model, prompt: promptOf(i), maxTokens: 8, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result()),
    );
    expect(together.map((r) => r.tokens)).toEqual(alone);
    const stats = await app.engine.call('stats', null);
    expect(stats.sharedBatches).toBe(0);
    // Seven models, room for two at a time: each came in whole, most were evicted again.
    expect(stats.devices!.evictions).toBeGreaterThan(0);
    expect(stats.devices!.deploys).toBeGreaterThanOrEqual(APPS.length * 4);
    const p = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    expect(p.provisioning).toBe('per-model');
    expect(p.devices.every((d) => d.residentBytes <= d.budgetBytes)).toBe(true);
    // Instances of one device belong to one model (its own pool).
    for (const d of p.devices) expect(new Set(p.instances.filter((i) => i.device === d.id).map((i) => i.pool)).size).toBeLessThanOrEqual(1);
  });
});
