/**
 * The zoo routes, errors and metrics on a listening server over the demo (each block's KV cache kept small, 4 pages
 * of 16 tokens, so KV limits are reachable; ingest confined to the fixture's directory): ingesting a PEFT LoRA by path makes it servable with the whole model's
 * tokens; applications and blocks are listed with their sharing; bad input is a 4xx with a useful body and the
 * server keeps serving; more requests than the blocks' KV holds at once wait and still give the tokens of alone;
 * /metrics reports latency quantiles, tokens/s, per-block batching and the memory split.
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateLoraAdapter, generateModel } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { APPS, FOUNDATION, makeFixture, postJson, serve, wholeModelTokens } from './support/fixture.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => ({ app, url } = await serve(fixture, { kvPages: 4, ingestRoot: fixture.root })));
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = [9, 8, 7, 6, 5, 4, 3];
const complete = (model: string, extra: Record<string, unknown> = {}) => postJson(`${url}/v1/completions`, { model, prompt: PROMPT, max_tokens: 6, temperature: 0, ignore_eos: true, ...extra });

function metric(text: string, series: string): number {
  const line = text.split('\n').find((l) => !l.startsWith('#') && l.slice(0, l.lastIndexOf(' ')) === series);
  if (line === undefined) throw new Error(`no series ${series} in /metrics`);
  return Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('zoo routes', () => {
  it('lists the applications with their chains and the blocks with the applications sharing them', async () => {
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string; parent: string | null; blocks: string[] }[] };
    expect(models.data.map((m) => m.id).sort()).toEqual([...APPS].sort());
    expect(models.data.find((m) => m.id === 'sql-lora')!.parent).toBe(FOUNDATION);
    const blocks = (await (await fetch(`${url}/v1/zoo/blocks`)).json()) as { data: { label: string; users: string[] }[] };
    const embed = blocks.data.find((b) => b.label === 'embed')!;
    // Every PE fine-tune runs the foundation's embedding block; the full fine-tune has its own.
    expect(embed.users.sort()).toEqual(APPS.filter((a) => a !== 'vicuna').sort());
    expect(blocks.data.filter((b) => b.label.includes('+lora')).every((b) => b.users.length === 1)).toBe(true);
    const zoo = (await (await fetch(`${url}/v1/zoo`)).json()) as { storage: { uniqueBytes: number; logicalBytes: number; sharedBlocks: number } };
    expect(zoo.storage.uniqueBytes).toBeLessThan(zoo.storage.logicalBytes / 3);
    expect(zoo.storage.sharedBlocks).toBeGreaterThan(0);
  });

  it('ingests a PEFT LoRA by path: it becomes servable, with the whole model’s tokens', async () => {
    expect((await complete('poetry')).status).toBe(404);
    const r = await postJson(`${url}/v1/zoo/models`, { id: 'poetry', path: fixture.spareLora });
    expect(r.status, r.text).toBe(201);
    expect(r.json).toMatchObject({ id: 'poetry', kind: 'pe', method: 'lora', base: FOUNDATION });
    expect(r.json.labels).toContain('attn(0)+lora');
    const served = await app.engine.submit({ request: { id: 'poetry-1', adapter: 'poetry', prompt: PROMPT, maxTokens: 6, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();
    const whole = wholeModelTokens([{ name: 'poetry', modelDir: fixture.modelDir, loraDir: fixture.spareLora }], PROMPT, 6);
    expect(served.tokens).toEqual(whole['poetry']);
    const http = await complete('poetry');
    expect(http.status).toBe(200);
    expect(http.json.choices[0].text).toBe(served.text);
    expect(((await (await fetch(`${url}/v1/models/poetry`)).json()) as { id: string }).id).toBe('poetry');
  });
});

describe('bad input is a 4xx with a useful body, and the server keeps serving', () => {
  it('refuses unknown models, bad bodies and requests no block cache can hold', async () => {
    const unknown = await complete('no-such-app');
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ code: 'model_not_found', param: 'model' });
    expect(unknown.json.error.message).toContain('no-such-app');

    const noPrompt = await postJson(`${url}/v1/completions`, { model: FOUNDATION, max_tokens: 4 });
    expect(noPrompt.status).toBe(400);
    expect(noPrompt.json.error.message).toMatch(/prompt/);

    // 50 prompt tokens + 30 = 80 tokens: 5 pages, more than each block's 4.
    const tooLong = await postJson(`${url}/v1/completions`, { model: 'sql-lora', prompt: Array.from({ length: 50 }, (_, i) => i + 1), max_tokens: 30 });
    expect(tooLong.status).toBe(400);
    expect(tooLong.json.error.code).toBe('kv_cache_too_small');
    expect(tooLong.json.error.message).toMatch(/5 KV pages.*4/);

    // One device: no placement to show or change.
    const placement = await fetch(`${url}/v1/placement`);
    expect(placement.status).toBe(400);
    expect(((await placement.json()) as { error: { message: string } }).error.message).toMatch(/--devices 2/);
    const job = await postJson(`${url}/v1/placement/jobs`, { kind: 'place' });
    expect(job.status).toBe(400);
    expect(job.json.error.message).toMatch(/several devices/);
  });

  it('refuses bad ingests, naming the problem', async () => {
    const cases: [Record<string, unknown>, number, RegExp][] = [
      [{ id: 'x1', path: join(fixture.root, 'does-not-exist') }, 400, /not a directory/],
      [{ id: 'sql-lora', path: fixture.spareLora }, 409, /already holds/],
      [{ id: 'x2', path: fixture.spareLora, base: 'no-base' }, 404, /no-base/],
      [{ id: '../evil', path: fixture.spareLora }, 400, /id/],
      [{ id: 'x3' }, 400, /path/],
      [{ id: 'x4', path: fixture.root, kind: 'lora' }, 400, /adapter_config\.json/],
      [{ id: 'x5', path: tmpdir() }, 400, /outside the ingest root/],
    ];
    for (const [body, status, message] of cases) {
      const r = await postJson(`${url}/v1/zoo/models`, body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(r.json.error.message, JSON.stringify(body)).toMatch(message);
    }
    // A LoRA of another model's shape, and a checkpoint of another vocabulary.
    const { config: other } = generateModel(join(fixture.root, 'other'), { family: 'decoder', size: 'tiny', seed: 3, overrides: { hiddenSize: 32, numHeads: 4, numKvHeads: 2, headDim: 8, vocabSize: 512 } });
    const foreign = generateLoraAdapter(join(fixture.root, 'foreign-lora'), { base: other, seed: 4 }).dir;
    const wrongShape = await postJson(`${url}/v1/zoo/models`, { id: 'foreign', path: foreign });
    expect(wrongShape.status).toBeGreaterThanOrEqual(400);
    expect(wrongShape.status).toBeLessThan(500);
    const wrongVocab = await postJson(`${url}/v1/zoo/models`, { id: 'other', path: join(fixture.root, 'other') });
    expect(wrongVocab.status).toBe(400);
    expect(wrongVocab.json.error.message).toMatch(/vocabulary of 512/);
    // Nothing of it changed what is served.
    const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).not.toContain('foreign');
    expect((await complete('chat-lora')).status).toBe(200);
  });
});

describe('KV pressure and metrics', () => {
  it('runs more requests than the blocks’ KV holds at once, each with the tokens of alone', async () => {
    // 20 prompt tokens + 10 generated: 2 of each block's 4 pages, so at most two run at once in a shared block.
    const apps = ['sql-lora', 'chat-lora', 'summarizer', 'classifier', 'vicuna', FOUNDATION];
    const prompt = (i: number) => Array.from({ length: 20 }, (_, t) => (i * 53 + t * 7 + 1) % 1000);
    const alone = await Promise.all(apps.map((a, i) => app.engine.call('alone', { app: a, prompt: prompt(i), maxTokens: 10 })));
    const before = await app.engine.call('stats', null);
    const served = await Promise.all(
      apps.map((a, i) => app.engine.submit({ request: { id: `kv-${i}`, adapter: a, prompt: prompt(i), maxTokens: 10, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result()),
    );
    expect(served.map((r) => r.tokens)).toEqual(alone);
    const after = await app.engine.call('stats', null);
    expect(after.kvExhausted).toBeGreaterThan(before.kvExhausted);
  });

  it('reports latency quantiles, tokens/s, per-block batching and the memory split', async () => {
    const text = await (await fetch(`${url}/metrics`)).text();
    const p50 = metric(text, 'tessera_blockllm_request_latency_seconds{quantile="0.5"}');
    const p95 = metric(text, 'tessera_blockllm_request_latency_seconds{quantile="0.95"}');
    expect(p50).toBeGreaterThan(0);
    expect(p95).toBeGreaterThanOrEqual(p50);
    expect(metric(text, 'tessera_blockllm_tokens_per_second')).toBeGreaterThan(0);
    expect(metric(text, 'tessera_blockllm_block_rows_total')).toBeGreaterThanOrEqual(metric(text, 'tessera_blockllm_block_runs_total'));
    expect(metric(text, 'tessera_blockllm_zoo_bytes{kind="unique"}')).toBeLessThan(metric(text, 'tessera_blockllm_zoo_bytes{kind="logical"}'));
    expect(metric(text, 'tessera_blockllm_zoo_blocks{kind="shared"}')).toBeGreaterThan(0);
    expect(text).toContain('vllm:e2e_request_latency_seconds');
    // Served blocks are resident in the device pool (once, however many chains use them).
    const blocks = (await (await fetch(`${url}/v1/zoo/blocks`)).json()) as { data: { label: string; resident: boolean; users: string[] }[] };
    expect(blocks.data.filter((b) => b.users.includes('sql-lora')).every((b) => b.resident)).toBe(true);
  });
});
