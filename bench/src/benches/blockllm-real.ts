/**
 * blockllm-real: the real miniature of design note §8.2. The BlockLLM server on this machine with two devices
 * (worker threads, each with its own byte budget), serving the demo's applications — a foundation, two PEFT
 * LoRAs, a bottleneck adapter, BitFit, prefix-tuning and a full fine-tune — once with BlockLLM's provisioning
 * (shared blocks placed by the serving core's locality policy, per-block batching across applications) and once
 * with per-model provisioning (PM: each application's whole model deployed on its own, no sharing, models swapped
 * in and out of the devices as requests for them come), at the same memory: each device's budget is the one the
 * BlockLLM server chose (1.5 × its served blocks / 2). Both serve the same seeded open-loop arrival trace over HTTP
 * (greedy, non-streaming completions); reported: tokens/s over the trace's makespan, p50/p95 end-to-end latency,
 * the bytes loaded onto devices, swaps, and the hidden-state bytes that crossed devices. Greedy outputs must agree
 * (the provisioning changes where blocks run, not what they compute).
 *
 * Both servers run as child processes from apps/blockllm's sources, one after the other, on the same cores; the
 * figures are indicative on a small shared machine (the model is tiny: per-call overheads weigh more than FLOPs).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { rng } from '../data.js';
import { BENCH_MODELS_DIR } from '../models.js';
import { percentile } from '../stats.js';
import type { Row } from '../table.js';
import type { BenchContext } from '../types.js';

const BLOCKLLM_APP = resolve(fileURLToPath(new URL('../../../apps/blockllm/', import.meta.url)));

export interface BlockllmRealOptions {
  quick: boolean;
  /** Applications in the trace (the first N of the demo's seven). Default 7. */
  apps?: number;
  /** Requests in the trace. Default 42 quick, 140 full. */
  requests?: number;
  /** Mean arrival rate (requests/s, Poisson). Default 60. */
  rate?: number;
  /** Output tokens per request, uniform in [min, max]. Default [8, 24] quick, [16, 48] full. */
  output?: [number, number];
  /** Where the demo is generated (and its zoo cached). Default <tmp>/tessera-bench-models/blockllm-demo. */
  demoDir?: string;
  seed?: number;
}

interface TraceRequest {
  at: number;
  app: string;
  prompt: number[];
  maxTokens: number;
}

interface RunResult {
  config: 'PM' | 'BlockLLM';
  latenciesMs: number[];
  tokens: number;
  makespanMs: number;
  texts: string[];
  deviceBytes: number;
  placement: { devices: { id: string; budgetBytes: number; residentBytes: number }[] };
  metrics: string;
}

interface Server {
  url: string;
  child: ChildProcess;
  exited: Promise<number | null>;
}

/** Starts the BlockLLM server from its sources; resolves once it prints its address. */
async function startServer(args: string[], log: (line: string) => void): Promise<Server> {
  const child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', 'src/main.ts', '--port', '0', '--log-level', 'warn', ...args], {
    cwd: BLOCKLLM_APP,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, NO_COLOR: '1' },
  });
  const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const url = await new Promise<string>((ok, fail) => {
    let out = '';
    const timer = setTimeout(() => fail(new Error(`blockllm-real: the server did not start in 180 s\n${stderr}`)), 180_000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /serving .* on (http:\/\/[\d.]+:\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        ok(m[1]!);
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      fail(new Error(`blockllm-real: the server exited (${code}) before it was ready\n${stderr}`));
    });
  });
  log(`blockllm-real: server up on ${url} (${args.join(' ')})`);
  return { url, child, exited };
}

async function stopServer(s: Server): Promise<void> {
  s.child.kill('SIGINT');
  const timer = setTimeout(() => s.child.kill('SIGKILL'), 20_000);
  await s.exited;
  clearTimeout(timer);
}

/** The trace, open loop: each request is sent at its arrival time; latency is from arrival to the full answer. */
async function runTrace(url: string, trace: readonly TraceRequest[]): Promise<{ latenciesMs: number[]; tokens: number; makespanMs: number; texts: string[] }> {
  const t0 = performance.now();
  const latenciesMs = new Array<number>(trace.length);
  const texts = new Array<string>(trace.length);
  let tokens = 0;
  await Promise.all(
    trace.map(async (r, i) => {
      const wait = r.at - (performance.now() - t0);
      if (wait > 0) await new Promise((done) => setTimeout(done, wait));
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: r.app, prompt: r.prompt, max_tokens: r.maxTokens, temperature: 0, ignore_eos: true }),
      });
      const body = (await res.json()) as { choices?: { text: string }[]; usage?: { completion_tokens: number }; error?: { message: string } };
      if (!res.ok || !body.choices) throw new Error(`blockllm-real: request ${i} (${r.app}) failed with ${res.status}: ${body.error?.message ?? JSON.stringify(body)}`);
      latenciesMs[i] = performance.now() - t0 - r.at;
      texts[i] = body.choices[0]!.text;
      tokens += body.usage!.completion_tokens;
    }),
  );
  return { latenciesMs, tokens, makespanMs: performance.now() - t0, texts };
}

function metricValue(text: string, series: string): number {
  const line = text.split('\n').find((l) => !l.startsWith('#') && l.slice(0, l.lastIndexOf(' ')) === series);
  return line === undefined ? Number.NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
}

