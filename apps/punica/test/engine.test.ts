/**
 * The engine behind the HTTP API, end to end on a listening server:
 *   - greedy equivalence (E2E T15): 16 requests on 16 different adapters sent together return exactly the tokens
 *     each gets alone, and they really were batched together;
 *   - a cold adapter load does not stall the running batch: other requests' tokens keep arriving while it loads;
 *   - /health answers while the engine computes;
 *   - a client that disconnects mid-stream is cancelled in the engine and its KV pages are freed;
 *   - a crashed worker fails requests with 503 and /health reports it.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { HostEvent } from '@tessera/cluster';
import type { RequestEnd, WorkerEngineClient } from '@tessera/server-kit';

import type { AdapterNotice, PunicaProtocol } from '../src/engine/protocol.js';
import { ALL_TARGETS, type AdapterSpec, type Fixture, makeFixture, metricValue, MODEL_NAME, parseSse, serve } from './support/fixture.js';

const TENANTS: AdapterSpec[] = Array.from({ length: 16 }, (_, i) => ({
  name: `tenant-${String(i).padStart(2, '0')}`,
  rank: [2, 4, 8, 16][i % 4]!,
  targets: i % 3 === 0 ? ALL_TARGETS : ['q_proj', 'v_proj'],
  seed: 500 + i,
}));
const COLD: AdapterSpec = { name: 'cold-big', rank: 64, targets: ALL_TARGETS, seed: 900 };

let fixture: Fixture;
let app: FastifyInstance;
let address: string;
/** Every engine event and notice, in the order the worker produced them. */
const trace: (HostEvent | AdapterNotice)[] = [];
const ends: RequestEnd<PunicaProtocol>[] = [];
const worker = () => app.engine as WorkerEngineClient<PunicaProtocol>;
const endOf = (id: string) => ends.find((e) => e.placement.request.id === id);

beforeAll(async () => {
  fixture = makeFixture([...TENANTS, COLD]);
  app = await serve(fixture, { maxBatch: 32 });
  worker().on('events', (events) => trace.push(...events.map((m) => ('event' in m ? m.event : m.notice))));
  app.engine.on('request-end', (end) => ends.push(end));
  address = await app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

async function postJson(path: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${address}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), ...(signal ? { signal } : {}) });
}

function tokensOf(id: string): number[] {
  return trace.filter((e): e is Extract<HostEvent, { kind: 'token' }> => e.kind === 'token' && e.id === id).map((e) => e.token);
}

async function metrics(): Promise<string> {
  return (await fetch(`${address}/metrics`)).text();
}

/** Reads an SSE response chunk by chunk; `next()` returns the next frame's payload (or null at the end). */
function sseReader(res: Response) {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  return {
    async next(): Promise<unknown> {
      for (;;) {
        const end = buffer.indexOf('\n\n');
        if (end >= 0) {
          const frame = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          const data = frame.slice('data: '.length);
          return data === '[DONE]' ? data : JSON.parse(data);
        }
        const { value, done } = await reader.read();
        if (done) return null;
        buffer += decoder.decode(value, { stream: true });
      }
    },
    cancel: () => reader.cancel(),
  };
}

describe('greedy equivalence under batching (E2E T15)', () => {
  it('16 requests on 16 adapters sent together return exactly the tokens each gets alone', async () => {
    const requests = TENANTS.map((t, i) => ({ model: t.name, prompt: `Tenant ${i} asks about item ${i * 7}`, max_tokens: 16, temperature: 0, ignore_eos: true }));
    const alone: number[][] = [];
    for (const body of requests) {
      const res = await postJson('/v1/completions', body);
      expect(res.status).toBe(200);
      alone.push(tokensOf(((await res.json()) as { id: string }).id));
    }
    await app.engine.call('stats', null); // drains the batch-size record of the sequential round

    const together = await Promise.all(requests.map(async (body) => (await (await postJson('/v1/completions', body)).json()) as { id: string; usage: { completion_tokens: number } }));
    const { batchSizes } = await app.engine.call('stats', null);
    expect(Math.max(...batchSizes)).toBeGreaterThanOrEqual(8);

    together.forEach((res, i) => {
      expect(res.usage.completion_tokens).toBe(16);
      expect(tokensOf(res.id), TENANTS[i]!.name).toEqual(alone[i]);
      expect(alone[i]).toHaveLength(16);
    });
    // The adapters really differ: same prompt shape, different tenants, different continuations.
    expect(new Set(alone.map((t) => t.join(','))).size).toBeGreaterThanOrEqual(14);
  });
});

