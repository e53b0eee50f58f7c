/**
 * Speculation on surrogates at the default threshold (cosine 0.95): the foundation's surrogates (pruned by half,
 * recovered by least squares) predict their blocks' outputs closely on the demo, so speculations are accepted and
 * the successors' tentative runs — their K/V included — become final without a re-run. Every speculation ends
 * accepted, rolled back or superseded, and the sequences run to their length.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, serve } from './support/fixture.js';
import { metric, type PlacementBody, placementJob } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, scaleOutQueue: 0, speculation: { fraction: 1 } })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;

describe('speculation on surrogates, predictions accepted', () => {
  it('accepts close predictions: the tentative runs become final, nothing is re-run', async () => {
    // The FFN blocks on the device the attention blocks are not on: every hop of the chain crosses devices.
    const p = await placement();
    const chain = p.chains.find((c) => c.app === FOUNDATION)!;
    const home = chain.devices[1]!;
    const other = p.devices.map((d) => d.id).find((d) => d !== home)!;
    for (const key of chain.instances) {
      const i = (await placement()).instances.find((x) => x.instance === key)!;
      const want = i.label.startsWith('ffn') ? other : home;
      if (i.device !== want) expect((await placementJob(url, { kind: 'migrate', block: key, device: want })).state).toBe('completed');
    }
    const N = 8;
    const prompts = [Array.from({ length: 6 }, (_, t) => (50 + 3 * t) % 900), Array.from({ length: 10 }, (_, t) => (700 + 41 * t) % 900)];
    const served = await Promise.all(
      prompts.map((prompt, k) => app.engine.submit({ request: { id: `acc-${k}`, adapter: FOUNDATION, prompt, maxTokens: N, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result()),
    );
    for (const r of served) expect(r.tokens).toHaveLength(N);
    const s = (await placement()).speculation!;
    expect(s.acceptCosine).toBe(0.95);
    expect(s.speculations).toBeGreaterThanOrEqual(prompts.length * N);
    expect(s.accepted).toBeGreaterThan(0);
    const text = await (await fetch(`${url}/metrics`)).text();
    const outcomes = ['accepted', 'rolled-back', 'superseded'].map((o) => metric(text, `tessera_blockllm_speculations_total{outcome="${o}"}`));
    expect(outcomes[0]).toBe(s.accepted);
    expect(outcomes.reduce((a, b) => a + b, 0)).toBe(s.speculations);
    // Rows are re-run only for rejected predictions.
    if (s.rolledBack === 0) expect(s.repairedRows).toBe(0);
  });
});
