/**
 * Cluster mode end to end: a scheduler (in this process, as `--role scheduler` runs it), two worker processes
 * started by the real CLI (`--role worker`), and a frontend server (`--role frontend`'s buildServer) on the Redis
 * of REDIS_URL, in a namespace of its own. The frontend must answer exactly as the single-process server does
 * (greedy text), stream tokens from whichever worker serves a request, and spread a burst over the workers.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

import { redisUrlFromEnv } from '@tessera/cluster';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type ClusterScheduler, startClusterScheduler } from '../src/cluster/roles.js';
import { buildServer } from '../src/server.js';
import { type Fixture, makeFixture, parseSse, serve } from './support/fixture.js';

const url = redisUrlFromEnv();
const prefix = `punica-test-${randomBytes(4).toString('hex')}`;
let fx: Fixture;
let scheduler: ClusterScheduler;
let frontend: FastifyInstance;
let single: FastifyInstance;
const workers: { id: string; child: ChildProcess; out: string; exited: Promise<number | null> }[] = [];
const placements: { id: string; hostId: string }[] = [];

function startWorker(id: string): (typeof workers)[number] {
  const main = fileURLToPath(new URL('../src/main.ts', import.meta.url));
  const child = spawn(
    process.execPath,
    ['--conditions=@tessera/source', '--import', 'tsx', main, '--role', 'worker', '--host-id', id, '--model', fx.modelDir, '--adapters', fx.adaptersDir,
      '--redis', url, '--cluster-prefix', prefix, '--threads', '1', '--max-batch', '4'],
    { cwd: fileURLToPath(new URL('..', import.meta.url)), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const w = { id, child, out: '', exited: new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code))) };
  child.stdout!.on('data', (d: Buffer) => (w.out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (w.out += d.toString()));
  return w;
}

beforeAll(async () => {
  fx = makeFixture();
  scheduler = await startClusterScheduler({ redis: { url, prefix }, maxBatch: 4 });
  scheduler.service.scheduler.on('placed', (e) => placements.push({ id: e.id, hostId: e.hostId }));
  workers.push(startWorker('w1'), startWorker('w2'));
  frontend = await buildServer({ modelDir: fx.modelDir, adaptersDir: fx.adaptersDir, cluster: { redis: { url, prefix } } });
  single = await serve(fx, { threads: 1 });
  // Both workers are placeable once their first load report arrived.
  const deadline = Date.now() + 60_000;
  while (scheduler.service.scheduler.snapshot().hosts.filter((h) => h.freeKvPages !== null).length < 2) {
    if (Date.now() > deadline) throw new Error(`the workers did not report within 60 s:\n${workers.map((w) => `${w.id}: ${w.out}`).join('\n')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}, 90_000);

afterAll(async () => {
  await frontend?.close();
  await single?.close();
  for (const w of workers) w.child.kill('SIGTERM');
  const codes = await Promise.all(workers.map((w) => w.exited));
  await scheduler?.close();
  fx?.cleanup();
  // Workers stop cleanly on SIGTERM (their placements finished; the engine loop ends between two steps).
  expect(codes).toEqual(workers.map(() => 0));
}, 60_000);

async function complete(app: FastifyInstance, body: Record<string, unknown>) {
  const res = await app.inject({ method: 'POST', url: '/v1/completions', payload: body });
  return { status: res.statusCode, body: res.json() as { choices: { text: string; finish_reason: string }[]; usage: { completion_tokens: number } } };
}

describe('cluster mode (frontend + scheduler + 2 worker processes on Redis)', () => {
  it('answers a completion exactly as the single-process server does, on every adapter and the base model', async () => {
    for (const model of ['tiny-llama', ...fx.adapterNames]) {
      const body = { model, prompt: `cluster check for ${model}`, max_tokens: 12, temperature: 0, ignore_eos: true };
      const [a, b] = await Promise.all([complete(frontend, body), complete(single, body)]);
      expect(a.status).toBe(200);
      expect(a.body.choices[0]!.text).toBe(b.body.choices[0]!.text);
      expect(a.body.usage.completion_tokens).toBe(12);
    }
  });

  it('streams tokens (SSE) from whichever worker serves the request, ending in [DONE]', async () => {
    const body = { model: fx.adapterNames[1], prompt: 'stream me', max_tokens: 10, temperature: 0, ignore_eos: true };
    const res = await frontend.inject({ method: 'POST', url: '/v1/completions', payload: { ...body, stream: true, stream_options: { include_usage: true } } });
    expect(res.statusCode).toBe(200);
    const frames = parseSse(res.body);
    expect(frames.at(-1)).toBe('[DONE]');
    const text = frames
      .filter((f): f is { choices: { text: string }[] } => typeof f === 'object' && f !== null && 'choices' in f && (f as { choices: unknown[] }).choices.length > 0)
      .map((f) => f.choices[0]!.text)
      .join('');
    expect(text).toBe((await complete(single, body)).body.choices[0]!.text);
  });

  it('a burst larger than one worker’s batch cap is spread by the scheduler: the highest id fills first', async () => {
    placements.length = 0;
    const bodies = Array.from({ length: 8 }, (_, i) => ({ model: fx.adapterNames[i % 2], prompt: `burst ${i}`, max_tokens: 24, temperature: 0, ignore_eos: true }));
    const results = await Promise.all(bodies.map((b) => complete(frontend, b)));
    for (const r of results) expect(r.status).toBe(200);
    const byHost = new Map<string, number>();
    for (const p of placements) byHost.set(p.hostId, (byHost.get(p.hostId) ?? 0) + 1);
    expect(placements[0]!.hostId).toBe('w2');
    expect(byHost.get('w1')).toBeGreaterThan(0);
    expect(byHost.get('w2')).toBeGreaterThan(0);
  });

  it('serves /v1/models from the adapter directory, /health as a cluster, and refuses runtime adapter loading', async () => {
    const models = (await frontend.inject({ method: 'GET', url: '/v1/models' })).json() as { data: { id: string; residency: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['tiny-llama', ...fx.adapterNames]);
    const health = await frontend.inject({ method: 'GET', url: '/health' });
    expect(health.statusCode).toBe(200);
    expect(health.json()).toMatchObject({ status: 'ok', device: 'cluster' });
    const unknown = await complete(frontend, { model: 'nope', prompt: 'x', max_tokens: 2 });
    expect(unknown.status).toBe(404);
    const load = await frontend.inject({ method: 'POST', url: '/v1/load_lora_adapter', payload: { lora_name: 'x', lora_path: '/tmp/x' } });
    expect(load.statusCode).toBe(404);
  });
});
