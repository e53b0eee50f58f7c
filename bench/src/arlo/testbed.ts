/**
 * The real mini testbed of `pnpm bench arlo` (Figs. 6–7 analogue, arlo.md §10.3, §13.1): two real runtime
 * instances (apps/arlo's native runtime workers, one worker thread and one kernel thread each) serve the same
 * seeded open-loop trace of mixed-length requests under three schemes, through apps/arlo's own ArloService:
 *
 *   - ST: one runtime at the longest length, every request padded to it (both instances there);
 *   - ILB: polymorphing (the runtime lengths) + the allocation program, each request on its ideal runtime;
 *   - Arlo: polymorphing + the allocation program + Algorithm 1 (demotion to a longer runtime under congestion).
 *
 * Before the first run and after each, each instance is profiled alone and then both at once (apps/arlo's
 * profileInstance, length-scheduler's profiler), and the message round trip to a worker is timed (the per-request
 * overhead). The free CPU of a shared machine drifts, so each run is simulated with the service times of the mean of
 * the profiles taken just before and just after it, while both the service and the simulator plan with the one
 * before (the only one the service can know). The two instances share the machine's cores and memory bus, so one may run slower
 * while the other runs too; the ratio of the two profiles is the simulator's `concurrencySlowdown`. From the solo
 * profile and that factor, @tessera/sim's runArloSimulation predicts each scheme on the same trace, with the same
 * prior and the same SLO. Each scheme's allocation comes from `ArloService.solve(prior)` on the profile before the
 * run, carried out by the service's replacement (instances retargeted) before the trace starts. Schemes alternate
 * within each repeat; the reported measured figures are medians over the repeats. A latency is counted from the
 * request's scheduled arrival (the open-loop generator's lateness is latency too), to its logits back on the
 * main thread.
 */
import { ArloService, ensureDemo, profileInstance, type ProfilePoint, type Runtime, startInstances, type ThreadRuntime } from '@tessera/arlo';
import { makeRuntimeProfile, priorFromLengths, type SchemeName, schedulingPolicy } from '@tessera/length-scheduler';
import { type ArloSimulationResult, type ArloTrace, generateArloTrace, measuredLatencyProfile, runArloSimulation, twitterLengthSample } from '@tessera/sim';

import { miniModelDir } from '../models.js';
import { median, percentile } from '../stats.js';
import { barChart } from '../svg.js';
import type { Row, TableSpec } from '../table.js';
import type { BenchContext } from '../types.js';

export interface TestbedSizes {
  /** The generated encoder: 'mini' (hidden 512, 8 layers: ≈22 → 130 ms from 32 to 128 tokens on one thread) or 'tiny' (tests). */
  model: 'tiny' | 'mini';
  /** Runtime lengths, ascending; the trace's lengths are scaled to the longest. */
  lengths: number[];
  /** Open-loop Poisson arrivals (Twitter-Stable), mean rate and trace length. */
  ratePerSec: number;
  durationMs: number;
  /** Passes over the three schemes (alternating); measured figures are medians over them. */
  repeats: number;
  /** Timed runs per length in the profile (after `min(10, reps)` warm-ups). */
  profileReps: number;
  /** SLO as a multiple of the longest runtime's profiled time (the paper: BERT-Base 150 ms ≈ 31 × 4.86 ms). */
  sloFactor: number;
  seed: number;
}

export const TESTBED_SCHEMES = ['st', 'ilb', 'arlo'] as const satisfies readonly SchemeName[];
export type TestbedScheme = (typeof TESTBED_SCHEMES)[number];
const LABEL: Record<TestbedScheme, string> = { st: 'ST', ilb: 'poly + ILB', arlo: 'Arlo' };
/** The simulator draws its prior from this many lengths of the trace's mix, seeded trace.seed + 1 (sim/arlo/simulator.ts). */
const PRIOR_SAMPLE = 20_000;
const OVERHEAD_REPS = 20;

