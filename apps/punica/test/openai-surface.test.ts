/**
 * The OpenAI surface vLLM users rely on, over HTTP against the real engine (the demo-sized generated model):
 * batched prompts, n samples per prompt, usage equal to what was streamed, logprobs, echo, /tokenize and
 * /detokenize, and a 413 the client can read.
 */
import http from 'node:http';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, MODEL_NAME, parseSse, serve } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;

beforeAll(async () => {
  fixture = makeFixture([{ name: 'alpha' }]);
  app = await serve(fixture);
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

function post(url: string, payload: unknown) {
  return app.inject({ method: 'POST', url, payload: payload as Record<string, unknown> });
}

interface Chunk {
  choices: { index: number; text?: string; delta?: { content?: string; role?: string }; finish_reason: string | null; logprobs?: unknown }[];
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number } | null;
}

/** The SSE body's chunks ([DONE] checked and dropped). */
async function streamed(url: string, payload: Record<string, unknown>): Promise<Chunk[]> {
  const res = await post(url, { ...payload, stream: true });
  expect(res.statusCode).toBe(200);
  const frames = parseSse(res.body);
  expect(frames.at(-1)).toBe('[DONE]');
  return frames.slice(0, -1) as Chunk[];
}

const greedy = { max_tokens: 6, temperature: 0, ignore_eos: true };

describe('batched prompts on /v1/completions', () => {
  const texts = ['Hello there', 'Once upon a time', 'SELECT *'];

  it('a list of strings: one choice per prompt, in order, each what the prompt alone gives', async () => {
    const singles = await Promise.all(texts.map(async (prompt) => (await post('/v1/completions', { model: 'alpha', prompt, ...greedy })).json()));
    const res = await post('/v1/completions', { model: 'alpha', prompt: texts, ...greedy });
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2]);
    body.choices.forEach((c: { text: string; finish_reason: string }, i: number) => {
      expect(c.text).toBe(singles[i].choices[0].text);
      expect(c.finish_reason).toBe('length');
    });
    const promptTokens = texts.reduce((n, t) => n + app.tokenizer.encode(t).length, 0);
    expect(body.usage).toEqual({ prompt_tokens: promptTokens, completion_tokens: 18, total_tokens: promptTokens + 18 });
  });

  it('a list of token-id lists, and one token-id list, as vLLM takes them', async () => {
    const ids = texts.map((t) => app.tokenizer.encode(t));
    const byText = (await post('/v1/completions', { model: MODEL_NAME, prompt: texts, ...greedy })).json();
    const byIds = (await post('/v1/completions', { model: MODEL_NAME, prompt: ids, ...greedy })).json();
    expect(byIds.choices.map((c: { text: string }) => c.text)).toEqual(byText.choices.map((c: { text: string }) => c.text));
    const one = (await post('/v1/completions', { model: MODEL_NAME, prompt: ids[1], ...greedy })).json();
    expect(one.choices).toHaveLength(1);
    expect(one.choices[0].text).toBe(byText.choices[1].text);
  });

  it('streams the choices interleaved, each chunk naming its index; each choice adds up to its text', async () => {
    const whole = (await post('/v1/completions', { model: 'alpha', prompt: texts, ...greedy })).json();
    const chunks = await streamed('/v1/completions', { model: 'alpha', prompt: texts, ...greedy, stream_options: { include_usage: true } });
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual(whole.usage);
    const byIndex = new Map<number, string>();
    const finished = new Map<number, string | null>();
    for (const c of chunks.slice(0, -1)) {
      expect(c.choices).toHaveLength(1);
      const { index, text, finish_reason } = c.choices[0]!;
      byIndex.set(index, (byIndex.get(index) ?? '') + text);
      if (finish_reason !== null) finished.set(index, finish_reason);
    }
    expect([...byIndex.keys()].sort()).toEqual([0, 1, 2]);
    for (let i = 0; i < 3; i++) {
      expect(byIndex.get(i)).toBe(whole.choices[i].text);
      expect(finished.get(i)).toBe('length');
    }
  });

  it('names the prompt at fault', async () => {
    const empty = await post('/v1/completions', { model: 'alpha', prompt: ['a', ''] });
    expect(empty.statusCode).toBe(400);
    expect(empty.json().error).toMatchObject({ param: 'prompt', message: 'prompt[1] must not be empty' });
    const bad = await post('/v1/completions', { model: 'alpha', prompt: [[1, 2], [3, 1_000_000]] });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.message).toMatch(/^prompt\[1\]\[1\] = 1000000 is not a token id/);
  });
});

