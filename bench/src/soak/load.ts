/**
 * The soak itself: N concurrent clients, each sending requests back to back until the time is up, against one
 * server process. Punica clients mix completions and chat, streamed and not, the base model and every adapter,
 * greedy and sampled, and cancel a fraction mid-flight; PetS clients classify one to four texts (some sentence
 * pairs) on a random task and cancel a fraction too. Every answer is checked; the server's RSS is sampled from
 * /proc the whole time. Afterwards the server must drain to idle (nothing running, no KV pages held), which is
 * where a cancellation that leaked its request would show.
 */
import { rng } from '../data.js';
import { percentile } from '../stats.js';
import { PETS_TASKS } from './fixtures.js';
import { describe, getJson, isAbort, metricSum, metrics, postJson } from './http.js';
import type { NodeProcess } from './procs.js';
import { sleep } from './procs.js';
import { type PunicaRequestSpec, runPunicaRequest } from './punica-client.js';

export interface RssSample {
  /** Seconds since the soak started. */
  t: number;
  bytes: number;
}

export interface SoakStats {
  server: 'punica' | 'pets';
  clients: number;
  seconds: number;
  warmupSeconds: number;
  sent: number;
  completed: number;
  cancelled: number;
  errors: number;
  /** The first few errors, verbatim. */
  errorSamples: string[];
  streamed: number;
  latencyP50Ms: number | null;
  latencyP99Ms: number | null;
  /** Streams: time to the first token chunk. */
  ttftP50Ms: number | null;
  ttftP99Ms: number | null;
  /** Punica: generated tokens of completed requests per second; PetS: texts classified per second. */
  unitsPerS: number;
  unit: 'tokens' | 'queries';
  rss: RssSample[];
  /** RSS at the end of the warm-up and at the end of the run. */
  rssStartBytes: number | null;
  rssEndBytes: number | null;
  rssMaxBytes: number | null;
  /** The server drained (nothing running or waiting, no KV pages or pending queries) after the clients stopped. */
  drained: boolean;
  drainDetail: string;
  /** Requests the server itself counted as cancelled (Punica's tessera_requests_cancelled_total). */
  serverCancelled: number | null;
}

export interface SoakOptions {
  clients: number;
  seconds: number;
  warmupSeconds: number;
  seed: number;
  log: (line: string) => void;
}

interface Outcome {
  kind: 'ok' | 'cancelled' | 'error' | 'refused';
  units?: number;
  ms?: number;
  ttftMs?: number | null;
  message?: string;
}

