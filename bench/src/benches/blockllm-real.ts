/**
 * blockllm-real: the real miniature of design note §8.2. The BlockLLM server on this machine with two devices
 * (worker threads, each with its own byte budget), serving the demo's applications — a foundation, two PEFT
 * LoRAs, a bottleneck adapter, BitFit, prefix-tuning and a full fine-tune — once with BlockLLM's provisioning
 * (shared blocks placed by the serving core's locality policy, per-block batching across applications) and once
 * with per-model provisioning (PM: each application's whole model deployed on its own, no sharing, models swapped
 * in and out of the devices as requests for them come), at the same memory: each device holds 1.5 × the largest
 * application's model, so PM keeps one model per device. Both serve the same seeded open-loop arrival trace over HTTP
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
  /** Requests in the trace. Default 160 quick, 480 full. */
  requests?: number;
  /** Mean arrival rate (requests/s, Poisson). Default 100: about what BlockLLM sustains here, more than PM does. */
  rate?: number;
  /** Output tokens per request, uniform in [min, max]. Default [8, 24] quick, [16, 48] full. */
  output?: [number, number];
  /** Where the demo is generated (and its zoo cached). Default <tmp>/tessera-bench-models/blockllm-demo-<size>. */
  demoDir?: string;
  /**
   * The demo foundation: 'small' (hidden 256, 4 layers; default: compute outweighs per-call overheads), 'medium'
   * (hidden 768, 104 MB a model: the weights stream from memory) or 'tiny'.
   */
  demoSize?: 'tiny' | 'small' | 'medium';
  seed?: number;
  /** Block parameter bytes per device, for both servers. Default 1.5 × the largest application's model. */
  deviceBytes?: number;
  /** Times the trace runs on each server (alternating); the median is reported. Default 3 quick, 5 full. */
  rounds?: number;
  /**
   * A third server: BlockLLM with speculation on surrogates (`--speculate`, threshold 0.95, top 10 % of instances),
   * compared with BlockLLM without it. Its greedy outputs may differ (an accepted prediction is approximate), so they
   * are counted, not required equal. Default false.
   */
  speculation?: boolean;
}

/** One side's median run, with the trace it ran and how many rounds it took. */
type SideResult = RunResult & { trace: TraceRequest[]; rounds: number };

interface TraceRequest {
  at: number;
  app: string;
  prompt: number[];
  maxTokens: number;
}

