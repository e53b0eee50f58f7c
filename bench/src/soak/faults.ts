/**
 * The fault cases. Each submits requests whose expected output is known (greedy, `ignore_eos`, references taken
 * from the same system before the fault), injects the fault mid-generation, and checks that every request
 * completes exactly once: its token indices 0, 1, …, n−1 each once (direct cluster clients see the indices), its
 * streamed chunks exactly `max_tokens` (HTTP clients), its tokens or text equal to the reference, and the
 * scheduler finishing each request id once.
 *
 *   worker-killed   Punica cluster (a scheduler, two `--role worker` processes and a frontend on a private
 *                   redis-server): SIGKILL the worker holding the most requests while they stream.
 *   redis-restarted the same cluster: stop the private Redis (SIGTERM, append-only file flushed) mid-generation,
 *                   submit more requests while it is away, start it again on the same port and directory.
 *   punica-budget   a single-process Punica server with a 1 MiB adapter budget (two large adapters fit only one at
 *                   a time; a third, larger than the whole budget, is loaded at run time) and a 1 MiB KV cache,
 *                   hit by a burst far beyond both: requests queue, preempt and complete, or are refused with a
 *                   clear status; afterwards the server serves every registered adapter.
 *   pets-budget     a PetS server whose device budget is filled with loaded tasks, plus one registered task that
 *                   does not fit: a concurrent burst over all of them gets 200s and clear 507s; nothing registered
 *                   changes.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type ClientStream, connectClusterClient, type GenerateRequest, type RedisClusterClient, type SchedulerService, startSchedulerService } from '@tessera/cluster';
import { buildServer } from '@tessera/punica';

import { rng } from '../data.js';
import { BUDGET_ADAPTER_MIB, PETS_TASKS, PUNICA_MODEL_NAME, type SoakFixtures } from './fixtures.js';
import { describe, getJson, metricSum, metrics, postJson } from './http.js';
import { classifyProblem } from './load.js';
import { freePort, NodeProcess, PETS_APP, PrivateRedis, PUNICA_APP, sleep, startServer, waitFor } from './procs.js';
import { type PunicaOutcome, type PunicaRequestSpec, runPunicaRequest } from './punica-client.js';

type FrontendServer = Awaited<ReturnType<typeof buildServer>>;

export type FaultName = 'worker-killed' | 'redis-restarted' | 'punica-budget' | 'pets-budget';

export interface FaultResult {
  fault: FaultName;
  /** Requests submitted (references and after-checks not counted). */
  requests: number;
  /** Completed exactly once with exactly the expected tokens. */
  exact: number;
  /** Refused with a clear error status and body (expected only where capacity runs out). */
  refused: number;
  /** Never finished, or finished with tokens missing (an index gap, fewer chunks than asked). */
  lost: number;
  /** A token or a completion delivered twice (a repeated index, more chunks than asked, a request finished twice). */
  duplicated: number;
  /** The right count but other tokens than the reference. */
  wrong: number;
  /** Anything else that went wrong (an unexpected status, a server that stopped serving). */
  unexpected: number;
  /** Refused clearly, but with another status or code than the server's README documents for the case. */
  misreported: number;
  /** The fault really hit in-flight work, and the server served afterwards (case-specific; see `detail`). */
  faultHit: boolean;
  detail: string;
  problems: string[];
  passed: boolean;
  seconds: number;
}

interface Tally {
  exact: number;
  refused: number;
  lost: number;
  duplicated: number;
  wrong: number;
  unexpected: number;
  misreported: number;
  problems: string[];
}

function tally(): Tally {
  return { exact: 0, refused: 0, lost: 0, duplicated: 0, wrong: 0, unexpected: 0, misreported: 0, problems: [] };
}

function note(t: Tally, kind: Exclude<keyof Tally, 'problems' | 'exact'>, problem: string): void {
  t[kind]++;
  if (t.problems.length < 12) t.problems.push(`${kind}: ${problem}`);
}

