/**
 * The HTTP surface through fastify's inject (no port): schema and semantic 4xx bodies in OpenAI's shape, the
 * model-name rules (base, adapter, base:adapter; unknown → 404, never the base model), /v1/models, /health,
 * /metrics text, and a real generation through the engine worker.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, MODEL_NAME, metricValue, nativeAddonLoadedHere, parseSse, serve } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;

beforeAll(async () => {
  fixture = makeFixture([{ name: 'alpha' }, { name: 'beta', rank: 4 }, { name: 'gamma.v2', rank: 16 }]);
  app = await serve(fixture);
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

function post(url: string, payload: unknown) {
  return app.inject({ method: 'POST', url, payload: payload as Record<string, unknown> });
}

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

function expectError(res: { statusCode: number; json(): unknown }, status: number, match: { param?: string | null; code?: string | null; message?: RegExp }) {
  expect(res.statusCode).toBe(status);
  const body = res.json() as ErrorBody;
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  if (match.param !== undefined) expect(body.error.param).toBe(match.param);
  if (match.code !== undefined) expect(body.error.code).toBe(match.code);
  if (match.message) expect(body.error.message).toMatch(match.message);
  expect(body.error.type).toBe(match.code === 'route_not_found' ? 'not_found_error' : 'invalid_request_error');
  return body.error;
}

describe('POST /v1/completions', () => {
  it('generates with the base model and with an adapter, reporting usage and the finish reason', async () => {
    const base = await post('/v1/completions', { model: MODEL_NAME, prompt: 'Hello there', max_tokens: 6, temperature: 0, ignore_eos: true });
    expect(base.statusCode).toBe(200);
    const body = base.json();
    expect(body).toMatchObject({ object: 'text_completion', model: MODEL_NAME, choices: [{ index: 0, finish_reason: 'length', logprobs: null }] });
    expect(body.id).toMatch(/^cmpl-[0-9a-f]{24}$/);
    expect(body.usage.completion_tokens).toBe(6);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 6);
    expect(typeof body.choices[0].text).toBe('string');

    const tuned = await post('/v1/completions', { model: 'alpha', prompt: 'Hello there', max_tokens: 6, temperature: 0, ignore_eos: true });
    expect(tuned.statusCode).toBe(200);
    expect(tuned.json().model).toBe('alpha');
    // `base:adapter` selects the same adapter, with the same greedy result.
    const spelled = await post('/v1/completions', { model: `${MODEL_NAME}:alpha`, prompt: 'Hello there', max_tokens: 6, temperature: 0, ignore_eos: true });
    expect(spelled.json().choices[0].text).toBe(tuned.json().choices[0].text);
  });

  it('takes token ids and one-element prompt lists', async () => {
    const ids = app.tokenizer.encode('Once upon a time');
    const a = await post('/v1/completions', { model: 'beta', prompt: ids, max_tokens: 4, temperature: 0 });
    const b = await post('/v1/completions', { model: 'beta', prompt: ['Once upon a time'], max_tokens: 4, temperature: 0 });
    const c = await post('/v1/completions', { model: 'beta', prompt: [ids], max_tokens: 4, temperature: 0 });
    for (const r of [a, b, c]) expect(r.statusCode).toBe(200);
    expect(b.json().choices[0].text).toBe(a.json().choices[0].text);
    expect(c.json().choices[0].text).toBe(a.json().choices[0].text);
    expect(a.json().usage.prompt_tokens).toBe(ids.length);
  });

  it('cuts the text at a stop string and reports finish_reason stop', async () => {
    const free = (await post('/v1/completions', { model: 'alpha', prompt: 'Stop here', max_tokens: 12, temperature: 0, ignore_eos: true })).json();
    const text: string = free.choices[0].text;
    const stop = text.slice(2, 4);
    expect(stop.length).toBe(2);
    const cut = (await post('/v1/completions', { model: 'alpha', prompt: 'Stop here', max_tokens: 12, temperature: 0, ignore_eos: true, stop })).json();
    expect(cut.choices[0].finish_reason).toBe('stop');
    expect(cut.choices[0].text).toBe(text.slice(0, text.indexOf(stop)));
  });

  it('streams SSE chunks ending in [DONE], with a usage chunk when asked', async () => {
    const res = await post('/v1/completions', { model: 'alpha', prompt: 'Hi', max_tokens: 5, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
    const frames = parseSse(res.body);
    expect(frames.at(-1)).toBe('[DONE]');
    const chunks = frames.slice(0, -1) as { choices: { text: string; finish_reason: string | null }[]; usage?: { completion_tokens: number } }[];
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ completion_tokens: 5 });
    const closing = chunks.at(-2)!;
    expect(closing.choices[0]!.finish_reason).toBe('length');
    const streamed = chunks.slice(0, -1).map((c) => c.choices[0]!.text).join('');
    const whole = (await post('/v1/completions', { model: 'alpha', prompt: 'Hi', max_tokens: 5, temperature: 0, ignore_eos: true })).json();
    expect(streamed).toBe(whole.choices[0].text);
  });

  it('gives the same sampled text for the same seed', async () => {
    const req = { model: 'beta', prompt: 'Seeded', max_tokens: 8, temperature: 0.9, top_p: 0.95, top_k: 50, seed: 1234 };
    const a = (await post('/v1/completions', req)).json();
    const b = (await post('/v1/completions', req)).json();
    expect(a.choices[0].text).toBe(b.choices[0].text);
  });
});

describe('POST /v1/chat/completions', () => {
  it('answers with an assistant message through the chat template', async () => {
    const res = await post('/v1/chat/completions', {
      model: 'gamma.v2',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hello' }] },
      ],
      max_tokens: 5,
      temperature: 0,
    });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body).toMatchObject({ object: 'chat.completion', model: 'gamma.v2', choices: [{ index: 0, message: { role: 'assistant' } }] });
    expect(body.id).toMatch(/^chatcmpl-/);
    const prompt = app.tokenizer.encode('system: Be brief.\nuser: Hello\nassistant:');
    expect(body.usage.prompt_tokens).toBe(prompt.length);
  });

  it('rejects parts it cannot render and conflicting limits', async () => {
    expectError(await post('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }), 400, {
      param: 'messages[0].content',
      message: /image_url.*not supported/,
    });
    expectError(await post('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: 'x' }], max_tokens: 3, max_completion_tokens: 4 }), 400, {
      param: 'max_completion_tokens',
    });
    expectError(await post('/v1/chat/completions', { model: 'alpha', messages: [] }), 400, { param: 'messages' });
    expectError(await post('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'wizard', content: 'x' }] }), 400, { param: 'messages[0].role', message: /must be one of/ });
    expectError(await post('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function' }] }), 400, { param: 'tools' });
  });
});

describe('the model name picks the adapter, and only a known one', () => {
  it('404s an unknown adapter with model_not_found instead of falling back to the base model', async () => {
    for (const model of ['delta', `${MODEL_NAME}:delta`, 'ALPHA', `other:alpha`, '']) {
      const res = await post('/v1/completions', { model, prompt: 'x', max_tokens: 2 });
      if (model === '') expectError(res, 400, { param: 'model' });
      else expectError(res, 404, { param: 'model', code: 'model_not_found', message: new RegExp(`\`${model}\` does not exist`) });
    }
    expectError(await post('/v1/chat/completions', { model: 'delta', messages: [{ role: 'user', content: 'x' }] }), 404, { code: 'model_not_found' });
  });
});

describe('bad input is a 400 with a clear message and the field as param', () => {
  const cases: [string, Record<string, unknown>, { param: string | null; code?: string; message: RegExp }][] = [
    ['missing model', { prompt: 'x' }, { param: 'model', message: /'model' is required/ }],
    ['max_tokens 0', { model: 'alpha', prompt: 'x', max_tokens: 0 }, { param: 'max_tokens', message: /max_tokens must be >= 1/ }],
    ['max_tokens as a string', { model: 'alpha', prompt: 'x', max_tokens: '5' }, { param: 'max_tokens', message: /max_tokens must be integer/ }],
    ['temperature 3', { model: 'alpha', prompt: 'x', temperature: 3 }, { param: 'temperature', message: /temperature must be <= 2/ }],
    ['top_p 0', { model: 'alpha', prompt: 'x', top_p: 0 }, { param: 'top_p', message: /top_p must be > 0/ }],
    ['prompt a number', { model: 'alpha', prompt: 5 }, { param: 'prompt', message: /prompt must be a string, an array of token ids/ }],
    ['empty prompt', { model: 'alpha', prompt: '' }, { param: 'prompt', message: /prompt must not be empty/ }],
    ['empty token list', { model: 'alpha', prompt: [] }, { param: 'prompt', message: /prompt must not be empty/ }],
    ['token out of the vocabulary', { model: 'alpha', prompt: [5, 1_000_000] }, { param: 'prompt', message: /prompt\[1\] = 1000000 is not a token id/ }],
    ['an empty prompt in a batch', { model: 'alpha', prompt: ['a', ''] }, { param: 'prompt', message: /prompt\[1\] must not be empty/ }],
    ['n = 0', { model: 'alpha', prompt: 'x', n: 0 }, { param: 'n', message: /n must be >= 1/ }],
    ['too many choices', { model: 'alpha', prompt: 'x', n: 129 }, { param: 'n', message: /at most 128 per request/ }],
    ['best_of', { model: 'alpha', prompt: 'x', best_of: 3 }, { param: 'best_of', message: /best_of/ }],
    ['logprobs over 20', { model: 'alpha', prompt: 'x', logprobs: 21 }, { param: 'logprobs', message: /logprobs must be at most 20/ }],
    ['max_tokens 0 without echo', { model: 'alpha', prompt: 'x', max_tokens: 0, echo: false }, { param: 'max_tokens', message: /0 only with echo/ }],
    ['presence_penalty', { model: 'alpha', prompt: 'x', presence_penalty: 0.5 }, { param: 'presence_penalty', message: /not supported/ }],
    ['empty stop string', { model: 'alpha', prompt: 'x', stop: '' }, { param: 'stop', message: /stop must be a non-empty string/ }],
    ['stream_options without stream', { model: 'alpha', prompt: 'x', stream_options: { include_usage: true } }, { param: 'stream_options', message: /only be given when stream is true/ }],
    ['stream not a boolean', { model: 'alpha', prompt: 'x', stream: 'yes' }, { param: 'stream', message: /stream must be boolean/ }],
    [
      'prompt + max_tokens over the context',
      { model: 'alpha', prompt: 'x', max_tokens: 1000 },
      { param: 'prompt', code: 'context_length_exceeded', message: /maximum context length is 256 tokens\. However, you requested 1002 tokens \(2 in the prompt, 1000 in the completion\)/ },
    ],
    [
      'a prompt that fills the context',
      { model: 'alpha', prompt: Array.from({ length: 256 }, () => 5) },
      { param: 'prompt', code: 'context_length_exceeded', message: /leaves no room for a completion/ },
    ],
  ];
  it.each(cases)('%s', async (_name, payload, want) => {
    expectError(await post('/v1/completions', payload), 400, want);
  });

  it('answers malformed JSON and unknown routes in the same error shape', async () => {
    const bad = await app.inject({ method: 'POST', url: '/v1/completions', payload: '{"model":', headers: { 'content-type': 'application/json' } });
    expect(bad.statusCode).toBe(400);
    expect((bad.json() as ErrorBody).error.message).toMatch(/JSON/);
    expectError(await app.inject({ method: 'GET', url: '/v1/nothing' }), 404, { code: 'route_not_found' });
  });
});

describe('GET /v1/models', () => {
  it('lists the base model and every adapter with vLLM lineage and residency', async () => {
    // Make 'alpha' resident by using it.
    await post('/v1/completions', { model: 'alpha', prompt: 'warm', max_tokens: 1 });
    const res = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(res.statusCode).toBe(200);
    const { object, data } = res.json() as { object: string; data: Record<string, unknown>[] };
    expect(object).toBe('list');
    expect(data.map((m) => m.id)).toEqual([MODEL_NAME, 'alpha', 'beta', 'gamma.v2']);
    expect(data[0]).toMatchObject({ object: 'model', parent: null, root: fixture.modelDir, residency: 'device', max_model_len: 256 });
    for (const m of data.slice(1)) {
      expect(m).toMatchObject({ object: 'model', parent: MODEL_NAME, root: `${fixture.adaptersDir}/${m.id as string}`, max_model_len: 256 });
      expect(['disk', 'host', 'device']).toContain(m.residency);
    }
    expect(data.find((m) => m.id === 'alpha')).toMatchObject({ residency: 'device', lora_rank: 8 });
    expect(data.find((m) => m.id === 'gamma.v2')).toMatchObject({ lora_rank: 16 });

    const one = await app.inject({ method: 'GET', url: `/v1/models/${MODEL_NAME}:beta` });
    expect(one.json()).toMatchObject({ id: 'beta', parent: MODEL_NAME });
    expectError(await app.inject({ method: 'GET', url: '/v1/models/nope' }), 404, { code: 'model_not_found' });
  });
});

describe('GET /health and GET /metrics', () => {
  it('reports a healthy engine', async () => {
    const res = await app.inject({ method: 'GET', url: '/health' });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ status: 'ok', model: MODEL_NAME, device: expect.any(String) });
  });

  it('exposes vLLM-named and tessera metrics in Prometheus text', async () => {
    const res = await app.inject({ method: 'GET', url: '/metrics' });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    const text = res.body;
    for (const name of [
      'vllm:num_requests_running',
      'vllm:num_requests_waiting',
      'vllm:kv_cache_usage_perc',
      'vllm:prompt_tokens_total',
      'vllm:generation_tokens_total',
      'vllm:time_to_first_token_seconds',
      'vllm:e2e_request_latency_seconds',
      'vllm:request_success_total',
      'vllm:lora_requests_info',
      'tessera_adapter_cache_hits_total',
      'tessera_adapter_cache_misses_total',
      'tessera_adapter_cache_evictions_total',
      'tessera_adapter_load_seconds',
      'tessera_batch_size',
      'tessera_kv_cache_used_pages',
      'process_cpu_seconds_total',
    ]) {
      expect(text).toContain(`# TYPE ${name} `);
    }
    const label = `{model_name="${MODEL_NAME}"}`;
    expect(metricValue(text, `vllm:generation_tokens_total${label}`)).toBeGreaterThan(0);
    expect(metricValue(text, `vllm:request_success_total{model_name="${MODEL_NAME}",finished_reason="length"}`)).toBeGreaterThan(0);
    expect(metricValue(text, 'tessera_adapter_cache_misses_total')).toBeGreaterThan(0);
    expect(metricValue(text, 'tessera_kv_cache_used_pages')).toBe(0);
    expect(metricValue(text, 'tessera_engine_healthy')).toBe(1);
    expect(metricValue(text, 'tessera_adapters_registered')).toBe(3);
    expect(metricValue(text, 'tessera_batch_size_count')).toBeGreaterThan(0);
  });
});

describe('the HTTP thread', () => {
  it('never loads the native addon: the model runs in the worker only', () => {
    expect(nativeAddonLoadedHere()).toBe(false);
  });
});
