/**
 * Twitter-like request traces for the Arlo simulator (arlo.md §9-I, §10.1). The real Twitter trace cannot be
 * fetched, so it is substituted by:
 *
 * - arrivals: **Stable**, a Poisson process at the given rate (the paper: Poisson within each second of the trace);
 *   **Bursty**, a two-state Markov-modulated Poisson process (MMPP-2, the paper's [46, 47]): the rate switches
 *   between a high and a low level with exponential sojourns (mean 10 s, i.e. a switch probability of ≈0.1 per
 *   second), the levels `burstRatio` (2) apart and centred so that the long-run mean is the given rate. The MMPP
 *   parameters are not in the paper; these are ours.
 * - lengths: the Twitter mix, lognormal with median 21 tokens and σ 0.6 clipped to [1, 125] (p50 21, p98 ≈ 72,
 *   ≈80 % of FLOPs wasted when padded to 125: the paper's §2 facts), rescaled linearly to span 512
 *   (len' = round(len × 512 / 125)); short-term fluctuation multiplies the median by exp(N(0, σ_s)) once per second
 *   (σ_s 0.15, so that a 10-s p98 differs from a 10-min one by about the 20 % of Fig. 1); an optional slow drift of
 *   the median (a sine) for long traces.
 *
 * Arrival times, the MMPP's states, the per-second fluctuation and the lengths each come from their own seeded
 * stream, so the same seed gives the same trace and changing the length mix leaves the arrival times alone.
 */
import { SimArgumentError } from '../errors.js';
import { type Random, exponential, standardNormal, substream } from '../random.js';

export type ArloTraceKind = 'stable' | 'bursty';

export interface TwitterLengthOptions {
  /** Median of the raw (unscaled) lengths, tokens (default 21). */
  median?: number;
  /** σ of the lognormal (default 0.6). */
  sigma?: number;
  /** Raw lengths are clipped to this (default 125, the trace's longest tweet). */
  rawMax?: number;
  /** Raw lengths are rescaled to span this (default 512); equal to rawMax to keep them as they are. */
  scaleTo?: number;
  /** Per-second multiplicative fluctuation of the median, exp(N(0, σ_s)) (default 0.15; 0 for none). */
  fluctuationSigma?: number;
  /** Slow drift of the median: ±amplitude (fraction, default 0) over a sine of this period (default 1 h). */
  driftAmplitude?: number;
  driftPeriodMs?: number;
}

export interface BurstOptions {
  /** High rate over low rate (default 2, e.g. 1.33× and 0.67× the mean). */
  burstRatio?: number;
  /** Mean time in each state before switching (default 10 000 ms). */
  meanSojournMs?: number;
}

export interface ArloTraceOptions {
  kind: ArloTraceKind;
  /** Long-run mean arrivals per second. */
  ratePerSec: number;
  durationMs: number;
  seed: number;
  lengths?: TwitterLengthOptions;
  burst?: BurstOptions;
}

/** One MMPP state interval: the rate (req/s) from `startMs` to `endMs`. */
export interface RateInterval {
  startMs: number;
  endMs: number;
  ratePerSec: number;
}

export interface ArloTrace {
  readonly kind: ArloTraceKind;
  readonly ratePerSec: number;
  readonly durationMs: number;
  readonly seed: number;
  /** Arrival times (ms, non-decreasing). */
  readonly arrivalMs: Float64Array;
  /** Request lengths (tokens, in [1, scaleTo]). */
  readonly length: Int32Array;
  /** The rate's piecewise-constant course (one interval for Stable, the MMPP's sojourns for Bursty). */
  readonly rates: readonly RateInterval[];
  /** The longest possible length (scaleTo). */
  readonly maxLength: number;
  /** The length mix it was drawn from (for a prior: {@link twitterLengthSample}). */
  readonly lengthOptions: TwitterLengthOptions;
}

const STREAM_ARRIVALS = 1;
const STREAM_STATES = 2;
const STREAM_FLUCTUATION = 3;
const STREAM_LENGTHS = 4;

interface ResolvedLengths {
  median: number;
  sigma: number;
  rawMax: number;
  scaleTo: number;
  fluctuationSigma: number;
  driftAmplitude: number;
  driftPeriodMs: number;
}

function resolveLengths(o: TwitterLengthOptions = {}): ResolvedLengths {
  const r: ResolvedLengths = {
    median: o.median ?? 21,
    sigma: o.sigma ?? 0.6,
    rawMax: o.rawMax ?? 125,
    scaleTo: o.scaleTo ?? 512,
    fluctuationSigma: o.fluctuationSigma ?? 0.15,
    driftAmplitude: o.driftAmplitude ?? 0,
    driftPeriodMs: o.driftPeriodMs ?? 3_600_000,
  };
  if (!(r.median >= 1)) throw new SimArgumentError(`lengths.median must be >= 1, got ${r.median}`);
  if (!(r.sigma >= 0)) throw new SimArgumentError(`lengths.sigma must be >= 0, got ${r.sigma}`);
  if (!(Number.isInteger(r.rawMax) && r.rawMax >= 1)) throw new SimArgumentError(`lengths.rawMax must be a positive integer, got ${r.rawMax}`);
  if (!(Number.isInteger(r.scaleTo) && r.scaleTo >= 1)) throw new SimArgumentError(`lengths.scaleTo must be a positive integer, got ${r.scaleTo}`);
  if (!(r.fluctuationSigma >= 0)) throw new SimArgumentError(`lengths.fluctuationSigma must be >= 0, got ${r.fluctuationSigma}`);
  if (!(r.driftAmplitude >= 0 && r.driftAmplitude < 1)) throw new SimArgumentError(`lengths.driftAmplitude must be in [0, 1), got ${r.driftAmplitude}`);
  if (!(r.driftPeriodMs > 0)) throw new SimArgumentError(`lengths.driftPeriodMs must be > 0, got ${r.driftPeriodMs}`);
  return r;
}

