/**
 * Workload traces for the cluster experiment (Punica Fig. 13, punica.md §10.3): Poisson arrivals whose rate
 * follows a profile (ramp up, plateau, ramp down), each request with a prompt length, an output length and an
 * adapter drawn from a popularity distribution. Everything is drawn from seeded streams ({@link substream}):
 * arrival times, lengths and adapters each from their own, so the same seed gives the same trace and changing
 * the length distribution leaves the arrival times alone.
 *
 * Arrivals of a non-homogeneous Poisson process come from thinning (Lewis & Shedler): candidates from a
 * homogeneous process at the profile's maximum rate, each kept with probability rate(t) / max.
 */
import { SimArgumentError } from './errors.js';
import { type Random, exponential, standardNormal, substream, uniformInt } from './random.js';

/** Zipf's α in every Punica experiment (the same value as @tessera/sgmv-kernel's DEFAULT_ZIPF_ALPHA). */
export const DEFAULT_ZIPF_ALPHA = 1.5;

/** A request rate over time: arrivals per second at virtual time t (ms). */
export interface RateProfile {
  rate(tMs: number): number;
  /** An upper bound of rate(t) over [0, durationMs] (the thinning envelope). */
  maxPerSec: number;
  durationMs: number;
}

export interface RampProfileOptions {
  /** Arrivals per second on the plateau. */
  peakPerSec: number;
  durationMs: number;
  /** Fraction of the duration spent ramping up from basePerSec to the peak (default 0.4). */
  rampUpFrac?: number;
  /** Fraction spent at the peak (default 0.2); the rest ramps back down to basePerSec. */
  plateauFrac?: number;
  /** Rate at t = 0 and at the end (default 0). */
  basePerSec?: number;
}

/** A piecewise-linear ramp: base → peak (up), peak (plateau), peak → base (down); `peakAtMs` = the plateau's start. */
export interface RampProfile extends RateProfile {
  readonly peakPerSec: number;
  readonly basePerSec: number;
  readonly upEndMs: number;
  readonly downStartMs: number;
}

export function rampProfile(options: RampProfileOptions): RampProfile {
  const { peakPerSec, durationMs } = options;
  const up = options.rampUpFrac ?? 0.4;
  const plateau = options.plateauFrac ?? 0.2;
  const base = options.basePerSec ?? 0;
  if (!(peakPerSec > 0) || !Number.isFinite(peakPerSec)) throw new SimArgumentError(`rampProfile: peakPerSec must be a positive number, got ${peakPerSec}`);
  if (!(durationMs > 0) || !Number.isFinite(durationMs)) throw new SimArgumentError(`rampProfile: durationMs must be positive, got ${durationMs}`);
  if (!(up >= 0 && plateau >= 0 && up + plateau <= 1)) {
    throw new SimArgumentError(`rampProfile: rampUpFrac (${up}) and plateauFrac (${plateau}) must be >= 0 and sum to at most 1`);
  }
  if (!(base >= 0 && base <= peakPerSec)) throw new SimArgumentError(`rampProfile: basePerSec must be in [0, peakPerSec], got ${base}`);
  const upEndMs = up * durationMs;
  const downStartMs = (up + plateau) * durationMs;
  const downMs = durationMs - downStartMs;
  return {
    peakPerSec,
    basePerSec: base,
    upEndMs,
    downStartMs,
    durationMs,
    maxPerSec: peakPerSec,
    rate(t: number): number {
      if (t < 0 || t > durationMs) return 0;
      if (t < upEndMs) return base + ((peakPerSec - base) * t) / upEndMs;
      if (t <= downStartMs || downMs === 0) return peakPerSec;
      return base + ((peakPerSec - base) * (durationMs - t)) / downMs;
    },
  };
}

/** A constant rate over [0, durationMs]. */
export function constantProfile(perSec: number, durationMs: number): RateProfile {
  if (!(perSec > 0) || !Number.isFinite(perSec)) throw new SimArgumentError(`constantProfile: rate must be a positive number, got ${perSec}`);
  if (!(durationMs > 0)) throw new SimArgumentError(`constantProfile: durationMs must be positive, got ${durationMs}`);
  return { rate: (t) => (t >= 0 && t <= durationMs ? perSec : 0), maxPerSec: perSec, durationMs };
}

/** Any rate function, with its bound (rate(t) must never exceed maxPerSec; it is checked as arrivals are drawn). */
export function rateProfile(rate: (tMs: number) => number, options: { maxPerSec: number; durationMs: number }): RateProfile {
  if (!(options.maxPerSec > 0)) throw new SimArgumentError(`rateProfile: maxPerSec must be positive, got ${options.maxPerSec}`);
  if (!(options.durationMs > 0)) throw new SimArgumentError(`rateProfile: durationMs must be positive, got ${options.durationMs}`);
  return { rate, maxPerSec: options.maxPerSec, durationMs: options.durationMs };
}