describe('n samples per prompt', () => {
  it('greedy: n identical choices, indexed 0..n-1, usage counting the prompt once', async () => {
    const res = (await post('/v1/completions', { model: 'alpha', prompt: 'Hello there', n: 3, ...greedy })).json();
    expect(res.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2]);
    expect(new Set(res.choices.map((c: { text: string }) => c.text)).size).toBe(1);
    const promptTokens = app.tokenizer.encode('Hello there').length;
    expect(res.usage).toEqual({ prompt_tokens: promptTokens, completion_tokens: 18, total_tokens: promptTokens + 18 });
  });

  it('seeded: distinct samples, reproducible; sample 0 is the n = 1 answer with the same seed (sample i uses seed + i)', async () => {
    const req = { model: 'alpha', prompt: 'Seeded', max_tokens: 12, temperature: 1, ignore_eos: true, seed: 42 };
    const a = (await post('/v1/completions', { ...req, n: 4 })).json();
    const b = (await post('/v1/completions', { ...req, n: 4 })).json();
    const textsA = a.choices.map((c: { text: string }) => c.text);
    expect(b.choices.map((c: { text: string }) => c.text)).toEqual(textsA);
    expect(new Set(textsA).size).toBeGreaterThan(1);
    for (let i = 0; i < 4; i++) {
      const single = (await post('/v1/completions', { ...req, seed: 42 + i })).json();
      expect(single.choices[0].text).toBe(textsA[i]);
    }
  });

  it('batched prompts × n: index p·n + i; chat takes n too', async () => {
    const res = (await post('/v1/completions', { model: 'alpha', prompt: ['Hello there', 'Once upon a time'], n: 2, ...greedy })).json();
    expect(res.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2, 3]);
    expect(res.choices[0].text).toBe(res.choices[1].text);
    expect(res.choices[2].text).toBe(res.choices[3].text);
    const chat = (await post('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: 'Hi' }], n: 2, ...greedy })).json();
    expect(chat.choices.map((c: { index: number }) => c.index)).toEqual([0, 1]);
    expect(chat.choices[0].message.content).toBe(chat.choices[1].message.content);
    const chunks = await streamed('/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: 'Hi' }], n: 2, ...greedy });
    for (const index of [0, 1]) {
      const mine = chunks.filter((c) => c.choices[0]?.index === index);
      expect(mine[0]!.choices[0]!.delta).toEqual({ role: 'assistant', content: '' });
      expect(mine.map((c) => c.choices[0]!.delta?.content ?? '').join('')).toBe(chat.choices[index].message.content);
    }
  });
});

describe('usage equals what was streamed', () => {
  it('one token chunk per completion token, also when a stop string holds text back or EOS ends the text', async () => {
    // Long free generations, then stop strings taken from their middles: the tokens that start a stop string are
    // held back (empty text) until it is decided. Several prompts, so some token boundary falls inside a stop string.
    const prompts = ['Hello there', 'Once upon a time', 'SELECT *', 'Roses are', 'Stop here'];
    let heldBack = 0;
    for (const prompt of prompts) {
      const free = (await post('/v1/completions', { model: 'alpha', prompt, max_tokens: 24, temperature: 0, ignore_eos: true })).json();
      const text: string = free.choices[0].text;
      const stop = text.slice(6, 11);
      for (const body of [
        { model: 'alpha', prompt, max_tokens: 24, temperature: 0, ignore_eos: true, stop },
        { model: 'alpha', prompt, max_tokens: 24, temperature: 0 },
      ]) {
        const chunks = await streamed('/v1/completions', { ...body, stream_options: { include_usage: true } });
        const usage = chunks.at(-1)!.usage!;
        const tokenChunks = chunks.filter((c) => c.choices.length === 1 && c.choices[0]!.finish_reason === null);
        heldBack += tokenChunks.filter((c) => c.choices[0]!.text === '').length;
        expect(tokenChunks.length).toBe(usage.completion_tokens);
        const whole = (await post('/v1/completions', body)).json();
        expect(usage).toEqual(whole.usage);
        expect(tokenChunks.map((c) => c.choices[0]!.text).join('')).toBe(whole.choices[0].text);
      }
    }
    // The case of the issue: some token's text was held back (or was an EOS) and still counted.
    expect(heldBack).toBeGreaterThan(0);
  });
});

describe('logprobs', () => {
  interface CompletionLogprobs {
    tokens: string[];
    token_logprobs: number[];
    top_logprobs: Record<string, number>[];
    text_offset: number[];
  }

  it('completions logprobs: k: per token its text, logprob, the top k (with the chosen one) and text offsets; the same when streamed', async () => {
    const req = { model: 'alpha', prompt: 'Hello there', max_tokens: 8, temperature: 0, ignore_eos: true, logprobs: 3 };
    const body = (await post('/v1/completions', req)).json();
    const lp = body.choices[0].logprobs as CompletionLogprobs;
    expect(lp.tokens).toHaveLength(8);
    expect(lp.token_logprobs).toHaveLength(8);
    expect(lp.top_logprobs).toHaveLength(8);
    let offset = 0;
    lp.tokens.forEach((token, i) => {
      expect(lp.text_offset[i]).toBe(offset);
      offset += token.length;
      const top = lp.top_logprobs[i]!;
      const values = Object.values(top);
      expect(values.length).toBeGreaterThanOrEqual(1);
      expect(values.length).toBeLessThanOrEqual(4);
      // Greedy: the chosen token is the most likely one.
      expect(top[token]).toBeCloseTo(lp.token_logprobs[i]!, 6);
      expect(Math.max(...values)).toBeCloseTo(lp.token_logprobs[i]!, 6);
      expect(values.reduce((n, v) => n + Math.exp(v), 0)).toBeLessThanOrEqual(1 + 1e-6);
      for (const v of values) expect(v).toBeLessThanOrEqual(0);
    });

    const chunks = await streamed('/v1/completions', req);
    const merged: CompletionLogprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const c of chunks) {
      const part = c.choices[0]!.logprobs as CompletionLogprobs | null;
      if (c.choices[0]!.finish_reason !== null) {
        expect(part).toBeNull();
        continue;
      }
      for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) (merged[k] as unknown[]).push(...part![k]);
    }
    expect(merged).toEqual(lp);
    // logprobs: 0 gives the chosen token's logprob alone.
    const zero = (await post('/v1/completions', { ...req, logprobs: 0 })).json().choices[0].logprobs as CompletionLogprobs;
    expect(zero.token_logprobs).toEqual(lp.token_logprobs);
    zero.top_logprobs.forEach((top, i) => expect(top).toEqual({ [zero.tokens[i]!]: zero.token_logprobs[i] }));
  });

  it('chat logprobs: true, top_logprobs: k → content entries with bytes; the same numbers as completions over the same prompt', async () => {
    const messages = [{ role: 'user', content: 'Hi there' }];
    const body = (await post('/v1/chat/completions', { model: 'alpha', messages, max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: true, top_logprobs: 2 })).json();
    const content = body.choices[0].logprobs.content as { token: string; logprob: number; bytes: number[]; top_logprobs: { token: string; logprob: number; bytes: number[] }[] }[];
    expect(content).toHaveLength(5);
    for (const entry of content) {
      expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
      expect(entry.top_logprobs).toHaveLength(2);
      expect(entry.top_logprobs[0]!.logprob).toBeCloseTo(entry.logprob, 6);
      expect(entry.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(entry.top_logprobs[1]!.logprob);
    }
    const ids = app.tokenizer.encode('user: Hi there\nassistant:');
    const completion = (await post('/v1/completions', { model: 'alpha', prompt: ids, max_tokens: 5, temperature: 0, ignore_eos: true, logprobs: 2 })).json();
    expect(completion.choices[0].logprobs.token_logprobs).toEqual(content.map((e) => e.logprob));
    // Without logprobs, null; top_logprobs alone or over 20 is refused.
    expect((await post('/v1/chat/completions', { model: 'alpha', messages, max_tokens: 2 })).json().choices[0].logprobs).toBeNull();
    for (const bad of [{ top_logprobs: 2 }, { logprobs: true, top_logprobs: 21 }]) {
      const res = await post('/v1/chat/completions', { model: 'alpha', messages, max_tokens: 2, ...bad });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.param).toBe('top_logprobs');
    }
    const over = await post('/v1/completions', { model: 'alpha', prompt: 'x', logprobs: 21 });
    expect(over.statusCode).toBe(400);
    expect(over.json().error.param).toBe('logprobs');
  });
});

