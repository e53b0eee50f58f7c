/**
 * cluster-real: the Punica server on this machine, once as one process and once as a cluster on Redis (a
 * scheduler, three worker processes and a frontend), serving the same requests over HTTP. Reported: tokens/s of
 * each, their ratio, how the scheduler spread the requests over the workers, and whether the greedy outputs
 * agree (they must: the cluster changes where a request runs, not what it computes).
 *
 * The three workers share this machine's cores with each other, with the frontend and with the scheduler, so the
 * ratio measures the cluster's overhead (BullMQ jobs, Redis streams, one engine per process at one thread each)
 * against one engine using every core; it is not a scaling figure. On a machine with one accelerator per worker
 * the workers would not share compute.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { connectClusterClient, redisUrlFromEnv, startSchedulerService } from '@tessera/cluster';
import { readHfConfig } from '@tessera/engine';
import { buildServer } from '@tessera/punica';
import { assignAdapters, popularity } from '@tessera/sgmv-kernel/bench';

import { rng } from '../data.js';
import { BENCH_MODELS_DIR, miniModelDir } from '../models.js';
import type { Row, TableSpec } from '../table.js';
import type { BenchContext } from '../types.js';
import { adapterDirs, paperMatchedRank } from './punica-textgen.js';

export interface ClusterRealOptions {
  workers?: number;
  requests?: number;
  outputTokens?: number;
  adapters?: number;
}

interface Served {
  ms: number;
  completionTokens: number;
  texts: Map<string, string>;
}

const PUNICA_APP = resolve(fileURLToPath(new URL('../../../apps/punica/', import.meta.url)));

/** Fires every request at once (non-streaming completions) and waits for all of them. */
async function fire(address: string, requests: { id: string; model: string; prompt: number[] }[], maxTokens: number): Promise<Served> {
  const texts = new Map<string, string>();
  let completionTokens = 0;
  const t0 = performance.now();
  await Promise.all(
    requests.map(async (r) => {
      const res = await fetch(`${address}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: r.model, prompt: r.prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true }),
      });
      const body = (await res.json()) as { choices?: { text: string }[]; usage?: { completion_tokens: number }; error?: { message: string } };
      if (!res.ok || !body.choices) throw new Error(`cluster bench: ${r.id} failed with ${res.status}: ${body.error?.message ?? JSON.stringify(body)}`);
      texts.set(r.id, body.choices[0]!.text);
      completionTokens += body.usage!.completion_tokens;
    }),
  );
  return { ms: performance.now() - t0, completionTokens, texts };
}

function startWorker(id: string, args: string[], log: (line: string) => void): { child: ChildProcess; exited: Promise<number | null> } {
  const child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', 'src/main.ts', '--role', 'worker', '--host-id', id, ...args], {
    cwd: PUNICA_APP,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, TESSERA_THREADS: '1' },
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  child.stderr!.on('data', (d: Buffer) => log(`[${id}] ${d.toString().trimEnd()}`));
  return { child, exited };
}

export async function clusterRealFigure(ctx: BenchContext, options: ClusterRealOptions = {}) {
  const workers = options.workers ?? 3;
  const n = options.requests ?? (ctx.quick ? 24 : 96);
  const outputTokens = options.outputTokens ?? (ctx.quick ? 16 : 48);
  const adapterCount = options.adapters ?? 16;
  const rank = paperMatchedRank();
  const modelDir = miniModelDir('decoder', ctx.log);
  const config = readHfConfig(modelDir);
  if (config.family !== 'decoder') throw new Error(`cluster bench: ${modelDir} is not a decoder`);
  // A directory of exactly these adapters: the workers register every subdirectory of --adapters.
  const adaptersRoot = join(BENCH_MODELS_DIR, `decoder-mini-seed0-cluster-lora-r${rank}`);
  const dirs = adapterDirs({ config }, adapterCount, rank, ctx, adaptersRoot);
  const adapters = [...dirs].map(([name, path]) => ({ name, path }));

  // One seeded request set: zipf-1.5 adapter popularity (Fig. 13's), prompts of 16–48 token ids.
  const next = rng(1313);
  // (Zipf's models beyond adapterCount wrap around onto the first ones.)
  const assignment = assignAdapters(popularity('zipf', n), 1313);
  const requests = Array.from({ length: n }, (_, i) => {
    const len = 16 + Math.floor(next() * 33);
    return {
      id: `c${i}`,
      model: adapters[assignment[i]! % adapters.length]!.name,
      prompt: Array.from({ length: len }, () => 1 + Math.floor(next() * (config.vocabSize - 3))),
    };
  });

  // 1. The single-process server: one engine using every core.
  ctx.log(`cluster-real: single-process server, ${n} requests × ${outputTokens} tokens`);
  const single = await buildServer({ modelDir, adapters, maxBatch: 32, threads: ctx.threads });
  let solo: Served;
  try {
    const address = await single.listen({ host: '127.0.0.1', port: 0 });
    await fire(address, requests.slice(0, 4), 4); // warm-up: adapters resident, pages touched
    solo = await fire(address, requests, outputTokens);
  } finally {
    await single.close();
  }

  // 2. The cluster: scheduler (here), workers (processes), frontend (here) on one Redis, its own namespace.
  const url = redisUrlFromEnv();
  const prefix = `bench-${randomBytes(4).toString('hex')}`;
  ctx.log(`cluster-real: scheduler + ${workers} worker processes + frontend on ${url} (prefix ${prefix})`);
  const scheduler = await startSchedulerService({ url, prefix, maxBatch: 32 });
  const placedOn = new Map<string, number>();
  scheduler.scheduler.on('placed', (e) => placedOn.set(e.hostId, (placedOn.get(e.hostId) ?? 0) + 1));
  let migrations = 0;
  scheduler.scheduler.on('evicted', () => migrations++);
  const children: { child: ChildProcess; exited: Promise<number | null> }[] = [];
  let clustered: Served;
  const frontend = await buildServer({ modelDir, adapters, maxBatch: 32, cluster: { redis: { url, prefix } } });
  try {
    const args = ['--model', modelDir, '--redis', url, '--cluster-prefix', prefix, '--max-batch', '32', '--threads', '1', '--log-level', 'warn'];
    for (let w = 0; w < workers; w++) children.push(startWorker(`worker-${w}`, [...args, '--adapters', adaptersRoot], ctx.log));
    const client = await connectClusterClient({ url, prefix });
    const deadline = performance.now() + 120_000;
    while ((await client.hosts()).length < workers) {
      if (performance.now() > deadline) throw new Error(`cluster bench: only ${(await client.hosts()).length} of ${workers} workers reported within 120 s`);
      if ((await Promise.race([...children.map((c) => c.exited), new Promise((r) => setTimeout(() => r('wait'), 200))])) !== 'wait') {
        throw new Error('cluster bench: a worker process exited during start-up (see its stderr above)');
      }
    }
    await client.close();
    const address = await frontend.listen({ host: '127.0.0.1', port: 0 });
    await fire(address, requests.slice(0, 4), 4);
    placedOn.clear();
    clustered = await fire(address, requests, outputTokens);
  } finally {
    await frontend.close();
    for (const c of children) c.child.kill('SIGTERM');
    await Promise.all(children.map((c) => Promise.race([c.exited, new Promise((r) => setTimeout(r, 10_000))])));
    for (const c of children) if (c.child.exitCode === null) c.child.kill('SIGKILL');
    await scheduler.close();
  }

  let mismatches = 0;
  for (const [id, text] of solo.texts) if (clustered.texts.get(id) !== text) mismatches++;
  const tps = (s: Served) => s.completionTokens / (s.ms / 1000);
  const spread = [...placedOn].sort().map(([h, k]) => `${h}:${k}`).join(' ');
  const rows: Row[] = [
    { setup: 'single process (1 engine, all cores)', requests: n, tokens: solo.completionTokens, seconds: solo.ms / 1000, tok_per_s: tps(solo), placements: '-' },
    {
      setup: `cluster (${workers} worker processes, 1 thread each)`,
      requests: n,
      tokens: clustered.completionTokens,
      seconds: clustered.ms / 1000,
      tok_per_s: tps(clustered),
      placements: spread,
    },
  ];
  const table: TableSpec = {
    columns: [
      { key: 'setup', header: 'setup' },
      { key: 'requests', header: 'requests' },
      { key: 'tokens', header: 'tokens' },
      { key: 'seconds', header: 's' },
      { key: 'tok_per_s', header: 'tok/s' },
      { key: 'placements', header: 'placements per worker' },
    ],
    rows,
    notes: [
      `the same ${n} greedy requests (zipf-1.5 over ${adapterCount} rank-${rank} adapters, ${outputTokens} tokens each) over HTTP, all sent at once`,
      `greedy outputs that differ between the two setups: ${mismatches} (must be 0); migrations in the cluster run: ${migrations}`,
      `${workers} workers share this machine's cores: the ratio is the cluster's overhead on one machine, not scaling`,
    ],
  };
  return {
    rows,
    table,
    ratios: { cluster_3_workers_vs_single_process: tps(clustered) / tps(solo), cluster_output_mismatches: mismatches },
    params: { workers, requests: n, outputTokens, adapters: adapterCount, rank, redis: url },
  };
}
