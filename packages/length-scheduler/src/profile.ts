/**
 * Runtime profiles (arlo.md §4, §6.4): a runtime's service time t_i, its capacity within the SLO M_i = ⌊SLO/t_i⌋,
 * and 𝓛_i(B), the mean latency when one instance takes B requests per SLO window. The allocation program prices a
 * runtime by g_i(B) = B·𝓛_i(B); its exact solvers need g non-decreasing and the HiGHS one needs it convex, which
 * every model here is (the table takes the lower convex envelope of noisy measurements).
 *
 * The offline profiler drives a caller-supplied `measure(length, batch)` (the runtime, its worker, its timer) and
 * does no compute itself, so the same code profiles an ONNX session, the native encoder or a simulated executor.
 */
import { LengthSchedulerArgumentError } from './errors.js';
import type { LatencyPoint } from './lengths.js';

/** 𝓛(B) in ms for B ≥ 0 requests per SLO window on one instance. */
export type LatencyAtLoad = (load: number) => number;

export interface RuntimeProfile {
  /** ℓ_i: the padded length of the runtime. */
  readonly maxLength: number;
  /** t_i: one request's service time (ms), fixed per-request overhead included. */
  readonly serviceMs: number;
  /** M_i = ⌊SLO / t_i⌋: requests one instance can finish within one SLO window. */
  readonly capacity: number;
  /** 𝓛_i(B): mean latency (ms) at B requests per SLO window per instance. */
  readonly latencyAtLoad: LatencyAtLoad;
}

/** How 𝓛 is built from t and the SLO; a measured table is {@link tableLatency}. */
export type LatencyModelName = 'md1' | 'batch-arrival';

export interface Md1Options {
  /** Utilisation where the M/D/1 curve stops and a straight line (its tangent in B·𝓛) continues. Default 0.97. */
  rhoCap?: number;
}

/**
 * M/D/1 (the default, §6.4): Poisson arrivals at B/SLO, deterministic service t, ρ = B·t/SLO,
 * 𝓛(B) = t + ρt / (2(1−ρ)). It blows up as ρ → 1, so beyond `rhoCap` g(B) = B·𝓛(B) goes on along its tangent:
 * steep, finite, still convex, so an overloaded runtime has a price the solvers can compare.
 */
export function md1Latency(serviceMs: number, sloMs: number, options: Md1Options = {}): LatencyAtLoad {
  checkPositive(serviceMs, 'serviceMs');
  checkPositive(sloMs, 'sloMs');
  const rhoCap = options.rhoCap ?? 0.97;
  if (!(rhoCap > 0 && rhoCap < 1)) throw new LengthSchedulerArgumentError(`rhoCap must be in (0, 1), got ${rhoCap}`);
  const t = serviceMs;
  const loadCap = (rhoCap * sloMs) / t;
  const latencyBelowCap = (load: number): number => {
    const rho = (load * t) / sloMs;
    return t + (rho * t) / (2 * (1 - rho));
  };
  // g(B) = B t + B ρ t / (2(1 − ρ)); g'(B) = t + t ρ (2 − ρ) / (2 (1 − ρ)²).
  const gCap = loadCap * latencyBelowCap(loadCap);
  const slopeCap = t + (t * rhoCap * (2 - rhoCap)) / (2 * (1 - rhoCap) ** 2);
  return (load) => {
    if (load <= loadCap) return latencyBelowCap(load);
    return (gCap + slopeCap * (load - loadCap)) / load;
  };
}

/**
 * The batch-arrival reading of Fig. 4: B requests queued at once finish at t, 2t, …, Bt, so 𝓛(B) = t(B+1)/2.
 * Kept for comparison; it lets the optimiser run instances near 100 % and gave long tails in the prototype (§6.4).
 */
export function batchArrivalLatency(serviceMs: number): LatencyAtLoad {
  checkPositive(serviceMs, 'serviceMs');
  return (load) => (serviceMs * (load + 1)) / 2;
}

/** One measured point of 𝓛: at `load` requests per SLO window, the mean latency was `ms`. */
export interface LoadLatencyPoint {
  load: number;
  ms: number;
}

/**
 * 𝓛 from measured points (e.g. Poisson arrivals replayed at load B/SLO against one instance). Works on
 * g(B) = B·𝓛(B) through (0, 0): takes the lower convex envelope of the points (noise must not make g non-convex),
 * interpolates g linearly and extends it past the last point with the last slope.
 */
