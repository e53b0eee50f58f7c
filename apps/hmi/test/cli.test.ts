/**
 * The command line as a user runs it: `--help` prints the usage and exits 0; a bad flag exits 2; the demo
 * (generated once into a scratch --demo-dir, then its domains and tenants trained through the manager's jobs) serves
 * on loopback, answers the README's quick-start requests, and exits 0 on SIGTERM after a clean shutdown.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { DEMO_VERSION, ensureDemo } from '../src/demo.js';

const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
const bin = fileURLToPath(new URL('../bin/tessera-hmi.mjs', import.meta.url));
const readme = fileURLToPath(new URL('../README.md', import.meta.url));
const cwd = fileURLToPath(new URL('..', import.meta.url));
let scratch: string;

beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), 'tessera-hmi-cli-'));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[], script = main): { child: ChildProcessWithoutNullStreams; output: () => string; exited: Promise<number | null> } {
  const child = spawn(process.execPath, script === main ? ['--conditions=@tessera/source', '--import', 'tsx', main, ...args] : [script, ...args], { cwd, stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exited };
}

/** The README's quick-start requests: each `curl` line of the quickstart region, as method, path and body. */
function quickstartRequests(): { path: string; body: unknown }[] {
  const text = readFileSync(readme, 'utf8');
  const region = /<!-- #region quickstart -->([\s\S]*?)<!-- #endregion quickstart -->/.exec(text)![1]!;
  return region
    .split('\n')
    .filter((l) => l.trim().startsWith('curl '))
    .map((l) => {
      const url = /curl -s (\S+)/.exec(l)![1]!;
      const data = /-d '([^']*)'/.exec(l);
      return { path: url.replace(/^localhost:\d+/, ''), body: data ? JSON.parse(data[1]!) : undefined };
    });
}

describe('tessera-hmi --help', () => {
  it('prints the usage with every flag and exits 0 (through the bin script)', async () => {
    const { output, exited } = run(['--help'], bin);
    expect(await exited).toBe(0);
    for (const flag of ['--model', '--demo', '--demo-dir', '--lower-layers', '--alpha', '--redis', '--pipeline', '--max-batch', '--slots', '--threads', '--port', '--log-level']) {
      expect(output()).toContain(flag);
    }
  });

  it('a bad flag exits 2 with the reason', async () => {
    const { output, exited } = run(['--pipeline', 'eager']);
    expect(await exited).toBe(2);
    expect(output()).toMatch(/--pipeline must be one of/);
  });
});

describe('the demo', () => {
  it('is generated once and reused afterwards', async () => {
    const dir = join(scratch, 'demo');
    const lines: string[] = [];
    // A shorter pretraining than the real demo's (CI time); the command below reuses this directory.
    const first = await ensureDemo(dir, (l) => lines.push(l), 100);
    expect(first.generated).toBe(true);
    expect(lines[0]).toMatch(/generating the demo model/);
    const again = await ensureDemo(dir, (l) => lines.push(l), 100);
    expect(again).toMatchObject({ generated: false, modelDir: first.modelDir });
    expect(JSON.parse(readFileSync(join(dir, 'demo.json'), 'utf8'))).toMatchObject({ version: DEMO_VERSION, pretrain_steps: 100 });
  });

  it('trains its domains and tenants at start, answers the README quick start, and stops cleanly on SIGTERM', async () => {
    const { child, output, exited } = run(['--demo-dir', join(scratch, 'demo'), '--demo-tenants', '6', '--port', '0', '--log-level', 'warn']);
    const deadline = Date.now() + 90_000;
    while (!output().includes('[hmi] try:')) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the demo did not start:\n${output()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    const address = /on (http:\/\/127\.0\.0\.1:\d+)/.exec(output())![1]!;
    expect(output()).toMatch(/using the demo model in/);
    expect(output()).toMatch(/3 domain\(s\), 6 tenant\(s\)/);
    const requests = quickstartRequests();
    expect(requests.length).toBeGreaterThanOrEqual(2);
    for (const r of requests) {
      const res = await fetch(`${address}${r.path}`, r.body === undefined ? {} : { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(r.body) });
      expect(res.status, `${r.path}: ${await res.clone().text()}`).toBeLessThan(300);
    }
    const domains = (await (await fetch(`${address}/v1/domains`)).json()) as { data: { name: string }[] };
    expect(domains.data.map((d) => d.name)).toEqual(['root', 'bio', 'eco']);
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
  }, 120_000);
});