export async function runBlockllmRealMiniature(
  ctx: BenchContext,
  opts: BlockllmRealOptions,
): Promise<{ rows: Row[]; ratios: { real_throughput_vs_pm: number; real_p95_vs_pm: number }; notes: string[] }> {
  const demoDir = opts.demoDir ?? join(BENCH_MODELS_DIR, 'blockllm-demo');
  const requests = opts.requests ?? (opts.quick ? 42 : 140);
  const rate = opts.rate ?? 60;
  const [outMin, outMax] = opts.output ?? (opts.quick ? [8, 24] : [16, 48]);
  const common = ['--demo-dir', demoDir, '--devices', '2', '--kv-pages', '128', '--max-batch', '64'];

  const run = async (config: RunResult['config'], args: string[], trace: (apps: string[]) => TraceRequest[]): Promise<RunResult & { trace: TraceRequest[] }> => {
    const server = await startServer([...common, ...args], ctx.log);
    try {
      const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { id: string }[] };
      const t = trace(models.data.map((m) => m.id));
      // One warm-up request per application (first-use costs, JIT), then the trace.
      for (const app of new Set(t.map((r) => r.app))) await runTrace(server.url, [{ at: 0, app, prompt: [5, 6, 7], maxTokens: 2 }]);
      ctx.log(`blockllm-real: ${config}: ${t.length} requests over ${new Set(t.map((r) => r.app)).size} applications`);
      const out = await runTrace(server.url, t);
      const placement = (await (await fetch(`${server.url}/v1/placement`)).json()) as RunResult['placement'];
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      return { config, ...out, deviceBytes: placement.devices[0]!.budgetBytes, placement, metrics, trace: t };
    } finally {
      await stopServer(server);
    }
  };

  // One seeded trace: applications uniform over the first N, Poisson arrivals, prompts of 4–24 token ids.
  let fixed: TraceRequest[] | null = null;
  const makeTrace = (apps: string[]): TraceRequest[] => {
    if (fixed) return fixed;
    const n = Math.min(opts.apps ?? apps.length, apps.length);
    const pick = apps.slice(0, n);
    const next = rng(opts.seed ?? 20_251_127);
    let at = 0;
    fixed = Array.from({ length: requests }, () => {
      at += (-Math.log(1 - next()) * 1000) / rate;
      const len = 4 + Math.floor(next() * 21);
      return {
        at,
        app: pick[Math.floor(next() * pick.length)]!,
        prompt: Array.from({ length: len }, () => 3 + Math.floor(next() * 250)),
        maxTokens: outMin + Math.floor(next() * (outMax - outMin + 1)),
      };
    });
    return fixed;
  };

  // BlockLLM first: its device budget is the memory both get.
  const blocks = await run('BlockLLM', [], makeTrace);
  const pm = await run('PM', ['--provisioning', 'per-model', '--device-bytes', String(blocks.deviceBytes)], makeTrace);

  const rowOf = (r: RunResult & { trace: TraceRequest[] }): Row => ({
    figure: 'real',
    config: r.config,
    apps: new Set(r.trace.map((t) => t.app)).size,
    requests: r.trace.length,
    devices: r.placement.devices.length,
    device_mb: r.deviceBytes / 2 ** 20,
    resident_mb: r.placement.devices.reduce((n, d) => n + d.residentBytes, 0) / 2 ** 20,
    tokens: r.tokens,
    makespan_s: r.makespanMs / 1000,
    tokens_per_s: r.tokens / (r.makespanMs / 1000),
    p50_ms: percentile(r.latenciesMs, 50),
    p95_ms: percentile(r.latenciesMs, 95),
    loaded_mb: metricValue(r.metrics, 'tessera_blockllm_loaded_bytes_total') / 2 ** 20,
    evictions: metricValue(r.metrics, 'tessera_blockllm_evictions_total'),
    cross_device_mb: metricValue(r.metrics, 'tessera_blockllm_cross_device_bytes_total') / 2 ** 20,
    comm_share: metricValue(r.metrics, 'tessera_blockllm_communication_share'),
    shared_batches: metricValue(r.metrics, 'tessera_blockllm_shared_block_batches_total'),
  });
  const rows = [rowOf(pm), rowOf(blocks)];
  const same = pm.texts.every((t, i) => t === blocks.texts[i]);
  const ratios = {
    real_throughput_vs_pm: (rows[1]!.tokens_per_s as number) / (rows[0]!.tokens_per_s as number),
    real_p95_vs_pm: (rows[1]!.p95_ms as number) / (rows[0]!.p95_ms as number),
  };
  const notes = [
    `real miniature: ${rows[1]!.apps} applications of the demo zoo on 2 devices (worker threads, one kernel thread each), ${requests} requests at ${rate}/s (Poisson), outputs of ${outMin}–${outMax} tokens, greedy`,
    `equal memory: ${(blocks.deviceBytes / 2 ** 20).toFixed(2)} MiB of block parameters per device for both (BlockLLM's default budget); KV caches are per block instance and outside it`,
    `real_throughput_vs_pm = ${ratios.real_throughput_vs_pm.toFixed(2)} (target ≥ 1.3); real_p95_vs_pm = ${ratios.real_p95_vs_pm.toFixed(2)} (lower is better)`,
    `greedy outputs ${same ? 'identical' : 'DIFFER'} between PM and BlockLLM`,
    'indicative: a tiny model on a small machine shared with other work, both servers run one after the other on the same cores',
  ];
  if (!same) throw new Error('blockllm-real: PM and BlockLLM gave different greedy outputs for the same trace');
  return { rows, ratios, notes };
}
