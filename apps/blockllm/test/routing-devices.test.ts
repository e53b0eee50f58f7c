/**
 * Route choice on a server with two devices (the §4.3 cost model, DeviceSet.route → routeByCostModel): every block
 * of the foundation's chain gets a replica on the other device (placement jobs), then concurrent sequences of the
 * foundation spread over both instances of each block — each new sequence sees the ones routed before it as the
 * loaded instance's queue — and still give the tokens of one device; /metrics counts the hops the cost model chose
 * (all by min-latency: a new sequence has no KV anywhere). With cohort homes off, that spread is the cost model's; with
 * them on (the default), each of the two cohorts keeps its sequences on its own device, so no hop crosses.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, serve } from './support/fixture.js';
import { metric, placementJob, type PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
let homed: { app: FastifyInstance; url: string };
// Each device can hold the whole zoo (1.14 MB unique for the demo), so both can hold the foundation's chain.
beforeAll(async () => {
  ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, cohortHomes: false }));
  homed = await serve(fixture, { devices: 2, deviceBytes: 3_000_000 });
});
afterAll(async () => {
  await Promise.all([app?.close(), homed?.app.close()]);
  fixture.cleanup();
});

const placementOf = async (at: string) => (await (await fetch(`${at}/v1/placement`)).json()) as PlacementBody;
const placement = () => placementOf(url);
const promptOf = (i: number) => Array.from({ length: 4 + i }, (_, t) => (31 * i + 7 * t + 2) % 900);
const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');

describe('routes by the cost model', () => {
  it('spreads concurrent sequences over two replicas of each shared block, with the tokens of one device', async () => {
    const chain = (await placement()).chains.find((c) => c.app === FOUNDATION)!;
    for (const [k, block] of chain.instances.entries()) {
      const job = await placementJob(url, { kind: 'deploy', block, device: other(chain.devices[k]!) });
      expect(job.state, JSON.stringify(job)).toBe('completed');
    }
    const before = await placement();
    for (const block of chain.instances) expect(before.instances.filter((i) => i.block === block).map((i) => i.device).sort()).toEqual(['device-0', 'device-1']);
    const metrics0 = await (await fetch(`${url}/metrics`)).text();
    const hops0 = metric(metrics0, 'tessera_blockllm_route_hops_total{reason="min-latency"}');

    const N = 6;
    const alone = await Promise.all(Array.from({ length: N }, (_, i) => app.engine.call('alone', { app: FOUNDATION, prompt: promptOf(i), maxTokens: 12 })));
    const served = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        app.engine.submit({ request: { id: `spread-${i}`, adapter: FOUNDATION, prompt: promptOf(i), maxTokens: 12, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result(),
      ),
    );
    expect(served.map((r) => r.tokens)).toEqual(alone);

    const after = await placement();
    for (const block of chain.instances) {
      const routed = after.instances.filter((i) => i.block === block).map((i) => i.routed - (before.instances.find((b) => b.instance === i.instance)?.routed ?? 0));
      // Both instances of every block took some of the sequences, and together all of them (one route each).
      expect(routed.length, block).toBe(2);
      expect(Math.min(...routed), `${block}: ${JSON.stringify(routed)}`).toBeGreaterThan(0);
      expect(routed[0]! + routed[1]!).toBe(N);
    }
    const stats = await app.engine.call('stats', null);
    expect(stats.devices!.perDevice.every((d) => d.busyMs > 0)).toBe(true);
    const text = await (await fetch(`${url}/metrics`)).text();
    // One hop per block of each new sequence's chain, all by the lowest estimate; no sequence had KV to keep.
    expect(metric(text, 'tessera_blockllm_route_hops_total{reason="min-latency"}') - hops0).toBe(N * chain.instances.length);
    expect(metric(text, 'tessera_blockllm_route_hops_total{reason="kv-owner"}')).toBe(0);
    expect(metric(text, 'tessera_blockllm_route_cross_device_hops_total')).toBeGreaterThanOrEqual(0);
  });
});

describe('cohort homes', () => {
  it("keeps each cohort's sequences on its own device: the two replicas split them, and no hop crosses", async () => {
    const chain = (await placementOf(homed.url)).chains.find((c) => c.app === FOUNDATION)!;
    for (const [k, block] of chain.instances.entries()) {
      const job = await placementJob(homed.url, { kind: 'deploy', block, device: other(chain.devices[k]!) });
      expect(job.state, JSON.stringify(job)).toBe('completed');
    }
    const before = await placementOf(homed.url);
    const crossed0 = metric(await (await fetch(`${homed.url}/metrics`)).text(), 'tessera_blockllm_route_cross_device_hops_total');
    const stats0 = (await homed.app.engine.call('stats', null)).devices!;
    const N = 6;
    const alone = await Promise.all(Array.from({ length: N }, (_, i) => homed.app.engine.call('alone', { app: FOUNDATION, prompt: promptOf(i), maxTokens: 10 })));
    const served = await Promise.all(
      Array.from({ length: N }, (_, i) =>
        homed.app.engine.submit({ request: { id: `home-${i}`, adapter: FOUNDATION, prompt: promptOf(i), maxTokens: 10, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result(),
      ),
    );
    expect(served.map((r) => r.tokens)).toEqual(alone);
    const after = await placementOf(homed.url);
    for (const block of chain.instances) {
      const routed = after.instances.filter((i) => i.block === block).map((i) => i.routed - (before.instances.find((b) => b.instance === i.instance)?.routed ?? 0));
      // Two cohorts of three: each device's instance took one cohort.
      expect(routed.sort(), block).toEqual([N / 2, N / 2]);
    }
    const text = await (await fetch(`${homed.url}/metrics`)).text();
    expect(metric(text, 'tessera_blockllm_route_cross_device_hops_total') - crossed0).toBe(0);
    // Every step ran as one device's program: a cohort spread over both devices (the cost model's alternation of
    // sequences over the two replicas) would post one program to each.
    const stats = (await homed.app.engine.call('stats', null)).devices!;
    expect(stats.steps - stats0.steps).toBeGreaterThan(0);
    expect(stats.programs - stats0.programs).toBe(stats.steps - stats0.steps);
  });
});