function result(fault: FaultName, requests: number, t: Tally, faultHit: boolean, detail: string, t0: number): FaultResult {
  const passed = faultHit && t.lost === 0 && t.duplicated === 0 && t.wrong === 0 && t.unexpected === 0 && t.misreported === 0 && t.exact + t.refused === requests;
  return { fault, requests, ...t, faultHit, detail, passed, seconds: (performance.now() - t0) / 1000 };
}

// ─── requests with known answers ────────────────────────────────────────────────────────────────────────────

interface Planned {
  id: string;
  adapter: string | null;
  prompt: number[];
  maxTokens: number;
  via: 'client' | 'http';
}

interface Reference {
  tokens: number[];
  text: string;
}

function plan(tag: string, n: number, adapters: readonly string[], vocabSize: number, maxTokens: [number, number], seed: number): Planned[] {
  const rand = rng(seed);
  return Array.from({ length: n }, (_, i) => {
    const choice = Math.floor(rand() * (adapters.length + 1));
    return {
      id: `${tag}-${i}`,
      adapter: choice < adapters.length ? adapters[choice]! : null,
      prompt: Array.from({ length: 8 + Math.floor(rand() * 24) }, () => 1 + Math.floor(rand() * (vocabSize - 3))),
      maxTokens: maxTokens[0] + Math.floor(rand() * (maxTokens[1] - maxTokens[0] + 1)),
      via: i % 2 === 0 ? 'client' : 'http',
    };
  });
}

function generateRequest(p: Planned, id = p.id): GenerateRequest {
  return { id, adapter: p.adapter, prompt: p.prompt, maxTokens: p.maxTokens, sampling: { temperature: 0 }, stop: [], ignoreEos: true };
}

function httpSpec(p: Planned, stream: boolean, extra: Partial<PunicaRequestSpec> = {}): PunicaRequestSpec {
  return { endpoint: 'completions', model: p.adapter ?? PUNICA_MODEL_NAME, prompt: p.prompt, maxTokens: p.maxTokens, temperature: 0, stream, ...extra };
}

interface Collected {
  indices: number[];
  tokens: number[];
  finishes: number;
  finishReason: string | null;
  error: string | null;
}

/** Reads a cluster client stream to its end (or until `giveUp` resolves, when it is cancelled). */
async function collect(client: RedisClusterClient, stream: ClientStream, onToken: (n: number) => void, giveUp: Promise<void>): Promise<Collected> {
  const out: Collected = { indices: [], tokens: [], finishes: 0, finishReason: null, error: null };
  let stopped = false;
  const reading = (async () => {
    try {
      for await (const ev of stream) {
        if (ev.type === 'token') {
          out.indices.push(ev.index);
          out.tokens.push(ev.token);
          onToken(out.tokens.length);
        } else if (ev.type === 'finish') {
          out.finishes++;
          out.finishReason = ev.result.finishReason;
          return;
        } else {
          out.error = describe(ev.error);
          return;
        }
      }
      if (!stopped) out.error = 'the stream ended without a result';
    } catch (err) {
      out.error = describe(err);
    }
  })();
  await Promise.race([reading, giveUp.then(() => (stopped = true))]);
  if (stopped && out.finishes === 0 && out.error === null) {
    out.error = `no result before the deadline (${out.tokens.length} tokens)`;
    client.cancel(stream.id);
  }
  return out;
}

