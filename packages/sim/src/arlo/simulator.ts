/**
 * The Arlo simulator (arlo.md §9-H): @tessera/length-scheduler's objects under virtual time. What runs is the real
 * policy code: the scheme's `schedulingPolicy`, a `LengthEstimator` fed every arrival, the `RuntimeScheduler`
 * solving the allocation program every period on the virtual clock, `planReplacement` + `ReplacementRun` moving
 * instances in batches (drain, swap, re-activate), and the `MultiLevelDispatcher` choosing the instance of every
 * request. Only the instances are modelled: each is a single-server FIFO executor (batch 1, as Arlo's runtimes)
 * whose service time comes from a latency profile at the request's padded length, plus the paper's fixed 0.8 ms
 * per-request overhead, times an optional lognormal jitter; DT's dynamic-shape runtime runs the request's own length
 * times an injectable dynamic-shape penalty. Instances that share a CPU's cores (the real testbed) can slow each
 * other down by a measured factor per number running at once (`concurrencySlowdown`, processor sharing).
 *
 * Events: ARRIVAL (observe, dispatch, enqueue), DONE (record, complete, next in FIFO, finish a drain), SWAP_DONE
 * (re-activate, next batch), SCALE_TICK and PROVISIONED (optional auto-scaling with the scheme's own scaler),
 * SAMPLE (timeline); the periodic solve happens between events at its due time. A
 * solve takes no virtual time (the paper's solve is far shorter than its period), and nothing in the result comes
 * from the wall clock: the same options give the same result.
 */
import {
  type AllocationDecision,
  type AllocationSolver,
  type HeadroomOptions,
  type LatencyModelName,
  type PolicyOptions,
  type RuntimeProfile,
  type SchemeName,
  type ScaleDecision,
  type TargetTrackingOptions,
  HeadroomScaler,
  LengthEstimator,
  MultiLevelDispatcher,
  NoServingInstanceError,
  ReplacementRun,
  RuntimeScheduler,
  SCHEMES,
  TargetTrackingScaler,
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
  /**
   * What the instances really take, when it differs from the profile the schedulers plan with (default: the
   * profile). A real testbed whose speed drifted between its profile and its run plans with the first and runs at
   * the second; the allocation and the dispatcher's capacities come from `profile` either way.
   */
  serviceProfile?: ArloLatencyProfile;
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
  /**
   * Instances that share one machine's cores and memory bus (a CPU testbed) slow each other down: element k − 1 is
   * the service-time factor while k instances execute at once (element 0 must be 1; past the end, the last holds).
   * Running requests then progress as under processor sharing: when an instance starts or finishes, every running
   * request's remaining solo time is re-timed at the new factor. Default: none, the instances are independent (GPUs).
   */
  concurrencySlowdown?: readonly number[];
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
  /**
   * Auto-scaling with the scheme's scaler (Arlo, ILB, IG, Even: target tracking on p98; ST, DT, INFaaS-like:
   * headroom on utilisation), ticked every `tickMs`. Off by default: the instance count stays fixed, as in
   * Figs. 10–11 and Tables 3–4.
   */
  autoscale?: AutoscaleOptions;
}

export interface AutoscaleOptions {
  /** Scaler tick (default 1 000 ms). */
  tickMs?: number;
  /** A new instance serves this long after the decision (default 5 000 ms). */
  provisionMs?: number;
  minInstances?: number;
  maxInstances?: number;
  /** Target-tracking settings beyond the SLO and the runtime (window, thresholds, cooldown, scale-in period). */
  targetTracking?: Omit<TargetTrackingOptions, 'sloMs' | 'longestRuntime' | 'clock' | 'minInstances' | 'maxInstances'>;
  /** Headroom settings (headroom, scale-in threshold and hold, cooldown). */
  headroom?: Omit<HeadroomOptions, 'longestRuntime' | 'clock' | 'minInstances' | 'maxInstances'>;
}

export interface ScalingRecord {
  atMs: number;
  /** 'out': the new instance started serving; 'in': the released instance finished its requests and left. */
  action: 'out' | 'in';
  /** The instance added or released (its index in the request log is the number after 'i'). */
  instanceId: string;
  /** Instances serving after it. */
  instances: number;
  reason: string;
}

