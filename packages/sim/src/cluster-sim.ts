/**
 * runClusterSimulation: Punica's cluster experiment (Fig. 13, paper §7; punica.md §10.3, §14 item 8) in virtual
 * time. The REAL PunicaScheduler, InProcessEngineHosts, ClientStreams and batcher Schedulers run in a
 * {@link SimCluster}; only the GPUs' time is simulated ({@link SimGpu}: step latency from a {@link LatencyModel},
 * KV pages from the real page allocator, no math). A seeded
 * trace of Poisson arrivals with a ramped rate and zipf-1.5 adapter popularity is submitted at its arrival times;
 * each finished stream's tokens are checked (exactly the output length, and the tokens an unmigrated run makes).
 *
 * The run returns a timeline sampled every `sampleEveryMs` (request rate, cluster throughput, per-GPU batch size,
 * queue length, autoscale signals) and totals (completions, tokens, migrations, how much GPU time ran at the batch
 * cap or idle, whether GPUs that went idle after the peak stayed idle, and the exactly-once token check).
 * After `durationMs` no request arrives; the run goes on until every request has finished (at most `maxDrainMs`).
 * Same options → the same result, deep-equal: nothing in it reads the wall clock.
 */
import type { ClientStream, FinishedResult } from '@tessera/cluster';
import { KV_PAGE_SIZE as PAGE_SIZE } from '@tessera/core';
import { SimArgumentError } from './errors.js';
import {
  DEFAULT_LENGTHS,
  DEFAULT_ZIPF_ALPHA,
  type LengthDistribution,
  type Popularity,
  type RampProfile,
  type RateProfile,
  type TraceRequest,
  generateTrace,
  maxSequenceLength,
  rampProfile,
} from './arrivals.js';
import { type LatencyModel, paperLatencyModel } from './latency.js';
import { SimCluster } from './sim-cluster.js';
import type { SimGpu } from './sim-gpu.js';
import { simulatedGeneration, simulatedPrompt } from './simulated-runner.js';

/** Peak arrivals per second per GPU of the default ramp (with the default lengths and paper latency, ≈ 80 % of a GPU). */
export const DEFAULT_PEAK_PER_GPU_PER_SEC = 1.0;

/** Default KV budget per GPU in tokens (see {@link ClusterSimulationOptions.kvTokensPerGpu}). */
export const DEFAULT_KV_TOKENS_PER_GPU = 32_000;

export interface ClusterSimulationOptions {
  /** Simulated GPUs (default 16, the paper's two HGX A100 servers). */
  gpus?: number;
  /** Arrival window in simulated ms (default 3,600,000: one hour). */
  durationMs?: number;
  /** Request rate over time (default: a ramp up 40 %, plateau 20 %, down 40 % peaking at 1.0 request/s per GPU). */
  arrivals?: RateProfile;
  /** Adapter popularity (default zipf with α = 1.5 over numAdapters). */
  popularity?: Popularity;
  /** Adapters of the default popularity (default 100; the paper does not say). */
  numAdapters?: number;
  /** Prompt and output lengths (default the Punica repo's synthetic distribution, max 2048 tokens). */
  lengths?: LengthDistribution;
  /** Step latency (default {@link paperLatencyModel}: Llama-2 7B on an A100). */
  latency?: LatencyModel;
  /**
   * KV budget per GPU in tokens (default 32,000). A 40 GB A100 holds about 50,000 tokens of Llama-2 7B KV (punica.md
   * §14 item 8); with the default lengths that budget never runs out in an hour, so the default is scaled down to
   * where KV exhaustion, and so migration, happens occasionally, as in the paper's Fig. 13.
   */
  kvTokensPerGpu?: number;
  /** Batch cap (default 32). */
  maxBatch?: number;
  /** Timeline resolution (default 10,000 ms). */
  sampleEveryMs?: number;
  /** Seed of the trace (default 0). */
  seed?: number;
  /** Scheduler: "lightly loaded" below this fraction of the cap (default 0.5). */
  lightlyLoadedFraction?: number;
  /** Scheduler: a GPU idle this long is releasable (default 60,000 ms). */
  idleReleaseMs?: number;
  /** After durationMs, how long to wait for the last requests (default 1,800,000 ms). */
  maxDrainMs?: number;
  /** Run this trace instead of generating one (arrivals, popularity, lengths and seed then only label the run). */
  trace?: readonly TraceRequest[];
}

