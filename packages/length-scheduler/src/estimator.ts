/**
 * The length-distribution estimator (arlo.md §5): Q_i, the average number of requests per SLO window whose ideal
 * runtime is i, from the arrivals of the current window. Requests are counted by ideal runtime, never by the
 * runtime they were dispatched to (demotion would bias the histogram).
 *
 * The prior. An allocation from a tiny sample is dangerous (requests can only move up, so a missing short runtime
 * turns into a backlog on the long one), and the paper does not say how the first allocation is made. Each bin is
 * a Poisson rate with a Gamma prior worth w ms of traffic at the reference rates:
 *
 *   Q_i = SLO · (count_i + ref_i·w) / (T + w)      ref_i: reference rate of bin i (requests per ms)
 *
 * In the first window the reference is the prior and w its weight (`prior.weightMs`, default 10 s): at T = 0 the
 * estimate is the prior itself, and the data takes over as T grows. After each snapshot the snapshot becomes the
 * reference and w becomes `carryOverMs` (default 1 s): an on-demand re-solve right after a period leans on the last
 * estimate instead of on a handful of requests, while a full window (120 s in the paper) keeps the last estimate
 * at under 1 %. With both weights 0 it is the paper's estimator, count_i / T · SLO.
 */
import { type Clock, systemClock } from '@tessera/core';

import { LengthSchedulerArgumentError } from './errors.js';
import { checkRuntimeLengths, idealRuntimeIndex } from './lengths.js';

export interface LengthPrior {
  /** Expected Q_i (requests per SLO window per ideal runtime), e.g. from history or {@link priorFromLengths}. */
  q: readonly number[];
  /** How much observed traffic the prior is worth (ms). Default 10 000. */
  weightMs?: number;
}

export interface LengthEstimatorOptions {
  sloMs: number;
  clock?: Clock;
  prior?: LengthPrior;
  /** Weight (ms of traffic) of the previous snapshot in the next window's estimate. Default 1 000. */
  carryOverMs?: number;
}

export interface LengthSnapshot {
  /** Q_i per runtime. */
  q: number[];
  /** Requests counted per ideal runtime in the window. */
  counts: number[];
  /** Window length (ms). */
  windowMs: number;
  /** Requests longer than the longest runtime (counted in its bin). */
  oversize: number;
}

export class LengthEstimator {
  readonly lengths: readonly number[];
  private readonly sloMs: number;
  private readonly clock: Clock;
  private readonly counts: Float64Array;
  private readonly reference: Float64Array;
  private weightMs: number;
  private readonly carryOverMs: number;
  private windowStart: number;
  private oversize = 0;

  constructor(lengths: readonly number[], options: LengthEstimatorOptions) {
    checkRuntimeLengths(lengths);
    if (!(Number.isFinite(options.sloMs) && options.sloMs > 0)) throw new LengthSchedulerArgumentError(`sloMs must be finite and > 0, got ${options.sloMs}`);
    this.lengths = [...lengths];
    this.sloMs = options.sloMs;
    this.clock = options.clock ?? systemClock;
    this.counts = new Float64Array(lengths.length);
    this.reference = new Float64Array(lengths.length);
    const prior = options.prior;
    if (prior !== undefined) {
      if (prior.q.length !== lengths.length) throw new LengthSchedulerArgumentError(`prior has ${prior.q.length} bins for ${lengths.length} runtimes`);
      for (const [i, qi] of prior.q.entries()) {
        if (!(Number.isFinite(qi) && qi >= 0)) throw new LengthSchedulerArgumentError(`prior q[${i}] must be finite and >= 0, got ${qi}`);
        this.reference[i] = qi / this.sloMs;
      }
    }
    this.weightMs = prior === undefined ? 0 : (prior.weightMs ?? 10_000);
    if (!(this.weightMs >= 0 && Number.isFinite(this.weightMs))) throw new LengthSchedulerArgumentError(`prior weightMs must be finite and >= 0, got ${this.weightMs}`);
    this.carryOverMs = options.carryOverMs ?? 1000;
    if (!(this.carryOverMs >= 0 && Number.isFinite(this.carryOverMs))) throw new LengthSchedulerArgumentError(`carryOverMs must be finite and >= 0, got ${this.carryOverMs}`);
    this.windowStart = this.clock.now();
  }

  /** Counts one arrival of `length` tokens in its ideal runtime's bin (the last one if it is longer than all). */
  observe(length: number): void {
    if (!(length >= 1 && Number.isFinite(length))) throw new LengthSchedulerArgumentError(`request length must be a finite number >= 1, got ${length}`);
    let i = idealRuntimeIndex(this.lengths, length);
    if (i === this.lengths.length) {
      i--;
      this.oversize++;
    }
    this.counts[i]!++;
  }

  /** The estimate now, without closing the window. */
  peek(): LengthSnapshot {
    const T = Math.max(0, this.clock.now() - this.windowStart);
    const w = this.weightMs;
    const q: number[] = [];
    for (let i = 0; i < this.counts.length; i++) {
      const denom = T + w;
      // No time and no weight: nothing new is known, so the reference stands.
      q.push(denom > 0 ? (this.sloMs * (this.counts[i]! + this.reference[i]! * w)) / denom : this.sloMs * this.reference[i]!);
    }
    return { q, counts: Array.from(this.counts), windowMs: T, oversize: this.oversize };
  }

  /** The estimate for the allocation; closes the window, and the estimate becomes the next window's reference. */
  snapshot(): LengthSnapshot {
    const snap = this.peek();
    for (let i = 0; i < this.counts.length; i++) this.reference[i] = snap.q[i]! / this.sloMs;
    this.weightMs = this.carryOverMs;
    this.counts.fill(0);
    this.oversize = 0;
    this.windowStart = this.clock.now();
    return snap;
  }
}

/**
 * A prior from a sample of request lengths (history, or an assumed distribution) and a request rate: the sample's
 * share of each ideal runtime times the rate, per SLO window.
 */
export function priorFromLengths(lengths: readonly number[], sample: readonly number[], requestsPerSecond: number, sloMs: number): number[] {
  checkRuntimeLengths(lengths);
  if (sample.length === 0) throw new LengthSchedulerArgumentError('priorFromLengths needs a non-empty length sample');
  if (!(Number.isFinite(requestsPerSecond) && requestsPerSecond >= 0)) throw new LengthSchedulerArgumentError(`requestsPerSecond must be finite and >= 0, got ${requestsPerSecond}`);
  const counts = new Array<number>(lengths.length).fill(0);
  for (const len of sample) counts[Math.min(idealRuntimeIndex(lengths, len), lengths.length - 1)]!++;
  const perWindow = (requestsPerSecond * sloMs) / 1000;
  return counts.map((c) => (c / sample.length) * perWindow);
}