describe('echo on /v1/completions', () => {
  interface Logprobs {
    tokens: string[];
    token_logprobs: (number | null)[];
    top_logprobs: (Record<string, number> | null)[];
    text_offset: number[];
  }
  const prompt = 'Hello there';
  const completion = (body: Record<string, unknown>) => post('/v1/completions', { model: 'alpha', prompt, ...greedy, ...body });

  it('puts the prompt before the text; streamed, the first chunk of each choice starts with it', async () => {
    const plain = (await completion({})).json();
    const echoed = (await completion({ echo: true })).json();
    expect(echoed.choices[0].text).toBe(prompt + plain.choices[0].text);
    expect(echoed.usage).toEqual(plain.usage);
    const chunks = await streamed('/v1/completions', { model: 'alpha', prompt, ...greedy, echo: true });
    expect(chunks[0]!.choices[0]!.text!.startsWith(prompt)).toBe(true);
    expect(chunks.map((c) => c.choices[0]!.text).join('')).toBe(echoed.choices[0].text);
    // One chunk per completion token still (the prompt rides on the first).
    expect(chunks.filter((c) => c.choices[0]!.finish_reason === null)).toHaveLength(6);
  });

  it('with logprobs: the prompt tokens first (the first null, the rest finite and ≤ 0), the completion after', async () => {
    const ids = app.tokenizer.encode(prompt);
    const plain = (await completion({ logprobs: 2 })).json().choices[0].logprobs as Logprobs;
    const body = (await completion({ echo: true, logprobs: 2 })).json();
    const lp = body.choices[0].logprobs as Logprobs;
    expect(lp.tokens).toHaveLength(ids.length + 6);
    expect(lp.token_logprobs).toHaveLength(ids.length + 6);
    expect(lp.top_logprobs).toHaveLength(ids.length + 6);
    expect(lp.text_offset).toHaveLength(ids.length + 6);
    expect(lp.token_logprobs[0]).toBeNull();
    expect(lp.top_logprobs[0]).toBeNull();
    for (let i = 1; i < ids.length; i++) {
      const v = lp.token_logprobs[i]!;
      expect(Number.isFinite(v)).toBe(true);
      expect(v).toBeLessThanOrEqual(0);
      const top = lp.top_logprobs[i]!;
      expect(top[lp.tokens[i]!]).toBeCloseTo(v, 6);
      expect(Object.keys(top).length).toBeGreaterThanOrEqual(2);
    }
    expect(lp.tokens.slice(ids.length)).toEqual(plain.tokens);
    expect(lp.token_logprobs.slice(ids.length)).toEqual(plain.token_logprobs);
    expect(lp.top_logprobs.slice(ids.length)).toEqual(plain.top_logprobs);
    let offset = 0;
    lp.tokens.forEach((t, i) => {
      expect(lp.text_offset[i]).toBe(offset);
      offset += t.length;
    });

    // Streamed: the same entries, the prompt's in the first chunk.
    const chunks = await streamed('/v1/completions', { model: 'alpha', prompt, ...greedy, echo: true, logprobs: 2 });
    const first = chunks[0]!.choices[0]!.logprobs as Logprobs;
    expect(first.tokens).toHaveLength(ids.length + 1);
    const merged: Logprobs = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
    for (const c of chunks) {
      const part = c.choices[0]!.logprobs as Logprobs | null;
      if (!part) continue;
      for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'] as const) (merged[k] as unknown[]).push(...part[k]);
    }
    expect(merged).toEqual(lp);
  });

  it('scoring a prompt and its own greedy continuation (max_tokens 0) gives the logprobs the generation reported', async () => {
    const ids = app.tokenizer.encode(prompt);
    const generated = (await post('/v1/completions', { model: 'alpha', prompt: ids, ...greedy, logprobs: 0 })).json();
    const genLp = generated.choices[0].logprobs as Logprobs;
    // The generated ids: each token's text back to its id, as far as the text names one token (a byte token
    // alone decodes to U+FFFD, as several others do).
    const byText = new Map<string, number[]>();
    for (let id = 0; id < fixture.config.vocabSize; id++) {
      const text = app.tokenizer.decode([id], { skipSpecialTokens: false });
      byText.set(text, [...(byText.get(text) ?? []), id]);
    }
    const continuation: number[] = [];
    for (const t of genLp.tokens) {
      const candidates = byText.get(t) ?? [];
      if (candidates.length !== 1) break;
      continuation.push(candidates[0]!);
    }
    expect(continuation.length).toBeGreaterThanOrEqual(2);
    const n = continuation.length;
    const full = [...ids, ...continuation];
    const scoredRes = await post('/v1/completions', { model: 'alpha', prompt: full, max_tokens: 0, echo: true, logprobs: 0 });
    expect(scoredRes.statusCode).toBe(200);
    const scored = scoredRes.json();
    const lp = scored.choices[0].logprobs as Logprobs;
    expect(lp.tokens).toHaveLength(full.length);
    expect(lp.tokens.slice(ids.length)).toEqual(genLp.tokens.slice(0, n));
    lp.token_logprobs.slice(ids.length).forEach((v, i) => expect(v).toBeCloseTo(genLp.token_logprobs[i]!, 4));
    // The prompt alone: its text, 0 completion tokens, finish 'length'.
    expect(scored.choices[0].text).toBe(app.tokenizer.decode(full, { skipSpecialTokens: true }));
    expect(scored.choices[0].finish_reason).toBe('length');
    expect(scored.usage).toEqual({ prompt_tokens: full.length, completion_tokens: 0, total_tokens: full.length });
    const chunks = await streamed('/v1/completions', { model: 'alpha', prompt: full, max_tokens: 0, echo: true, logprobs: 0 });
    expect(chunks.map((c) => c.choices[0]!.text).join('')).toBe(scored.choices[0].text);
    expect((chunks[0]!.choices[0]!.logprobs as Logprobs).token_logprobs).toEqual(lp.token_logprobs);
    // Without echo, max_tokens 0 is refused.
    const refused = await post('/v1/completions', { model: 'alpha', prompt, max_tokens: 0 });
    expect(refused.statusCode).toBe(400);
    expect(refused.json().error.param).toBe('max_tokens');
  });

  it('batched prompts × n × echo: each choice its own prompt first, logprobs matching the prompt alone', async () => {
    const texts = ['Hello there', 'Once upon a time'];
    const alone = await Promise.all(texts.map(async (p) => (await post('/v1/completions', { model: 'alpha', prompt: p, ...greedy, echo: true, logprobs: 1 })).json()));
    const res = (await post('/v1/completions', { model: 'alpha', prompt: texts, n: 2, ...greedy, echo: true, logprobs: 1 })).json();
    expect(res.choices.map((c: { index: number }) => c.index)).toEqual([0, 1, 2, 3]);
    res.choices.forEach((c: { text: string; logprobs: Logprobs }, i: number) => {
      const p = Math.floor(i / 2);
      expect(c.text.startsWith(texts[p]!)).toBe(true);
      expect(c.text).toBe(alone[p].choices[0].text);
      expect(c.logprobs.tokens).toEqual(alone[p].choices[0].logprobs.tokens);
      c.logprobs.token_logprobs.forEach((v, j) => (v === null ? expect(alone[p].choices[0].logprobs.token_logprobs[j]).toBeNull() : expect(v).toBeCloseTo(alone[p].choices[0].logprobs.token_logprobs[j], 4)));
    });
  });
});