/** Drives `clients` loops of `one(rand)` for `seconds`, sampling the server's RSS. */
async function drive(server: NodeProcess, options: SoakOptions, one: (rand: () => number, streamed: () => void) => Promise<Outcome>): Promise<Omit<SoakStats, 'server' | 'unit' | 'drained' | 'drainDetail' | 'serverCancelled'>> {
  const t0 = performance.now();
  const warmupEnd = t0 + options.warmupSeconds * 1000;
  const end = t0 + options.seconds * 1000;
  const rss: RssSample[] = [];
  const sample = () => {
    const bytes = server.rss();
    if (bytes !== null) rss.push({ t: (performance.now() - t0) / 1000, bytes });
  };
  sample();
  const sampleEveryMs = Math.max(250, Math.min(5000, (options.seconds * 1000) / 120));
  const sampler = setInterval(sample, sampleEveryMs);
  let rssStartBytes: number | null = null;
  const warmupTimer = setTimeout(() => {
    sample();
    rssStartBytes = rss.at(-1)?.bytes ?? null;
  }, options.warmupSeconds * 1000);

  let sent = 0;
  let completed = 0;
  let cancelled = 0;
  let errors = 0;
  let streamed = 0;
  let units = 0;
  let firstMeasured = Infinity;
  let lastMeasured = 0;
  const errorSamples: string[] = [];
  const latencies: number[] = [];
  const ttfts: number[] = [];
  const client = async (c: number) => {
    const rand = rng(options.seed * 1000 + c);
    while (performance.now() < end) {
      const started = performance.now();
      sent++;
      const out = await one(rand, () => streamed++);
      if (out.kind === 'ok') {
        completed++;
        if (started >= warmupEnd) {
          firstMeasured = Math.min(firstMeasured, started);
          lastMeasured = Math.max(lastMeasured, performance.now());
          units += out.units ?? 0;
          latencies.push(out.ms ?? 0);
          if (out.ttftMs !== null && out.ttftMs !== undefined) ttfts.push(out.ttftMs);
        }
      } else if (out.kind === 'cancelled') {
        cancelled++;
      } else {
        errors++;
        if (errorSamples.length < 10) errorSamples.push(out.message ?? out.kind);
        options.log(`soak error: ${out.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: options.clients }, (_, c) => client(c)));
  clearTimeout(warmupTimer);
  clearInterval(sampler);
  sample();
  const p = (values: number[], q: number) => (values.length > 0 ? percentile(values, q) : null);
  const measuredSeconds = lastMeasured > firstMeasured ? (lastMeasured - firstMeasured) / 1000 : 0;
  return {
    clients: options.clients,
    seconds: (performance.now() - t0) / 1000,
    warmupSeconds: options.warmupSeconds,
    sent,
    completed,
    cancelled,
    errors,
    errorSamples,
    streamed,
    latencyP50Ms: p(latencies, 50),
    latencyP99Ms: p(latencies, 99),
    ttftP50Ms: p(ttfts, 50),
    ttftP99Ms: p(ttfts, 99),
    unitsPerS: measuredSeconds > 0 ? units / measuredSeconds : 0,
    rss,
    rssStartBytes: rssStartBytes ?? rss[0]?.bytes ?? null,
    rssEndBytes: rss.at(-1)?.bytes ?? null,
    rssMaxBytes: rss.length > 0 ? Math.max(...rss.map((s) => s.bytes)) : null,
  };
}

/** Waits (up to `timeoutMs`) until `idle()` says the server holds nothing; returns whether it did and the last detail. */
async function drain(idle: () => Promise<{ ok: boolean; detail: string }>, timeoutMs = 15_000): Promise<{ drained: boolean; drainDetail: string }> {
  const deadline = performance.now() + timeoutMs;
  let last = { ok: false, detail: 'not checked' };
  while (performance.now() < deadline) {
    last = await idle();
    if (last.ok) break;
    await sleep(100);
  }
  return { drained: last.ok, drainDetail: last.detail };
}

const WORDS = ['order', 'late', 'refund', 'invoice', 'the', 'report', 'query', 'select', 'poem', 'river', 'market', 'patient', 'dose', 'court', 'ruling', 'a', 'quick', 'summary', 'please', 'table'];

function words(rand: () => number, n: number): string {
  return Array.from({ length: n }, () => WORDS[Math.floor(rand() * WORDS.length)]!).join(' ');
}

/** One random Punica request: the mix the issue asks for (streaming and not, every adapter and the base, cancellations). */
export function punicaSpec(rand: () => number, models: readonly string[], vocabSize: number, cancelFraction: number): PunicaRequestSpec {
  const endpoint = rand() < 0.6 ? 'completions' : 'chat';
  const stream = rand() < 0.5;
  const model = models[Math.floor(rand() * models.length)]!;
  const maxTokens = 4 + Math.floor(rand() * 45);
  const greedy = rand() < 0.5;
  const prompt =
    endpoint === 'completions' && rand() < 0.5
      ? Array.from({ length: 4 + Math.floor(rand() * 40) }, () => 1 + Math.floor(rand() * (vocabSize - 3)))
      : words(rand, 3 + Math.floor(rand() * 20));
  const spec: PunicaRequestSpec = { endpoint, model, prompt, maxTokens, temperature: greedy ? 0 : 0.8, stream, ...(greedy ? {} : { seed: Math.floor(rand() * 1e6) }) };
  if (rand() < cancelFraction) {
    if (stream) spec.cancelAfterTokens = 1 + Math.floor(rand() * Math.max(1, maxTokens - 2));
    else spec.cancelAfterMs = 2 + Math.floor(rand() * 40);
  }
  return spec;
}

export async function soakPunica(address: string, server: NodeProcess, models: readonly string[], vocabSize: number, options: SoakOptions): Promise<SoakStats> {
  options.log(`soak: Punica, ${options.clients} clients for ${options.seconds} s over ${models.length} models (base + adapters)`);
  const driven = await drive(server, options, async (rand, streamed) => {
    const spec = punicaSpec(rand, models, vocabSize, 0.15);
    if (spec.stream) streamed();
    const out = await runPunicaRequest(address, spec);
    if (out.kind === 'ok') return { kind: 'ok', units: out.tokens, ms: out.ms, ttftMs: out.ttftMs };
    if (out.kind === 'cancelled') return { kind: 'cancelled' };
    if (out.kind === 'refused') return { kind: 'refused', message: `${spec.endpoint} model=${spec.model}: ${out.status} ${out.code}: ${out.message}` };
    return { kind: 'error', message: out.message };
  });
  const drained = await drain(async () => {
    const text = await metrics(address);
    const running = metricSum(text, 'vllm:num_requests_running');
    const waiting = metricSum(text, 'vllm:num_requests_waiting');
    const kv = metricSum(text, 'tessera_kv_cache_used_pages');
    return { ok: running === 0 && waiting === 0 && kv === 0, detail: `running ${running}, waiting ${waiting}, KV pages in use ${kv}` };
  });
  const serverCancelled = metricSum(await metrics(address), 'tessera_requests_cancelled_total');
  return { server: 'punica', unit: 'tokens', ...driven, ...drained, serverCancelled };
}

interface ClassifyBody {
  data?: { index?: number; label?: string; probabilities?: number[] }[];
  error?: { message?: string; code?: string };
}

/** Checks a classify answer for `inputs` texts of task `task`; returns the problem, or null. */
export function classifyProblem(task: (typeof PETS_TASKS)[number], inputs: number, status: number, body: unknown): string | null {
  const b = body as ClassifyBody;
  if (status !== 200) return `status ${status}: ${b.error?.code ?? ''} ${b.error?.message ?? JSON.stringify(body).slice(0, 200)}`;
  if (!Array.isArray(b.data) || b.data.length !== inputs) return `${b.data?.length} results for ${inputs} inputs`;
  for (const [i, d] of b.data.entries()) {
    if (d.index !== i) return `result ${i} has index ${d.index}`;
    if (!d.label || !task.labels.includes(d.label)) return `result ${i}: label ${d.label} is not one of ${task.labels.join(', ')}`;
    const sum = (d.probabilities ?? []).reduce((a, v) => a + v, 0);
    if (d.probabilities?.length !== task.labels.length || Math.abs(sum - 1) > 1e-3) return `result ${i}: probabilities ${JSON.stringify(d.probabilities)}`;
  }
  return null;
}

export async function soakPets(address: string, server: NodeProcess, options: SoakOptions): Promise<SoakStats> {
  options.log(`soak: PetS, ${options.clients} clients for ${options.seconds} s over ${PETS_TASKS.length} tasks`);
  const driven = await drive(server, options, async (rand) => {
    const task = PETS_TASKS[Math.floor(rand() * PETS_TASKS.length)]!;
    const n = 1 + Math.floor(rand() * 4);
    const input = Array.from({ length: n }, () => words(rand, 1 + Math.floor(rand() * 10)));
    const pair = rand() < 0.3 ? Array.from({ length: n }, () => words(rand, 1 + Math.floor(rand() * 8))) : null;
    const cancelAfterMs = rand() < 0.1 ? Math.floor(rand() * 15) : null;
    const controller = new AbortController();
    const timer = cancelAfterMs === null ? undefined : setTimeout(() => controller.abort(), cancelAfterMs);
    const t0 = performance.now();
    try {
      const { status, body } = await postJson(`${address}/v1/tasks/${task.id}/classify`, { input, ...(pair ? { input_pair: pair } : {}) }, controller.signal);
      const problem = classifyProblem(task, n, status, body);
      if (problem) return { kind: 'error', message: `classify ${task.id} × ${n}: ${problem}` };
      return { kind: 'ok', units: n, ms: performance.now() - t0, ttftMs: null };
    } catch (err) {
      if (controller.signal.aborted && isAbort(err)) return { kind: 'cancelled' };
      return { kind: 'error', message: `classify ${task.id} × ${n}: ${describe(err)}` };
    } finally {
      clearTimeout(timer);
    }
  });
  const drained = await drain(async () => {
    const health = (await getJson(`${address}/health`)).body as { status?: string; requests_in_flight?: number };
    const pending = metricSum(await metrics(address), 'tessera_pets_pending_queries');
    return { ok: health.status === 'ok' && health.requests_in_flight === 0 && pending === 0, detail: `health ${health.status}, in flight ${health.requests_in_flight}, pending queries ${pending}` };
  });
  return { server: 'pets', unit: 'queries', ...driven, ...drained, serverCancelled: null };
}
