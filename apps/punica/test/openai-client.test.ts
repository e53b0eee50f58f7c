/**
 * A real listening server driven by the official `openai` npm client (v6): completions and chat completions,
 * streaming and not, usage in streams, and the client's typed errors for our error bodies.
 */
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, MODEL_NAME, serve } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;
let client: OpenAI;

beforeAll(async () => {
  fixture = makeFixture([{ name: 'sql' }, { name: 'poetry', rank: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj'] }]);
  app = await serve(fixture);
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  client = new OpenAI({ baseURL: `${address}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

describe('completions', () => {
  it('non-streaming, on an adapter', async () => {
    const res = await client.completions.create({ model: 'sql', prompt: 'SELECT', max_tokens: 7, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(res.object).toBe('text_completion');
    expect(res.model).toBe('sql');
    expect(res.choices).toHaveLength(1);
    expect(res.choices[0]!.finish_reason).toBe('length');
    expect(res.usage).toMatchObject({ completion_tokens: 7 });
  });

  it('streaming: the chunks add up to the non-streamed text', async () => {
    const params = { model: 'poetry', prompt: 'Roses are', max_tokens: 10, temperature: 0, ignore_eos: true };
    const whole = await client.completions.create(params as OpenAI.CompletionCreateParamsNonStreaming);
    const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      if (chunk.choices[0]) {
        text += chunk.choices[0].text;
        finish = chunk.choices[0].finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0]!.text);
    expect(finish).toBe('length');
    expect(usage).toEqual(whole.usage);
  });
});

describe('batched prompts and n through the client', () => {
  it('one choice per prompt × sample, indexed p·n + i', async () => {
    const res = await client.completions.create({ model: 'sql', prompt: ['SELECT', 'FROM'], n: 2, max_tokens: 3, temperature: 0, ignore_eos: true } as OpenAI.CompletionCreateParamsNonStreaming);
    expect(res.choices.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    expect(res.usage).toMatchObject({ completion_tokens: 12 });
  });
});

describe('chat completions', () => {
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You write SQL.' },
    { role: 'user', content: 'All users, please.' },
  ];

  it('non-streaming', async () => {
    const res = await client.chat.completions.create({ model: `${MODEL_NAME}:sql`, messages, max_tokens: 6, temperature: 0 });
    expect(res.object).toBe('chat.completion');
    expect(res.choices[0]!.message.role).toBe('assistant');
    expect(typeof res.choices[0]!.message.content).toBe('string');
    expect(['stop', 'length']).toContain(res.choices[0]!.finish_reason);
    expect(res.usage!.total_tokens).toBe(res.usage!.prompt_tokens + res.usage!.completion_tokens);
  });

  it('streaming: a role delta first, content deltas, then the finish reason and usage', async () => {
    const whole = await client.chat.completions.create({ model: 'sql', messages, max_tokens: 9, temperature: 0, max_completion_tokens: 9 });
    const stream = await client.chat.completions.create({ model: 'sql', messages, max_tokens: 9, temperature: 0, stream: true, stream_options: { include_usage: true } });
    const chunks: OpenAI.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    const content = chunks.map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(content).toBe(whole.choices[0]!.message.content);
    const withReason = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(withReason).toHaveLength(1);
    expect(withReason[0]!.choices[0]!.finish_reason).toBe(whole.choices[0]!.finish_reason);
    expect(chunks.at(-1)!.usage).toEqual(whole.usage);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('greedy results depend on the adapter', async () => {
    const outputs = await Promise.all(
      [MODEL_NAME, 'sql', 'poetry'].map(async (model) =>
        (await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 })).choices[0]!.message.content,
      ),
    );
    expect(new Set(outputs).size).toBe(3);
  });
});

describe('errors through the client', () => {
  it('an unknown adapter is a NotFoundError with code model_not_found', async () => {
    const err = await client.completions.create({ model: 'nope', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe('model_not_found');
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).param).toBe('model');
  });

  it('bad input is a BadRequestError naming the field', async () => {
    const err = await client.chat.completions.create({ model: 'sql', messages: [{ role: 'user', content: 'x' }], n: 0 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n');
    const tooLong = await client.completions.create({ model: 'sql', prompt: 'x', max_tokens: 4000 }).catch((e: unknown) => e);
    expect(tooLong).toBeInstanceOf(OpenAI.BadRequestError);
    expect((tooLong as InstanceType<typeof OpenAI.BadRequestError>).code).toBe('context_length_exceeded');
  });

  it('models.list shows the base model and its adapters', async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toEqual([MODEL_NAME, 'poetry', 'sql']);
    const poetry = await client.models.retrieve('poetry');
    expect(poetry).toMatchObject({ id: 'poetry', parent: MODEL_NAME });
  });
});
