/**
 * `npm start` serves this model: the Punica server, given the committed model directory and adapters (what
 * scripts/task.mjs start passes), lists the base and every category's adapter, and a greedy completion through
 * the OpenAI API's `model` field is English-looking text, the same on a second request. The native addon is loaded
 * by the server's engine worker, not by this test's thread.
 */
import { join } from 'node:path';

import { buildServer } from '@tessera/punica';
import { afterAll, describe, expect, it } from 'vitest';

import { DEMO_OUT_DIR } from '../src/cli.js';
import { DEFAULT_LORA_CATEGORIES, DEMO_MODEL_NAME } from '../src/recipe.js';

let app: Awaited<ReturnType<typeof buildServer>> | undefined;

afterAll(async () => {
  await app?.close();
});

describe('the Punica server on the fortunes demo', () => {
  it('serves the base and each category adapter by name', async () => {
    app = await buildServer({ modelDir: join(DEMO_OUT_DIR, DEMO_MODEL_NAME), adaptersDir: join(DEMO_OUT_DIR, 'adapters'), threads: 1, kvBudgetMiB: 8 });
    const models = await app.inject({ method: 'GET', url: '/v1/models' });
    expect(models.statusCode).toBe(200);
    const ids = (models.json() as { data: Array<{ id: string }> }).data.map((m) => m.id);
    expect(ids.sort()).toEqual([DEMO_MODEL_NAME, ...DEFAULT_LORA_CATEGORIES].sort());

    const complete = async (model: string) => {
      const res = await app!.inject({ method: 'POST', url: '/v1/completions', payload: { model, prompt: 'The meaning of life is', max_tokens: 20, temperature: 0 } });
      expect(res.statusCode).toBe(200);
      return (res.json() as { choices: Array<{ text: string }> }).choices[0]!.text;
    };
    for (const model of [DEMO_MODEL_NAME, 'science', 'computers']) {
      const text = await complete(model);
      expect(text.length).toBeGreaterThan(0);
      expect((text.match(/[A-Za-z ,.'\n]/g)?.length ?? 0) / text.length).toBeGreaterThan(0.8);
      expect(await complete(model)).toBe(text);
    }
  });
});