export function tableLatency(points: readonly LoadLatencyPoint[]): LatencyAtLoad {
  if (points.length === 0) throw new LengthSchedulerArgumentError('tableLatency needs at least one point');
  const sorted = [...points].sort((a, b) => a.load - b.load);
  for (const p of sorted) {
    if (!(Number.isFinite(p.load) && p.load > 0)) throw new LengthSchedulerArgumentError(`table load must be finite and > 0, got ${p.load}`);
    if (!(Number.isFinite(p.ms) && p.ms > 0)) throw new LengthSchedulerArgumentError(`table latency must be finite and > 0, got ${p.ms} at load ${p.load}`);
  }
  // Lower convex hull (monotone chain) of (0,0) and (B, B·𝓛(B)).
  const xs: number[] = [0];
  const ys: number[] = [0];
  const merged: { x: number; y: number }[] = [];
  for (const p of sorted) {
    const y = p.load * p.ms;
    const last = merged[merged.length - 1];
    if (last !== undefined && last.x === p.load) last.y = Math.min(last.y, y);
    else merged.push({ x: p.load, y });
  }
  for (const { x, y } of merged) pushHull(xs, ys, x, y);
  const lastSlope = xs.length >= 2 ? (ys[ys.length - 1]! - ys[ys.length - 2]!) / (xs[xs.length - 1]! - xs[xs.length - 2]!) : 0;
  const firstMs = xs.length >= 2 ? ys[1]! / xs[1]! : sorted[0]!.ms;
  return (load) => {
    if (load <= 0) return firstMs;
    const n = xs.length;
    if (load >= xs[n - 1]!) return (ys[n - 1]! + lastSlope * (load - xs[n - 1]!)) / load;
    let k = 1;
    while (xs[k]! < load) k++;
    const x0 = xs[k - 1]!;
    const x1 = xs[k]!;
    const g = ys[k - 1]! + ((ys[k]! - ys[k - 1]!) * (load - x0)) / (x1 - x0);
    return g / load;
  };
}

function pushHull(xs: number[], ys: number[], x: number, y: number): void {
  while (xs.length >= 2) {
    const n = xs.length;
    const x1 = xs[n - 2]!;
    const y1 = ys[n - 2]!;
    const x2 = xs[n - 1]!;
    const y2 = ys[n - 1]!;
    // Drop the middle point when it lies on or above the chord from (x1,y1) to (x,y).
    if ((y2 - y1) * (x - x1) >= (y - y1) * (x2 - x1)) {
      xs.pop();
      ys.pop();
    } else break;
  }
  xs.push(x);
  ys.push(y);
}

export interface RuntimeProfileInit {
  maxLength: number;
  /** Measured mean service time (ms) of one request, before `overheadMs`. */
  serviceMs: number;
  sloMs: number;
  /** Fixed per-request overhead added to the service time before M is computed (the paper's simulator: 0.8 ms). */
  overheadMs?: number;
  /** 'md1' (default), 'batch-arrival', or a measured 𝓛 (e.g. {@link tableLatency}). */
  latency?: LatencyModelName | LatencyAtLoad;
}

/** A profile from a service time: M = ⌊SLO/t⌋ with the overhead included (§4: leaving it out over-fills instances). */
export function makeRuntimeProfile(init: RuntimeProfileInit): RuntimeProfile {
  if (!Number.isInteger(init.maxLength) || init.maxLength < 1) throw new LengthSchedulerArgumentError(`maxLength must be a positive integer, got ${init.maxLength}`);
  checkPositive(init.serviceMs, 'serviceMs');
  checkPositive(init.sloMs, 'sloMs');
  const overheadMs = init.overheadMs ?? 0;
  if (!(overheadMs >= 0)) throw new LengthSchedulerArgumentError(`overheadMs must be >= 0, got ${overheadMs}`);
  const serviceMs = init.serviceMs + overheadMs;
  const capacity = Math.floor(init.sloMs / serviceMs);
  if (capacity < 1) {
    throw new LengthSchedulerArgumentError(`runtime ${init.maxLength}: service time ${serviceMs} ms exceeds the SLO of ${init.sloMs} ms (capacity 0)`);
  }
  const model = init.latency ?? 'md1';
  const latencyAtLoad = typeof model === 'function' ? model : model === 'md1' ? md1Latency(serviceMs, init.sloMs) : batchArrivalLatency(serviceMs);
  return { maxLength: init.maxLength, serviceMs, capacity, latencyAtLoad };
}