/** Expected arrivals in [fromMs, toMs] (trapezoid rule over `steps` pieces): ∫ rate(t) dt. */
export function expectedArrivals(profile: RateProfile, fromMs = 0, toMs = profile.durationMs, steps = 10_000): number {
  const h = (toMs - fromMs) / steps;
  let sum = 0;
  for (let i = 0; i <= steps; i++) {
    const w = i === 0 || i === steps ? 0.5 : 1;
    sum += w * profile.rate(fromMs + i * h);
  }
  return (sum * h) / 1000;
}

/** Arrival times (ms, increasing) of a Poisson process with the profile's rate over [0, durationMs], by thinning. */
export function poissonArrivals(profile: RateProfile, random: Random): number[] {
  const { maxPerSec, durationMs } = profile;
  const meanGapMs = 1000 / maxPerSec;
  const times: number[] = [];
  for (let t = exponential(random, meanGapMs); t <= durationMs; t += exponential(random, meanGapMs)) {
    const r = profile.rate(t);
    if (r > maxPerSec * (1 + 1e-9)) throw new SimArgumentError(`poissonArrivals: rate(${t}) = ${r} exceeds the profile's maxPerSec ${maxPerSec}`);
    if (random() * maxPerSec < r) times.push(t);
  }
  return times;
}

// ─── lengths ─────────────────────────────────────────────────────────────────────────────────────────────────

/**
 * Prompt and output lengths in tokens.
 * - 'punica-synthetic' (default, maxLength 2048): the Punica repo's generate_request_set (punica.md §10.1): prompt ~
 *   −1 + 18·exp(0.8·Z) (a lognormal with σ 0.8, loc −1, scale 18; mean ≈ 24), rounded and clipped to
 *   [1, maxLength − 2]; total ~ Uniform{0 … maxLength − 1}, at least prompt + 2; output = total − prompt (mean ≈
 *   maxLength / 2). The paper says ShareGPT; the public repo draws this, so it stands in for it.
 * - 'uniform': prompt and output uniform integers in [min, max].
 * - 'fixed': every request the same.
 */
export type LengthDistribution =
  | { kind: 'punica-synthetic'; maxLength?: number }
  | { kind: 'uniform'; prompt: readonly [number, number]; output: readonly [number, number] }
  | { kind: 'fixed'; prompt: number; output: number };

export const DEFAULT_LENGTHS: LengthDistribution = { kind: 'punica-synthetic', maxLength: 2048 };

/** The longest prompt + output a distribution can draw (what a GPU's KV budget must hold). */
export function maxSequenceLength(lengths: LengthDistribution): number {
  switch (lengths.kind) {
    case 'punica-synthetic':
      return (lengths.maxLength ?? 2048) - 1;
    case 'uniform':
      return lengths.prompt[1] + lengths.output[1];
    case 'fixed':
      return lengths.prompt + lengths.output;
  }
}

function checkLengths(lengths: LengthDistribution): void {
  const positive = (what: string, v: number, min = 1) => {
    if (!Number.isSafeInteger(v) || v < min) throw new SimArgumentError(`lengths: ${what} must be an integer >= ${min}, got ${v}`);
  };
  switch (lengths.kind) {
    case 'punica-synthetic':
      positive('maxLength', lengths.maxLength ?? 2048, 4);
      return;
    case 'uniform':
      positive('prompt min', lengths.prompt[0]);
      positive('output min', lengths.output[0]);
      if (lengths.prompt[1] < lengths.prompt[0] || lengths.output[1] < lengths.output[0]) {
        throw new SimArgumentError(`lengths: a [min, max] range has max < min (${JSON.stringify(lengths)})`);
      }
      return;
    case 'fixed':
      positive('prompt', lengths.prompt);
      positive('output', lengths.output);
      return;
    default:
      throw new SimArgumentError(`lengths: unknown kind ${JSON.stringify((lengths as { kind: unknown }).kind)}`);
  }
}

/** One (prompt, output) draw. */
export function drawLengths(lengths: LengthDistribution, random: Random): { prompt: number; output: number } {
  switch (lengths.kind) {
    case 'punica-synthetic': {
      const maxLength = lengths.maxLength ?? 2048;
      const raw = Math.round(-1 + 18 * Math.exp(0.8 * standardNormal(random)));
      const prompt = Math.min(Math.max(raw, 1), maxLength - 2);
      const total = Math.max(uniformInt(random, 0, maxLength - 1), prompt + 2);
      return { prompt, output: total - prompt };
    }
    case 'uniform':
      return { prompt: uniformInt(random, lengths.prompt[0], lengths.prompt[1]), output: uniformInt(random, lengths.output[0], lengths.output[1]) };
    case 'fixed':
      return { prompt: lengths.prompt, output: lengths.output };
  }
}