/** An instance lent to one scheme's ArloService: it delegates everything, but the service's close() leaves the worker up for the next scheme. */
class LentRuntime implements Runtime {
  constructor(private readonly inner: ThreadRuntime) {}
  get id() {
    return this.inner.id;
  }
  get kind() {
    return this.inner.kind;
  }
  get length() {
    return this.inner.length;
  }
  get maxBatch() {
    return this.inner.maxBatch;
  }
  get failure() {
    return this.inner.failure;
  }
  infer(batch: readonly (readonly number[])[]) {
    return this.inner.infer(batch);
  }
  retarget(length: number) {
    return this.inner.retarget(length);
  }
  async close(): Promise<void> {}
}

/** What one scheme's run measured. */
export interface TestbedRun {
  scheme: TestbedScheme;
  repeat: number;
  latencyMs: Float64Array;
  queueMs: Float64Array;
  execMs: Float64Array;
  /** Runtime length each request ran at. */
  paddedTo: Int32Array;
  allocation: number[];
  /** The SLO it was allocated under (from the profile before it). */
  sloMs: number;
  /** The simulator's prediction of this run (same trace, the profiles before and after it averaged). */
  simulated: ArloSimulationResult;
}

/** Token ids of request k (its content does not matter to the timing; deterministic, never the pad id 0). */
function requestIds(k: number, length: number, vocabSize: number): number[] {
  return Array.from({ length }, (_, t) => 1 + ((k * 131 + t * 7) % (vocabSize - 1)));
}

/** Replays the trace open-loop into the service: request k is sent at t0 + arrivalMs[k], whatever is outstanding. */
async function replay(service: ArloService, trace: ArloTrace, vocabSize: number): Promise<Omit<TestbedRun, 'scheme' | 'repeat' | 'sloMs' | 'allocation' | 'simulated'>> {
  const n = trace.arrivalMs.length;
  const out = { latencyMs: new Float64Array(n), queueMs: new Float64Array(n), execMs: new Float64Array(n), paddedTo: new Int32Array(n) };
  const ids = Array.from({ length: n }, (_, k) => requestIds(k, trace.length[k]!, vocabSize));
  const pending: Promise<void>[] = [];
  const t0 = performance.now() + 5;
  let k = 0;
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const now = performance.now() - t0;
      while (k < n && trace.arrivalMs[k]! <= now) {
        const at = t0 + trace.arrivalMs[k]!;
        const j = k++;
        pending.push(
          service.infer(ids[j]!).then((r) => {
            out.latencyMs[j] = performance.now() - at;
            out.queueMs[j] = r.queueMs;
            out.execMs[j] = r.execMs;
            out.paddedTo[j] = r.paddedTo;
          }),
        );
      }
      if (k >= n) resolve();
      else setTimeout(tick, Math.max(0, trace.arrivalMs[k]! - (performance.now() - t0)));
    };
    setTimeout(tick, 5);
  });
  await Promise.all(pending);
  return out;
}

/** The message round trip to a worker beyond its own execution time (median of `reps` runs at the shortest length). */
async function measureOverheadMs(runtime: ThreadRuntime, length: number, vocabSize: number): Promise<number> {
  const extra: number[] = [];
  for (let r = 0; r < OVERHEAD_REPS; r++) {
    const t = performance.now();
    const out = await runtime.infer([requestIds(r, length, vocabSize)]);
    extra.push(Math.max(0, performance.now() - t - out.execMs));
  }
  return median(extra);
}

/** σ of a mean-1 lognormal with this mean-over-median (mean / median = e^{σ²/2}); 0 when the mean is not above the median. */
export function lognormalSigma(meanMs: number, medianMs: number): number {
  return meanMs > medianMs && medianMs > 0 ? Math.sqrt(2 * Math.log(meanMs / medianMs)) : 0;
}

export interface TestbedResult {
  rows: Row[];
  ratios: Record<string, number>;
  tables: TableSpec[];
  svgs: Record<string, string>;
  params: Record<string, unknown>;
}

const TARGETS = { realVsSt: 1, fidelity: 0.15 };