/** Classifies a direct client's stream against its reference. */
function judgeStream(t: Tally, p: Planned, c: Collected, want: number[]): void {
  const seen = new Set<number>();
  const repeated = c.indices.filter((i) => (seen.has(i) ? true : (seen.add(i), false)));
  if (repeated.length > 0 || c.finishes > 1 || c.tokens.length > want.length) {
    note(t, 'duplicated', `${p.id}: indices ${JSON.stringify(c.indices)}, ${c.finishes} finishes, ${c.tokens.length}/${want.length} tokens`);
  } else if (c.error !== null || c.finishes === 0 || c.tokens.length < want.length || c.indices.some((v, i) => v !== i)) {
    note(t, 'lost', `${p.id}: ${c.error ?? 'no finish'}; ${c.tokens.length}/${want.length} tokens, indices ${JSON.stringify(c.indices.slice(0, 40))}`);
  } else if (c.tokens.some((v, i) => v !== want[i]) || c.finishReason !== 'length') {
    note(t, 'wrong', `${p.id}: tokens differ from the reference (finish ${c.finishReason})`);
  } else {
    t.exact++;
  }
}

/** Classifies an HTTP request's outcome against its reference text. `refusedOk`: a clear refusal is expected. */
function judgeHttp(t: Tally, label: string, out: PunicaOutcome, maxTokens: number, wantText: string | null, refusedOk: (o: { status: number; code: string | null }) => boolean): void {
  if (out.kind === 'ok') {
    if (wantText !== null && out.text !== wantText) note(t, 'wrong', `${label}: text ${JSON.stringify(out.text.slice(0, 60))} ≠ reference ${JSON.stringify(wantText.slice(0, 60))}`);
    else t.exact++;
  } else if (out.kind === 'refused') {
    if (refusedOk(out)) t.refused++;
    else note(t, 'unexpected', `${label}: ${out.status} ${out.code}: ${out.message}`);
  } else if (out.kind === 'error') {
    if (out.tokens !== undefined && out.tokens > maxTokens) note(t, 'duplicated', `${label}: ${out.message}`);
    else if (out.timedOut || out.tokens !== undefined) note(t, 'lost', `${label}: ${out.message}`);
    else note(t, 'unexpected', `${label}: ${out.message}`);
  } else {
    note(t, 'unexpected', `${label}: cancelled, though nobody cancelled it`);
  }
}

// ─── the cluster ────────────────────────────────────────────────────────────────────────────────────────────

export interface ClusterFaultOptions {
  /** Requests per round (half through the HTTP frontend, half through a direct cluster client). */
  requests: number;
  /** Tokens each request generates: [min, max]. */
  maxTokens: [number, number];
  /** How long Redis stays away. */
  outageMs: number;
  /** Rounds of each fault (a fresh worker replaces the killed one between rounds). */
  rounds: number;
  /** Give up on a request this long after the fault was repaired. */
  deadlineMs: number;
  log: (line: string) => void;
}

class Cluster {
  readonly workers = new Map<string, NodeProcess>();
  private nextWorker = 1;
  readonly doneCount = new Map<string, number>();
  readonly lostHosts: string[] = [];
  migrations = 0;

  private constructor(
    readonly fx: SoakFixtures,
    readonly redis: PrivateRedis,
    readonly redisDir: string,
    readonly prefix: string,
    readonly scheduler: SchedulerService,
    readonly frontend: FrontendServer,
    readonly address: string,
    readonly client: RedisClusterClient,
    readonly log: (line: string) => void,
  ) {
    scheduler.scheduler.on('done', (e) => this.doneCount.set(e.id, (this.doneCount.get(e.id) ?? 0) + 1));
    scheduler.scheduler.on('host-lost', (e) => this.lostHosts.push(e.hostId));
    scheduler.scheduler.on('evicted', () => this.migrations++);
  }

  static async start(fx: SoakFixtures, log: (line: string) => void): Promise<Cluster> {
    const redisDir = mkdtempSync(join(tmpdir(), 'tessera-soak-redis-'));
    const redis = new PrivateRedis(await freePort(), { dir: redisDir });
    await redis.start();
    const prefix = `soak-${randomBytes(4).toString('hex')}`;
    log(`faults: private redis-server on ${redis.url}, cluster prefix ${prefix}`);
    const scheduler = await startSchedulerService({ url: redis.url, prefix, maxBatch: 4, pollMs: 100 });
    const frontend = await buildServer({ modelDir: fx.decoderDir, adaptersDir: fx.adaptersDir, cluster: { redis: { url: redis.url, prefix } }, logger: false });
    const address = await frontend.listen({ host: '127.0.0.1', port: 0 });
    const client = await connectClusterClient({ url: redis.url, prefix });
    const cluster = new Cluster(fx, redis, redisDir, prefix, scheduler, frontend, address, client, log);
    await Promise.all([cluster.addWorker(), cluster.addWorker()]);
    return cluster;
  }

