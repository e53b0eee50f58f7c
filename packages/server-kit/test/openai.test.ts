/**
 * OpenAI's generation endpoints over a fake token-streaming backend: JSON and SSE answers, limits, the model name's
 * resolution, and errors by kind (an engine error before the first token gets its own status; after it, an error
 * frame and [DONE]).
 */
import type { FinishedResult, GenerateRequest, TokenEvent } from '@tessera/cluster';
import { EventStream } from '@tessera/cluster';
import { InvalidArgumentError } from '@tessera/core';
import { TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { createTesseraServer, EngineUnavailableError, ModelRegistry, openaiGenerationRoutes } from '../src/index.js';

const registry = new ModelRegistry({ name: 'base', root: '/models/base', maxModelLen: 64, created: 0 });
registry.add({ name: 'tuned', path: '/adapters/tuned', rank: 8, created: 0 });
const submitted: GenerateRequest[] = [];
const cancelled: string[] = [];

/** Emits one token per prompt token (text 't<i>'), then finishes; a prompt starting with 999 fails mid-stream, 998 at once. */
function submit(request: GenerateRequest): EventStream<TokenEvent, FinishedResult> {
  submitted.push(request);
  const { id } = request;
  const stream = new EventStream<TokenEvent, FinishedResult>(id);
  const n = Math.min(request.maxTokens, 3);
  setImmediate(() => {
    if (request.prompt[0] === 998) return stream.fail(new InvalidArgumentError('refused'));
    for (let i = 0; i < n; i++) stream.accept({ kind: 'token', id, attempt: 0, index: i, token: i, text: `t${i}` });
    if (request.prompt[0] === 999) return stream.fail(new EngineUnavailableError('the engine worker exited'));
    const result: FinishedResult = { id, tokens: [0, 1, 2].slice(0, n), text: '', finishReason: 'length', promptTokens: request.prompt.length, completionTokens: n };
    stream.accept({ kind: 'finish', id, attempt: 0, result });
  });
  return stream;
}

let app: FastifyInstance;
beforeAll(async () => {
  app = await createTesseraServer({
    name: 'openai-test',
    validatorCompiler: TypeBoxValidatorCompiler,
    engine: async () => ({ close: async () => {} }),
    health: () => ({ healthy: true, body: {} }),
    errors: { fields: false },
    routes: async (instance) => {
      await instance.register(openaiGenerationRoutes, {
        backend: {
          resolve: (model) => registry.resolve(model),
          tokenizer: { encode: (text) => [1, ...text.split(' ').map((w) => w.length)] },
          contextLength: 64,
          vocabSize: 1000,
          submit,
          cancel: (id) => cancelled.push(id),
          errors: { fields: false },
        },
      });
    },
  });
});
afterAll(() => app?.close());

const post = (url: string, payload: Record<string, unknown>) => app.inject({ method: 'POST', url, payload });

describe('openaiGenerationRoutes', () => {
  it('answers a completion with the tokens as text, usage and the finish reason, on the resolved adapter', async () => {
    const res = await post('/v1/completions', { model: 'base:tuned', prompt: 'hello big world', max_tokens: 3, temperature: 0 });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toMatchObject({ object: 'text_completion', model: 'base:tuned', choices: [{ text: 't0t1t2', finish_reason: 'length' }], usage: { prompt_tokens: 4, completion_tokens: 3 } });
    expect(submitted.at(-1)).toMatchObject({ adapter: 'tuned', prompt: [1, 5, 3, 5], maxTokens: 3, sampling: { temperature: 0 } });
  });

  it('streams a chat completion: the role delta, content deltas, the finish reason, usage, [DONE]', async () => {
    const res = await post('/v1/chat/completions', { model: 'base', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2, stream: true, stream_options: { include_usage: true } });
    expect(res.statusCode).toBe(200);
    const frames = res.body.split('\n\n').filter(Boolean).map((f) => f.slice('data: '.length));
    expect(frames.at(-1)).toBe('[DONE]');
    const chunks = frames.slice(0, -1).map((f) => JSON.parse(f) as { choices: { delta: { role?: string; content?: string }; finish_reason: string | null }[]; usage?: unknown });
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('t0t1');
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('length');
    expect(chunks.at(-1)!.usage).toMatchObject({ completion_tokens: 2 });
  });

  it('batched prompts × n: one engine request per choice, ids and seeds derived (seed + i), usage counting each prompt once', async () => {
    const before = submitted.length;
    const res = await post('/v1/completions', { model: 'base', prompt: [[7, 7], [8]], n: 2, max_tokens: 2, temperature: 1, seed: 10 });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    const mine = submitted.slice(before);
    expect(mine.map((r) => r.id)).toEqual([0, 1, 2, 3].map((i) => `${body.id}-${i}`));
    expect(mine.map((r) => r.prompt)).toEqual([[7, 7], [7, 7], [8], [8]]);
    expect(mine.map((r) => r.sampling.seed)).toEqual([10, 11, 10, 11]);
    expect(body.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2, 3]);
    expect(body.usage).toEqual({ prompt_tokens: 3, completion_tokens: 8, total_tokens: 11 });
  });

  it('refuses what it cannot honour, an unknown model, and a request over the context', async () => {
    expect((await post('/v1/completions', { model: 'base', prompt: 'x', n: 200 })).json().error).toMatchObject({ param: 'n' });
    const unknown = await post('/v1/completions', { model: 'nope', prompt: 'x' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error).toMatchObject({ code: 'model_not_found', param: 'model' });
    const long = await post('/v1/completions', { model: 'base', prompt: 'x', max_tokens: 100 });
    expect(long.statusCode).toBe(400);
    expect(long.json().error.code).toBe('context_length_exceeded');
  });

  it('an engine error before the first token answers by its kind; after it, an error frame then [DONE]', async () => {
    const refused = await post('/v1/completions', { model: 'base', prompt: [998], max_tokens: 2 });
    expect(refused.statusCode).toBe(400);
    expect(Object.keys(refused.json().error).sort()).toEqual(['code', 'message', 'param', 'type']);
    const broken = await post('/v1/completions', { model: 'base', prompt: [999], max_tokens: 2, stream: true });
    expect(broken.statusCode).toBe(200);
    const frames = broken.body.split('\n\n').filter(Boolean);
    expect(frames.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse(frames.at(-2)!.slice('data: '.length))).toMatchObject({ error: { type: 'service_unavailable_error', code: 'TESSERA_ENGINE_UNAVAILABLE' } });
  });
});