/** What the profile of one repeat gave: per length mean / p50 / p99, the round trip, the SLO and the jitter σ. */
export interface Calibration {
  /** Each instance alone (the two instances' means averaged). */
  table: ProfilePoint[];
  /** Both instances at once. */
  pairedTable: ProfilePoint[];
  /** Service-time factor while both run (median over lengths of paired / alone, at least 1). */
  pairedSlowdown: number;
  overheadMs: number;
  sloMs: number;
  jitterSigma: number;
}

/** Per length: the means and p50s of several profiles averaged, the worst p99. */
function averageTables(tables: readonly ProfilePoint[][]): ProfilePoint[] {
  return tables[0]!.map((p, i) => ({
    length: p.length,
    batch: p.batch,
    meanMs: mean(tables.map((t) => t[i]!.meanMs)),
    p50Ms: mean(tables.map((t) => t[i]!.p50Ms)),
    p99Ms: Math.max(...tables.map((t) => t[i]!.p99Ms)),
  }));
}

/**
 * Profiles each instance alone (one after the other), then both at once (apps/arlo's profileInstance). At once,
 * they share the cores and the memory bus with each other and with this thread, and each runs slower: an earlier
 * version profiled only at once and its simulator over-predicted the measured mean 2.4× on idle cores, because at
 * this load an instance mostly runs alone.
 */
async function calibrate(real: readonly ThreadRuntime[], lengths: readonly number[], sizes: TestbedSizes, vocabSize: number): Promise<Calibration> {
  const profile = async (r: ThreadRuntime) => (await profileInstance(r, { lengths, sloMs: 1e9, reps: sizes.profileReps })).table;
  const solo: ProfilePoint[][] = [];
  for (const r of real) solo.push(await profile(r));
  const table = averageTables(solo);
  const pairedTable = averageTables(await Promise.all(real.map(profile)));
  const pairedSlowdown = Math.max(1, median(table.map((p, i) => pairedTable[i]!.meanMs / p.meanMs)));
  const overheadMs = await measureOverheadMs(real[0]!, lengths[0]!, vocabSize);
  return {
    table,
    pairedTable,
    pairedSlowdown,
    overheadMs,
    sloMs: Math.round(sizes.sloFactor * table[table.length - 1]!.meanMs),
    jitterSigma: median(table.map((p) => lognormalSigma(p.meanMs, p.p50Ms))),
  };
}

/** The mean of two profiles (tables, slowdown, round trip, jitter); the SLO stays the first one's. */
function blend(a: Calibration, b: Calibration): Calibration {
  return {
    table: averageTables([a.table, b.table]),
    pairedTable: averageTables([a.pairedTable, b.pairedTable]),
    pairedSlowdown: (a.pairedSlowdown + b.pairedSlowdown) / 2,
    overheadMs: (a.overheadMs + b.overheadMs) / 2,
    sloMs: a.sloMs,
    jitterSigma: (a.jitterSigma + b.jitterSigma) / 2,
  };
}

