/**
 * The serving policies a user turns on with flags, end to end over HTTP (`--prefix-cache`, `--fairness vtc`):
 * requests that share a system prompt hit the prefix cache of their own adapter (vLLM's
 * `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits` on /metrics), and their greedy completions equal the first,
 * uncached ones. The CLI parses both flags and refuses an unknown fairness policy.
 */
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { parseCli, UsageError } from '../src/config.js';
import { type Fixture, makeFixture, metricValue, MODEL_NAME, serve } from './support/fixture.js';

let fixture: Fixture;
let app: FastifyInstance;

beforeAll(async () => {
  fixture = makeFixture();
  app = await serve(fixture, { prefixCache: true, fairness: 'vtc' });
});

afterAll(async () => {
  await app?.close();
  fixture?.cleanup();
});

const system = 'You are a terse assistant for the railway timetable office. Answer in one short sentence. ';

async function complete(model: string, prompt: string): Promise<string> {
  const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: { model, prompt, max_tokens: 8, temperature: 0 } });
  expect(res.statusCode, res.body).toBe(200);
  return res.json().choices[0].text;
}

describe('--prefix-cache and --fairness vtc', () => {
  it('a shared system prompt hits its own adapter’s cached pages, with the same greedy text', async () => {
    const models = [MODEL_NAME, 'alpha', 'beta'];
    const first = await Promise.all(models.map((m) => complete(m, `${system}When is the first train?`)));
    const again = await Promise.all(models.map((m) => complete(m, `${system}When is the first train?`)));
    expect(again).toEqual(first);
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const queries = metricValue(text, `vllm:prefix_cache_queries_total{model_name="${MODEL_NAME}"}`)!;
    const hits = metricValue(text, `vllm:prefix_cache_hits_total{model_name="${MODEL_NAME}"}`)!;
    expect(queries).toBeGreaterThan(0);
    // The second round attaches every full page of each prompt but its last token: at least one page each.
    expect(hits).toBeGreaterThanOrEqual(3 * 16);
    expect(hits).toBeLessThan(queries);
  });

  it('the CLI parses both flags (and their environment variables) and refuses an unknown policy', () => {
    expect(parseCli(['--prefix-cache', '--fairness', 'vtc'], {})).toMatchObject({ prefixCache: true, fairness: 'vtc' });
    expect(parseCli([], { PUNICA_PREFIX_CACHE: '1', PUNICA_FAIRNESS: 'vtc' })).toMatchObject({ prefixCache: true, fairness: 'vtc' });
    expect(parseCli([], {})).toMatchObject({ prefixCache: false, fairness: 'fcfs' });
    expect(() => parseCli(['--fairness', 'lottery'], {})).toThrow(UsageError);
  });
});
