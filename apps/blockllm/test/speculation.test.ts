/**
 * Speculation on surrogates in the server (design note §4.5, algorithm 5.8; behaviour 23 end to end). Two devices;
 * placement jobs put the foundation's FFN blocks on the device its attention blocks are not on, so every hop of its
 * chain crosses devices and whichever instances the selection picks have their successor elsewhere. The server
 * builds the foundation blocks' surrogates on start (pruned by half, recovered by least squares). With the accept
 * threshold at 1, every prediction is rejected (forced mispredictions): the successors ran on the prediction, are
 * re-run on the real output, and the tokens are exactly those of the application run alone without speculation.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, serve } from './support/fixture.js';
import { metric, type PlacementBody, placementJob } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 3_000_000, scaleOutQueue: 0, speculation: { acceptCosine: 1, fraction: 1 } })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;

/** Alternates the foundation's chain over the two devices: attention blocks on one, FFN blocks on the other. */
async function alternate(): Promise<void> {
  const p = await placement();
  const chain = p.chains.find((c) => c.app === FOUNDATION)!;
  const home = chain.devices[1]!;
  const other = p.devices.map((d) => d.id).find((d) => d !== home)!;
  for (const [position, key] of chain.instances.entries()) {
    const label = p.instances.find((i) => i.instance === key)!.label;
    const want = label.startsWith('ffn') ? other : home;
    const now = (await placement()).instances.find((i) => i.instance === key)!.device;
    if (now === want) continue;
    const job = await placementJob(url, { kind: 'migrate', block: key, device: want });
    expect(job.state, `migrating block ${position} (${label}): ${job.error}`).toBe('completed');
  }
}

const PROMPTS = [
  Array.from({ length: 9 }, (_, t) => (31 + 7 * t) % 900),
  Array.from({ length: 5 }, (_, t) => (400 + 13 * t) % 900),
  Array.from({ length: 12 }, (_, t) => (5 + 29 * t) % 900),
];
const N = 10;

describe('speculation on surrogates, every prediction rejected', () => {
  it('deploys surrogates beside the chosen instances and shows them in /v1/placement', async () => {
    await alternate();
    // Admitting a request runs the selection (at the first step and every 16 steps after).
    await app.engine.submit({ request: { id: 'warm', adapter: FOUNDATION, prompt: PROMPTS[0]!, maxTokens: 2, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();
    const p = await placement();
    expect(p.speculation).not.toBeNull();
    expect(p.speculation!.acceptCosine).toBe(1);
    expect(p.speculation!.surrogates.length).toBeGreaterThan(0);
    for (const s of p.speculation!.surrogates) {
      expect(s.device).toBe(p.instances.find((i) => i.instance === s.instance)!.device);
      expect(s.label.startsWith('surrogate ')).toBe(true);
      expect(s.cosine).toBeGreaterThan(0.5);
      expect(s.cosine).toBeLessThan(1);
      expect(p.devices.find((d) => d.id === s.device)!.instances).toContain(s.surrogate);
    }
  });

  it('rolls back to exactly the tokens of the run without speculation (concurrent sequences)', async () => {
    const reference = await Promise.all(PROMPTS.map((prompt) => app.engine.call('alone', { app: FOUNDATION, prompt, maxTokens: N })));
    const before = (await placement()).speculation!;
    const served = await Promise.all(
      PROMPTS.map((prompt, k) => app.engine.submit({ request: { id: `spec-${k}`, adapter: FOUNDATION, prompt, maxTokens: N, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result()),
    );
    expect(served.map((r) => r.tokens)).toEqual(reference);
    const after = (await placement()).speculation!;
    const opened = after.speculations - before.speculations;
    expect(opened).toBeGreaterThanOrEqual(PROMPTS.length * N);
    expect(after.accepted).toBe(0);
    // Each rejection re-runs the rest of the chain, so a later speculation of the same step falls with it.
    const rolledBack = after.rolledBack - before.rolledBack;
    expect(rolledBack).toBeGreaterThanOrEqual(PROMPTS.length * N);
    expect(rolledBack).toBeLessThanOrEqual(opened);
    // Every rejection drops the tentative runs after the block and re-runs the sequence's new tokens from there.
    expect(after.droppedSteps - before.droppedSteps).toBeGreaterThanOrEqual(rolledBack);
    expect(after.repairedRows - before.repairedRows).toBe(PROMPTS.reduce((n, p) => n + p.length + N - 1, 0));

    const text = await (await fetch(`${url}/metrics`)).text();
    expect(metric(text, 'tessera_blockllm_speculations_total{outcome="rolled-back"}')).toBe(after.rolledBack);
    expect(metric(text, 'tessera_blockllm_speculations_total{outcome="accepted"}')).toBe(0);
    expect(metric(text, 'tessera_blockllm_speculations_total{outcome="superseded"}')).toBe(after.speculations - after.rolledBack);
    expect(metric(text, 'tessera_blockllm_speculation_repaired_rows_total')).toBe(after.repairedRows);
  });

  it('evicting a speculating instance takes its surrogate along; the server keeps serving the same tokens', async () => {
    const p = await placement();
    const s = p.speculation!.surrogates[0]!;
    const home = p.instances.find((i) => i.instance === s.instance)!.device;
    const other = p.devices.map((d) => d.id).find((d) => d !== home)!;
    const job = await placementJob(url, { kind: 'migrate', block: s.instance, device: other });
    expect(job.state, String(job.error)).toBe('completed');
    const q = await placement();
    expect(q.devices.find((d) => d.id === home)!.instances).not.toContain(s.surrogate);
    const reference = await app.engine.call('alone', { app: FOUNDATION, prompt: PROMPTS[1]!, maxTokens: N });
    const r = await app.engine.submit({ request: { id: 'after-migrate', adapter: FOUNDATION, prompt: PROMPTS[1]!, maxTokens: N, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();
    expect(r.tokens).toEqual(reference);
  });

  it('a re-placement takes the surrogates\' room back first; the periodic selection deploys them again', async () => {
    expect((await placement()).speculation!.surrogates.length).toBeGreaterThan(0);
    const job = await placementJob(url, { kind: 'place' });
    expect(job.state, String(job.error)).toBe('completed');
    const p = await placement();
    expect(p.speculation!.surrogates).toEqual([]);
    for (const d of p.devices) expect(d.instances.some((i) => i.endsWith('~surrogate'))).toBe(false);
    // More steps than the selection's period: the surrogates come back, and the tokens stay exact.
    const prompt = PROMPTS[2]!;
    const reference = await app.engine.call('alone', { app: FOUNDATION, prompt, maxTokens: 20 });
    const r = await app.engine.submit({ request: { id: 'after-place', adapter: FOUNDATION, prompt, maxTokens: 20, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();
    expect(r.tokens).toEqual(reference);
    expect((await placement()).speculation!.surrogates.length).toBeGreaterThan(0);
  });
});