export interface ScalingSummary {
  events: ScalingRecord[];
  /** Scale-in decisions dropped because a replacement was moving instances at the time. */
  skippedIn: number;
  /** Time-weighted instance count, ∫G(t)dt / T (Fig. 8's metric). */
  meanInstances: number;
  maxInstances: number;
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
  /** Instances serving (provisioned and not released) at the sample time. */
  instances: number;
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
  /** Busy instance time / serving instance time (G × end time without auto-scaling). */
  utilization: number;
  perRuntime: RuntimeSummary[];
  allocations: AllocationRecord[];
  /** Instances swapped to another runtime over the run. */
  swaps: number;
  /** Placements retried because no active instance could take the request at that moment (see `place`). */
  waitedPlacements: number;
  timeline: ArloTimelineSample[];
  /** Virtual time when the last request finished. */
  endMs: number;
  events: number;
  requestLog?: ArloRequestLog;
  /** Present when `autoscale` was given. */
  scaling?: ScalingSummary;
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
  /** Released by scale-in: draining its last requests, then gone. */
  retiring: boolean;
  retireReason: string;
  head: number;
  busy: boolean;
  /** Under `concurrencySlowdown`: the request executing (−1 none), its remaining solo time, and a token that voids stale DONE events. */
  job: number;
  remainingMs: number;
  generation: number;
}