/** Times one run of a runtime on an input of shape [batch, length]; returns the elapsed ms (the caller's timer). */
export type MeasureRun = (length: number, batch: number) => number | Promise<number>;

export interface ProfilerOptions {
  /** Runtime lengths to profile, ascending. */
  lengths: readonly number[];
  measure: MeasureRun;
  sloMs: number;
  /** Batch size of each run; Arlo's runtimes use 1 (§3.2). */
  batch?: number;
  /** Unmeasured runs first (default 10). */
  warmup?: number;
  /** Measured runs (default 100). */
  reps?: number;
  overheadMs?: number;
  latency?: LatencyModelName;
}

/** A profile with the measurement it came from. */
export interface MeasuredRuntimeProfile extends RuntimeProfile {
  /** Mean, median and p99 of the measured runs (ms, overhead not included). */
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
  reps: number;
}

/** The offline profiler (§4, §9-B): warms each runtime up, times `reps` runs, and builds its profile. */
export async function profileRuntimes(options: ProfilerOptions): Promise<MeasuredRuntimeProfile[]> {
  const batch = options.batch ?? 1;
  const warmup = options.warmup ?? 10;
  const reps = options.reps ?? 100;
  if (!Number.isInteger(batch) || batch < 1) throw new LengthSchedulerArgumentError(`batch must be a positive integer, got ${batch}`);
  if (!Number.isInteger(warmup) || warmup < 0) throw new LengthSchedulerArgumentError(`warmup must be a non-negative integer, got ${warmup}`);
  if (!Number.isInteger(reps) || reps < 1) throw new LengthSchedulerArgumentError(`reps must be a positive integer, got ${reps}`);
  const out: MeasuredRuntimeProfile[] = [];
  for (const length of options.lengths) {
    const samples = await measureMany(options.measure, length, batch, warmup, reps);
    const meanMs = samples.reduce((a, b) => a + b, 0) / samples.length;
    const profile = makeRuntimeProfile({
      maxLength: length,
      serviceMs: meanMs,
      sloMs: options.sloMs,
      ...(options.overheadMs === undefined ? {} : { overheadMs: options.overheadMs }),
      ...(options.latency === undefined ? {} : { latency: options.latency }),
    });
    out.push({ ...profile, meanMs, p50Ms: quantileSorted(samples, 0.5), p99Ms: quantileSorted(samples, 0.99), reps });
  }
  return out;
}

export interface LatencyCurveOptions {
  /** Lengths to measure, ascending (e.g. 8, 16, …, 512). */
  lengths: readonly number[];
  measure: MeasureRun;
  batch?: number;
  warmup?: number;
  reps?: number;
}

/** The static-shape latency curve t(ℓ) (median of `reps` runs per length, robust to stray slow runs) for {@link chooseRuntimeLengths}. */
export async function profileLatencyCurve(options: LatencyCurveOptions): Promise<LatencyPoint[]> {
  const batch = options.batch ?? 1;
  const warmup = options.warmup ?? 3;
  const reps = options.reps ?? 20;
  if (!Number.isInteger(reps) || reps < 1) throw new LengthSchedulerArgumentError(`reps must be a positive integer, got ${reps}`);
  const out: LatencyPoint[] = [];
  for (const length of options.lengths) {
    const samples = await measureMany(options.measure, length, batch, warmup, reps);
    out.push({ length, ms: quantileSorted(samples, 0.5) });
  }
  return out;
}

async function measureMany(measure: MeasureRun, length: number, batch: number, warmup: number, reps: number): Promise<number[]> {
  if (!Number.isInteger(length) || length < 1) throw new LengthSchedulerArgumentError(`profile length must be a positive integer, got ${length}`);
  for (let k = 0; k < warmup; k++) await measure(length, batch);
  const samples: number[] = [];
  for (let k = 0; k < reps; k++) {
    const ms = await measure(length, batch);
    if (!(Number.isFinite(ms) && ms >= 0)) throw new LengthSchedulerArgumentError(`measure(${length}, ${batch}) returned ${ms}; expected elapsed ms >= 0`);
    samples.push(ms);
  }
  return samples.sort((a, b) => a - b);
}

/** Nearest-rank quantile of an ascending array. */
export function quantileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

function checkPositive(value: number, name: string): void {
  if (!(Number.isFinite(value) && value > 0)) throw new LengthSchedulerArgumentError(`${name} must be finite and > 0, got ${value}`);
}