export interface TimelineSample {
  /** End of the interval this sample covers (ms). */
  tMs: number;
  /** The profile's rate at tMs. */
  targetRatePerSec: number;
  /** Arrivals in the interval per second. */
  arrivalsPerSec: number;
  /** Tokens delivered to clients in the interval per second (cluster throughput). */
  tokensPerSec: number;
  /** Requests waiting in the scheduler's FCFS queue at tMs. */
  queued: number;
  /** Time-mean batch size of each GPU over the interval (GPU order = `gpus`). */
  batch: number[];
  /** GPUs whose time-mean batch was > 0 in the interval. */
  activeGpus: number;
  /** The scheduler's autoscale signal at tMs. */
  needHost: boolean;
  releasable: number;
  lightlyLoaded: number;
}

export interface GpuSummary {
  id: string;
  steps: number;
  tokens: number;
  busyMs: number;
  atCapMs: number;
  /** Σ batch × ms / busyMs. */
  meanBusyBatch: number;
  /** Requests this GPU evicted on KV exhaustion (migrated away). */
  evictions: number;
  /** Placements the scheduler made onto it (first placements and migrations). */
  placements: number;
  /** Times it went from idle to busy after the load peaked. */
  wakeupsAfterPeak: number;
  /** Busy ms by batch size (index = batch size). */
  busyMsByBatch: number[];
}

export interface ClusterTotals {
  /** Requests that arrived. */
  requests: number;
  completed: number;
  failed: number;
  /** Still running or queued when the drain limit was reached. */
  unfinished: number;
  /** Tokens delivered to clients. */
  tokens: number;
  /** Requests evicted on KV exhaustion and placed again (the scheduler's 'evicted' events). */
  migrations: number;
  /** Times a request had to wait in the FCFS queue. */
  queuedPlacements: number;
  /** When the last request finished (or the drain limit). */
  endMs: number;
  /** When the load peaked (the end of the ramp's plateau). */
  peakAtMs: number;
  /** Σ batch × ms / Σ busy ms over all GPUs. */
  meanBusyBatch: number;
  /** Fractions of gpus × endMs: running at the batch cap, and idle. */
  gpuTimeAtCapFraction: number;
  gpuTimeIdleFraction: number;
  /** Running at the cap, and at ≥ 90 % of it, as fractions of busy GPU time. */
  busyGpuTimeAtCapFraction: number;
  busyGpuTimeNearCapFraction: number;
  /** Busy ms by batch size over all GPUs (index = batch size). */
  busyMsByBatch: number[];
  /**
   * Consolidation after the load peaked. `periods`: idle periods that began after the peak; `wakeups`: those that
   * ended before the run did. `releasable`: periods that lasted at least idleReleaseMs (the autoscaler would have
   * released the GPU). `recalled`: releasable periods that ended while another GPU was busy, i.e. the running GPUs
   * had no room and the cluster needed this one back (a wake-up while every GPU was idle is only the scheduler's
   * tie-break choosing among idle GPUs, which a cluster that had released some would make among the rest).
   * fraction = (releasable − recalled) / releasable: 1 = a GPU released on the ramp-down is never needed again.
   */
  idleAfterPeak: { periods: number; wakeups: number; releasable: number; recalled: number; fraction: number };
  /** The exactly-once check over every finished stream: token count = output length, indices 0, 1, 2, … and the
   * tokens equal an unmigrated run's. */
  tokenCheck: { checked: number; exact: number; mismatched: string[] };
  /** Duplicate or superseded events the client streams dropped (at-least-once delivery made exactly-once). */
  droppedEvents: number;
  steps: number;
  events: number;
}

export interface ClusterSimulationResult {
  config: {
    gpus: string[];
    durationMs: number;
    maxBatch: number;
    kvTokensPerGpu: number;
    kvPagesPerGpu: number;
    sampleEveryMs: number;
    seed: number;
    lightlyLoadedFraction: number;
    idleReleaseMs: number;
  };
  timeline: TimelineSample[];
  gpus: GpuSummary[];
  totals: ClusterTotals;
}