/** One length from the mix with the given median: lognormal, clipped to [1, rawMax], rescaled to [1, scaleTo]. */
function drawLength(random: Random, median: number, o: ResolvedLengths): number {
  const raw = Math.min(o.rawMax, Math.max(1, Math.round(median * Math.exp(o.sigma * standardNormal(random)))));
  return Math.min(o.scaleTo, Math.max(1, Math.round((raw * o.scaleTo) / o.rawMax)));
}

/** A sample of `count` lengths from the mix without fluctuation (for a prior or an offline estimate). */
export function twitterLengthSample(count: number, seed: number, lengths?: TwitterLengthOptions): Int32Array {
  if (!(Number.isInteger(count) && count >= 0)) throw new SimArgumentError(`twitterLengthSample: count must be a non-negative integer, got ${count}`);
  const o = resolveLengths(lengths);
  const random = substream(seed, STREAM_LENGTHS);
  const out = new Int32Array(count);
  for (let k = 0; k < count; k++) out[k] = drawLength(random, o.median, o);
  return out;
}

/** The rate intervals: one for Stable; for Bursty, MMPP sojourns starting in a state drawn from the stationary law. */
function rateIntervals(options: ArloTraceOptions): RateInterval[] {
  const { ratePerSec, durationMs } = options;
  if (options.kind === 'stable') return [{ startMs: 0, endMs: durationMs, ratePerSec }];
  const ratio = options.burst?.burstRatio ?? 2;
  const sojourn = options.burst?.meanSojournMs ?? 10_000;
  if (!(ratio >= 1 && Number.isFinite(ratio))) throw new SimArgumentError(`burst.burstRatio must be >= 1, got ${ratio}`);
  if (!(sojourn > 0)) throw new SimArgumentError(`burst.meanSojournMs must be > 0, got ${sojourn}`);
  // Symmetric switching spends half the time in each state, so (high + low) / 2 = mean and high / low = ratio.
  const low = (2 * ratePerSec) / (1 + ratio);
  const high = ratio * low;
  const random = substream(options.seed, STREAM_STATES);
  let highState = random() < 0.5;
  const out: RateInterval[] = [];
  for (let t = 0; t < durationMs; ) {
    const end = Math.min(durationMs, t + exponential(random, sojourn));
    out.push({ startMs: t, endMs: end, ratePerSec: highState ? high : low });
    highState = !highState;
    t = end;
  }
  return out;
}

/** A Stable or Bursty trace (see the module comment). */
export function generateArloTrace(options: ArloTraceOptions): ArloTrace {
  const { ratePerSec, durationMs, seed } = options;
  if (options.kind !== 'stable' && options.kind !== 'bursty') throw new SimArgumentError(`trace kind must be 'stable' or 'bursty', got "${String(options.kind)}"`);
  if (!(Number.isFinite(ratePerSec) && ratePerSec > 0)) throw new SimArgumentError(`trace ratePerSec must be a positive number, got ${ratePerSec}`);
  if (!(Number.isFinite(durationMs) && durationMs > 0)) throw new SimArgumentError(`trace durationMs must be a positive number, got ${durationMs}`);
  if (!(Number.isInteger(seed) && seed >= 0 && seed <= 0xffffffff)) throw new SimArgumentError(`trace seed must be an integer in [0, 2^32), got ${seed}`);
  const lengthOptions = resolveLengths(options.lengths);
  const rates = rateIntervals(options);

  // Arrivals: within each interval a homogeneous Poisson process (memorylessness makes restarting at a boundary exact).
  const arrivalsRandom = substream(seed, STREAM_ARRIVALS);
  const times: number[] = [];
  for (const iv of rates) {
    const gap = 1000 / iv.ratePerSec;
    for (let t = iv.startMs + exponential(arrivalsRandom, gap); t < iv.endMs; t += exponential(arrivalsRandom, gap)) times.push(t);
  }

  // Lengths: the median of second s is median · drift(s) · exp(N(0, σ_s)), one fluctuation draw per second.
  const fluctuationRandom = substream(seed, STREAM_FLUCTUATION);
  const lengthsRandom = substream(seed, STREAM_LENGTHS);
  const seconds = Math.ceil(durationMs / 1000);
  const medianOfSecond = new Float64Array(seconds);
  for (let s = 0; s < seconds; s++) {
    const drift = 1 + lengthOptions.driftAmplitude * Math.sin((2 * Math.PI * s * 1000) / lengthOptions.driftPeriodMs);
    const wobble = lengthOptions.fluctuationSigma > 0 ? Math.exp(lengthOptions.fluctuationSigma * standardNormal(fluctuationRandom)) : 1;
    medianOfSecond[s] = lengthOptions.median * drift * wobble;
  }
  const arrivalMs = Float64Array.from(times);
  const length = new Int32Array(times.length);
  for (let k = 0; k < times.length; k++) {
    const s = Math.min(seconds - 1, Math.floor(times[k]! / 1000));
    length[k] = drawLength(lengthsRandom, medianOfSecond[s]!, lengthOptions);
  }
  return { kind: options.kind, ratePerSec, durationMs, seed, arrivalMs, length, rates, maxLength: lengthOptions.scaleTo, lengthOptions: { ...lengthOptions } };
}