/** Runs the testbed (see the module comment). */
export async function runTestbed(sizes: TestbedSizes, ctx: BenchContext): Promise<TestbedResult> {
  const lengths = [...sizes.lengths];
  const longest = lengths[lengths.length - 1]!;
  const modelDir = sizes.model === 'tiny' ? ensureDemo().modelDir : miniModelDir('encoder', ctx.log);
  ctx.log(`arlo: testbed, starting two native runtime workers on the ${sizes.model} encoder (${modelDir})`);
  // startInstances pins the native kernels to one thread each (TESSERA_THREADS=1) before the workers load them; restored after.
  const threadsBefore = process.env.TESSERA_THREADS;
  let real: ThreadRuntime[];
  try {
    real = (await startInstances({ kind: 'native', modelDir, placement: [longest, longest], workers: 2, maxBatch: 1 })).real;
  } finally {
    if (threadsBefore === undefined) delete process.env.TESSERA_THREADS;
    else process.env.TESSERA_THREADS = threadsBefore;
  }
  try {
    const vocabSize = real[0]!.model.vocabSize;
    const trace = generateArloTrace({ kind: 'stable', ratePerSec: sizes.ratePerSec, durationMs: sizes.durationMs, seed: sizes.seed, lengths: { scaleTo: longest } });
    // Each scheme's prior is the simulator's own (same sample, same seed), so both solve the same program.
    const priorSample = Array.from(twitterLengthSample(PRIOR_SAMPLE, (trace.seed + 1) >>> 0, trace.lengthOptions));
    const runs: TestbedRun[] = [];
    // Profiles bracket every run: one before the first and one after each. The free CPU of a shared host drifts
    // (the mini encoder's 128-token time moved from 138 to 102 ms within one minute on an idle 2-vCPU VM), so the
    // simulator is given the mean of the profiles just before and just after the run it predicts. The service
    // allocates from the one before (the only one it can know), and the SLO comes from it for both.
    const profileNow = async (what: string): Promise<Calibration> => {
      ctx.log(`arlo: testbed, profiling ${lengths.join(', ')} (${sizes.profileReps} runs each, each instance alone and both at once) ${what}`);
      return calibrate(real, lengths, sizes, vocabSize);
    };
    const calibrations: Calibration[] = [await profileNow('before the first run')];
    for (let repeat = 0; repeat < sizes.repeats; repeat++) {
      for (const scheme of TESTBED_SCHEMES) {
        const before = calibrations.at(-1)!;
        const meanMsOf = (length: number) => before.table.find((p) => p.length === length)!.meanMs;
        const policy = schedulingPolicy(scheme, lengths);
        const profiles = policy.lengths.map((l) => makeRuntimeProfile({ maxLength: l, serviceMs: meanMsOf(l), overheadMs: before.overheadMs, sloMs: before.sloMs }));
        const prior = priorFromLengths(policy.lengths, priorSample, trace.ratePerSec, before.sloMs);
        // Every scheme starts from both instances at the longest length (valid for each); its allocation moves them.
        await Promise.all(real.map((r) => r.retarget(longest)));
        const service = new ArloService({
          lengths: policy.lengths,
          profiles,
          instances: real.map((r) => new LentRuntime(r)),
          sloMs: before.sloMs,
          priorQ: prior,
          policy: policy.dispatch,
          solver: policy.solver(),
          periodMs: 10 * sizes.durationMs,
        });
        let decision: Awaited<ReturnType<ArloService['solve']>>;
        let measured: Awaited<ReturnType<typeof replay>>;
        try {
          decision = await service.solve(prior);
          ctx.log(`arlo: testbed, ${LABEL[scheme]} (repeat ${repeat + 1}/${sizes.repeats}): allocation [${decision.result.instances.join(', ')}], ${trace.arrivalMs.length} requests`);
          measured = await replay(service, trace, vocabSize);
        } finally {
          await service.close();
        }
        const after = await profileNow(`after ${LABEL[scheme]} (repeat ${repeat + 1})`);
        calibrations.push(after);
        const cal = blend(before, after);
        const profileOf = (c: Calibration) =>
          measuredLatencyProfile(`native-${sizes.model}`, c.table.map((p) => ({ length: p.length, batch: 1, ms: p.meanMs })), { sloMs: before.sloMs, maxLength: longest });
        const simulated = await runArloSimulation({
          scheme,
          instances: 2,
          trace,
          // It plans with the profile and the per-request overhead the service had (so both solve the same program:
          // the simulator has one overhead for planning and running, and the blended one could flip a near-tie
          // between allocations) and runs at the mean of the profiles before and after the run.
          profile: profileOf(before),
          serviceProfile: profileOf(cal),
          sloMs: before.sloMs,
          runtimes: lengths,
          overheadMs: before.overheadMs,
          dynamicPenalty: 'none',
          jitterSigma: cal.jitterSigma,
          concurrencySlowdown: [1, cal.pairedSlowdown],
          periodMs: 10 * sizes.durationMs, // the initial allocation only, as the real runs
          swapMs: 0,
        });
        runs.push({ scheme, repeat, sloMs: before.sloMs, allocation: [...decision.result.instances], simulated, ...measured });
      }
    }
    return summarize({ sizes, trace, runs, calibrations });
  } finally {
    await Promise.allSettled(real.map((r) => r.close()));
  }
}

