/**
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's shapes): loading real PEFT directories, every
 * way a load can be refused (bad names, paths outside the adapter root, malformed adapters) with the server
 * still serving and the registered adapters intact, and unloading with a stream in flight.
 */
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateLoraAdapter, generateModel } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type Fixture, makeFixture, MODEL_NAME, parseSse, serve, spareAdapter } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;
let address: string;
let outside: string;

beforeAll(async () => {
  fixture = makeFixture([
    { name: 'alpha', seed: 100 },
    { name: 'beta', rank: 4, seed: 101 },
  ]);
  outside = mkdtempSync(join(tmpdir(), 'tessera-punica-outside-'));
  app = await serve(fixture, { adapterRoot: fixture.dir });
  address = await app.listen({ host: '127.0.0.1', port: 0 });
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
  rmSync(outside, { recursive: true, force: true });
});

const post = (url: string, payload: Record<string, unknown>) => app.inject({ method: 'POST', url, payload });
const load = (lora_name: string, lora_path: string) => post('/v1/load_lora_adapter', { lora_name, lora_path });
const unload = (lora_name: string) => post('/v1/unload_lora_adapter', { lora_name });

async function greedy(model: string, prompt = 'The adapter says'): Promise<{ status: number; text: string }> {
  const res = await post('/v1/completions', { model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true });
  return { status: res.statusCode, text: res.statusCode === 200 ? (res.json().choices[0].text as string) : '' };
}

async function modelIds(): Promise<string[]> {
  return ((await app.inject({ method: 'GET', url: '/v1/models' })).json().data as { id: string }[]).map((m) => m.id);
}

/** What must hold after any refused load: the server serves, and the registered adapters are unchanged. */
async function expectIntact(before: { ids: string[]; alpha: string; beta: string }) {
  expect(await modelIds()).toEqual(before.ids);
  expect((await greedy('alpha')).text).toBe(before.alpha);
  expect((await greedy('beta')).text).toBe(before.beta);
  expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
}

