/**
 * Two devices (worker threads, each with its own byte budget) over the demo zoo: the serving core's placement
 * spreads the chains over both, a request's chain runs block by block across them with the hidden state handed on
 * between devices, and every application gives the tokens — and, greedy, the bit-identical logits (its logprobs) —
 * of its chain run on one device; applications sharing blocks served together batch per block on each device (a
 * fused PE block with the base block it modifies: variant batching) and still give the tokens of alone, also when a block's KV cache is full and a step across devices is rolled back; placement jobs move and evict instances (the in-process control plane), bad ones
 * are 4xx and the server keeps serving.
 */
import { tokenLogprobs } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { APPS, makeFixture, nativeAddonLoadedHere, postJson, serve } from './support/fixture.js';
import { type JobBody, metric, placementJob, type PlacementBody } from './support/placement.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
// Each device holds about 77 % of the zoo's unique bytes (1.14 MB for the demo), so chains must spread;
// each block instance's KV cache is 4 pages of 16 tokens, so concurrent requests exhaust it and steps roll back.
beforeAll(async () => ({ app, url } = await serve(fixture, { devices: 2, deviceBytes: 880_000, kvPages: 4 })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = [5, 17, 42, 99, 7, 300, 12];
const N = 8;
const promptOf = (i: number) => Array.from({ length: 3 + 2 * i }, (_, t) => (37 * i + 11 * t + 3) % 1000);

async function served(model: string, prompt: number[], maxTokens: number, id: string, logprobs?: number) {
  const stream = app.engine.submit({ request: { id, adapter: model, prompt, maxTokens, sampling: {}, stop: [], ignoreEos: true, ...(logprobs ? { logprobs } : {}) }, attempt: 0, generated: [] });
  const lps: unknown[] = [];
  for await (const ev of stream) {
    if (ev.type === 'token') lps.push(ev.logprobs);
    else if (ev.type === 'finish') return { tokens: ev.result.tokens, logprobs: lps };
    else throw ev.error;
  }
  throw new Error(`request ${id} ended without a result`);
}

const placement = async () => (await (await fetch(`${url}/v1/placement`)).json()) as PlacementBody;

describe('a chain spread over two devices', () => {
  it('places the chains over both devices and serves every application with the tokens of one device', async () => {
    const p = await placement();
    expect(p.devices.map((d) => d.id)).toEqual(['device-0', 'device-1']);
    expect(p.devices.every((d) => d.instances.length > 0 && d.residentBytes <= d.budgetBytes)).toBe(true);
    expect(p.transport).toBe('in-process');
    // Some chains really cross: their blocks live on both devices.
    const spread = p.chains.filter((c) => new Set(c.devices).size === 2).map((c) => c.app);
    expect(spread.length).toBeGreaterThan(0);
    for (const model of APPS) {
      const alone = await app.engine.call('alone', { app: model, prompt: PROMPT, maxTokens: N });
      expect((await served(model, PROMPT, N, `two-${model}`)).tokens, model).toEqual(alone);
    }
    const stats = await app.engine.call('stats', null);
    expect(stats.devices!.crossBytes).toBeGreaterThan(0);
    // The zoo's memory split counts what the devices hold.
    expect(stats.memory.residentBytes).toBe(stats.devices!.perDevice.reduce((n, d) => n + d.residentBytes, 0));
    expect(stats.devices!.perDevice.every((d) => d.busyMs > 0)).toBe(true);
  });

  it('gives bit-identical logits (greedy logprobs) to the chain on one device', async () => {
    for (const model of ['sql-lora', 'persona', 'vicuna']) {
      const logits = await app.engine.call('aloneLogits', { app: model, prompt: PROMPT, maxTokens: N });
      const got = await served(model, PROMPT, N, `logits-${model}`, 5);
      expect(got.logprobs).toEqual(logits.map((row, i) => tokenLogprobs(row, got.tokens[i]!, 5)));
    }
  });

  it('batches applications sharing a block on each device, with the tokens of alone', async () => {
    const before = await app.engine.call('stats', null);
    const jobs = [...APPS, ...APPS].map((model, i) => ({ model, prompt: promptOf(i) }));
    const alone = await Promise.all(jobs.map((j) => app.engine.call('alone', { app: j.model, prompt: j.prompt, maxTokens: 16 })));
    const together = await Promise.all(jobs.map((j, i) => served(j.model, j.prompt, 16, `together-${i}`)));
    expect(together.map((t) => t.tokens)).toEqual(alone);
    const after = await app.engine.call('stats', null);
    expect(after.sharedBatches).toBeGreaterThan(before.sharedBatches);
    // Fused PE blocks ran in one batch with the base blocks they modify (variant batching).
    expect(after.devices!.variantBatches).toBeGreaterThan(before.devices!.variantBatches);
    // Fourteen requests do not fit the 4 pages a variant of a block adds to its device's cache at once: steps were
    // rolled back on every device and retried.
    expect(after.kvExhausted).toBeGreaterThan(before.kvExhausted);
    expect(after.devices!.crossRows).toBeGreaterThan(before.devices!.crossRows);
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(metric(text, 'tessera_blockllm_cross_device_bytes_total')).toBeGreaterThan(0);
    const share = metric(text, 'tessera_blockllm_communication_share');
    expect(share).toBeGreaterThan(0);
    expect(share).toBeLessThan(1);
    expect(metric(text, 'tessera_blockllm_device_utilisation{device="device-0"}')).toBeGreaterThan(0);
  });

  it('cancels a request mid-generation across devices; the others keep their tokens', async () => {
    const long = app.engine.submit({ request: { id: 'to-cancel', adapter: 'chat-lora', prompt: PROMPT, maxTokens: 40, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });
    const other = served('summarizer', PROMPT, N, 'beside-cancel');
    let seen = 0;
    let reason = '';
    for await (const ev of long) {
      if (ev.type === 'token' && ++seen === 3) app.engine.cancel('to-cancel');
      if (ev.type === 'finish') {
        reason = ev.result.finishReason;
        expect(ev.result.tokens.length).toBeLessThan(40);
      }
    }
    expect(reason).toBe('cancelled');
    expect((await other).tokens).toEqual(await app.engine.call('alone', { app: 'summarizer', prompt: PROMPT, maxTokens: N }));
    expect((await served('chat-lora', PROMPT, N, 'after-cancel')).tokens).toEqual(await app.engine.call('alone', { app: 'chat-lora', prompt: PROMPT, maxTokens: N }));
  });

  it('migrates and evicts instances by placement job; requests keep their tokens', async () => {
    const p = await placement();
    // An instance of sql-lora's chain that the other device can take (the server refuses the others with a 409).
    const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');
    let block = '';
    let to = '';
    let moved: { state: string } | null = null;
    for (const key of p.chains.find((c) => c.app === 'sql-lora')!.instances) {
      const from = p.instances.find((i) => i.instance === key)!.device;
      const r = await postJson(`${url}/v1/placement/jobs`, { kind: 'migrate', block: key, device: other(from) });
      if (r.status === 409) {
        expect(r.json.error.message).toMatch(/does not fit/);
        continue;
      }
      expect(r.status, r.text).toBe(202);
      (block = key), (to = other(from));
      for (;;) {
        const s = (await (await fetch(`${url}/v1/placement/jobs/${r.json.id}`)).json()) as { state: string };
        if (s.state === 'completed' || s.state === 'failed') {
          moved = s;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      break;
    }
    expect(moved?.state, JSON.stringify(moved)).toBe('completed');
    expect((await placement()).instances.find((i) => i.instance === block)!.device).toBe(to);
    const alone = await app.engine.call('alone', { app: 'sql-lora', prompt: PROMPT, maxTokens: N });
    expect((await served('sql-lora', PROMPT, N, 'after-migrate')).tokens).toEqual(alone);
    // Evicted, the block is deployed again on demand by the next request that needs it.
    const evicted = await placementJob(url, { kind: 'evict', block });
    expect(evicted.state).toBe('completed');
    expect((await placement()).instances.some((i) => i.instance === block)).toBe(false);
    expect((await served('sql-lora', PROMPT, N, 'after-evict')).tokens).toEqual(alone);
    expect((await placement()).instances.some((i) => i.instance === block)).toBe(true);
    // A re-placement by the frag-min policy, then by locality again.
    for (const policy of ['frag-min', 'locality'] as const) expect((await placementJob(url, { kind: 'place', policy })).state).toBe('completed');
    expect((await placement()).policy).toBe('locality');
    expect((await served('sql-lora', PROMPT, N, 'after-place')).tokens).toEqual(alone);
  });

  it('migrates an instance in use: the KV of its running sequences moves with it and they keep their tokens', async () => {
    const other = (d: string) => (d === 'device-0' ? 'device-1' : 'device-0');
    const M = 48; // with the 7-token prompt and persona's 4 prefix tokens, within the 4 pages (64 positions) of a cache
    let moved = 0;
    let pages = 0;
    // persona's chain holds prefix attention blocks (their prefix K/V moves too), classifier's a BitFit one. Each
    // instance of a chain in turn is moved while a long request runs through it; those the other device cannot hold
    // are refused and the request is unaffected. The job goes straight to the engine when the second token
    // arrives, so it runs between two of the request's steps.
    for (const model of ['persona', 'classifier']) {
      const alone = await app.engine.call('alone', { app: model, prompt: PROMPT, maxTokens: M });
      for (const [k, key] of (await placement()).chains.find((c) => c.app === model)!.instances.entries()) {
        const from = (await placement()).instances.find((i) => i.instance === key)!.device;
        const stream = app.engine.submit({ request: { id: `migrate-live-${model}-${k}`, adapter: model, prompt: PROMPT, maxTokens: M, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });
        let job: Promise<{ id: string } | Error> | null = null;
        let tokens: number[] = [];
        let seen = 0;
        for await (const ev of stream) {
          if (ev.type === 'token' && ++seen === 2) job = app.engine.call('placementSubmit', { kind: 'migrate', block: key, device: other(from) }).catch((err: Error) => err);
          else if (ev.type === 'finish') tokens = ev.result.tokens;
          else if (ev.type === 'error') throw ev.error;
        }
        expect(tokens, `${model} ${key}`).toEqual(alone);
        const submitted = await job!;
        if (submitted instanceof Error) {
          expect(submitted.message).toMatch(/does not fit/);
          continue;
        }
        let s: JobBody;
        for (;;) {
          s = (await (await fetch(`${url}/v1/placement/jobs/${submitted.id}`)).json()) as JobBody;
          if (s.state === 'completed' || s.state === 'failed') break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        expect(s.state, JSON.stringify(s)).toBe('completed');
        expect((await placement()).instances.find((i) => i.instance === key)!.device).toBe(other(from));
        const result = s.result as { movedSequences: number; kvPages: number };
        moved += result.movedSequences;
        pages += result.kvPages;
      }
      expect((await served(model, PROMPT, N, `after-live-migrate-${model}`)).tokens).toEqual(alone.slice(0, N));
    }
    // Some instance held the running request's KV when it moved (an attention block), and its pages went along.
    expect(moved).toBeGreaterThan(0);
    expect(pages).toBeGreaterThan(0);
  });

  it('refuses bad placement jobs with a 4xx naming the problem, and keeps serving', async () => {
    const p = await placement();
    const [b0] = p.instances;
    const post = (body: unknown) => postJson(`${url}/v1/placement/jobs`, body);
    const cases: [unknown, number, RegExp][] = [
      [{ kind: 'deploy', block: b0!.block, device: b0!.device }, 409, /already deployed/],
      [{ kind: 'migrate', block: b0!.block, device: 'device-9' }, 404, /no device "device-9"/],
      [{ kind: 'migrate', block: b0!.block, device: b0!.device }, 409, /already on/],
      [{ kind: 'evict', block: 'no-such-block' }, 404, /no instance/],
      [{ kind: 'deploy', block: 'no-such-block', device: 'device-0' }, 404, /no block/],
      [{ kind: 'teleport', block: b0!.block }, 400, /./],
      [{ kind: 'place', policy: 'random' }, 400, /./],
    ];
    for (const [body, status, message] of cases) {
      const r = await postJson(`${url}/v1/placement/jobs`, body);
      expect(r.status, `${JSON.stringify(body)} → ${r.text}`).toBe(status);
      expect(r.json.error.message).toMatch(message);
    }
    expect((await fetch(`${url}/v1/placement/jobs/999999`)).status).toBe(404);
    expect((await post({ kind: 'evict' })).status).toBe(400);
    const ok = await postJson(`${url}/v1/completions`, { model: 'chat-lora', prompt: PROMPT, max_tokens: 4, temperature: 0 });
    expect(ok.status).toBe(200);
    expect(nativeAddonLoadedHere()).toBe(false);
  });
});
