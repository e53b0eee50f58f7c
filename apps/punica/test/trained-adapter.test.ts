/**
 * A LoRA trained by the engine, served as trained: `tessera train lora` (trainLora through the CLI, in a child
 * process: this test thread must not load the native addon, the server's engine worker does) learns a small
 * key → value set on a tiny decoder and writes a PEFT adapter directory; the server hot-loads it with
 * POST /v1/load_lora_adapter, and /v1/completions (greedy) with model = that adapter answers every key with its
 * trained value, while the base model answers none of them.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

import { generateModel } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { buildServer } from '../src/server.js';
import { nativeAddonLoadedHere } from './support/fixture.js';

const VALUES = ['river', 'stone', 'cloud', 'maple', 'tiger', 'ocean', 'ember', 'frost', 'lunar', 'cedar', 'piano', 'raven'];
const pairs = VALUES.map((value, i) => ({ prompt: `key ${i} ->`, completion: ` ${value}` }));

const dir = mkdtempSync(join(tmpdir(), 'tessera-punica-trained-'));
const modelDir = join(dir, 'recall-base');
const adapterDir = join(dir, 'trained', 'recall');
let app: FastifyInstance | undefined;

/**
 * `tessera train …` in a child process: the engine's CLI module (`@tessera/engine/cli`, what the `tessera` command
 * runs for `train`), from source through tsx, resolved from this package's engine dependency.
 */
function tessera(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const require = createRequire(import.meta.url);
  const cli = require.resolve('@tessera/engine/cli', { paths: [dirname(require.resolve('@tessera/engine/package.json'))] });
  const script = `const { main } = await import(${JSON.stringify(pathToFileURL(cli).href)}); process.exitCode = await main(process.argv.slice(1));`;
  return new Promise((resolve) => {
    execFile(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', '--input-type=module', '-e', script, ...args], { cwd: dirname(require.resolve('@tessera/engine/package.json')), timeout: 60_000, env: { ...process.env, TESSERA_THREADS: '1' } },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

beforeAll(() => {
  // sharpen 10: the final norm's gain, so a random tiny model's logits can become confident.
  generateModel(modelDir, { family: 'decoder', seed: 1, sharpen: 10 });
  mkdirSync(join(dir, 'adapters'));
  writeFileSync(join(dir, 'recall.jsonl'), `${pairs.map((p) => JSON.stringify(p)).join('\n')}\n`);
});

afterAll(async () => {
  await app?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('a trained LoRA, hot-loaded into the server', () => {
  it('answers the keys with the trained values; the base model does not', async () => {
    const trained = await tessera([
      'train', 'lora', '--model', modelDir, '--data', join(dir, 'recall.jsonl'), '--out', adapterDir,
      '--steps', '80', '--lr', '1e-2', '--warmup', '8', '--batch', '12', '--rank', '8', '--alpha', '16', '--seed', '3', '--json',
    ]);
    expect({ code: trained.code, stderr: trained.code === 0 ? '' : trained.stderr }).toEqual({ code: 0, stderr: '' });
    expect(JSON.parse(trained.stdout)).toMatchObject({ kind: 'lora', out: adapterDir, files: ['adapter_config.json', 'adapter_model.safetensors'] });

    app = await buildServer({ modelDir, adaptersDir: join(dir, 'adapters'), adapterRoot: join(dir, 'trained'), threads: 1, kvBudgetMiB: 8 });
    const post = (url: string, payload: Record<string, unknown>) => app!.inject({ method: 'POST', url, payload });
    const load = await post('/v1/load_lora_adapter', { lora_name: 'recall', lora_path: adapterDir });
    expect(load.statusCode).toBe(200);
    expect(load.body).toBe("Success: LoRA adapter 'recall' added successfully.");

    const answer = async (model: string, prompt: string) => {
      const res = await post('/v1/completions', { model, prompt, max_tokens: 8, temperature: 0 });
      expect(res.statusCode).toBe(200);
      return res.json().choices[0].text as string;
    };
    const tuned = await Promise.all(pairs.map((p) => answer('recall', p.prompt)));
    const base = await Promise.all(pairs.map((p) => answer('recall-base', p.prompt)));
    expect(tuned).toEqual(pairs.map((p) => p.completion));
    expect(base.filter((text, i) => text === pairs[i]!.completion)).toEqual([]);
    expect(nativeAddonLoadedHere()).toBe(false);
  }, 60_000);
});
