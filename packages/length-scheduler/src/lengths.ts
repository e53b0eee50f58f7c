/**
 * Polymorphing (arlo.md §3, §9-A): the max lengths of the static-shape runtimes of one model, chosen from its
 * measured latency curve, and the ideal runtime of a request (the shortest one it fits: the least padding).
 */
import { LengthSchedulerArgumentError } from './errors.js';

/** Throws unless `lengths` is a non-empty, strictly ascending list of positive integers (ℓ_1 < … < ℓ_I). */
export function checkRuntimeLengths(lengths: readonly number[], what = 'runtime lengths'): void {
  if (lengths.length === 0) throw new LengthSchedulerArgumentError(`${what} must not be empty`);
  let prev = 0;
  for (const [i, l] of lengths.entries()) {
    if (!Number.isInteger(l) || l <= prev) {
      throw new LengthSchedulerArgumentError(`${what} must be ascending positive integers; entry ${i} is ${l} after ${prev}`);
    }
    prev = l;
  }
}

/**
 * Index of the request's ideal runtime: the smallest i with lengths[i] ≥ length (binary search). Returns
 * `lengths.length` when the request is longer than every runtime; the caller truncates or rejects it.
 */
export function idealRuntimeIndex(lengths: readonly number[], length: number): number {
  let lo = 0;
  let hi = lengths.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (lengths[mid]! >= length) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** `count` runtimes at maxLen/count, 2·maxLen/count, …, maxLen (rounded up to integers, the last exactly maxLen). */
export function uniformLengths(maxLength: number, count: number): number[] {
  if (!Number.isInteger(maxLength) || maxLength < 1) throw new LengthSchedulerArgumentError(`maxLength must be a positive integer, got ${maxLength}`);
  if (!Number.isInteger(count) || count < 1 || count > maxLength) {
    throw new LengthSchedulerArgumentError(`runtime count must be an integer in [1, ${maxLength}], got ${count}`);
  }
  const out: number[] = [];
  for (let k = 1; k <= count; k++) out.push(Math.ceil((k * maxLength) / count));
  return out;
}

/** One measured point of the static-shape latency curve: a runtime padded to `length` took `ms` per request. */
export interface LatencyPoint {
  length: number;
  ms: number;
}

export interface ChooseLengthsOptions {
  /** The longest runtime; defaults to the profile's last length. */
  maxLength?: number;
  /** A known step (the paper's 64 on TensorRT): skips detection and returns k·step up to maxLength. */
  stepHint?: number;
  /** A plateau is a run whose latency stays within (1 + plateauTol) of its first point's. Default 0.05 (§3.3: < 5 %). */
  plateauTol?: number;
  /** Runtimes of the uniform fallback, also the limit: more than 2× this many plateaus means no staircase. Default 8. */
  fallbackCount?: number;
}

export interface ChosenLengths {
  lengths: number[];
  /** How they were chosen: the given step, the detected staircase, or uniform steps because there was none. */
  method: 'step-hint' | 'staircase' | 'uniform';
}

/**
 * Runtime lengths from a measured latency curve (§9-A). A staircase (TensorRT on a GPU: a jump every 64 tokens,
 * < 5 % within a step) gives one runtime at the end of each plateau, so a request pays for the padding that costs
 * nothing. A curve without one (ONNX Runtime on a CPU is about linear in length) would give many tiny plateaus;
 * then the lengths are `fallbackCount` uniform steps.
 */
export function chooseRuntimeLengths(profile: readonly LatencyPoint[], options: ChooseLengthsOptions = {}): ChosenLengths {
  const plateauTol = options.plateauTol ?? 0.05;
  const fallbackCount = options.fallbackCount ?? 8;
  if (!(plateauTol >= 0)) throw new LengthSchedulerArgumentError(`plateauTol must be >= 0, got ${plateauTol}`);
  if (profile.length === 0 && options.maxLength === undefined) {
    throw new LengthSchedulerArgumentError('chooseRuntimeLengths needs a latency profile or a maxLength');
  }
  let prevLength = 0;
  for (const [i, p] of profile.entries()) {
    if (!Number.isInteger(p.length) || p.length <= prevLength) {
      throw new LengthSchedulerArgumentError(`profile lengths must be ascending positive integers; point ${i} has length ${p.length}`);
    }
    if (!(Number.isFinite(p.ms) && p.ms > 0)) throw new LengthSchedulerArgumentError(`profile point ${i} (length ${p.length}) has latency ${p.ms} ms; must be > 0`);
    prevLength = p.length;
  }
  const maxLength = options.maxLength ?? profile[profile.length - 1]!.length;
  if (!Number.isInteger(maxLength) || maxLength < 1) throw new LengthSchedulerArgumentError(`maxLength must be a positive integer, got ${maxLength}`);

  if (options.stepHint !== undefined) {
    const step = options.stepHint;
    if (!Number.isInteger(step) || step < 1) throw new LengthSchedulerArgumentError(`stepHint must be a positive integer, got ${step}`);
    const lengths: number[] = [];
    for (let l = step; l < maxLength; l += step) lengths.push(l);
    lengths.push(maxLength);
    return { lengths, method: 'step-hint' };
  }

  const points = profile.filter((p) => p.length <= maxLength);
  const ends: number[] = [];
  if (points.length > 0) {
    let startMs = points[0]!.ms;
    for (let k = 1; k < points.length; k++) {
      const p = points[k]!;
      if (p.ms > (1 + plateauTol) * startMs) {
        ends.push(points[k - 1]!.length);
        startMs = p.ms;
      }
    }
  }
  if (ends[ends.length - 1] !== maxLength) ends.push(maxLength);
  if (ends.length > 2 * fallbackCount) return { lengths: uniformLengths(maxLength, Math.min(fallbackCount, maxLength)), method: 'uniform' };
  return { lengths: ends, method: 'staircase' };
}
