/**
 * End to end on a listening server over the demo zoo: every application's greedy completion is, token for token,
 * the chain executor's run of that application alone and (foundation, LoRA, full fine-tune) the whole model's;
 * applications sharing blocks served concurrently give the same tokens as alone; streaming gives the same text.
 */
import { join } from 'node:path';

import { TextTokenizer } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { APPS, FOUNDATION, makeFixture, nativeAddonLoadedHere, parseSse, postJson, serve, wholeModelTokens } from './support/fixture.js';

const fixture = makeFixture();
const tokenizer = TextTokenizer.fromDir(fixture.modelDir);
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture)));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = [5, 17, 42, 99, 7, 300, 12];
const N = 8;
/** Ragged prompts, one per application, for the concurrent run. */
const promptOf = (i: number) => Array.from({ length: 3 + 2 * i }, (_, t) => (37 * i + 11 * t + 3) % 1000);

async function served(model: string, prompt: number[], maxTokens: number, id: string): Promise<number[]> {
  const stream = app.engine.submit({ request: { id, adapter: model, prompt, maxTokens, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] });
  return (await stream.result()).tokens;
}

describe('each application served as its chain of blocks', () => {
  it('gives the chain executor’s tokens run alone, over HTTP and over the host protocol', async () => {
    for (const model of APPS) {
      const alone = await app.engine.call('alone', { app: model, prompt: PROMPT, maxTokens: N });
      expect(alone).toHaveLength(N);
      expect(await served(model, PROMPT, N, `exact-${model}`)).toEqual(alone);
      const r = await postJson(`${url}/v1/completions`, { model, prompt: PROMPT, max_tokens: N, temperature: 0, ignore_eos: true });
      expect(r.status, r.text).toBe(200);
      expect(r.json.model).toBe(model);
      expect(r.json.usage).toEqual({ prompt_tokens: PROMPT.length, completion_tokens: N, total_tokens: PROMPT.length + N });
      expect(r.json.choices[0].text).toBe(tokenizer.decode(alone));
    }
    // The fine-tunes really differ from the foundation (else the equalities above would prove little).
    const base = await app.engine.call('alone', { app: FOUNDATION, prompt: PROMPT, maxTokens: N });
    for (const model of ['sql-lora', 'chat-lora', 'persona', 'vicuna']) expect(await app.engine.call('alone', { app: model, prompt: PROMPT, maxTokens: N })).not.toEqual(base);
  });

  it('gives the whole model’s tokens (foundation, LoRA as a delta, full fine-tune checkpoint)', async () => {
    const whole = wholeModelTokens(
      [
        { name: FOUNDATION, modelDir: fixture.modelDir },
        { name: 'sql-lora', modelDir: fixture.modelDir, loraDir: join(fixture.root, 'peft', 'sql-lora') },
        { name: 'chat-lora', modelDir: fixture.modelDir, loraDir: join(fixture.root, 'peft', 'chat-lora') },
        { name: 'vicuna', modelDir: join(fixture.root, 'vicuna') },
      ],
      PROMPT,
      N,
    );
    for (const [model, tokens] of Object.entries(whole)) expect(await served(model, PROMPT, N, `whole-${model}`), model).toEqual(tokens);
  });

  it('serves applications that share blocks concurrently with the same tokens as alone, batching shared blocks', async () => {
    const before = await app.engine.call('stats', null);
    const alone = await Promise.all(APPS.map((model, i) => app.engine.call('alone', { app: model, prompt: promptOf(i), maxTokens: 24 })));
    // All submitted in one tick: they join the running batch at once.
    const together = await Promise.all(APPS.map((model, i) => served(model, promptOf(i), 24, `together-${i}`)));
    expect(together).toEqual(alone);
    const after = await app.engine.call('stats', null);
    expect(after.sharedBatches).toBeGreaterThan(before.sharedBatches);
    // And over HTTP, two LoRAs sharing embed, both FFNs of one of them and the head, concurrently.
    const [a, b] = await Promise.all(
      ['sql-lora', 'chat-lora'].map((model) => postJson(`${url}/v1/completions`, { model, prompt: PROMPT, max_tokens: N, temperature: 0, ignore_eos: true })),
    );
    expect(a!.json.choices[0].text).toBe(tokenizer.decode(await app.engine.call('alone', { app: 'sql-lora', prompt: PROMPT, maxTokens: N })));
    expect(b!.json.choices[0].text).toBe(tokenizer.decode(await app.engine.call('alone', { app: 'chat-lora', prompt: PROMPT, maxTokens: N })));
  });

  it('streams completions and chat completions (SSE) with the same text as the JSON answer', async () => {
    for (const model of ['persona', 'vicuna']) {
      const body = { model, prompt: 'The quick brown fox', max_tokens: 10, temperature: 0 };
      const json = await postJson(`${url}/v1/completions`, body);
      const sse = await postJson(`${url}/v1/completions`, { ...body, stream: true });
      expect(sse.status).toBe(200);
      const events = parseSse(sse.text);
      expect(events.at(-1)).toBe('[DONE]');
      const chunks = events.slice(0, -1) as { choices: { text: string; finish_reason: string | null }[] }[];
      expect(chunks.map((c) => c.choices[0]!.text).join('')).toBe(json.json.choices[0].text);
      expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe(json.json.choices[0].finish_reason);
    }
    const chat = { model: 'sql-lora', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, temperature: 0 };
    const json = await postJson(`${url}/v1/chat/completions`, chat);
    expect(json.status).toBe(200);
    const events = parseSse((await postJson(`${url}/v1/chat/completions`, { ...chat, stream: true })).text);
    expect(events.at(-1)).toBe('[DONE]');
    const deltas = (events.slice(0, -1) as { choices: { delta: { content?: string } }[] }[]).map((c) => c.choices[0]?.delta.content ?? '').join('');
    expect(deltas).toBe(json.json.choices[0].message.content);
  });

  it('honours sampling, n, logprobs and echo; refuses prompt logprobs with a 400', async () => {
    const body = { model: 'chat-lora', prompt: 'Once upon a time', max_tokens: 6, temperature: 0.9, seed: 7, n: 2, logprobs: 2 };
    const a = await postJson(`${url}/v1/completions`, body);
    const b = await postJson(`${url}/v1/completions`, body);
    expect(a.status, a.text).toBe(200);
    expect(a.json.choices).toHaveLength(2);
    expect(a.json.choices.map((c: { text: string }) => c.text)).toEqual(b.json.choices.map((c: { text: string }) => c.text));
    for (const c of a.json.choices) {
      expect(c.logprobs.tokens).toHaveLength(6);
      expect(c.logprobs.top_logprobs[0]).toBeTypeOf('object');
      for (const lp of c.logprobs.token_logprobs) expect(lp).toBeLessThanOrEqual(0);
    }
    const echo = await postJson(`${url}/v1/completions`, { model: 'vicuna', prompt: 'Echo me', max_tokens: 3, temperature: 0, echo: true });
    expect(echo.json.choices[0].text.startsWith('Echo me')).toBe(true);
    const promptLogprobs = await postJson(`${url}/v1/completions`, { model: 'vicuna', prompt: 'Echo me', max_tokens: 3, echo: true, logprobs: 1 });
    expect(promptLogprobs.status).toBe(400);
    expect(promptLogprobs.json.error.message).toMatch(/prompt logprobs/);
  });

  it('never loads the native addon on the HTTP thread', () => {
    expect(nativeAddonLoadedHere()).toBe(false);
  });
});