describe('loading an adapter at run time', () => {
  it('registers it, serves it, and it computes what the same adapter registered at start-up computes', async () => {
    // Same seed and rank as 'alpha', so the same weights under another name.
    const path = spareAdapter(fixture, { name: 'alpha-copy', rank: 8, seed: 100 });
    const res = await load('alpha-copy', path);
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    expect(res.body).toBe("Success: LoRA adapter 'alpha-copy' added successfully.");

    const models = (await app.inject({ method: 'GET', url: '/v1/models' })).json().data as Record<string, unknown>[];
    expect(models.find((m) => m.id === 'alpha-copy')).toMatchObject({ parent: MODEL_NAME, root: path, residency: 'disk', lora_rank: 8 });

    const copy = await greedy('alpha-copy');
    expect(copy.status).toBe(200);
    expect(copy.text).toBe((await greedy('alpha')).text);
    expect(copy.text).not.toBe((await greedy(MODEL_NAME)).text);
    const after = (await app.inject({ method: 'GET', url: '/v1/models/alpha-copy' })).json();
    expect(after.residency).toBe('device');
  });

  it('refuses bad names, taken names and bad paths with a 400 naming the field', async () => {
    const path = spareAdapter(fixture, { name: 'fine', seed: 5 });
    const cases: [string, string, string, RegExp][] = [
      ['a/b', path, 'lora_name', /path separator/],
      ['a\\b', path, 'lora_name', /path separator/],
      ['..', path, 'lora_name', /must not contain "\.\."|must start/],
      ['x..y', path, 'lora_name', /must not contain "\.\."/],
      ['', path, 'lora_name', /must not be empty/],
      ['-dash', path, 'lora_name', /must start with a letter or digit/],
      [MODEL_NAME, path, 'lora_name', /base model's name/],
      ['alpha', path, 'lora_name', /has already been loaded/],
      ['fresh', join(fixture.dir, 'no-such-dir'), 'lora_path', /does not exist/],
      ['fresh', join(fixture.modelDir, 'config.json'), 'lora_path', /is not a directory/],
    ];
    for (const [name, p, param, message] of cases) {
      const res = await load(name, p);
      expect(res.statusCode, `${name} ${p}`).toBe(400);
      expect(res.json().error).toMatchObject({ type: 'invalid_request_error', param });
      expect(res.json().error.message).toMatch(message);
    }
  });

  it('keeps runtime-loaded adapters inside the adapter root, symlinks included', async () => {
    const { config } = generateModel(join(outside, 'm'), { family: 'decoder', size: 'tiny', seed: 7 });
    const elsewhere = join(outside, 'elsewhere');
    generateLoraAdapter(elsewhere, { base: config, seed: 3 });
    const res = await load('elsewhere', elsewhere);
    expect(res.statusCode).toBe(400);
    expect(res.json().error.message).toMatch(/outside the adapter root/);
    const link = join(fixture.dir, 'sneaky-link');
    symlinkSync(elsewhere, link);
    const viaLink = await load('sneaky', link);
    expect(viaLink.statusCode).toBe(400);
    expect(viaLink.json().error.message).toMatch(/outside the adapter root/);
  });

  it('refuses malformed adapter directories; the server keeps serving every registered adapter', async () => {
    const before = { ids: await modelIds(), alpha: (await greedy('alpha')).text, beta: (await greedy('beta')).text };
    expect(before.ids).toEqual(expect.arrayContaining([MODEL_NAME, 'alpha', 'beta']));
    const good = spareAdapter(fixture, { name: 'template', seed: 11 });
    const broken = (name: string, mutate: (dir: string) => void) => {
      const dir = join(fixture.spareDir, name);
      cpSync(good, dir, { recursive: true });
      mutate(dir);
      return dir;
    };
    const otherShape = join(fixture.spareDir, 'other-shape');
    const { config: wide } = generateModel(join(fixture.dir, 'wide-model'), { family: 'decoder', size: 'tiny', seed: 1, overrides: { hiddenSize: 32, numHeads: 2, numKvHeads: 2, intermediateSize: 64 } });
    generateLoraAdapter(otherShape, { base: wide, seed: 2 });
    const encoderAdapter = join(fixture.spareDir, 'encoder-adapter');
    const { config: encoder } = generateModel(join(fixture.dir, 'encoder-model'), { family: 'encoder', size: 'tiny', seed: 1 });
    generateLoraAdapter(encoderAdapter, { base: encoder, seed: 2 });
    const empty = join(fixture.spareDir, 'empty');
    mkdirSync(empty, { recursive: true });

    const cases: [string, string, RegExp][] = [
      ['empty', empty, /adapter_config\.json/],
      ['bad-json', broken('bad-json', (d) => writeFileSync(join(d, 'adapter_config.json'), '{"r": 8, ')), /JSON/],
      ['no-weights', broken('no-weights', (d) => rmSync(join(d, 'adapter_model.safetensors'))), /adapter_model/],
      ['truncated', broken('truncated', (d) => truncateSync(join(d, 'adapter_model.safetensors'), 200)), /truncat|ends|header|bytes/i],
      ['other-shape', otherShape, /shape|\[/],
      ['encoder-adapter', encoderAdapter, /match|target|module|bert/i],
    ];
    for (const [name, dir, message] of cases) {
      const res = await load(name, dir);
      expect(res.statusCode, name).toBe(400);
      const error = res.json().error;
      expect(error.message, name).toMatch(new RegExp(`lora adapter "${name}" at .* cannot be loaded`));
      expect(error.message, name).toMatch(message);
      await expectIntact(before);
      // A refused name is free again: nothing half-registered remains.
      expect((await greedy(name)).status).toBe(404);
    }
    const retry = await load('bad-json', good);
    expect(retry.statusCode).toBe(200);
    expect((await unload('bad-json')).statusCode).toBe(200);
  });
});

describe('unloading an adapter', () => {
  it('removes it (404 afterwards), and it can be loaded again', async () => {
    const path = spareAdapter(fixture, { name: 'temp', seed: 21 });
    expect((await load('temp', path)).statusCode).toBe(200);
    const text = (await greedy('temp')).text;
    const res = await unload('temp');
    expect(res.statusCode).toBe(200);
    expect(res.body).toBe("Success: LoRA adapter 'temp' removed successfully.");
    expect((await greedy('temp')).status).toBe(404);
    expect(await modelIds()).not.toContain('temp');
    const again = await unload('temp');
    expect(again.statusCode).toBe(404);
    expect(again.json().error).toMatchObject({ code: 'model_not_found', param: 'lora_name' });
    expect((await load('temp', path)).statusCode).toBe(200);
    expect((await greedy('temp')).text).toBe(text);
    expect((await unload('temp')).statusCode).toBe(200);
  });

  it('lets a stream already using it finish, refusing new requests at once', async () => {
    const path = spareAdapter(fixture, { name: 'busy', seed: 31 });
    expect((await load('busy', path)).statusCode).toBe(200);
    const streamRes = await fetch(`${address}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'busy', prompt: 'long story', max_tokens: 120, temperature: 0, ignore_eos: true, stream: true }),
    });
    expect(streamRes.status).toBe(200);
    const reader = streamRes.body!.getReader();
    const decoder = new TextDecoder();
    let body = decoder.decode((await reader.read()).value);

    const unloading = fetch(`${address}/v1/unload_lora_adapter`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ lora_name: 'busy' }) });
    // The name disappears at once, while the stream is still running.
    await expect.poll(async () => (await modelIds()).includes('busy'), { timeout: 10_000, interval: 5 }).toBe(false);
    expect((await greedy('busy')).status).toBe(404);

    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      body += decoder.decode(value, { stream: true });
    }
    const frames = parseSse(body);
    expect(frames.at(-1)).toBe('[DONE]');
    const last = frames.at(-2) as { choices: { finish_reason: string }[] };
    expect(last.choices[0]!.finish_reason).toBe('length');
    const unloaded = await unloading;
    expect(unloaded.status).toBe(200);
    expect(await unloaded.text()).toBe("Success: LoRA adapter 'busy' removed successfully.");
  });
});