// ─── popularity ──────────────────────────────────────────────────────────────────────────────────────────────

/**
 * Which adapter a request uses (punica.md §10.1, the paper's definitions, per request):
 * - distinct: every request its own adapter;
 * - uniform: one of `adapters` equally likely;
 * - zipf: adapter i (0 = most popular) with probability ∝ α^−i over `adapters`: "the number of requests to the
 *   i-th most popular model is α times that of the (i+1)-th" (α = 1.5 in every experiment);
 * - identical: every request adapter 0.
 * @tessera/sgmv-kernel's generators split a fixed batch into exact segment sizes (§9.8); a trace of arrivals
 * needs a per-request draw instead, so these are the same definitions drawn per request.
 */
export type Popularity =
  | { kind: 'distinct' }
  | { kind: 'uniform'; adapters: number }
  | { kind: 'zipf'; adapters: number; alpha?: number }
  | { kind: 'identical' };

/** Adapter names: `lora-0000`, `lora-0001`, … (rank order: lora-0000 is the most popular under zipf). */
export function adapterName(index: number): string {
  return `lora-${String(index).padStart(4, '0')}`;
}

/** A sampler of adapter indices for a popularity (distinct returns the request's own index). */
export function popularitySampler(popularity: Popularity, random: Random): (requestIndex: number) => number {
  switch (popularity.kind) {
    case 'distinct':
      return (i) => i;
    case 'identical':
      return () => 0;
    case 'uniform': {
      const k = popularity.adapters;
      if (!Number.isSafeInteger(k) || k < 1) throw new SimArgumentError(`popularity: uniform needs adapters >= 1, got ${k}`);
      return () => Math.floor(random() * k);
    }
    case 'zipf': {
      const k = popularity.adapters;
      const alpha = popularity.alpha ?? DEFAULT_ZIPF_ALPHA;
      if (!Number.isSafeInteger(k) || k < 1) throw new SimArgumentError(`popularity: zipf needs adapters >= 1, got ${k}`);
      if (!(alpha > 1) || !Number.isFinite(alpha)) throw new SimArgumentError(`popularity: zipf alpha must be > 1, got ${alpha}`);
      // Cumulative weights α^−i, searched by bisection.
      const cdf = new Float64Array(k);
      let sum = 0;
      for (let i = 0; i < k; i++) cdf[i] = sum += alpha ** -i;
      return () => {
        const u = random() * sum;
        let lo = 0;
        let hi = k - 1;
        while (lo < hi) {
          const mid = (lo + hi) >> 1;
          if (cdf[mid]! > u) hi = mid;
          else lo = mid + 1;
        }
        return lo;
      };
    }
    default:
      throw new SimArgumentError(`popularity: unknown kind ${JSON.stringify((popularity as { kind: unknown }).kind)}`);
  }
}

// ─── traces ──────────────────────────────────────────────────────────────────────────────────────────────────

export interface TraceRequest {
  /** `req-000000`, … in arrival order. */
  id: string;
  index: number;
  atMs: number;
  adapter: string;
  promptTokens: number;
  outputTokens: number;
}

export interface TraceOptions {
  profile: RateProfile;
  /** Default zipf-1.5 over 100 adapters. */
  popularity?: Popularity;
  /** Default {@link DEFAULT_LENGTHS}. */
  lengths?: LengthDistribution;
  seed?: number;
}

export const DEFAULT_POPULARITY: Popularity = { kind: 'zipf', adapters: 100, alpha: DEFAULT_ZIPF_ALPHA };

/** Substream indices of a trace's seed. */
const STREAM_ARRIVALS = 0;
const STREAM_LENGTHS = 1;
const STREAM_ADAPTERS = 2;

/** The requests of one run, in arrival order. Same options and seed → the same trace. */
export function generateTrace(options: TraceOptions): TraceRequest[] {
  const seed = options.seed ?? 0;
  const lengths = options.lengths ?? DEFAULT_LENGTHS;
  checkLengths(lengths);
  const times = poissonArrivals(options.profile, substream(seed, STREAM_ARRIVALS));
  const lengthRandom = substream(seed, STREAM_LENGTHS);
  const adapterOf = popularitySampler(options.popularity ?? DEFAULT_POPULARITY, substream(seed, STREAM_ADAPTERS));
  return times.map((atMs, index) => {
    const { prompt, output } = drawLengths(lengths, lengthRandom);
    return { id: `req-${String(index).padStart(6, '0')}`, index, atMs, adapter: adapterName(adapterOf(index)), promptTokens: prompt, outputTokens: output };
  });
}