  /** Starts one more `--role worker` process and waits until the scheduler can place on it. */
  async addWorker(): Promise<string> {
    const id = `w${this.nextWorker++}`;
    const worker = new NodeProcess({
      app: PUNICA_APP,
      label: `worker ${id}`,
      log: this.log,
      args: ['--role', 'worker', '--host-id', id, '--model', this.fx.decoderDir, '--adapters', this.fx.adaptersDir, '--redis', this.redis.url,
        '--cluster-prefix', this.prefix, '--threads', '1', '--max-batch', '4', '--log-level', 'warn'],
    });
    this.workers.set(id, worker);
    await Promise.race([
      waitFor(`worker ${id} to report to the scheduler`, () => this.scheduler.scheduler.snapshot().hosts.some((h) => h.id === id && h.freeKvPages !== null), 120_000),
      worker.exited.then((code) => {
        throw new Error(`soak: worker ${id} exited (${code}) during start-up`);
      }),
    ]);
    return id;
  }

  async close(): Promise<void> {
    await this.client.close().catch(() => {});
    await this.frontend.close().catch(() => {});
    await Promise.all([...this.workers.values()].map((w) => w.stop(10_000)));
    await this.scheduler.close().catch(() => {});
    await this.redis.stop();
    rmSync(this.redisDir, { recursive: true, force: true });
  }

  /** The greedy answer of each planned request on this cluster, before any fault (also the round's warm-up). */
  async references(planned: readonly Planned[]): Promise<Map<string, Reference>> {
    const refs = new Map<string, Reference>();
    await Promise.all(
      planned.map(async (p) => {
        if (p.via === 'client') {
          const c = await collect(this.client, this.client.submit(generateRequest(p, `ref-${p.id}`)), () => {}, new Promise(() => {}));
          if (c.error !== null || c.tokens.length !== p.maxTokens) throw new Error(`soak: the reference run of ${p.id} failed: ${c.error ?? `${c.tokens.length} tokens`}`);
          refs.set(p.id, { tokens: c.tokens, text: '' });
        } else {
          const out = await runPunicaRequest(this.address, httpSpec(p, false));
          if (out.kind !== 'ok') throw new Error(`soak: the reference run of ${p.id} failed: ${JSON.stringify(out)}`);
          refs.set(p.id, { tokens: [], text: out.text });
        }
      }),
    );
    return refs;
  }

