/**
 * The Arlo simulator (arlo.md §9-H): @tessera/length-scheduler's objects under virtual time. What runs is the real
 * policy code: the scheme's `schedulingPolicy`, a `LengthEstimator` fed every arrival, the `RuntimeScheduler`
 * solving the allocation program every period on the virtual clock, `planReplacement` + `ReplacementRun` moving
 * instances in batches (drain, swap, re-activate), and the `MultiLevelDispatcher` choosing the instance of every
 * request. Only the instances are modelled: each is a single-server FIFO executor (batch 1, as Arlo's runtimes)
 * whose service time comes from a latency profile at the request's padded length, plus the paper's fixed 0.8 ms
 * per-request overhead, times an optional lognormal jitter; DT's dynamic-shape runtime runs the request's own length
 * times an injectable dynamic-shape penalty.
 *
 * Events: ARRIVAL (observe, dispatch, enqueue), DONE (record, complete, next in FIFO, finish a drain), SWAP_DONE
 * (re-activate, next batch), SAMPLE (timeline); the periodic solve happens between events at its due time. A
 * solve takes no virtual time (the paper's solve is far shorter than its period), and nothing in the result comes
 * from the wall clock: the same options give the same result.
 */
import {
  type AllocationDecision,
  type AllocationSolver,
  type LatencyModelName,
  type PolicyOptions,
  type RuntimeProfile,
  type SchemeName,
  LengthEstimator,
  MultiLevelDispatcher,
  ReplacementRun,
  RuntimeScheduler,
  SCHEMES,
  checkRuntimeLengths,
  makeRuntimeProfile,
  paddedLength,
  planReplacement,
  priorFromLengths,
  quantileSorted,
  schedulingPolicy,
  uniformLengths,
} from '@tessera/length-scheduler';

import { type ErrorKind, TesseraError } from '@tessera/core';

import { EventQueue, VirtualClock } from '../clock.js';
import { SimArgumentError } from '../errors.js';
import { standardNormal, substream } from '../random.js';
import { type ArloLatencyProfile, type DynamicPenaltySpec, PAPER_OVERHEAD_MS, type PaperModel, paperLatencyProfile, resolveDynamicPenalty } from './profiles.js';
import { type ArloTrace, type TwitterLengthOptions, twitterLengthSample } from './trace.js';

export interface ArloSimulationOptions {
  /** Arlo or a baseline (st, dt, infaas, ilb, ig, even). */
  scheme: SchemeName;
  /** Instances (GPUs), fixed for the run. */
  instances: number;
  trace: ArloTrace;
  /** Latency profile (default the paper's BERT-Base). */
  profile?: ArloLatencyProfile | PaperModel;
  /** SLO (default the profile's: 150 ms BERT-Base, 450 ms BERT-Large). */
  sloMs?: number;
  /** The polymorphed runtimes: a count of uniform steps up to the profile's max length (default 8), or the lengths. */
  runtimes?: number | readonly number[];
  /** Fixed per-request overhead added to every service time and to t_i before M_i (default 0.8 ms, §5.2.1). */
  overheadMs?: number;
  /** DT's slowdown against static kernels (default 'gpu': 3.56× → 1.22×; 'none' for ORT on CPU). */
  dynamicPenalty?: DynamicPenaltySpec;
  /** σ of a mean-1 lognormal factor on each service time (default 0.02; 0 for deterministic service). */
  jitterSigma?: number;
  /** Seed of the service jitter (default the trace's seed). */
  seed?: number;
  /** Allocation period (default 120 000 ms). */
  periodMs?: number;
  /** Time one instance takes to swap runtimes (default 1 000 ms, §6.6). */
  swapMs?: number;
  /** Replacement moves per batch (default ⌈5 % of G⌉). */
  replacementBatchSize?: number;
  /** Algorithm 1's λ, α, L and IG's busyness. */
  policy?: PolicyOptions;
  /** 𝓛 of the profiles (default M/D/1). */
  latencyModel?: LatencyModelName;
  /** Overrides the scheme's allocation solver. */
  solver?: AllocationSolver;
  /** The length mix the prior is drawn from (default the trace's own mix); the prior assumes the trace's mean rate. */
  priorLengths?: TwitterLengthOptions;
  /** Timeline sample spacing (default 1 000 ms). */
  sampleEveryMs?: number;
  /** Return per-request finish times, runtimes and instances (for checks; memory grows with the trace). */
  recordRequests?: boolean;
}

