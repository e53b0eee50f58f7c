/**
 * A zoo that starts as the foundation alone (one block): ingesting a LoRA by path cuts the foundation's block
 * around the adapted attention, so the executor serving it must be replaced. Requests running across the ingest
 * finish on the old chain, new ones wait and run on the new chains, and every one gives the tokens of alone (the
 * chain == whole model equality makes old and new chains agree bit for bit).
 */
import { rmSync } from 'node:fs';
import { join } from 'node:path';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, expect, it } from 'vitest';

import { FOUNDATION, makeFixture, postJson, serve, wholeModelTokens } from './support/fixture.js';

const fixture = makeFixture();
let app: FastifyInstance;
let url: string;
beforeAll(async () => {
  rmSync(fixture.zooDir, { recursive: true, force: true });
  // No demoRoot: the zoo holds the foundation only.
  ({ app, url } = await serve(fixture, { demoRoot: undefined }));
});
afterAll(async () => {
  await app?.close();
  fixture.cleanup();
});

const PROMPT = [3, 1, 4, 1, 5, 9, 2, 6];
const submit = (id: string, adapter: string, maxTokens: number) =>
  app.engine.submit({ request: { id, adapter, prompt: PROMPT, maxTokens, sampling: {}, stop: [], ignoreEos: true }, attempt: 0, generated: [] }).result();

it('re-partitions the served foundation on ingest and keeps every request’s tokens', async () => {
  const listed = async (id: string) => ((await (await fetch(`${url}/v1/zoo/models`)).json()) as { data: { id: string; labels: string[] }[] }).data.find((a) => a.id === id);
  expect((await listed(FOUNDATION))!.labels).toHaveLength(1);
  const reference = await app.engine.call('alone', { app: FOUNDATION, prompt: PROMPT, maxTokens: 40 });
  const running = submit('long', FOUNDATION, 40);
  const ingest = await postJson(`${url}/v1/zoo/models`, { id: 'sql-lora', path: join(fixture.root, 'peft', 'sql-lora') });
  expect(ingest.status, ingest.text).toBe(201);
  const [long, lora, after] = await Promise.all([running, submit('lora', 'sql-lora', 12), submit('after', FOUNDATION, 12)]);
  expect(long.tokens).toEqual(reference);
  expect(after.tokens).toEqual(reference.slice(0, 12));
  expect((await listed(FOUNDATION))!.labels.length).toBeGreaterThan(1);
  expect((await app.engine.call('stats', null)).rebuilds).toBe(1);
  expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/^tessera_blockllm_executor_rebuilds_total 1$/m);
  const whole = wholeModelTokens([{ name: 'sql-lora', modelDir: fixture.modelDir, loraDir: join(fixture.root, 'peft', 'sql-lora') }], PROMPT, 12);
  expect(lora.tokens).toEqual(whole['sql-lora']);
});