  /**
   * Submits `planned` (and `later` once `inject` calls its submit hook), runs `inject` once some request has
   * streamed a few tokens, then waits for everything and judges it.
   */
  async round(planned: Planned[], later: Planned[], inject: (hooks: { submitLater: () => void; inFlight: () => number }) => Promise<void>, deadlineMs: number): Promise<Tally> {
    const all = [...planned, ...later];
    const refs = await this.references(all);
    const progress = new Map<string, number>();
    const finished = new Set<string>();
    let release!: () => void;
    const repaired = new Promise<void>((done) => (release = done));
    let deadline: NodeJS.Timeout | undefined;
    const giveUp = repaired.then(() => new Promise<void>((done) => (deadline = setTimeout(done, deadlineMs))));
    const t = tally();
    const run = (p: Planned) => {
      if (p.via === 'client') {
        return collect(this.client, this.client.submit(generateRequest(p)), (n) => progress.set(p.id, n), giveUp).then((c) => {
          finished.add(p.id);
          judgeStream(t, p, c, refs.get(p.id)!.tokens);
        });
      }
      // Generous timeout: the deadline proper starts once the fault is repaired.
      return runPunicaRequest(this.address, httpSpec(p, true, { onToken: (n) => progress.set(p.id, n), timeoutMs: 300_000 })).then((out) => {
        finished.add(p.id);
        judgeHttp(t, p.id, out, p.maxTokens, refs.get(p.id)!.text, () => false);
      });
    };
    const doneBefore = new Map(this.doneCount);
    const runs = planned.map(run);
    await waitFor('a request to stream 2 tokens', () => [...progress.values()].some((n) => n >= 2), 60_000);
    await inject({ submitLater: () => runs.push(...later.map(run)), inFlight: () => [...progress.keys()].filter((id) => !finished.has(id)).length });
    release();
    await Promise.all(runs);
    clearTimeout(deadline);
    // The scheduler finished each request id (the direct ones; the frontend's own ids too) exactly once.
    await waitFor('the scheduler to settle', () => this.scheduler.scheduler.snapshot().requests === 0, 30_000).catch(() => {});
    for (const [id, n] of this.doneCount) {
      const now = n - (doneBefore.get(id) ?? 0);
      if (now > 1 && !id.startsWith('ref-')) note(t, 'duplicated', `the scheduler finished ${id} ${now} times`);
    }
    return t;
  }
}

export async function clusterFaults(fx: SoakFixtures, options: ClusterFaultOptions): Promise<FaultResult[]> {
  const cluster = await Cluster.start(fx, options.log);
  const adapters = fx.adapterNames;
  const vocab = fx.decoder.vocabSize;
  try {
    // (a) a worker process killed mid-run.
    const killT0 = performance.now();
    const killTally = tally();
    let killRequests = 0;
    let inFlightOnKilled = 0;
    const killed: string[] = [];
    for (let r = 0; r < options.rounds; r++) {
      const planned = plan(`kill${r}`, options.requests, adapters, vocab, options.maxTokens, 7100 + r);
      killRequests += planned.length;
      const t = await cluster.round(
        planned,
        [],
        async () => {
          const hosts = cluster.scheduler.scheduler.snapshot().hosts.filter((h) => cluster.workers.get(h.id)?.running);
          const victim = hosts.sort((a, b) => b.requests.length - a.requests.length)[0];
          if (!victim) throw new Error('soak: no worker to kill');
          inFlightOnKilled += victim.requests.length;
          options.log(`faults: SIGKILL worker ${victim.id} holding ${victim.requests.length} request(s)`);
          await cluster.workers.get(victim.id)!.kill();
          killed.push(victim.id);
        },
        options.deadlineMs,
      );
      merge(killTally, t);
      await cluster.addWorker(); // back to two workers for the next round and for the Redis restarts
    }
    const lostSeen = killed.every((id) => cluster.lostHosts.includes(id));
    const kill = result(
      'worker-killed',
      killRequests,
      killTally,
      inFlightOnKilled > 0 && lostSeen,
      `${killed.length} worker(s) killed holding ${inFlightOnKilled} request(s) in flight; the scheduler ${lostSeen ? 'declared each lost' : 'did not declare every killed worker lost'}`,
      killT0,
    );
    options.log(`faults: worker-killed ${kill.passed ? 'passed' : 'FAILED'} (${kill.detail})`);

    // (b) the private Redis restarted mid-run, with requests submitted while it is away.
    const redisT0 = performance.now();
    const redisTally = tally();
    let redisRequests = 0;
    let inFlightAtStop = 0;
    for (let r = 0; r < options.rounds; r++) {
      const planned = plan(`redis${r}`, options.requests, adapters, vocab, options.maxTokens, 8100 + r);
      const during = plan(`redis${r}-during`, Math.max(2, options.requests >> 1), adapters, vocab, options.maxTokens, 8200 + r);
      redisRequests += planned.length + during.length;
      const t = await cluster.round(
        planned,
        during,
        async ({ submitLater, inFlight }) => {
          inFlightAtStop += inFlight();
          options.log(`faults: stopping redis-server (${options.outageMs} ms outage) with ${inFlight()} request(s) streaming`);
          await cluster.redis.stop();
          submitLater();
          await sleep(options.outageMs);
          await cluster.redis.start();
          options.log('faults: redis-server is back');
        },
        options.deadlineMs,
      );
      merge(redisTally, t);
    }
    const restart = result(
      'redis-restarted',
      redisRequests,
      redisTally,
      inFlightAtStop > 0,
      `${options.rounds} restart(s), ${options.outageMs} ms each, with ${inFlightAtStop} request(s) mid-stream at the stop; requests submitted during each outage`,
      redisT0,
    );
    options.log(`faults: redis-restarted ${restart.passed ? 'passed' : 'FAILED'}`);
    return [kill, restart];
  } finally {
    await cluster.close();
  }
}