export interface LatencySummary {
  meanMs: number;
  p50Ms: number;
  p98Ms: number;
  p99Ms: number;
  maxMs: number;
}

export interface AllocationRecord {
  atMs: number;
  reason: AllocationDecision['reason'] | 'initial';
  /** N_i decided. */
  instances: number[];
  overloaded: boolean;
  solver: string;
  /** The program's predicted mean latency (ms). */
  predictedMeanMs: number;
  /** Instances moved to reach it (0 when deferred behind a replacement still running, then counted when applied). */
  moves: number;
}

export interface ArloTimelineSample {
  /** End of the sample interval. */
  tMs: number;
  arrivalsPerSec: number;
  /** Mean and p98 latency of the requests finished in the interval (NaN when none). */
  meanLatencyMs: number;
  p98Ms: number;
  /** Requests waiting (not executing) at the sample time. */
  queued: number;
  /** Active instances per runtime at the sample time. */
  active: number[];
}

export interface RuntimeSummary {
  maxLength: number;
  /** Requests executed on it. */
  requests: number;
  meanLatencyMs: number;
  /** Time-mean active instances (over the timeline samples). */
  meanInstances: number;
}

export interface ArloRequestLog {
  startMs: Float64Array;
  finishMs: Float64Array;
  /** Runtime index each request ran on. */
  runtime: Int32Array;
  /** Instance index (0 … G − 1) each request ran on. */
  instance: Int32Array;
  /** Service time (ms) each request took. */
  serviceMs: Float64Array;
}

export interface ArloSimulationResult {
  scheme: SchemeName;
  instances: number;
  profile: string;
  sloMs: number;
  runtimeLengths: number[];
  requests: number;
  completed: number;
  latency: LatencySummary;
  /** Mean wait in an instance's FIFO before execution (ms). */
  meanQueueMs: number;
  /** Mean service time (ms, overhead included). */
  meanServiceMs: number;
  /** Fraction of requests over the SLO. */
  sloViolationFrac: number;
  /** Padded tokens / tokens computed: the compute spent on zero-padding. */
  paddingWaste: number;
  /** Fraction dispatched above their ideal runtime, and sent back to it by Algorithm 1 with every candidate congested. */
  demotedFrac: number;
  congestedFallbackFrac: number;
  /** Busy instance time / (G × end time). */
  utilization: number;
  perRuntime: RuntimeSummary[];
  allocations: AllocationRecord[];
  /** Instances swapped to another runtime over the run. */
  swaps: number;
  timeline: ArloTimelineSample[];
  /** Virtual time when the last request finished. */
  endMs: number;
  events: number;
  requestLog?: ArloRequestLog;
}

/**
 * A request finished twice or never: a bug in the simulator, never the caller's input. Not exported (nothing to
 * catch); exporting it would list it with server-kit's internal-error table.
 */
class ArloSimulationInvariantError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string) {
    super('TESSERA_SIM_ARLO_INVARIANT', message);
  }
}

interface Executor {
  id: string;
  index: number;
  fifo: number[];
  head: number;
  busy: boolean;
}

const STREAM_JITTER = 11;
const PRIOR_SAMPLE = 20_000;