const STREAM_JITTER = 11;
/** Virtual ms between placement attempts of a request no active instance can take. */
const RETRY_MS = 1;
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
  const slowdown = options.concurrencySlowdown;
  if (slowdown !== undefined && (slowdown.length === 0 || slowdown[0] !== 1 || slowdown.some((f) => !(Number.isFinite(f) && f >= 1)))) {
    throw new SimArgumentError(`concurrencySlowdown must start with 1 and hold factors >= 1, got [${slowdown.join(', ')}]`);
  }
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
  // What executing takes (the planning above uses `profile`).
  const actual = options.serviceProfile ?? profile;
  if (actual.maxLength < profile.maxLength) throw new SimArgumentError(`serviceProfile covers ${actual.maxLength} tokens, the profile ${profile.maxLength}`);
  const actualServiceOfRuntime = lengths.map((l) => actual.staticMs(l) + overheadMs);
  const actualDynamicMs = (len: number): number => actual.staticMs(Math.min(len, profile.maxLength)) * penalty(len) + overheadMs;
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
        const exec: Executor = { id: `i${k}`, index: k, fifo: [], retiring: false, retireReason: '', head: 0, busy: false, job: -1, remainingMs: 0, generation: 0 };
        executors.push(exec);
        byId.set(exec.id, exec);
        dispatcher.add(exec.id, runtime);
      }
    });
  }

  // Time integrals: serving instances (for utilisation and ∫G dt) and busy instances (headroom scaling).
  let serving = executors.length;
  let servingSince = 0;
  let servingIntegral = 0;
  let maxServing = serving;
  const changeServing = (delta: number): void => {
    const now = clock.now();
    servingIntegral += serving * (now - servingSince);
    servingSince = now;
    serving += delta;
    maxServing = Math.max(maxServing, serving);
  };
  let busyInstances = 0;
  let busySince = 0;
  let busyIntegral = 0;
  const changeBusy = (delta: number): void => {
    const now = clock.now();
    busyIntegral += busyInstances * (now - busySince);
    busySince = now;
    busyInstances += delta;
  };
  // A decision solved for another instance count than the one serving when it is applied (a scaling step in
  // between) is dropped, and an on-demand solve for the current count runs at once.
  let resolveWanted = false;

  // ── Replacement ────────────────────────────────────────────────────────────────────────────────────────────
  let replacement: ReplacementRun | null = null;
  let deferred: AllocationRecord | null = null;
  let swaps = 0;
  const replacementBatch = options.replacementBatchSize;

  const startReplacement = (rec: AllocationRecord): void => {
    const current = dispatcher
      .instances()
      .filter((v) => !byId.get(v.id)!.retiring)
      .map((v) => ({ id: v.id, runtime: v.runtime, outstanding: v.outstanding }));
    if (rec.instances.reduce((a, b) => a + b, 0) !== current.length) {
      resolveWanted = true;
      return;
    }
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
  // With shared cores, the executing requests progress together (processor sharing): `settle` charges the time
  // since the last change at the factor that held, `retime` schedules each one's DONE at the factor that holds now.
  const running = new Set<Executor>();
  let settledAt = 0;
  const factor = (k: number): number => (slowdown === undefined || k === 0 ? 1 : slowdown[Math.min(k, slowdown.length) - 1]!);
  const settle = (): void => {
    const elapsed = clock.now() - settledAt;
    const f = factor(running.size);
    for (const exec of running) exec.remainingMs = Math.max(0, exec.remainingMs - elapsed / f);
    settledAt = clock.now();
  };
  const retime = (): void => {
    const f = factor(running.size);
    for (const exec of running) {
      const generation = ++exec.generation;
      queue.after(exec.remainingMs * f, () => {
        if (exec.generation === generation) finish(exec, exec.job);
      });
    }
  };
  const startNext = (exec: Executor): void => {
    if (exec.head === exec.fifo.length) {
      exec.fifo.length = 0;
      exec.head = 0;
      if (exec.busy) changeBusy(-1);
      exec.busy = false;
      if (exec.retiring && dispatcher.has(exec.id) && dispatcher.instance(exec.id).outstanding === 0) release(exec);
      return;
    }
    const k = exec.fifo[exec.head++]!;
    const base = policy.dynamicShape ? actualDynamicMs(trace.length[k]!) : actualServiceOfRuntime[runtimeOf[k]!]!;
    const service = jitterSigma > 0 ? base * Math.exp(jitterSigma * standardNormal(jitter) - (jitterSigma * jitterSigma) / 2) : base;
    if (!exec.busy) changeBusy(1);
    exec.busy = true;
    startMs[k] = clock.now();
    if (slowdown !== undefined) {
      settle();
      exec.job = k;
      exec.remainingMs = service;
      running.add(exec);
      retime();
      return;
    }
    serviceMs[k] = service;
    busyMs += service;
    queue.after(service, () => finish(exec, k));
  };
  const finish = (exec: Executor, k: number): void => {
    if (!Number.isNaN(finishMs[k]!)) throw new ArloSimulationInvariantError(`request ${k} finished twice`);
    finishMs[k] = clock.now();
    if (slowdown !== undefined) {
      // The service time is what it took beside the others.
      serviceMs[k] = finishMs[k]! - startMs[k]!;
      busyMs += serviceMs[k]!;
      settle();
      running.delete(exec);
      exec.job = -1;
      retime();
    }
    completed++;
    intervalLatencies.push(finishMs[k]! - trace.arrivalMs[k]!);
    tracker?.record(finishMs[k]! - trace.arrivalMs[k]!);
    dispatcher.complete(exec.id);
    if (replacement !== null && dispatcher.instance(exec.id).state === 'draining') pumpReplacement();
    startNext(exec);
  };

  // ── Auto-scaling ───────────────────────────────────────────────────────────────────────────────────────────
  const auto = options.autoscale;
  const longest = lengths.length - 1;
  const scalingEvents: ScalingRecord[] = [];
  let skippedIn = 0;
  const minInstances = auto?.minInstances ?? 1;
  const maxInstances = auto?.maxInstances ?? Infinity;
  const tracker =
    auto !== undefined && policy.scaling === 'target-tracking'
      ? new TargetTrackingScaler({ ...auto.targetTracking, sloMs, longestRuntime: longest, clock, minInstances, maxInstances })
      : null;
  const headroom =
    auto !== undefined && policy.scaling === 'headroom' ? new HeadroomScaler({ ...auto.headroom, longestRuntime: longest, clock, minInstances, maxInstances }) : null;
  // Instances the allocation may use: serving minus those released and still draining.
  let retiringCount = 0;
  const release = (exec: Executor): void => {
    dispatcher.remove(exec.id);
    changeServing(-1);
    retiringCount--;
    runtimeScheduler.setInstances(serving - retiringCount);
    scalingEvents.push({ atMs: clock.now(), action: 'in', instanceId: exec.id, instances: serving, reason: exec.retireReason });
  };
  const scale = (decision: ScaleDecision): void => {
    if (decision.action === 'out') {
      queue.after(auto?.provisionMs ?? 5000, () => {
        const exec: Executor = { id: `i${executors.length}`, index: executors.length, fifo: [], retiring: false, retireReason: '', head: 0, busy: false, job: -1, remainingMs: 0, generation: 0 };
        executors.push(exec);
        byId.set(exec.id, exec);
        dispatcher.add(exec.id, decision.runtime);
        changeServing(1);
        runtimeScheduler.setInstances(serving - retiringCount);
        scalingEvents.push({ atMs: clock.now(), action: 'out', instanceId: exec.id, instances: serving, reason: decision.reason });
      });
      return;
    }
    // A replacement plan names its instances; releasing one of them mid-plan would break it.
    if (replacement !== null) {
      skippedIn++;
      return;
    }
    const exec = byId.get(decision.instanceId)!;
    exec.retiring = true;
    exec.retireReason = decision.reason;
    retiringCount++;
    runtimeScheduler.setInstances(serving - retiringCount);
    dispatcher.drain(exec.id);
    if (dispatcher.instance(exec.id).outstanding === 0) release(exec);
  };
  let lastTickBusy = 0;
  let lastTickServing = 0;
  const tickMs = auto?.tickMs ?? 1000;
  if (auto !== undefined && !(tickMs > 0)) throw new SimArgumentError(`autoscale.tickMs must be > 0, got ${tickMs}`);
  const scaleTick = (tMs: number): void => {
    const candidates = dispatcher.instances().filter((v) => v.state === 'active');
    let decision: ScaleDecision | null = null;
    if (tracker !== null) decision = tracker.tick(candidates);
    else if (headroom !== null) {
      // Utilisation over the last tick: busy instance time / serving instance time.
      changeBusy(0);
      changeServing(0);
      const busy = busyIntegral - lastTickBusy;
      const servingTime = servingIntegral - lastTickServing;
      lastTickBusy = busyIntegral;
      lastTickServing = servingIntegral;
      decision = headroom.tick(servingTime > 0 ? Math.min(1, busy / servingTime) : 0, candidates);
    }
    if (decision !== null) scale(decision);
    if (tMs + tickMs < trace.durationMs) queue.schedule(tMs + tickMs, () => scaleTick(tMs + tickMs));
  };
  if (auto !== undefined && tickMs < trace.durationMs) queue.schedule(tickMs, () => scaleTick(tickMs));

  // ── Arrivals ───────────────────────────────────────────────────────────────────────────────────────────────
  let intervalArrivals = 0;
  let intervalLatencies: number[] = [];
  // A request that no active instance can take (every instance of the runtimes long enough for it is draining or
  // loading: a scale-in or a replacement moved the last one) waits for one, as it would in a real queue: it is
  // placed again every RETRY_MS of virtual time, and its latency still counts from its arrival.
  let waitedPlacements = 0;
  const place = (k: number): void => {
    const len = trace.length[k]!;
    let view: ReturnType<typeof dispatcher.dispatch>;
    try {
      view = dispatcher.dispatch(len);
    } catch (err) {
      if (!(err instanceof NoServingInstanceError)) throw err;
      waitedPlacements++;
      queue.after(RETRY_MS, () => place(k));
      return;
    }
    const exec = byId.get(view.id)!;
    runtimeOf[k] = view.runtime;
    instanceOf[k] = exec.index;
    const padded = paddedLength(policy, len, view.runtime);
    paddedTokens += padded - Math.min(len, padded);
    computedTokens += padded;
    intervalArrivals++;
    exec.fifo.push(k);
    if (!exec.busy) startNext(exec);
  };
  const arrive = (k: number): void => {
    estimator.observe(trace.length[k]!);
    place(k);
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
      instances: serving,
    });
    intervalArrivals = 0;
    intervalLatencies = [];
    if (tMs + sampleEveryMs <= trace.durationMs) queue.schedule(tMs + sampleEveryMs, () => sampleAt(tMs + sampleEveryMs));
  };
  if (sampleEveryMs <= trace.durationMs) queue.schedule(sampleEveryMs, () => sampleAt(sampleEveryMs));

  // ── Run: events up to each period's due time, the solve, then on; after the trace, drain ─────────────────────
  for (;;) {
    const due = runtimeScheduler.nextDueMs;
    if (due >= trace.durationMs && !resolveWanted) break;
    while (!resolveWanted && queue.nextTime() <= due) queue.runNext();
    let solving: Promise<AllocationDecision> | null;
    if (resolveWanted) {
      resolveWanted = false;
      if (clock.now() >= trace.durationMs) continue;
      solving = runtimeScheduler.solveNow();
    } else {
      queue.run(due);
      solving = runtimeScheduler.poll();
    }
    if (solving !== null) {
      const decision = await solving;
      const rec = record(decision, decision.reason, 0);
      allocations.push(rec);
      applyAllocation(rec);
    }
  }
  queue.run();
  changeServing(0);
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
    utilization: servingIntegral > 0 ? busyMs / servingIntegral : 0,
    perRuntime: lengths.map((maxLength, i) => ({
      maxLength,
      requests: perRuntimeCount[i]!,
      meanLatencyMs: perRuntimeCount[i]! > 0 ? perRuntimeLatency[i]! / perRuntimeCount[i]! : NaN,
      meanInstances: timeline.length > 0 ? timeline.reduce((a, s) => a + s.active[i]!, 0) / timeline.length : (initial.result.instances[i] ?? 0),
    })),
    allocations,
    swaps,
    waitedPlacements,
    timeline,
    endMs,
    events: queue.eventsRun,
  };
  if (auto !== undefined) {
    result.scaling = { events: scalingEvents, skippedIn, meanInstances: endMs > 0 ? servingIntegral / endMs : serving, maxInstances: maxServing };
  }
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
