/**
 * The command line as a user runs it: `--help` prints the usage and exits 0; `--demo` generates the demo once
 * (reused afterwards), serves it on loopback with every demo task loaded, answers a classify, and exits 0 on
 * SIGTERM after a clean shutdown.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { DEMO_MODEL_NAME, DEMO_TASKS, ensureDemo } from '../src/demo.js';

const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const bin = fileURLToPath(new URL('../bin/tessera-pets.mjs', import.meta.url));
const cwd = fileURLToPath(new URL('..', import.meta.url));
let scratch: string;

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'tessera-pets-cli-'));
});

afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[], script = main): { child: ChildProcessWithoutNullStreams; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, script === main ? ['--conditions=@tessera/source', '--import', 'tsx', main, ...args] : [script, ...args], {
    cwd,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

describe('tessera-pets --help', () => {
  it('prints the usage with every flag and exits 0 (through the bin script)', async () => {
    const { output, exited } = run(['--help'], bin);
    expect(await exited).toBe(0);
    for (const flag of ['--model', '--demo', '--params-root', '--strategy', '--window-ms', '--budget-mb', '--max-input-tokens', '--max-batch-inputs']) {
      expect(output()).toContain(flag);
    }
  });

  it('a bad flag exits 2 with the reason', async () => {
    const { output, exited } = run(['--strategy', 'greedy']);
    expect(await exited).toBe(2);
    expect(output()).toMatch(/--strategy must be one of/);
  });
});

describe('the demo', () => {
  it('is generated once (a shared model and one task per PET type) and reused afterwards', () => {
    const dir = join(scratch, 'demo');
    const lines: string[] = [];
    const first = ensureDemo(dir, (l) => lines.push(l));
    expect(first.generated).toBe(true);
    expect(first.modelName).toBe(DEMO_MODEL_NAME);
    expect(lines.filter((l) => l.startsWith('generating task'))).toHaveLength(DEMO_TASKS.length);
    expect(new Set(DEMO_TASKS.map((t) => t.petType)).size).toBe(DEMO_TASKS.length);
    for (const t of first.tasks) expect(existsSync(t.path)).toBe(true);
    const stamp = statSync(first.tasks[0]!.path).mtimeMs;
    const again = ensureDemo(dir, (l) => lines.push(l));
    expect(again.generated).toBe(false);
    expect(statSync(again.tasks[0]!.path).mtimeMs).toBe(stamp);
  });

  it('serves the demo: /health, classify, then SIGTERM exits 0', async () => {
    const { child, output, exited } = run(['--demo', '--demo-dir', join(scratch, 'cli-demo'), '--port', '0', '--threads', '1', '--log-level', 'warn']);
    try {
      const pattern = /serving .* on (http:\/\/127\.0\.0\.1:\d+)/;
      await expect.poll(() => pattern.exec(output())?.[1], { timeout: 30_000, interval: 50 }).toBeDefined();
      const address = pattern.exec(output())![1]!;
      const health = await fetch(`${address}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({ status: 'ok', shared_model: DEMO_MODEL_NAME, tasks_registered: DEMO_TASKS.length, tasks_loaded: DEMO_TASKS.length });
      const res = await fetch(`${address}/v1/tasks/sentiment/classify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input: ['a wonderful, moving film', 'the plot makes no sense'] }),
      });
      expect(res.status).toBe(200);
      const body = (await res.json()) as { data: { label: string }[] };
      expect(body.data).toHaveLength(2);
      for (const d of body.data) expect(DEMO_TASKS[0]!.labels).toContain(d.label);
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