function merge(into: Tally, from: Tally): void {
  into.exact += from.exact;
  into.refused += from.refused;
  into.lost += from.lost;
  into.duplicated += from.duplicated;
  into.wrong += from.wrong;
  into.unexpected += from.unexpected;
  into.misreported += from.misreported;
  into.problems.push(...from.problems.slice(0, Math.max(0, 12 - into.problems.length)));
}

// ─── budgets ────────────────────────────────────────────────────────────────────────────────────────────────

export interface BudgetFaultOptions {
  /** Requests in the burst. */
  burst: number;
  log: (line: string) => void;
}

/** A clear refusal for capacity: 507 (a full store), 503 (busy), or 4xx naming the problem. */
const capacityRefusal = (o: { status: number; code: string | null }) => o.status === 507 || o.status === 503 || (o.status >= 400 && o.status < 500 && o.code !== null);

export async function punicaBudgetFault(fx: SoakFixtures, options: BudgetFaultOptions): Promise<FaultResult> {
  const t0 = performance.now();
  const t = tally();
  const { server, address } = await startServer({
    name: 'punica',
    app: PUNICA_APP,
    label: 'punica (budget)',
    log: options.log,
    args: ['--model', fx.decoderDir, '--adapters', fx.budgetAdaptersDir, '--adapter-budget-mib', String(BUDGET_ADAPTER_MIB), '--kv-budget-mib', '1', '--max-batch', '16', '--threads', '1'],
  });
  try {
    const load = await postJson(`${address}/v1/load_lora_adapter`, { lora_name: 'oversized', lora_path: fx.oversizedAdapterDir });
    const oversizedRegistered = load.status === 200;
    options.log(`faults: the oversized adapter (${fx.adapterBytes.oversized} bytes, budget ${BUDGET_ADAPTER_MIB} MiB) → load_lora_adapter ${load.status}`);
    const models = [...fx.budgetAdapterNames, ...(oversizedRegistered ? ['oversized'] : [])];
    const planned = plan('budget', options.burst, models, fx.decoder.vocabSize, [120, 200], 9100);
    const outcomes = await Promise.all(planned.map((p, i) => runPunicaRequest(address, httpSpec(p, i % 2 === 0, { timeoutMs: 300_000 }))));
    const texts = new Map<string, string>();
    planned.forEach((p, i) => {
      const out = outcomes[i]!;
      const oversized = p.adapter === 'oversized';
      if (oversized && out.kind === 'ok') note(t, 'unexpected', `${p.id}: served on an adapter larger than the whole budget`);
      else judgeHttp(t, p.id, out, p.maxTokens, null, oversized ? capacityRefusal : () => false);
      if (out.kind === 'ok') texts.set(p.id, out.text);
      // The README's error table: an adapter larger than the whole device budget is a 507 adapter_too_large (it
      // can never be resident, so a 503's "try again" would be wrong).
      if (oversized && out.kind === 'refused' && capacityRefusal(out) && !(out.status === 507 && out.code === 'adapter_too_large')) {
        note(t, 'misreported', `${p.id}: ${out.status} ${out.code} for an adapter larger than the whole budget (documented: 507 adapter_too_large): ${out.message}`);
      }
    });
    // Greedy outputs do not depend on queueing, preemption or adapter churn: each request again, alone.
    for (const p of planned.filter((q) => texts.has(q.id)).slice(0, 6)) {
      const alone = await runPunicaRequest(address, httpSpec(p, false));
      if (alone.kind !== 'ok' || alone.text !== texts.get(p.id)) {
        note(t, 'wrong', `${p.id}: the burst's text differs from the same request alone (${alone.kind})`);
        t.exact--;
      }
    }
    // The server keeps serving, and every registered adapter survived.
    const health = await getJson(`${address}/health`);
    const listed = ((await getJson(`${address}/v1/models`)).body as { data?: { id: string }[] }).data?.map((m) => m.id) ?? [];
    const expected = [PUNICA_MODEL_NAME, ...fx.budgetAdapterNames, ...(oversizedRegistered ? ['oversized'] : [])];
    const missing = expected.filter((m) => !listed.includes(m));
    if (health.status !== 200) note(t, 'unexpected', `/health ${health.status} after the burst`);
    if (missing.length > 0) note(t, 'unexpected', `adapters missing after the burst: ${missing.join(', ')}`);
    for (const model of [PUNICA_MODEL_NAME, ...fx.budgetAdapterNames]) {
      const out = await runPunicaRequest(address, { endpoint: 'completions', model, prompt: [5, 6, 7], maxTokens: 4, temperature: 0, stream: false });
      if (out.kind !== 'ok') note(t, 'unexpected', `${model} no longer serves after the burst: ${JSON.stringify(out)}`);
    }
    const text = await metrics(address);
    const evictions = metricSum(text, 'tessera_adapter_cache_evictions_total') ?? 0;
    const loads = metricSum(text, 'tessera_adapter_loads_total') ?? 0;
    const preemptions = metricSum(text, 'vllm:num_preemptions_total') ?? 0;
    const kv = metricSum(text, 'tessera_kv_cache_used_pages');
    if (kv !== 0) note(t, 'unexpected', `${kv} KV pages still in use after the burst`);
    const refusedOversized = planned.filter((p, i) => p.adapter === 'oversized' && outcomes[i]!.kind === 'refused').length;
    const refusals = outcomes.filter((o): o is Extract<PunicaOutcome, { kind: 'refused' }> => o.kind === 'refused');
    const codes = [...new Set(refusals.map((o) => `${o.status} ${o.code}`))];
    if (refusals[0]) options.log(`faults: a request on the oversized adapter: ${refusals[0].status} ${refusals[0].code}: ${refusals[0].message}`);
    return result(
      'punica-budget',
      planned.length,
      t,
      evictions > 0,
      `${options.burst} requests at once; adapter budget ${BUDGET_ADAPTER_MIB} MiB (big adapters ${fx.adapterBytes['big-a']} B each), KV 1 MiB: ` +
        `${loads} adapter loads, ${evictions} evictions, ${preemptions} preemptions; oversized adapter: load ${load.status}, ${refusedOversized} request(s) refused ${codes.join(', ') || '-'}` +
        `${refusals[0] ? ` ("${refusals[0].message}")` : ''}; ` +
        `afterwards /health ${health.status}, adapters listed ${listed.length - 1}`,
      t0,
    );
  } finally {
    await server.stop();
  }
}