function mean(xs: ArrayLike<number>): number {
  let sum = 0;
  for (let k = 0; k < xs.length; k++) sum += xs[k]!;
  return xs.length === 0 ? NaN : sum / xs.length;
}

interface SummaryInput {
  sizes: TestbedSizes;
  trace: ArloTrace;
  runs: TestbedRun[];
  /** The profiles in the order taken: one before the first run, then one after each run. */
  calibrations: Calibration[];
}

const distinct = (xs: readonly string[]) => [...new Set(xs)].join('; ');

/** Rows (one per run, one summary per scheme), the ratios, the table and the chart. */
export function summarize({ sizes, trace, runs, calibrations }: SummaryInput): TestbedResult {
  const rows: Row[] = [];
  for (const run of runs) {
    const lat = Array.from(run.latencyMs);
    const measuredMean = mean(lat);
    const sim = run.simulated;
    rows.push({
      figure: 'testbed-run',
      scheme: run.scheme,
      repeat: run.repeat,
      requests: lat.length,
      slo_ms: run.sloMs,
      mean_ms: measuredMean,
      p50_ms: percentile(lat, 50),
      p98_ms: percentile(lat, 98),
      mean_queue_ms: mean(run.queueMs),
      mean_exec_ms: mean(run.execMs),
      mean_padded_to: mean(run.paddedTo),
      allocation: run.allocation.join(','),
      sim_mean_ms: sim.latency.meanMs,
      sim_p98_ms: sim.latency.p98Ms,
      sim_utilization: sim.utilization,
      sim_allocation: sim.allocations[0]!.instances.join(','),
      fidelity_mean: Math.abs(sim.latency.meanMs - measuredMean) / measuredMean,
    });
  }
  const summary: Row[] = [];
  const measuredMean = new Map<TestbedScheme, number>();
  for (const scheme of TESTBED_SCHEMES) {
    const mine = rows.filter((r) => r.scheme === scheme && r.figure === 'testbed-run');
    if (mine.length === 0) continue;
    const med = (key: string) => median(mine.map((r) => r[key] as number));
    measuredMean.set(scheme, med('mean_ms'));
    summary.push({
      figure: 'testbed',
      scheme,
      label: LABEL[scheme],
      requests: trace.arrivalMs.length,
      repeats: mine.length,
      mean_ms: med('mean_ms'),
      p50_ms: med('p50_ms'),
      p98_ms: med('p98_ms'),
      mean_queue_ms: med('mean_queue_ms'),
      mean_exec_ms: med('mean_exec_ms'),
      sim_mean_ms: med('sim_mean_ms'),
      sim_p98_ms: med('sim_p98_ms'),
      sim_utilization: med('sim_utilization'),
      // Each repeat's prediction against its own measurement (same profile), then the median over repeats.
      fidelity_mean: med('fidelity_mean'),
      allocation: distinct(mine.map((r) => r.allocation as string)),
      sim_allocation: distinct(mine.map((r) => r.sim_allocation as string)),
    });
  }
  rows.push(...summary);
  const ratios: Record<string, number> = {};
  const st = measuredMean.get('st');
  const arlo = measuredMean.get('arlo');
  const ilb = measuredMean.get('ilb');
  if (st !== undefined && arlo !== undefined) ratios.real_mean_vs_st = arlo / st;
  if (ilb !== undefined && arlo !== undefined) ratios.real_mean_vs_ilb = arlo / ilb;
  for (const row of summary) {
    const key = row.scheme === 'arlo' ? 'sim_fidelity_mean' : `sim_fidelity_mean_${row.scheme as string}`;
    ratios[key] = row.fidelity_mean as number;
  }
  const fmt = (v: number | undefined) => (v === undefined ? '-' : Number(v.toPrecision(3)).toString());
  const verdict = (ok: boolean | undefined) => (ok === undefined ? 'not measured' : ok ? 'met' : 'NOT met');
  const range = (xs: number[]) => (Math.min(...xs) === Math.max(...xs) ? fmt(xs[0]) : `${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}`);
  const profileText = sizes.lengths.map((l, i) => `${l}: ${range(calibrations.map((c) => c.table[i]!.meanMs))} ms`).join(', ');
  const calText = `worker round trip ${range(calibrations.map((c) => c.overheadMs))} ms; SLO ${range(calibrations.map((c) => c.sloMs))} ms (${sizes.sloFactor} × the longest); simulator jitter σ ${range(calibrations.map((c) => c.jitterSigma))} (from mean / p50)`;
  const tableSpec: TableSpec = {
    columns: [
      { key: 'label', header: 'scheme' },
      { key: 'allocation', header: 'N (real)' },
      { key: 'sim_allocation', header: 'N (sim)' },
      { key: 'mean_ms', header: 'mean ms' },
      { key: 'p50_ms', header: 'p50 ms' },
      { key: 'p98_ms', header: 'p98 ms' },
      { key: 'mean_queue_ms', header: 'queue ms' },
      { key: 'mean_exec_ms', header: 'exec ms' },
      { key: 'sim_mean_ms', header: 'sim mean ms' },
      { key: 'sim_p98_ms', header: 'sim p98 ms' },
      { key: 'fidelity_mean', header: '|sim − real| / real' },
    ],
    rows: summary,
    notes: [
      `Real mini testbed (Figs. 6–7 analogue): two native runtime workers (one thread each) on the ${sizes.model} encoder, runtimes ${sizes.lengths.join(', ')}; ${trace.arrivalMs.length} requests, Poisson at ${sizes.ratePerSec} req/s for ${sizes.durationMs / 1000} s (Twitter length mix scaled to ${sizes.lengths.at(-1)}, seed ${sizes.seed}); medians of ${sizes.repeats} alternating repeat(s).`,
      `Profiled before the first run and after each (each instance alone, ${sizes.profileReps} runs each; range over the ${calibrations.length} profiles): ${profileText}; both at once, each ${range(calibrations.map((c) => c.pairedSlowdown))}× slower (the simulator's concurrencySlowdown); ${calText}. Each run is predicted from the mean of the profiles before and after it; fidelity is that prediction against the run, median over repeats.`,
      `Arlo mean / ST mean (measured): ${fmt(ratios.real_mean_vs_st)} (target < ${TARGETS.realVsSt}: ${verdict(ratios.real_mean_vs_st === undefined ? undefined : ratios.real_mean_vs_st < TARGETS.realVsSt)}).`,
      `Simulator vs measured Arlo mean: ${fmt(ratios.sim_fidelity_mean)} (target ≤ ${TARGETS.fidelity}: ${verdict(ratios.sim_fidelity_mean === undefined ? undefined : ratios.sim_fidelity_mean <= TARGETS.fidelity)}). The paper: 4.3 % and 2.6 %; here the load generator, Node's event loop and other jobs share the cores with the two workers.`,
    ],
  };
  const shown = summary.map((r) => r.label as string);
  const svg = barChart({
    title: `Real testbed: 2 native instances, ${sizes.ratePerSec} req/s (measured vs simulated)`,
    categories: shown,
    yLabel: 'latency ms',
    series: [
      { name: 'mean (measured)', values: summary.map((r) => r.mean_ms as number) },
      { name: 'mean (simulated)', values: summary.map((r) => r.sim_mean_ms as number) },
      { name: 'p98 (measured)', values: summary.map((r) => r.p98_ms as number) },
      { name: 'p98 (simulated)', values: summary.map((r) => r.sim_p98_ms as number) },
    ],
  });
  return {
    rows,
    ratios,
    tables: [tableSpec],
    svgs: { testbed: svg },
    params: { testbed: { ...sizes, calibrations } },
  };
}