/** Runs one scheme over a trace on `instances` simulated instances (see the module comment). */
export async function runArloSimulation(options: ArloSimulationOptions): Promise<ArloSimulationResult> {
  const { trace, scheme } = options;
  if (!SCHEMES.includes(scheme)) throw new SimArgumentError(`unknown scheme "${String(scheme)}"; expected one of ${SCHEMES.join(', ')}`);
  const G = options.instances;
  if (!(Number.isInteger(G) && G >= 1)) throw new SimArgumentError(`instances must be a positive integer, got ${G}`);
  const profile = typeof options.profile === 'object' ? options.profile : paperLatencyProfile(options.profile ?? 'bert-base');
  const sloMs = options.sloMs ?? profile.sloMs;
  const overheadMs = options.overheadMs ?? PAPER_OVERHEAD_MS;
  const jitterSigma = options.jitterSigma ?? 0.02;
  const periodMs = options.periodMs ?? 120_000;
  const swapMs = options.swapMs ?? 1000;
  const sampleEveryMs = options.sampleEveryMs ?? 1000;
  if (!(sloMs > 0)) throw new SimArgumentError(`sloMs must be > 0, got ${sloMs}`);
  if (!(overheadMs >= 0)) throw new SimArgumentError(`overheadMs must be >= 0, got ${overheadMs}`);
  if (!(jitterSigma >= 0)) throw new SimArgumentError(`jitterSigma must be >= 0, got ${jitterSigma}`);
  if (!(swapMs >= 0)) throw new SimArgumentError(`swapMs must be >= 0, got ${swapMs}`);
  if (!(sampleEveryMs > 0)) throw new SimArgumentError(`sampleEveryMs must be > 0, got ${sampleEveryMs}`);
  const penalty = resolveDynamicPenalty(options.dynamicPenalty ?? 'gpu');
  const polyLengths = typeof options.runtimes === 'object' ? [...options.runtimes] : uniformLengths(profile.maxLength, options.runtimes ?? 8);
  checkRuntimeLengths(polyLengths);
  if (polyLengths[polyLengths.length - 1]! > profile.maxLength) {
    throw new SimArgumentError(`runtime length ${polyLengths[polyLengths.length - 1]} exceeds the profile's max length ${profile.maxLength}`);
  }

  // ── The scheme's objects, all on the virtual clock ──────────────────────────────────────────────────────────
  const policy = schedulingPolicy(scheme, polyLengths, options.policy);
  const lengths = policy.lengths;
  const I = lengths.length;
  const clock = new VirtualClock();
  const queue = new EventQueue(clock);
  const sample = twitterLengthSample(PRIOR_SAMPLE, (trace.seed + 1) >>> 0, options.priorLengths ?? trace.lengthOptions);
  const serviceOfRuntime = lengths.map((l) => profile.staticMs(l) + overheadMs);
  const dynamicMs = (len: number): number => profile.staticMs(Math.min(len, profile.maxLength)) * penalty(len) + overheadMs;
  let dynamicMean = 0;
  if (policy.dynamicShape) {
    for (const len of sample) dynamicMean += dynamicMs(len);
    dynamicMean /= sample.length;
  }
  const profiles: RuntimeProfile[] = lengths.map((l, i) =>
    makeRuntimeProfile({
      maxLength: l,
      // DT's single runtime is priced at its mean service time over the length mix.
      serviceMs: policy.dynamicShape ? dynamicMean : serviceOfRuntime[i]! - overheadMs,
      overheadMs: policy.dynamicShape ? 0 : overheadMs,
      sloMs,
      ...(options.latencyModel === undefined ? {} : { latency: options.latencyModel }),
    }),
  );
  const estimator = new LengthEstimator(lengths, { sloMs, clock, prior: { q: priorFromLengths(lengths, Array.from(sample), trace.ratePerSec, sloMs) } });
  const runtimeScheduler = new RuntimeScheduler({ profiles, estimator, instances: G, solver: options.solver ?? policy.solver(), clock, periodMs });
  const dispatcher = new MultiLevelDispatcher({ lengths, capacities: profiles.map((p) => p.capacity), policy: policy.dispatch });

  // ── Per-request state ──────────────────────────────────────────────────────────────────────────────────────
  const n = trace.arrivalMs.length;
  const startMs = new Float64Array(n);
  const finishMs = new Float64Array(n).fill(NaN);
  const runtimeOf = new Int32Array(n).fill(-1);
  const instanceOf = new Int32Array(n).fill(-1);
  const serviceMs = new Float64Array(n);
  const jitter = substream(options.seed ?? trace.seed, STREAM_JITTER);
  let completed = 0;
  let busyMs = 0;
  let paddedTokens = 0;
  let computedTokens = 0;

  // ── Instances ──────────────────────────────────────────────────────────────────────────────────────────────
  const executors: Executor[] = [];
  const byId = new Map<string, Executor>();
  const initial = await runtimeScheduler.solveNow();
  const allocations: AllocationRecord[] = [record(initial, 'initial', 0)];
  {
    let k = 0;
    initial.result.instances.forEach((count, runtime) => {
      for (let c = 0; c < count; c++, k++) {
        const exec: Executor = { id: `i${k}`, index: k, fifo: [], head: 0, busy: false };
        executors.push(exec);
        byId.set(exec.id, exec);
        dispatcher.add(exec.id, runtime);
      }
    });
  }

  // ── Replacement ────────────────────────────────────────────────────────────────────────────────────────────
  let replacement: ReplacementRun | null = null;
  let deferred: AllocationRecord | null = null;
  let swaps = 0;
  const replacementBatch = options.replacementBatchSize;

  const startReplacement = (rec: AllocationRecord): void => {
    const current = dispatcher.instances().map((v) => ({ id: v.id, runtime: v.runtime, outstanding: v.outstanding }));
    const plan = planReplacement(current, rec.instances, replacementBatch === undefined ? {} : { batchSize: replacementBatch });
    rec.moves = plan.moves.length;
    if (plan.moves.length === 0) return;
    replacement = new ReplacementRun(dispatcher, plan);
    replacement.start();
    pumpReplacement();
  };
  const pumpReplacement = (): void => {
    const run = replacement;
    if (run === null) return;
    for (const move of run.drained()) {
      queue.after(swapMs, () => {
        swaps++;
        run.swapped(move.id);
        // A finished batch drains the next one; an instance already idle is ready at once.
        pumpReplacement();
        if (run.done) {
          replacement = null;
          const next = deferred;
          deferred = null;
          if (next !== null) startReplacement(next);
        }
      });
    }
  };
  const applyAllocation = (rec: AllocationRecord): void => {
    if (replacement !== null) deferred = rec; // the newest decision waits for the running replacement
    else startReplacement(rec);
  };

  // ── Executors ──────────────────────────────────────────────────────────────────────────────────────────────
  const startNext = (exec: Executor): void => {
    if (exec.head === exec.fifo.length) {
      exec.fifo.length = 0;
      exec.head = 0;
      exec.busy = false;
      return;
    }
    const k = exec.fifo[exec.head++]!;
    const base = policy.dynamicShape ? dynamicMs(trace.length[k]!) : serviceOfRuntime[runtimeOf[k]!]!;
    const service = jitterSigma > 0 ? base * Math.exp(jitterSigma * standardNormal(jitter) - (jitterSigma * jitterSigma) / 2) : base;
    exec.busy = true;
    startMs[k] = clock.now();
    serviceMs[k] = service;
    busyMs += service;
    queue.after(service, () => finish(exec, k));
  };
  const finish = (exec: Executor, k: number): void => {
    if (!Number.isNaN(finishMs[k]!)) throw new ArloSimulationInvariantError(`request ${k} finished twice`);
    finishMs[k] = clock.now();
    completed++;
    intervalLatencies.push(finishMs[k]! - trace.arrivalMs[k]!);
    dispatcher.complete(exec.id);
    if (replacement !== null && dispatcher.instance(exec.id).state === 'draining') pumpReplacement();
    startNext(exec);
  };

  // ── Arrivals ───────────────────────────────────────────────────────────────────────────────────────────────
  let intervalArrivals = 0;
  let intervalLatencies: number[] = [];
  const arrive = (k: number): void => {
    const len = trace.length[k]!;
    estimator.observe(len);
    const view = dispatcher.dispatch(len);
    const exec = byId.get(view.id)!;
    runtimeOf[k] = view.runtime;
    instanceOf[k] = exec.index;
    const padded = paddedLength(policy, len, view.runtime);
    paddedTokens += padded - Math.min(len, padded);
    computedTokens += padded;
    intervalArrivals++;
    exec.fifo.push(k);
    if (!exec.busy) startNext(exec);
    if (k + 1 < n) queue.schedule(trace.arrivalMs[k + 1]!, () => arrive(k + 1));
  };
  if (n > 0) queue.schedule(trace.arrivalMs[0]!, () => arrive(0));

  // ── Timeline ───────────────────────────────────────────────────────────────────────────────────────────────
  const timeline: ArloTimelineSample[] = [];
  const sampleAt = (tMs: number): void => {
    let queued = 0;
    for (const e of executors) queued += e.fifo.length - e.head;
    const lat = intervalLatencies.sort((a, b) => a - b);
    timeline.push({
      tMs,
      arrivalsPerSec: (intervalArrivals * 1000) / sampleEveryMs,
      meanLatencyMs: lat.length > 0 ? lat.reduce((a, b) => a + b, 0) / lat.length : NaN,
      p98Ms: quantileSorted(lat, 0.98),
      queued,
      active: dispatcher.activeCounts(),
    });
    intervalArrivals = 0;
    intervalLatencies = [];
    if (tMs + sampleEveryMs <= trace.durationMs) queue.schedule(tMs + sampleEveryMs, () => sampleAt(tMs + sampleEveryMs));
  };
  if (sampleEveryMs <= trace.durationMs) queue.schedule(sampleEveryMs, () => sampleAt(sampleEveryMs));

  // ── Run: events up to each period's due time, the solve, then on; after the trace, drain ─────────────────────
  for (;;) {
    const due = runtimeScheduler.nextDueMs;
    if (due >= trace.durationMs) break;
    queue.run(due);
    const solving = runtimeScheduler.poll();
    if (solving !== null) {
      const decision = await solving;
      const rec = record(decision, decision.reason, 0);
      allocations.push(rec);
      applyAllocation(rec);
    }
  }
  queue.run();
  if (completed !== n) throw new ArloSimulationInvariantError(`simulation ended with ${n - completed} of ${n} requests unfinished`);

  // ── Summary ────────────────────────────────────────────────────────────────────────────────────────────────
  const latencies = new Float64Array(n);
  let queueSum = 0;
  let serviceSum = 0;
  let violations = 0;
  const perRuntimeCount = new Array<number>(I).fill(0);
  const perRuntimeLatency = new Array<number>(I).fill(0);
  for (let k = 0; k < n; k++) {
    const latency = finishMs[k]! - trace.arrivalMs[k]!;
    latencies[k] = latency;
    queueSum += startMs[k]! - trace.arrivalMs[k]!;
    serviceSum += serviceMs[k]!;
    if (latency > sloMs) violations++;
    perRuntimeCount[runtimeOf[k]!]!++;
    perRuntimeLatency[runtimeOf[k]!]! += latency;
  }
  const endMs = clock.now();
  const sorted = latencies.slice().sort();
  const nearestRank = (q: number): number => (n > 0 ? sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]! : NaN);
  const mean = n > 0 ? latencies.reduce((a, b) => a + b, 0) / n : NaN;
  const stats = dispatcher.stats;
  const result: ArloSimulationResult = {
    scheme,
    instances: G,
    profile: profile.name,
    sloMs,
    runtimeLengths: [...lengths],
    requests: n,
    completed,
    latency: {
      meanMs: mean,
      p50Ms: nearestRank(0.5),
      p98Ms: nearestRank(0.98),
      p99Ms: nearestRank(0.99),
      maxMs: n > 0 ? sorted[n - 1]! : NaN,
    },
    meanQueueMs: n > 0 ? queueSum / n : NaN,
    meanServiceMs: n > 0 ? serviceSum / n : NaN,
    sloViolationFrac: n > 0 ? violations / n : 0,
    paddingWaste: computedTokens > 0 ? paddedTokens / computedTokens : 0,
    demotedFrac: stats.dispatched > 0 ? stats.demoted / stats.dispatched : 0,
    congestedFallbackFrac: stats.dispatched > 0 ? stats.congestedFallback / stats.dispatched : 0,
    utilization: endMs > 0 ? busyMs / (G * endMs) : 0,
    perRuntime: lengths.map((maxLength, i) => ({
      maxLength,
      requests: perRuntimeCount[i]!,
      meanLatencyMs: perRuntimeCount[i]! > 0 ? perRuntimeLatency[i]! / perRuntimeCount[i]! : NaN,
      meanInstances: timeline.length > 0 ? timeline.reduce((a, s) => a + s.active[i]!, 0) / timeline.length : (initial.result.instances[i] ?? 0),
    })),
    allocations,
    swaps,
    timeline,
    endMs,
    events: queue.eventsRun,
  };
  if (options.recordRequests === true) result.requestLog = { startMs, finishMs, runtime: runtimeOf, instance: instanceOf, serviceMs };
  return result;
}

function record(decision: AllocationDecision, reason: AllocationRecord['reason'], moves: number): AllocationRecord {
  return {
    atMs: decision.atMs,
    reason,
    instances: [...decision.result.instances],
    overloaded: decision.result.overloaded,
    solver: decision.result.solver,
    predictedMeanMs: decision.result.meanLatencyMs,
    moves,
  };
}
