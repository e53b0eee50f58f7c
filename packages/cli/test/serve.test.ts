/**
 * `tessera serve punica` as a real process: the Punica server on port 0 over a generated tiny model answers
 * /health and a completion, and SIGTERM (sent to the `tessera` process only, not its group) stops it cleanly.
 * Also: a server whose package is not there is a clear exit 2, not a stack trace.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateModel } from '@tessera/engine';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { loadServer, ServerUnavailableError } from '../src/index.js';
import { bin, cleanEnv } from './support.js';

const scratch = mkdtempSync(join(tmpdir(), 'tessera-cli-serve-'));
const model = join(scratch, 'tiny-llama');
beforeAll(() => {
  generateModel(model, { family: 'decoder', seed: 5 });
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('tessera serve punica (a real process)', () => {
  it('serves a generated tiny model on port 0, answers /health and a completion, and stops on SIGTERM', async () => {
    const child = spawn(process.execPath, [bin, 'serve', 'punica', '--model', model, '--port', '0', '--threads', '1'], {
      cwd: scratch,
      // Flags and PUNICA_* variables as the server's own bin reads them: the log level comes from the variable.
      env: cleanEnv({ PUNICA_LOG_LEVEL: 'warn' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const addressOf = () => /\[punica\] serving tiny-llama \(cpu\) with 0 adapter\(s\) on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
    try {
      await expect.poll(addressOf, { timeout: 45_000, interval: 50 }).toBeDefined();
      const address = addressOf()!;
      const health = await fetch(`${address}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({ status: 'ok', model: 'tiny-llama', device: 'cpu' });
      const res = await fetch(`${address}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'tiny-llama', prompt: 'The quick brown fox', max_tokens: 4, temperature: 0 }),
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBeGreaterThan(0);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      // Stopped, not orphaned: nothing listens there any more.
      await expect(fetch(`${address}/health`)).rejects.toThrow();
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 60_000);
});

describe('a server that is not installed', () => {
  it('loadServer says which package is missing and what to do', async () => {
    const missing = { name: 'nowhere', package: '@tessera/nowhere-server', envPrefix: 'NOWHERE', summary: '' };
    const err = await loadServer(missing).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ServerUnavailableError);
    expect(err).toMatchObject({ kind: 'unavailable', code: 'TESSERA_SERVER_UNAVAILABLE' });
    expect((err as Error).message).toMatch(/the nowhere server \(@tessera\/nowhere-server\) cannot be loaded: .*nowhere-server/);
    expect((err as Error).message).toContain('install @tessera/nowhere-server beside @tessera/cli');
  });
});
