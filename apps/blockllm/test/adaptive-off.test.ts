/**
 * Adaptive serving switched off (`--no-adaptive`, BLOCKLLM_ADAPTIVE=0: DeviceSet's `adaptive: false`): the same run
 * as adaptive.test.ts — a second vicuna sequence while a first one holds vicuna's own first instance, maxQueueLen 1 —
 * keeps every hop on vicuna's own blocks: both sequences get the plain chain's tokens and no hop is counted adaptive.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { makeFixture, serve } from './support/fixture.js';
import { adaptiveRun, metric, type PlacementBody, substitutedChain } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, maxQueueLen: 1, adaptive: false })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = Array.from({ length: 7 }, (_, t) => (77 + 11 * t) % 900);
const N = 12;

describe('adaptive serving off', () => {
  it("serves the second vicuna sequence on vicuna's own blocks, with the plain chain's tokens", async () => {
    const p = (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;
    expect(p.adaptive).toBe(false);
    const { blocks } = await substitutedChain(url, 'vicuna');
    const own = await app.engine.call('alone', { app: 'vicuna', prompt: PROMPT, maxTokens: 2 * N });
    const substituted = await app.engine.call('alone', { app: 'vicuna', prompt: PROMPT, maxTokens: N, blocks });
    expect(substituted).not.toEqual(own.slice(0, N));

    const run = await adaptiveRun(app, 'vicuna', PROMPT, N);
    expect(run.held).toEqual(own);
    expect(run.second).toEqual(own.slice(0, N));
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(metric(text, 'tessera_blockllm_route_hops_adaptive_total')).toBe(0);
    expect(metric(text, 'tessera_blockllm_route_hops_total{reason="min-latency"}')).toBeGreaterThan(0);
  });
});