/**
 * Ready-made sizes. 'full': the paper's setting with every default (16 GPUs, one hour, max length 2048, 32k KV
 * tokens per GPU, peak 1 request/s per GPU). 'quick': 6 GPUs for 10 simulated minutes with sequences a quarter as
 * long (max 512 tokens), the KV budget scaled with them (8,000 tokens) and the peak rate raised to 5 requests/s per
 * GPU so the load per GPU is alike: the same shapes in seconds.
 */
export function clusterSimulationPreset(size: 'quick' | 'full', seed = 0): ClusterSimulationOptions {
  if (size === 'full') return { seed };
  const gpus = 6;
  const durationMs = 600_000;
  return {
    gpus,
    durationMs,
    lengths: { kind: 'punica-synthetic', maxLength: 512 },
    kvTokensPerGpu: 8_000,
    arrivals: rampProfile({ peakPerSec: 5 * gpus, durationMs }),
    sampleEveryMs: 5_000,
    idleReleaseMs: 30_000,
    seed,
  };
}

/** The last time the profile is at (within 0.1 % of) its highest rate: the start of the ramp-down. */
function peakTime(profile: RateProfile): number {
  const ramp = profile as Partial<RampProfile>;
  if (typeof ramp.downStartMs === 'number') return ramp.downStartMs;
  const steps = 2000;
  let best = 0;
  let at = 0;
  for (let i = 0; i <= steps; i++) {
    const t = (profile.durationMs * i) / steps;
    const r = profile.rate(t);
    if (r >= best * 0.999) {
      if (r > best) best = r;
      at = t;
    }
  }
  return at;
}

/**
 * Checks a finished stream like a client would: the tokens it delivered (ClientStream keeps a token only at the
 * next expected index, so a duplicate or a gap cannot hide) number exactly the output length, and equal both the
 * finish result's tokens and what an unmigrated run generates.
 */
function streamIsExact(stream: ClientStream, result: FinishedResult, request: TraceRequest): boolean {
  const delivered = stream.delivered;
  if (result.finishReason !== 'length' || delivered.length !== request.outputTokens || result.tokens.length !== request.outputTokens) return false;
  const expected = simulatedGeneration(simulatedPrompt(request.promptTokens, request.index), request.outputTokens);
  for (let i = 0; i < expected.length; i++) if (delivered[i] !== expected[i] || result.tokens[i] !== expected[i]) return false;
  return true;
}

function positiveInteger(what: string, v: number): void {
  if (!Number.isSafeInteger(v) || v < 1) throw new SimArgumentError(`runClusterSimulation: ${what} must be a positive integer, got ${v}`);
}

