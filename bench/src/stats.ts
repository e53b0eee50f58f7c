/**
 * Timing: warm up, then repeat until a time budget is spent, and report the median per-call time.
 * Fast calls are batched so that one sample spans at least `minSampleMs` (timer resolution and loop overhead
 * stay small next to the work measured).
 */

export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of an empty list');
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** Linear-interpolated percentile, p in [0, 100]. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) throw new RangeError('percentile of an empty list');
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile must be in [0, 100], got ${p}`);
  const sorted = [...values].sort((a, b) => a - b);
  const pos = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export interface MeasureOptions {
  /** Untimed calls before measuring (page faults, caches, lazy init, thread pools spinning up). Default 2. */
  warmup?: number;
  /** Keep sampling until this much time has been spent measuring (after warm-up). Default 500 ms. */
  budgetMs?: number;
  /** At least this many samples, even past the budget. Default 5. */
  minSamples?: number;
  /** Stop after this many samples even within the budget. Default 1000. */
  maxSamples?: number;
  /** Batch calls so a sample lasts at least this long. Default 2 ms. */
  minSampleMs?: number;
  /** Monotonic clock in milliseconds (tests inject a fake one). */
  now?: () => number;
}

export interface Timing {
  /** Median time per call, milliseconds: the number reported. */
  medianMs: number;
  minMs: number;
  maxMs: number;
  /** Interquartile range of the per-call samples, relative to the median: a noise indicator. */
  spread: number;
  /** Samples taken, and calls per sample. */
  samples: number;
  batch: number;
  /** Per-call time of each sample. */
  sampleMs: number[];
}

interface Resolved {
  warmup: number;
  budgetMs: number;
  minSamples: number;
  maxSamples: number;
  minSampleMs: number;
  now: () => number;
}

function resolve(options: MeasureOptions): Resolved {
  const r: Resolved = {
    warmup: options.warmup ?? 2,
    budgetMs: options.budgetMs ?? 500,
    minSamples: options.minSamples ?? 5,
    maxSamples: options.maxSamples ?? 1000,
    minSampleMs: options.minSampleMs ?? 2,
    now: options.now ?? (() => performance.now()),
  };
  if (!(r.warmup >= 0) || !(r.budgetMs >= 0) || !(r.minSamples >= 1) || !(r.maxSamples >= r.minSamples) || !(r.minSampleMs >= 0)) {
    throw new RangeError(`bad measure options: ${JSON.stringify({ ...r, now: undefined })}`);
  }
  return r;
}

function summarise(sampleMs: number[], batch: number): Timing {
  const med = median(sampleMs);
  return {
    medianMs: med,
    minMs: Math.min(...sampleMs),
    maxMs: Math.max(...sampleMs),
    spread: med > 0 ? (percentile(sampleMs, 75) - percentile(sampleMs, 25)) / med : 0,
    samples: sampleMs.length,
    batch,
    sampleMs,
  };
}

/** Calls per sample so that a sample lasts about minSampleMs, given one call's time. */
function batchFor(callMs: number, minSampleMs: number): number {
  if (callMs >= minSampleMs || minSampleMs === 0) return 1;
  return Math.min(1 << 20, Math.ceil(minSampleMs / Math.max(callMs, 1e-6)));
}

/** Times a synchronous function. */
export function measure(fn: () => unknown, options: MeasureOptions = {}): Timing {
  const o = resolve(options);
  let callMs = Infinity;
  for (let i = 0; i < o.warmup; i++) {
    const t0 = o.now();
    fn();
    callMs = Math.min(callMs, o.now() - t0);
  }
  if (!Number.isFinite(callMs)) {
    const t0 = o.now();
    fn();
    callMs = o.now() - t0;
  }
  const batch = batchFor(callMs, o.minSampleMs);
  const samples: number[] = [];
  const start = o.now();
  while (samples.length < o.maxSamples && (samples.length < o.minSamples || o.now() - start < o.budgetMs)) {
    const t0 = o.now();
    for (let i = 0; i < batch; i++) fn();
    samples.push((o.now() - t0) / batch);
  }
  return summarise(samples, batch);
}

/** Times an async function (each call awaited before the next starts). */
export async function measureAsync(fn: () => Promise<unknown>, options: MeasureOptions = {}): Promise<Timing> {
  const o = resolve(options);
  let callMs = Infinity;
  for (let i = 0; i < o.warmup; i++) {
    const t0 = o.now();
    await fn();
    callMs = Math.min(callMs, o.now() - t0);
  }
  if (!Number.isFinite(callMs)) {
    const t0 = o.now();
    await fn();
    callMs = o.now() - t0;
  }
  const batch = batchFor(callMs, o.minSampleMs);
  const samples: number[] = [];
  const start = o.now();
  while (samples.length < o.maxSamples && (samples.length < o.minSamples || o.now() - start < o.budgetMs)) {
    const t0 = o.now();
    for (let i = 0; i < batch; i++) await fn();
    samples.push((o.now() - t0) / batch);
  }
  return summarise(samples, batch);
}
