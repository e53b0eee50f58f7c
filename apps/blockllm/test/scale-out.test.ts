/**
 * Scale-out across two devices (design note §4.6, the serving core's planScaleOut): with the default budget the
 * locality policy puts the foundation's family on one device; when more sequences route through an instance than
 * its queue bound allows, a replica is deployed on the other device and new sequences route there by load, so both
 * devices run the shared blocks, each batching its own sequences per block. Tokens stay those of one device.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { APPS, makeFixture, serve } from './support/fixture.js';
import type { PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, scaleOutQueue: 2 })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PE = APPS.filter((a) => a !== 'vicuna');
const promptOf = (i: number) => Array.from({ length: 4 + i }, (_, t) => (29 * i + 13 * t + 5) % 900);

describe('scale-out', () => {
  it('replicates hot shared blocks on the other device and keeps every token', async () => {
    const before = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    // The foundation's family (every PE application) starts on one device.
    const home = before.chains.find((c) => c.app === PE[0])!.devices[0]!;
    expect(PE.every((a) => before.chains.find((c) => c.app === a)!.devices.every((d) => d === home))).toBe(true);
    const jobs = [...PE, ...PE].map((model, i) => ({ model, prompt: promptOf(i) }));
    const alone = await Promise.all(jobs.map((j) => app.engine.call('alone', { app: j.model, prompt: j.prompt, maxTokens: 10 })));
    const stats0 = await app.engine.call('stats', null);
    const served = await Promise.all(
      jobs.map((j, i) => app.engine.submit({ request: { id: `so-${i}`, adapter: j.model, prompt: j.prompt, maxTokens: 10, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result()),
    );
    expect(served.map((r) => r.tokens)).toEqual(alone);
    const stats = await app.engine.call('stats', null);
    expect(stats.devices!.scaleOuts).toBeGreaterThan(0);
    const other = stats.devices!.perDevice.find((d) => d.id !== home)!;
    expect(other.busyMs).toBeGreaterThan(stats0.devices!.perDevice.find((d) => d.id !== home)!.busyMs);
    const after = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    const replicas = after.instances.filter((i) => i.instance.includes('@'));
    expect(replicas.length).toBeGreaterThan(0);
    expect(replicas.every((r) => r.device !== home && after.instances.some((i) => i.instance === r.block))).toBe(true);
    expect(after.devices.every((d) => d.residentBytes <= d.budgetBytes)).toBe(true);
  });
});