export function runClusterSimulation(options: ClusterSimulationOptions = {}): ClusterSimulationResult {
  const gpuCount = options.gpus ?? 16;
  const durationMs = options.durationMs ?? 3_600_000;
  const maxBatch = options.maxBatch ?? 32;
  const kvTokensPerGpu = options.kvTokensPerGpu ?? DEFAULT_KV_TOKENS_PER_GPU;
  const sampleEveryMs = options.sampleEveryMs ?? 10_000;
  const seed = options.seed ?? 0;
  const lightlyLoadedFraction = options.lightlyLoadedFraction ?? 0.5;
  const idleReleaseMs = options.idleReleaseMs ?? 60_000;
  const maxDrainMs = options.maxDrainMs ?? 1_800_000;
  positiveInteger('gpus', gpuCount);
  positiveInteger('maxBatch', maxBatch);
  positiveInteger('kvTokensPerGpu', kvTokensPerGpu);
  if (!(durationMs > 0)) throw new SimArgumentError(`runClusterSimulation: durationMs must be positive, got ${durationMs}`);
  if (!(sampleEveryMs > 0)) throw new SimArgumentError(`runClusterSimulation: sampleEveryMs must be positive, got ${sampleEveryMs}`);
  if (!(maxDrainMs >= 0)) throw new SimArgumentError(`runClusterSimulation: maxDrainMs must be >= 0, got ${maxDrainMs}`);
  const lengths = options.lengths ?? DEFAULT_LENGTHS;
  const profile = options.arrivals ?? rampProfile({ peakPerSec: DEFAULT_PEAK_PER_GPU_PER_SEC * gpuCount, durationMs });
  const trace =
    options.trace ??
    generateTrace({
      profile,
      popularity: options.popularity ?? { kind: 'zipf', adapters: options.numAdapters ?? 100, alpha: DEFAULT_ZIPF_ALPHA },
      lengths,
      seed,
    });
  const longest = options.trace ? trace.reduce((m, r) => Math.max(m, r.promptTokens + r.outputTokens), 0) : maxSequenceLength(lengths);
  // A GPU's cache has whole pages; a request must fit it alone (the batcher refuses one that cannot).
  const kvCapacity = Math.floor(kvTokensPerGpu / PAGE_SIZE) * PAGE_SIZE;
  if (longest > kvCapacity) {
    throw new SimArgumentError(`runClusterSimulation: a request of up to ${longest} tokens does not fit a GPU's ${kvCapacity} KV tokens (${kvTokensPerGpu} rounded down to pages)`);
  }
  const latency = options.latency ?? paperLatencyModel();
  const peakAtMs = peakTime(profile);

  const cluster = new SimCluster({
    gpus: gpuCount,
    latency,
    kvTokensPerGpu,
    maxBatch,
    maxPositions: Math.max(longest + 1, 16),
    lightlyLoadedFraction,
    idleReleaseMs,
  });
  const { queue, scheduler, gpus } = cluster;
  const requestById = new Map<string, TraceRequest>();
  let exact = 0;
  let droppedEvents = 0;
  const mismatched: string[] = [];
  cluster.onClientDone = (stream, outcome) => {
    const request = requestById.get(stream.id)!;
    requestById.delete(stream.id);
    if (outcome.kind === 'finish' && streamIsExact(stream, outcome.result, request)) exact++;
    else mismatched.push(stream.id);
    droppedEvents += stream.dropped;
  };
  const placements = new Map<string, number>(gpus.map((g) => [g.id, 0]));

  let migrations = 0;
  let queuedPlacements = 0;
  let completed = 0;
  let failed = 0;
  let outstanding = 0;
  let lastDoneMs = 0;
  scheduler.on('evicted', () => migrations++);
  scheduler.on('queued', () => queuedPlacements++);
  scheduler.on('placed', ({ hostId }) => placements.set(hostId, placements.get(hostId)! + 1));
  scheduler.on('done', ({ reason, at }) => {
    outstanding--;
    lastDoneMs = at;
    if (reason === 'finished') completed++;
    else failed++;
  });

  let arrivalsInInterval = 0;
  let nextArrival = 0;
  const arrive = () => {
    const request = trace[nextArrival++]!;
    arrivalsInInterval++;
    outstanding++;
    requestById.set(request.id, request);
    const prompt = simulatedPrompt(request.promptTokens, request.index);
    cluster.submit({ id: request.id, adapter: request.adapter, prompt, maxTokens: request.outputTokens, sampling: {}, stop: [], ignoreEos: true });
    if (nextArrival < trace.length) queue.schedule(trace[nextArrival]!.atMs, arrive);
  };
  if (trace.length > 0) queue.schedule(trace[0]!.atMs, arrive);

  const timeline: TimelineSample[] = [];
  let lastTokens = 0;
  let lastBatchMs = gpus.map(() => 0);
  const limitMs = durationMs + maxDrainMs;
  const sample = () => {
    const t = queue.now();
    const start = timeline.length === 0 ? 0 : timeline[timeline.length - 1]!.tMs;
    const span = t - start;
    const tokens = gpus.reduce((a, g) => a + g.tokens, 0);
    const batchMs = gpus.map((g) => g.batchMsUntil(t));
    const batch = batchMs.map((b, i) => (b - lastBatchMs[i]!) / span);
    const signal = scheduler.autoscale();
    timeline.push({
      tMs: t,
      targetRatePerSec: profile.rate(t),
      arrivalsPerSec: (arrivalsInInterval * 1000) / span,
      tokensPerSec: ((tokens - lastTokens) * 1000) / span,
      queued: scheduler.queued,
      batch,
      activeGpus: batch.filter((b) => b > 0).length,
      needHost: signal.needHost,
      releasable: signal.releasable.length,
      lightlyLoaded: signal.lightlyLoaded.length,
    });
    arrivalsInInterval = 0;
    lastTokens = tokens;
    lastBatchMs = batchMs;
    const drained = nextArrival >= trace.length && outstanding === 0;
    if (!(t >= durationMs && drained) && t < limitMs) queue.schedule(Math.min(t + sampleEveryMs, limitMs), sample);
  };
  queue.schedule(sampleEveryMs, sample);

  queue.run(limitMs);
  const endMs = outstanding === 0 ? Math.max(lastDoneMs, durationMs) : queue.now();

  const busyMs = gpus.reduce((a, g) => a + g.busyMs, 0);
  const atCapMs = gpus.reduce((a, g) => a + g.atCapMs, 0);
  const batchMs = gpus.reduce((a, g) => a + g.batchMsUntil(endMs), 0);
  let periods = 0;
  let wakeups = 0;
  let releasable = 0;
  let recalled = 0;
  const busyMsByBatch = new Array<number>(maxBatch + 1).fill(0);
  /** Whether some GPU other than `self` was running at time t (not inside one of its idle periods). */
  const anotherBusyAt = (self: SimGpu, t: number) =>
    gpus.some((g) => g !== self && !g.idlePeriods.some((p) => p.startMs <= t && (p.endMs === null || t < p.endMs)));
  const gpuSummaries: GpuSummary[] = gpus.map((g) => {
    let gpuWakeups = 0;
    for (const p of g.idlePeriods) {
      if (p.startMs < peakAtMs) continue;
      periods++;
      if (p.endMs !== null) gpuWakeups++;
      if ((p.endMs ?? endMs) - p.startMs < idleReleaseMs) continue;
      releasable++;
      if (p.endMs !== null && anotherBusyAt(g, p.endMs)) recalled++;
    }
    wakeups += gpuWakeups;
    g.msByBatch.forEach((ms, b) => (busyMsByBatch[b]! += ms));
    return {
      id: g.id,
      steps: g.steps,
      tokens: g.tokens,
      busyMs: g.busyMs,
      atCapMs: g.atCapMs,
      meanBusyBatch: g.busyMs > 0 ? g.batchMsUntil(endMs) / g.busyMs : 0,
      evictions: g.evictions,
      placements: placements.get(g.id)!,
      wakeupsAfterPeak: gpuWakeups,
      busyMsByBatch: Array.from(g.msByBatch),
    };
  });
  const nearCapMs = busyMsByBatch.reduce((a, ms, b) => (b >= 0.9 * maxBatch ? a + ms : a), 0);
  const gpuTime = gpuCount * endMs;
  const totals: ClusterTotals = {
    requests: nextArrival,
    completed,
    failed,
    unfinished: outstanding,
    tokens: gpus.reduce((a, g) => a + g.tokens, 0),
    migrations,
    queuedPlacements,
    endMs,
    peakAtMs,
    meanBusyBatch: busyMs > 0 ? batchMs / busyMs : 0,
    gpuTimeAtCapFraction: gpuTime > 0 ? atCapMs / gpuTime : 0,
    gpuTimeIdleFraction: gpuTime > 0 ? 1 - busyMs / gpuTime : 0,
    busyGpuTimeAtCapFraction: busyMs > 0 ? atCapMs / busyMs : 0,
    busyGpuTimeNearCapFraction: busyMs > 0 ? nearCapMs / busyMs : 0,
    busyMsByBatch,
    idleAfterPeak: { periods, wakeups, releasable, recalled, fraction: releasable > 0 ? (releasable - recalled) / releasable : 1 },
    tokenCheck: { checked: exact + mismatched.length, exact, mismatched: mismatched.slice(0, 20) },
    droppedEvents,
    steps: gpus.reduce((a, g) => a + g.steps, 0),
    events: queue.eventsRun,
  };
  cluster.dispose();
  return {
    config: {
      gpus: gpus.map((g) => g.id),
      durationMs,
      maxBatch,
      kvTokensPerGpu,
      kvPagesPerGpu: gpus[0]!.cache.numPages,
      sampleEveryMs,
      seed,
      lightlyLoadedFraction,
      idleReleaseMs,
    },
    timeline,
    gpus: gpuSummaries,
    totals,
  };
}