describe('/tokenize and /detokenize as vLLM serves them', () => {
  it('a prompt or chat messages → count, max_model_len, tokens; tokens → the prompt', async () => {
    const res = await post('/tokenize', { model: 'alpha', prompt: 'Hello there' });
    expect(res.statusCode).toBe(200);
    const ids = app.tokenizer.encode('Hello there');
    expect(res.json()).toEqual({ count: ids.length, max_model_len: fixture.config.maxPositions, tokens: ids, token_strs: null });
    const bare = (await post('/tokenize', { model: MODEL_NAME, prompt: 'Hello there', add_special_tokens: false })).json();
    expect(bare.tokens).toEqual(app.tokenizer.encode('Hello there', { addSpecialTokens: false }));
    const chat = (await post('/tokenize', { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }] })).json();
    expect(chat.tokens).toEqual(app.tokenizer.encode('user: Hi\nassistant:'));
    // The count is what /v1/chat/completions reports as prompt_tokens.
    const usage = (await post('/v1/chat/completions', { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 1 })).json().usage;
    expect(usage.prompt_tokens).toBe(chat.count);

    const back = await post('/detokenize', { model: 'alpha', tokens: bare.tokens });
    expect(back.statusCode).toBe(200);
    expect(back.json()).toEqual({ prompt: 'Hello there' });
    const unknown = await post('/tokenize', { model: 'nope', prompt: 'x' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error.code).toBe('model_not_found');
    const bad = await post('/detokenize', { model: 'alpha', tokens: [1, 1_000_000] });
    expect(bad.statusCode).toBe(400);
    expect(bad.json().error.param).toBe('tokens');
  });
});

