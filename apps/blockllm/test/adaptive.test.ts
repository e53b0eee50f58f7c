/**
 * Adaptive serving on a server with two devices (design note §4.3, algorithm 5.4–5.5; DeviceSet.route over
 * block-zoo's hopRoutes): the demo's vicuna is a full fine-tune whose first layer scores equivalent to the
 * foundation's without being identical, so its chain's first block has an equivalent segment, the foundation's
 * blocks over the same span. With maxQueueLen 1, a second vicuna sequence finds vicuna's own first instance taken by
 * a running one and is served through the foundation's instances instead, then rejoins vicuna's chain: its tokens
 * are those of the chain executor run with that substitution (not vicuna's own), the running one keeps vicuna's
 * tokens, and /metrics counts the adaptively served hops. (adaptive-off.test.ts: the same with adaptive serving off.)
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { makeFixture, serve } from './support/fixture.js';
import { adaptiveRun, metric, type PlacementBody, substitutedChain } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, maxQueueLen: 1 })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = Array.from({ length: 7 }, (_, t) => (77 + 11 * t) % 900);
const N = 12;

describe('adaptive serving on equivalent blocks', () => {
  it("lists vicuna's equivalent segment: the foundation's blocks over its first block's span", async () => {
    const p = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    expect(p.adaptive).toBe(true);
    const vicuna = p.chains.find((c) => c.app === 'vicuna')!;
    expect(vicuna.equivalents).toHaveLength(1);
    const [eq] = vicuna.equivalents;
    expect(eq).toMatchObject({ position: 0, rejoin: 1 });
    expect(eq!.score).toBeGreaterThanOrEqual(0.98);
    expect(eq!.score).toBeLessThan(1);
    const foundation = p.chains.find((c) => c.app === 'tessera-tiny-llama')!;
    expect(eq!.blocks).toEqual(foundation.instances.slice(0, eq!.blocks.length).map((k) => p.instances.find((i) => i.instance === k)!.block));
  });

  it("serves a vicuna sequence through the foundation's instances while vicuna's own is taken, with the substituted chain's tokens", async () => {
    const { blocks, plain } = await substitutedChain(url, 'vicuna');
    const reference = await app.engine.call('alone', { app: 'vicuna', prompt: PROMPT, maxTokens: N, blocks });
    const own = await app.engine.call('alone', { app: 'vicuna', prompt: PROMPT, maxTokens: 2 * N });
    // The substitution changes the tokens (equivalent, not identical), so the check below tells the routes apart.
    expect(reference).not.toEqual(own.slice(0, N));
    expect(blocks).not.toEqual(plain);

    const before = await (await fetch(`${url}/metrics`)).text();
    const placed0 = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    const run = await adaptiveRun(app, 'vicuna', PROMPT, N);
    expect(run.held).toEqual(own);
    expect(run.second).toEqual(reference);

    const text = await (await fetch(`${url}/metrics`)).text();
    const series = 'tessera_blockllm_route_hops_adaptive_total';
    // The second sequence's hops through the segment's blocks, one each; the held sequence's route is vicuna's own.
    expect(metric(text, series) - metric(before, series)).toBe(blocks.length - (plain.length - 1));
    // Each block of the segment was routed the second sequence (its instances' `routed` moved by one).
    const placed = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    const routed = (p: PlacementBody, b: string) => p.instances.filter((i) => i.block === b).reduce((n, i) => n + i.routed, 0);
    for (const b of blocks.slice(0, blocks.length - (plain.length - 1))) expect(routed(placed, b) - routed(placed0, b), b).toBe(1);
  });
});
