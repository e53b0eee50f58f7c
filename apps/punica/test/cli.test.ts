/**
 * The command line: flags and PUNICA_* variables, the demo generated once and reused, and the real CLI process:
 * it generates the demo, serves it on loopback, answers a completion, and exits cleanly on SIGINT.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { parseCli, USAGE, UsageError } from '../src/config.js';
import { DEMO_ADAPTERS, DEMO_MODEL_NAME, ensureDemo } from '../src/demo.js';
import { discoverAdapters } from '../src/server.js';

let scratch: string;

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'tessera-punica-cli-'));
});

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('parseCli', () => {
  it('has defaults: loopback, port 8000, batch 32, the demo when no model is given', () => {
    expect(parseCli([], {})).toMatchObject({ modelDir: undefined, host: '127.0.0.1', port: 8000, maxBatch: 32, kvBudgetMiB: 64, adapterBudgetMiB: 64, adapterAdmin: true, demo: false, threads: undefined, logLevel: 'info' });
  });

  it('reads flags, and PUNICA_* variables where a flag is absent', () => {
    const env = { PUNICA_MODEL: '/env/model', PUNICA_PORT: '9000', PUNICA_MAX_BATCH: '8', PUNICA_ADAPTER_ADMIN: '0', PUNICA_THREADS: '2', PUNICA_HOST: '0.0.0.0' };
    expect(parseCli([], env)).toMatchObject({ modelDir: '/env/model', port: 9000, maxBatch: 8, adapterAdmin: false, threads: 2, host: '0.0.0.0' });
    const flags = ['--model', '/m', '--adapters', '/a', '--port', '8100', '--max-batch', '16', '--kv-budget-mib', '128', '--adapter-budget-mib', '32', '--threads', '4', '--no-adapter-admin', '--adapter-root', '/a', '--model-name', 'llama'];
    expect(parseCli(flags, env)).toMatchObject({ modelDir: '/m', adaptersDir: '/a', port: 8100, maxBatch: 16, kvBudgetMiB: 128, adapterBudgetMiB: 32, threads: 4, adapterAdmin: false, adapterRoot: '/a', modelName: 'llama' });
  });

  it('ignores the leading -- that `pnpm start -- …` passes through', () => {
    expect(parseCli(['--', '--port', '9001'], {})).toMatchObject({ port: 9001 });
  });

  it('returns null for --help, and the usage names every flag', () => {
    expect(parseCli(['--help'], {})).toBeNull();
    expect(parseCli(['-h'], {})).toBeNull();
    for (const flag of ['--model', '--adapters', '--host', '--port', '--max-batch', '--kv-budget-mib', '--adapter-budget-mib', '--threads', '--demo', '--demo-dir', '--no-adapter-admin', '--adapter-root']) {
      expect(USAGE).toContain(flag);
    }
  });

  it('rejects unknown flags and bad values with a UsageError', () => {
    for (const argv of [['--nope'], ['--port', 'abc'], ['--port', '70000'], ['--max-batch', '0'], ['--threads', '1.5'], ['--log-level', 'loud'], ['positional']]) {
      expect(() => parseCli(argv, {}), argv.join(' ')).toThrow(UsageError);
    }
    expect(() => parseCli([], { PUNICA_ADAPTER_ADMIN: 'maybe' })).toThrow(/PUNICA_ADAPTER_ADMIN/);
  });

  it('--weights f32|int8 (or PUNICA_WEIGHTS): int8 quantizes the linear weights at load; f32 by default', () => {
    expect(parseCli([], {})).toMatchObject({ weights: 'f32' });
    expect(parseCli(['--weights', 'int8'], {})).toMatchObject({ weights: 'int8' });
    expect(parseCli([], { PUNICA_WEIGHTS: 'int8' })).toMatchObject({ weights: 'int8' });
    expect(USAGE).toContain('--weights');
    expect(() => parseCli(['--weights', 'int4'], {})).toThrow(UsageError);
  });

  it('cluster mode: --role and --redis (or PUNICA_ROLE, PUNICA_REDIS_URL, REDIS_URL); no role means one process', () => {
    expect(parseCli([], { REDIS_URL: 'redis://r:1' })).toMatchObject({ role: null, redisUrl: 'redis://r:1', clusterPrefix: 'tessera', lightlyLoadedFraction: 0.5, idleReleaseSeconds: 60 });
    expect(parseCli(['--role', 'worker', '--host-id', 'gpu-7'], {})).toMatchObject({ role: 'worker', hostId: 'gpu-7', redisUrl: 'redis://127.0.0.1:6379' });
    expect(parseCli(['--role', 'scheduler', '--redis', 'redis://s:2', '--lightly-loaded', '0.25', '--idle-release-s', '5'], { REDIS_URL: 'redis://r:1' })).toMatchObject({
      role: 'scheduler',
      redisUrl: 'redis://s:2',
      lightlyLoadedFraction: 0.25,
      idleReleaseSeconds: 5,
    });
    expect(parseCli([], { PUNICA_ROLE: 'frontend', PUNICA_REDIS_URL: 'redis://e:3', PUNICA_CLUSTER_PREFIX: 'blue' })).toMatchObject({ role: 'frontend', redisUrl: 'redis://e:3', clusterPrefix: 'blue' });
    expect(parseCli(['--role', 'worker'], {})!.hostId).toMatch(/-\d+$/);
    for (const flag of ['--role', '--redis', '--cluster-prefix', '--host-id', '--lightly-loaded', '--idle-release-s']) expect(USAGE).toContain(flag);
    expect(() => parseCli(['--role', 'boss'], {})).toThrow(/--role must be one of frontend, worker, scheduler/);
    expect(() => parseCli(['--redis', 'redis://x:1'], {})).toThrow(/--redis needs --role/);
    expect(() => parseCli(['--role', 'scheduler', '--lightly-loaded', '2'], {})).toThrow(/--lightly-loaded/);
  });
});

describe('the demo', () => {
  it('is generated once (a model and eight adapters) and reused afterwards', () => {
    const dir = join(scratch, 'demo');
    const lines: string[] = [];
    const first = ensureDemo(dir, (l) => lines.push(l));
    expect(first.generated).toBe(true);
    expect(first.modelName).toBe(DEMO_MODEL_NAME);
    expect(lines.filter((l) => l.startsWith('generating adapter'))).toHaveLength(8);
    expect(discoverAdapters(first.adaptersDir).map((a) => a.name)).toEqual(DEMO_ADAPTERS.map((a) => a.name).sort());
    expect(new Set(DEMO_ADAPTERS.map((a) => a.rank)).size).toBeGreaterThan(3);
    const stamp = statSync(join(first.modelDir, 'model.safetensors')).mtimeMs;

    const again = ensureDemo(dir, (l) => lines.push(l));
    expect(again.generated).toBe(false);
    expect(statSync(join(again.modelDir, 'model.safetensors')).mtimeMs).toBe(stamp);
  });
});

describe('the tessera-punica process', () => {
  it('serves the demo on loopback and exits cleanly on SIGINT', async () => {
    const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
    const child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', main, '--demo-dir', join(scratch, 'cli-demo'), '--port', '0', '--threads', '1', '--log-level', 'warn'], {
      cwd: fileURLToPath(new URL('..', import.meta.url)),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      await expect.poll(() => /serving .* on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1], { timeout: 30_000, interval: 50 }).toBeDefined();
      const address = /serving .* on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)![1]!;
      expect(out).toContain('generating adapter 8/8');
      const res = await fetch(`${address}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: DEMO_ADAPTERS[1]!.name, prompt: 'The quick brown fox', max_tokens: 5, temperature: 0 }),
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBeGreaterThan(0);
      child.kill('SIGINT');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