describe('an oversized body', () => {
  /**
   * Posts `total` bytes (declared by content-length or chunked) in one write or in 64 KiB writes yielding between
   * them; resolves when the exchange is over with the status, the body and any client error (EPIPE, ECONNRESET).
   */
  function bigPost(address: string, total: number, declared: boolean, oneWrite: boolean): Promise<{ status?: number; body: string; error?: string }> {
    return new Promise((resolve) => {
      const url = new URL('/v1/completions', address);
      const headers: Record<string, string | number> = { 'content-type': 'application/json' };
      if (declared) headers['content-length'] = total;
      const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent: false });
      const out: { status?: number; body: string; error?: string } = { body: '' };
      req.on('response', (res) => {
        out.status = res.statusCode!;
        res.setEncoding('utf8');
        res.on('data', (c: string) => (out.body += c));
      });
      req.on('error', (err: NodeJS.ErrnoException) => (out.error = err.code ?? err.message));
      req.on('close', () => resolve(out));
      const chunk = Buffer.alloc(oneWrite ? total : 64 * 1024, 0x20);
      chunk.write('{"model":"alpha","prompt":"');
      if (oneWrite) return void req.end(chunk);
      let sent = 0;
      const next = () => {
        if (req.destroyed) return;
        if (sent >= total) return void req.end();
        const n = Math.min(chunk.length, total - sent);
        sent += n;
        req.write(n === chunk.length ? chunk : chunk.subarray(0, n), () => setTimeout(next, 1));
      };
      next();
    });
  }

  it('is answered with a 413 the client reads, without an EPIPE, also while it is still sending', async () => {
    const address = await app.listen({ host: '127.0.0.1', port: 0 });
    for (const declared of [true, false]) {
      for (const oneWrite of [true, false]) {
        const answer = await bigPost(address, 24 * 1024 * 1024, declared, oneWrite);
        expect({ declared, oneWrite, status: answer.status, error: answer.error }).toEqual({ declared, oneWrite, status: 413, error: undefined });
        expect(JSON.parse(answer.body).error).toMatchObject({ type: 'invalid_request_error', code: 'FST_ERR_CTP_BODY_TOO_LARGE' });
      }
    }
  });
});
