/**
 * The command line: flags and BLOCKLLM_* variables, --help, the demo's files generated once and reused, and the
 * real CLI process: it generates the demo (the engine worker builds its zoo), serves every application on
 * loopback, answers a completion, and exits cleanly on SIGINT.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { DEFAULT_HEAP_GROWING_PERCENT, parseCli, USAGE, UsageError } from '../src/config.js';
import { DEMO_MODEL_NAME, ensureDemo } from '../src/demo.js';

let scratch: string;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'tessera-blockllm-cli-'));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const MAIN = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const APP_DIR = fileURLToPath(new URL('..', import.meta.url));

describe('parseCli', () => {
  it('has defaults: loopback, port 8000, batch 32, 64 KV pages a block, ingest on, the demo when no model is given', () => {
    expect(parseCli([], {})).toMatchObject({ modelDir: undefined, zooDir: undefined, host: '127.0.0.1', port: 8000, maxBatch: 32, kvPages: 64, ingest: true, demo: false, threads: undefined, logLevel: 'info' });
  });

  it('reads flags, and BLOCKLLM_* variables where a flag is absent', () => {
    const env = { BLOCKLLM_MODEL: '/env/model', BLOCKLLM_ZOO: '/env/zoo', BLOCKLLM_PORT: '9000', BLOCKLLM_MAX_BATCH: '8', BLOCKLLM_KV_PAGES: '12', BLOCKLLM_INGEST: '0', BLOCKLLM_THREADS: '2', BLOCKLLM_DEMO: '1' };
    expect(parseCli([], env)).toMatchObject({ modelDir: '/env/model', zooDir: '/env/zoo', port: 9000, maxBatch: 8, kvPages: 12, ingest: false, threads: 2, demo: true });
    const flags = ['--model', '/m', '--zoo', '/z', '--port', '8100', '--max-batch', '16', '--kv-pages', '128', '--threads', '4', '--no-ingest', '--ingest-root', '/r', '--model-name', 'llama'];
    expect(parseCli(flags, env)).toMatchObject({ modelDir: '/m', zooDir: '/z', port: 8100, maxBatch: 16, kvPages: 128, threads: 4, ingest: false, ingestRoot: '/r', modelName: 'llama' });
  });

  it('reads the device and placement flags (one device, blocks, locality, in-process by default)', () => {
    expect(parseCli([], {})).toMatchObject({ devices: 1, deviceMb: undefined, provisioning: 'blocks', placementPolicy: 'locality', redis: false, redisPrefix: 'tessera-blockllm' });
    const flags = ['--devices', '3', '--device-mb', '64', '--device-bytes', '1500000', '--provisioning', 'per-model', '--placement-policy', 'frag-min', '--redis', '--redis-url', 'redis://h:1', '--redis-prefix', 'p1'];
    expect(parseCli(flags, {})).toMatchObject({ devices: 3, deviceMb: 64, deviceBytes: 1_500_000, provisioning: 'per-model', placementPolicy: 'frag-min', redis: true, redisUrl: 'redis://h:1', redisPrefix: 'p1' });
    expect(parseCli([], { BLOCKLLM_DEVICES: '2', BLOCKLLM_REDIS: '1', REDIS_URL: 'redis://env:2' })).toMatchObject({ devices: 2, redis: true, redisUrl: 'redis://env:2' });
    for (const argv of [['--devices', '0'], ['--devices', '99'], ['--provisioning', 'both'], ['--placement-policy', 'random'], ['--device-mb', '0']]) expect(() => parseCli(argv, {}), argv.join(' ')).toThrow(UsageError);
    for (const flag of ['--devices', '--device-mb', '--provisioning', '--placement-policy', '--redis', '--redis-prefix', 'BLOCKLLM_DEVICES']) expect(USAGE).toContain(flag);
  });

  it('reads the adaptive serving flags (on, no queue bound by default)', () => {
    expect(parseCli([], {})).toMatchObject({ adaptive: true, maxQueue: undefined });
    expect(parseCli(['--no-adaptive', '--max-queue', '4'], {})).toMatchObject({ adaptive: false, maxQueue: 4 });
    expect(parseCli([], { BLOCKLLM_ADAPTIVE: '0', BLOCKLLM_MAX_QUEUE: '2' })).toMatchObject({ adaptive: false, maxQueue: 2 });
    expect(parseCli([], { BLOCKLLM_ADAPTIVE: '1' })).toMatchObject({ adaptive: true });
    expect(() => parseCli(['--max-queue', '0'], {})).toThrow(UsageError);
    for (const flag of ['--no-adaptive', 'BLOCKLLM_ADAPTIVE=0', '--max-queue', 'BLOCKLLM_MAX_QUEUE']) expect(USAGE).toContain(flag);
  });

  it('reads cohort homes (on by default) and the heap growth (300 % by default, 0: V8 decides)', () => {
    expect(parseCli([], {})).toMatchObject({ cohortHomes: true, heapGrowingPercent: DEFAULT_HEAP_GROWING_PERCENT });
    expect(DEFAULT_HEAP_GROWING_PERCENT).toBe(300);
    expect(parseCli(['--no-cohort-homes', '--heap-growing-percent', '0'], {})).toMatchObject({ cohortHomes: false, heapGrowingPercent: 0 });
    expect(parseCli([], { BLOCKLLM_COHORT_HOMES: '0', BLOCKLLM_HEAP_GROWING_PERCENT: '100' })).toMatchObject({ cohortHomes: false, heapGrowingPercent: 100 });
    for (const argv of [['--heap-growing-percent', '-1'], ['--heap-growing-percent', '2000'], ['--heap-growing-percent', '1.5']]) expect(() => parseCli(argv, {}), argv.join(' ')).toThrow(UsageError);
    for (const flag of ['--no-cohort-homes', 'BLOCKLLM_COHORT_HOMES=0', '--heap-growing-percent', 'BLOCKLLM_HEAP_GROWING_PERCENT']) expect(USAGE).toContain(flag);
  });

  it('reads the demo size (tiny by default; small and medium)', () => {
    expect(parseCli([], {})).toMatchObject({ demoSize: 'tiny' });
    expect(parseCli(['--demo-size', 'medium'], {})).toMatchObject({ demoSize: 'medium' });
    expect(parseCli([], { BLOCKLLM_DEMO_SIZE: 'small' })).toMatchObject({ demoSize: 'small' });
    expect(() => parseCli(['--demo-size', 'huge'], {})).toThrow(UsageError);
    expect(USAGE).toContain('tiny|small|medium');
  });

  it('reads how migrate jobs move K/V (overlapped by default)', () => {
    expect(parseCli([], {})).toMatchObject({ kvMigration: 'overlapped' });
    expect(parseCli(['--kv-migration', 'copy'], {})).toMatchObject({ kvMigration: 'copy' });
    expect(parseCli([], { BLOCKLLM_KV_MIGRATION: 'copy' })).toMatchObject({ kvMigration: 'copy' });
    expect(() => parseCli(['--kv-migration', 'teleport'], {})).toThrow(UsageError);
    for (const flag of ['--kv-migration', 'BLOCKLLM_KV_MIGRATION']) expect(USAGE).toContain(flag);
  });

  it('reads the speculation flags (off by default; several devices with blocks provisioning)', () => {
    expect(parseCli([], {})).toMatchObject({ speculate: false, specAcceptCosine: 0.95, specFraction: 0.1 });
    expect(parseCli(['--devices', '2', '--speculate', '--spec-accept-cosine', '0.9', '--spec-fraction', '0.5'], {})).toMatchObject({ speculate: true, specAcceptCosine: 0.9, specFraction: 0.5 });
    expect(parseCli([], { BLOCKLLM_DEVICES: '3', BLOCKLLM_SPECULATE: '1', BLOCKLLM_SPEC_ACCEPT_COSINE: '1' })).toMatchObject({ speculate: true, specAcceptCosine: 1 });
    expect(() => parseCli(['--speculate'], {})).toThrow(/--devices 2 or more/);
    expect(() => parseCli(['--devices', '2', '--speculate', '--provisioning', 'per-model'], {})).toThrow(UsageError);
    for (const bad of ['1.5', '-2', 'high', '']) expect(() => parseCli(['--devices', '2', '--speculate', '--spec-accept-cosine', bad], {}), bad).toThrow(UsageError);
    expect(() => parseCli(['--spec-fraction', '2'], {})).toThrow(/--spec-fraction/);
    for (const flag of ['--speculate', 'BLOCKLLM_SPECULATE=1', '--spec-accept-cosine', '--spec-fraction']) expect(USAGE).toContain(flag);
  });

  it('returns null for --help, and the usage names every flag and its variable', () => {
    expect(parseCli(['--help'], {})).toBeNull();
    expect(parseCli(['-h'], {})).toBeNull();
    for (const flag of ['--model', '--zoo', '--host', '--port', '--max-batch', '--kv-pages', '--threads', '--demo', '--demo-dir', '--no-ingest', '--ingest-root', 'BLOCKLLM_MODEL', 'BLOCKLLM_KV_PAGES', 'BLOCKLLM_INGEST=0']) {
      expect(USAGE).toContain(flag);
    }
  });

  it('rejects unknown flags and bad values with a UsageError', () => {
    for (const argv of [['--nope'], ['--port', 'abc'], ['--port', '70000'], ['--max-batch', '0'], ['--kv-pages', '0'], ['--threads', '1.5'], ['--log-level', 'loud'], ['positional']]) {
      expect(() => parseCli(argv, {}), argv.join(' ')).toThrow(UsageError);
    }
    expect(() => parseCli([], { BLOCKLLM_INGEST: 'maybe' })).toThrow(/BLOCKLLM_INGEST/);
  });
});

describe('the demo files', () => {
  it('are generated once and reused afterwards', () => {
    const dir = join(scratch, 'demo');
    const first = ensureDemo(dir);
    expect(first.generated).toBe(true);
    expect(first.modelName).toBe(DEMO_MODEL_NAME);
    const stamp = statSync(join(first.modelDir, 'model.safetensors')).mtimeMs;
    const again = ensureDemo(dir);
    expect(again.generated).toBe(false);
    expect(statSync(join(again.modelDir, 'model.safetensors')).mtimeMs).toBe(stamp);
  });
});

describe('the tessera-blockllm process', () => {
  it('prints --help and exits 0; exits 2 on a bad flag', () => {
    const help = spawnSync(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', MAIN, '--help'], { cwd: APP_DIR, encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('tessera-blockllm');
    expect(help.stdout).toContain('BLOCKLLM_ZOO');
    const bad = spawnSync(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', MAIN, '--port', 'x'], { cwd: APP_DIR, encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/--port/);
  });

  it('serves the demo on loopback and exits cleanly on SIGINT', async () => {
    const child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', MAIN, '--demo-dir', join(scratch, 'cli-demo'), '--port', '0', '--threads', '1', '--log-level', 'warn'], {
      cwd: APP_DIR,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const serving = /serving (\d+) application\(s\) .* on (http:\/\/127\.0\.0\.1:\d+)/;
      await expect.poll(() => serving.exec(out)?.[2], { timeout: 25_000, interval: 50 }).toBeDefined();
      const [, count, address] = serving.exec(out)!;
      expect(Number(count)).toBe(7);
      for (const line of ['sql-lora', 'summarizer', 'classifier', 'persona', 'vicuna']) expect(out).toContain(line);
      const res = await fetch(`${address}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'persona', prompt: 'The quick brown fox', max_tokens: 5, temperature: 0 }),
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