interface TaskList {
  data?: { id: string; state: string }[];
  memory?: { shared_bytes: number; pet_bytes: number; budget_bytes: number };
}

export async function petsBudgetFault(fx: SoakFixtures, sharedBytes: number, options: BudgetFaultOptions): Promise<FaultResult> {
  const t0 = performance.now();
  const t = tally();
  // The smallest whole-MiB budget that holds the shared model: what is left over fills with task copies.
  const budgetMiB = Math.ceil(sharedBytes / (1024 * 1024));
  const { server, address } = await startServer({
    name: 'pets',
    app: PETS_APP,
    label: 'pets (budget)',
    log: options.log,
    args: ['--model', fx.encoderDir, '--params-root', fx.paramsDir, '--budget-mb', String(budgetMiB), '--threads', '1'],
  });
  try {
    const register = (body: Record<string, unknown>) => postJson(`${address}/v1/tasks`, body);
    // The largest task type, copied under new ids and loaded until the budget says no.
    const big = PETS_TASKS.find((x) => x.type === 'maskbert')!;
    const loaded: string[] = [];
    let refusal: { status: number; body: unknown } | null = null;
    for (let i = 0; i < 200 && refusal === null; i++) {
      const res = await register({ pet_type: big.type, id: `${big.id}-${i}`, path: `${big.id}.safetensors`, load: true });
      if (res.status === 201) loaded.push(`${big.id}-${i}`);
      else refusal = res;
    }
    const refusalCode = (refusal?.body as { error?: { code?: string } } | undefined)?.error?.code ?? null;
    if (refusal === null || refusal.status !== 507 || refusalCode !== 'budget_exceeded') {
      note(t, 'unexpected', `filling the budget: ${refusal ? `${refusal.status} ${JSON.stringify(refusal.body).slice(0, 200)}` : 'never refused'}`);
    }
    const overflow = `${big.id}-overflow`;
    const reg = await register({ pet_type: big.type, id: overflow, path: `${big.id}.safetensors` });
    if (reg.status !== 201) note(t, 'unexpected', `registering ${overflow} (no load): ${reg.status}`);
    const before = ((await getJson(`${address}/v1/tasks`)).body as TaskList).data;

    const targets = Array.from({ length: options.burst }, (_, i) => (i % 4 === 3 ? overflow : loaded[i % loaded.length]!));
    let refused507 = 0;
    await Promise.all(
      targets.map(async (id, i) => {
        const res = await postJson(`${address}/v1/tasks/${id}/classify`, { input: [`burst ${i}`, 'the budget is full'] });
        if (id === overflow) {
          const code = (res.body as { error?: { code?: string } }).error?.code;
          if (res.status === 507 && code === 'budget_exceeded') {
            t.refused++;
            refused507++;
          } else note(t, 'unexpected', `${id}: ${res.status} ${JSON.stringify(res.body).slice(0, 200)} (expected 507 budget_exceeded)`);
        } else {
          const problem = classifyProblem({ ...big, id }, 2, res.status, res.body);
          if (problem) note(t, 'unexpected', `${id}: ${problem}`);
          else t.exact++;
        }
      }),
    );
    const after = ((await getJson(`${address}/v1/tasks`)).body as TaskList).data;
    const unchanged = JSON.stringify(after?.map((x) => [x.id, x.state])) === JSON.stringify(before?.map((x) => [x.id, x.state]));
    if (!unchanged) note(t, 'unexpected', `the task list changed: ${JSON.stringify(before)} → ${JSON.stringify(after)}`);
    const health = await getJson(`${address}/health`);
    if (health.status !== 200) note(t, 'unexpected', `/health ${health.status} after the burst`);
    return result(
      'pets-budget',
      targets.length,
      t,
      refusal?.status === 507 && loaded.length > 0,
      `budget ${budgetMiB} MiB (shared model ${sharedBytes} B) filled with ${loaded.length} loaded ${big.type} tasks; ${options.burst} classifies at once, ` +
        `${refused507} on the task that does not fit answered 507 budget_exceeded; task list ${unchanged ? 'unchanged' : 'CHANGED'}, /health ${health.status}`,
      t0,
    );
  } finally {
    await server.stop();
  }
}