describe('on-demand adapter loading', () => {
  it("a cold adapter's load does not delay the running requests' tokens", async () => {
    const longRes = await postJson('/v1/completions', { model: TENANTS[0]!.name, prompt: 'A long answer', max_tokens: 200, temperature: 0, ignore_eos: true, stream: true });
    const long = sseReader(longRes);
    const first = (await long.next()) as { id: string };
    const traceStart = trace.length;

    const cold = await postJson('/v1/completions', { model: COLD.name, prompt: 'Cold start', max_tokens: 4, temperature: 0 });
    expect(cold.status).toBe(200);

    const events = trace.slice(traceStart);
    const start = events.findIndex((e) => e.kind === 'adapter-load-start' && e.name === COLD.name);
    const loaded = events.findIndex((e) => e.kind === 'adapter-loaded' && e.name === COLD.name);
    expect(start).toBeGreaterThanOrEqual(0);
    expect(loaded).toBeGreaterThan(start);
    // While the adapter was read from disk and uploaded, the running request kept getting tokens.
    const during = events.slice(start, loaded).filter((e) => e.kind === 'token' && e.id === first.id).length;
    expect(during).toBeGreaterThan(0);

    for (let f = await long.next(); f !== null; f = await long.next()) if (f === '[DONE]') break;
    expect(tokensOf(first.id)).toHaveLength(200);
    expect(metricValue(await metrics(), 'tessera_adapter_load_seconds_count')).toBeGreaterThanOrEqual(1);
  });
});

describe('responsiveness and cancellation', () => {
  it('/health answers while the engine computes', async () => {
    const streams = await Promise.all(
      TENANTS.map(async (t, i) => sseReader(await postJson('/v1/completions', { model: t.name, prompt: `busy ${i}`, max_tokens: 200, temperature: 0, ignore_eos: true, stream: true }))),
    );
    let answeredWhileBusy = 0;
    for (let i = 0; i < 10; i++) {
      const res = await fetch(`${address}/health`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as { status: string; requests_in_flight: number };
      expect(body.status).toBe('ok');
      if (body.requests_in_flight > 0) answeredWhileBusy++;
    }
    expect(answeredWhileBusy).toBeGreaterThan(0);
    await Promise.all(streams.map(async (s) => {
      for (let f = await s.next(); f !== null; f = await s.next()) if (f === '[DONE]') break;
    }));
  });

  it('a client that disconnects mid-stream is cancelled in the engine and its KV pages are freed', async () => {
    // Company in the batch makes each step slower, so the cancel lands long before the request could finish.
    const others = await Promise.all(
      TENANTS.slice(1).map(async (t, i) => sseReader(await postJson('/v1/completions', { model: t.name, prompt: `load ${i}`, max_tokens: 120, temperature: 0, ignore_eos: true, stream: true }))),
    );
    const abort = new AbortController();
    const res = await postJson('/v1/completions', { model: TENANTS[0]!.name, prompt: 'to be abandoned', max_tokens: 230, temperature: 0, ignore_eos: true, stream: true }, abort.signal);
    const stream = sseReader(res);
    const first = (await stream.next()) as { id: string };
    await stream.next();
    abort.abort();

    await expect.poll(() => endOf(first.id)?.result?.finishReason, { timeout: 10_000, interval: 10 }).toBe('cancelled');
    const end = endOf(first.id)!;
    expect(end.result!.completionTokens).toBeLessThan(230);

    await Promise.all(others.map(async (s) => {
      for (let f = await s.next(); f !== null; f = await s.next()) if (f === '[DONE]') break;
    }));
    await expect.poll(async () => metricValue(await metrics(), 'tessera_kv_cache_used_pages'), { timeout: 10_000, interval: 20 }).toBe(0);
    const text = await metrics();
    expect(metricValue(text, 'tessera_requests_cancelled_total')).toBe(1);
    expect(metricValue(text, `vllm:request_success_total{model_name="${MODEL_NAME}",finished_reason="abort"}`)).toBe(1);
    expect(metricValue(text, `vllm:num_requests_running{model_name="${MODEL_NAME}"}`)).toBe(0);
    expect(metricValue(text, `vllm:num_requests_waiting{model_name="${MODEL_NAME}"}`)).toBe(0);
  });
});

describe('a crashed engine worker', () => {
  it('fails in-flight and new requests with 503, and /health reports unhealthy', async () => {
    const stream = sseReader(await postJson('/v1/completions', { model: TENANTS[1]!.name, prompt: 'doomed', max_tokens: 200, temperature: 0, ignore_eos: true, stream: true }));
    await stream.next();
    await worker().terminate();

    const frames: unknown[] = [];
    for (let f = await stream.next(); f !== null; f = await stream.next()) frames.push(f);
    expect(frames.at(-1)).toBe('[DONE]');
    expect(frames.at(-2)).toMatchObject({ error: { code: 'engine_unavailable', type: 'service_unavailable_error' } });

    const health = await fetch(`${address}/health`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ status: 'unhealthy', error: expect.stringMatching(/exited unexpectedly/) });

    const res = await postJson('/v1/completions', { model: MODEL_NAME, prompt: 'anyone?', max_tokens: 2 });
    expect(res.status).toBe(503);
    expect(await res.json()).toMatchObject({ error: { code: 'engine_unavailable' } });
    expect(metricValue(await metrics(), 'tessera_engine_healthy')).toBe(0);
    expect(parseSse('data: [DONE]\n\n')).toEqual(['[DONE]']);
  });
});