interface RunResult {
  config: 'PM' | 'BlockLLM' | 'BlockLLM+spec';
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
  // TESSERA_BENCH_NODE_ARGS: extra Node flags for the servers (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile them under the trace).
  const nodeArgs = (process.env.TESSERA_BENCH_NODE_ARGS ?? '').split(' ').filter(Boolean);
  const child = spawn(process.execPath, [...nodeArgs, '--conditions=@tessera/source', '--import', 'tsx', 'src/main.ts', '--port', '0', '--log-level', 'warn', ...args], {
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
): Promise<{ rows: Row[]; ratios: { real_throughput_vs_pm: number; real_p95_vs_pm: number; real_spec_throughput_vs_blockllm?: number; real_spec_p95_vs_blockllm?: number }; notes: string[] }> {
  const demoSize = opts.demoSize ?? 'small';
  const demoDir = opts.demoDir ?? join(BENCH_MODELS_DIR, `blockllm-demo-${demoSize}`);
  const requests = opts.requests ?? (opts.quick ? 160 : 480);
  const rate = opts.rate ?? 100;
  const [outMin, outMax] = opts.output ?? (opts.quick ? [8, 24] : [16, 48]);
  // Scale-out (BlockLLM only: per-model provisioning has no shared instances) once 0.8 × 16 sequences route through one instance.
  const common = ['--demo-dir', demoDir, '--demo-size', demoSize, '--devices', '2', '--kv-pages', '128', '--max-batch', '64', '--scale-out-queue', '16'];

  // One seeded trace: applications uniform over the first N, Poisson arrivals, prompts of 4–24 token ids.
  const makeTrace = (apps: string[]): TraceRequest[] => {
    const n = Math.min(opts.apps ?? apps.length, apps.length);
    const pick = apps.slice(0, n);
    const next = rng(opts.seed ?? 20_251_127);
    let at = 0;
    return Array.from({ length: requests }, () => {
      at += (-Math.log(1 - next()) * 1000) / rate;
      const len = 4 + Math.floor(next() * 21);
      return {
        at,
        app: pick[Math.floor(next() * pick.length)]!,
        prompt: Array.from({ length: len }, () => 3 + Math.floor(next() * 250)),
        maxTokens: outMin + Math.floor(next() * (outMax - outMin + 1)),
      };
    });
  };

  // Equal memory: every device of both servers gets 1.5 × the largest application's model (its chain's block bytes),
  // so per-model provisioning holds one model per device and swaps, as in the paper's setting (more applications
  // than whole models fit), while BlockLLM's zoo, stored once, fits with room for scale-out. A first BlockLLM start
  // reads the zoo's sizes. Then both servers stay up and the trace runs on each in turn, alternating which goes
  // first, so drift in the machine's load falls on both; the median round is reported.
  const rounds = opts.rounds ?? (opts.quick ? 3 : 5);
  const servers: Server[] = [];
  try {
    let deviceBytes = opts.deviceBytes ?? 0;
    if (!deviceBytes) {
      const probe = await startServer(common, ctx.log);
      try {
        const zoo = (await (await fetch(`${probe.url}/v1/zoo`)).json()) as { apps: { id: string; blocks: string[] }[]; blocks: { id: string; bytes: number }[] };
        const bytes = new Map(zoo.blocks.map((b) => [b.id, b.bytes]));
        const largest = Math.max(...zoo.apps.map((a) => a.blocks.reduce((n, b) => n + bytes.get(b)!, 0)));
        deviceBytes = Math.ceil(1.5 * largest);
      } finally {
        await stopServer(probe);
      }
    }
    const blockServer = await startServer([...common, '--device-bytes', String(deviceBytes)], ctx.log);
    servers.push(blockServer);
    const pmServer = await startServer([...common, '--provisioning', 'per-model', '--device-bytes', String(deviceBytes)], ctx.log);
    servers.push(pmServer);
    const specServer = opts.speculation ? await startServer([...common, '--device-bytes', String(deviceBytes), '--speculate'], ctx.log) : null;
    if (specServer) servers.push(specServer);
    const models = (await (await fetch(`${blockServer.url}/v1/models`)).json()) as { data: { id: string }[] };
    const trace = makeTrace(models.data.map((m) => m.id));
    const sides: { config: RunResult['config']; server: Server; runs: Awaited<ReturnType<typeof runTrace>>[] }[] = [
      { config: 'PM', server: pmServer, runs: [] },
      { config: 'BlockLLM', server: blockServer, runs: [] },
      ...(specServer ? [{ config: 'BlockLLM+spec' as const, server: specServer, runs: [] }] : []),
    ];
    // One warm-up request per application on each (first-use costs, JIT).
    for (const side of sides) for (const app of new Set(trace.map((r) => r.app))) await runTrace(side.server.url, [{ at: 0, app, prompt: [5, 6, 7], maxTokens: 2 }]);
    for (let round = 0; round < rounds; round++) {
      // Each round starts with another side, so drift in the machine's load falls on all of them.
      for (const side of [...sides.slice(round % sides.length), ...sides.slice(0, round % sides.length)]) {
        ctx.log(`blockllm-real: round ${round + 1}/${rounds}, ${side.config}: ${trace.length} requests over ${new Set(trace.map((r) => r.app)).size} applications`);
        side.runs.push(await runTrace(side.server.url, trace));
      }
    }
    const results = await Promise.all(
      sides.map(async (side): Promise<SideResult> => {
        // The median round by tokens/s (every round serves the same tokens).
        const sorted = [...side.runs].sort((a, b) => a.makespanMs - b.makespanMs);
        const mid = sorted[sorted.length >> 1]!;
        const placement = (await (await fetch(`${side.server.url}/v1/placement`)).json()) as RunResult['placement'];
        const metrics = await (await fetch(`${side.server.url}/metrics`)).text();
        return { config: side.config, ...mid, deviceBytes, placement, metrics, trace, rounds: side.runs.length };
      }),
    );
    return finish(results[0]!, results[1]!, results[2] ?? null);
  } finally {
    await Promise.allSettled(servers.map(stopServer));
  }

  function finish(pm: SideResult, blocks: SideResult, spec: SideResult | null) {
  const rowOf = (r: SideResult): Row => ({
    figure: 'real',
    config: r.config,
    rounds: r.rounds,
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
    scale_outs: metricValue(r.metrics, 'tessera_blockllm_scale_outs_total'),
  });
  const rows = [rowOf(pm), rowOf(blocks), ...(spec ? [rowOf(spec)] : [])];
  const same = pm.texts.every((t, i) => t === blocks.texts[i]);
  const ratios: { real_throughput_vs_pm: number; real_p95_vs_pm: number; real_spec_throughput_vs_blockllm?: number; real_spec_p95_vs_blockllm?: number } = {
    real_throughput_vs_pm: (rows[1]!.tokens_per_s as number) / (rows[0]!.tokens_per_s as number),
    real_p95_vs_pm: (rows[1]!.p95_ms as number) / (rows[0]!.p95_ms as number),
  };
  const specNotes: string[] = [];
  if (spec) {
    const row = rows[2]!;
    ratios.real_spec_throughput_vs_blockllm = (row.tokens_per_s as number) / (rows[1]!.tokens_per_s as number);
    ratios.real_spec_p95_vs_blockllm = (row.p95_ms as number) / (rows[1]!.p95_ms as number);
    const outcome = (o: string) => metricValue(spec.metrics, `tessera_blockllm_speculations_total{outcome="${o}"}`);
    const agree = spec.texts.filter((t, i) => t === blocks.texts[i]).length;
    row.speculations = outcome('accepted') + outcome('rolled-back') + outcome('superseded');
    row.spec_accepted = outcome('accepted');
    specNotes.push(
      `speculation (BlockLLM+spec: --speculate, cosine 0.95, top 10 % of instances): ${row.speculations} speculations over all rounds, ${row.spec_accepted} accepted, ${outcome('rolled-back')} rolled back; ` +
        `throughput ${ratios.real_spec_throughput_vs_blockllm.toFixed(2)}× and p95 ${ratios.real_spec_p95_vs_blockllm.toFixed(2)}× BlockLLM without it; ${agree} of ${spec.texts.length} greedy outputs equal to BlockLLM's (an accepted prediction is approximate)`,
    );
  }
  const notes = [
    `real miniature: ${rows[1]!.apps} applications of the ${demoSize} demo zoo on 2 devices (worker threads, one kernel thread each), ${requests} requests at ${rate}/s (Poisson), outputs of ${outMin}–${outMax} tokens, greedy`,
    `median of ${blocks.rounds} rounds per side, the two servers taking turns on one trace`,
    `equal memory: ${(blocks.deviceBytes / 2 ** 20).toFixed(2)} MiB of block parameters per device for both (1.5 × the largest model unless set: PM holds one model per device); KV caches are per block instance and outside it`,
    `real_throughput_vs_pm = ${ratios.real_throughput_vs_pm.toFixed(2)} (target ≥ 1.3); real_p95_vs_pm = ${ratios.real_p95_vs_pm.toFixed(2)} (lower is better)`,
    `greedy outputs ${same ? 'identical' : 'DIFFER'} between PM and BlockLLM`,
    'indicative: a tiny model on a small machine shared with other work, both servers run one after the other on the same cores',
    ...specNotes,
  ];
  if (!same) throw new Error('blockllm-real: PM and BlockLLM gave different greedy outputs for the same trace');
  return { rows, ratios, notes };
  }
}
