/**
 * Step-latency models: how long one batcher step (one model forward over a mixed prefill + decode batch) takes
 * on a simulated GPU. A model maps a step's shape to milliseconds:
 *
 *   stepMs = intercept + perDecodeRow · decodeRows + perPrefillToken · prefillTokens + perKvToken · kvTokens
 *
 * where kvTokens = Σ over the batch's sequences of the context each attends to after the step (prompt length for a
 * prefill, cached length + 1 for a decode). Three ways to get the coefficients:
 *   (a) {@link fitLatencyModel}: least squares over measured samples;
 *   (b) {@link paperLatencyModel}: Punica's Fig. 1 curves for Llama-2 7B on an A100 (see its doc for the mapping);
 *   (c) measured samples of real engine steps: `profileDecoderSteps` in the bench package (bench/src/
 *       latency-profile.ts) measures real steps of a generated decoder on this machine and returns samples for (a);
 *       it lives there because it needs the engine and the native addon, which this package never loads.
 */
import { LatencyFitError, SimArgumentError } from './errors.js';

/** What a step's latency depends on. */
export interface StepShape {
  /** Sequences in the forward (prefills + decodes). */
  batchSize: number;
  /** Tokens of the sequences prefilled this step (prompt, plus generated tokens when recomputing a migrated request). */
  prefillTokens: number;
  /** Sequences that decoded one token. */
  decodeRows: number;
  /** Σ context per sequence after the step (what attention reads). */
  kvTokens: number;
}

export interface LatencyModel {
  /** Milliseconds of one step; always > 0. */
  stepMs(step: StepShape): number;
}

/** A measured step. */
export interface LatencySample extends StepShape {
  ms: number;
}

export interface LinearLatencyCoefficients {
  interceptMs: number;
  perDecodeRowMs: number;
  perPrefillTokenMs: number;
  perKvTokenMs: number;
}

/** No step is shorter than this (a fitted model may extrapolate below zero on shapes it never saw). */
export const MIN_STEP_MS = 1e-3;

export class LinearLatencyModel implements LatencyModel {
  readonly coefficients: Readonly<LinearLatencyCoefficients>;

  constructor(coefficients: LinearLatencyCoefficients) {
    for (const [k, v] of Object.entries(coefficients)) {
      if (!Number.isFinite(v)) throw new SimArgumentError(`LinearLatencyModel: ${k} must be a finite number, got ${v}`);
    }
    this.coefficients = { ...coefficients };
  }

  stepMs(step: StepShape): number {
    const c = this.coefficients;
    const ms = c.interceptMs + c.perDecodeRowMs * step.decodeRows + c.perPrefillTokenMs * step.prefillTokens + c.perKvTokenMs * step.kvTokens;
    return ms > MIN_STEP_MS ? ms : MIN_STEP_MS;
  }
}

/**
 * Llama-2 7B on one A100 from Punica's Fig. 1 (punica.md §5.6, §14 item 8): a decode step takes 11 → 13 ms from
 * batch 1 to 32 at short sequences and 17 → 34 ms at long ones. "Short" is read as 128 tokens per sequence and
 * "long" as 2048 (the ends of the repo's sweep {128 … 2048}), so the four corners are (batch, kvTokens, ms) =
 * (1, 128, 11), (32, 4096, 13), (1, 2048, 17), (32, 65536, 34). A model linear in decode rows and KV tokens cannot
 * pass through all four (attention at batch 1 does not saturate the GPU), so it is pinned to the three corners a
 * busy GPU lives near:
 *   perKvTokenMs    = (34 − 13) / (65536 − 4096)                     = 3.418e-4  (batch 32, short → long)
 *   perDecodeRowMs  = (13 − 11 − (4096 − 128) · perKvTokenMs) / 31   = 0.02077   (short, batch 1 → 32)
 *   interceptMs     = 11 − perDecodeRowMs − 128 · perKvTokenMs       = 10.935
 * and predicts 11.7 ms (not 17) for one 2048-token sequence alone. Prefill is compute-bound ("latency ∝ batch
 * size"); the paper prints no number, so perPrefillTokenMs = 0.08 comes from FLOPs: 2 × 6.7e9 per token at about
 * 55 % of the A100's 312 fp16 TFLOP/s.
 */
export function paperLatencyModel(): LinearLatencyModel {
  const perKvTokenMs = (34 - 13) / (65536 - 4096);
  const perDecodeRowMs = (13 - 11 - (4096 - 128) * perKvTokenMs) / 31;
  const interceptMs = 11 - perDecodeRowMs - 128 * perKvTokenMs;
  return new LinearLatencyModel({ interceptMs, perDecodeRowMs, perPrefillTokenMs: 0.08, perKvTokenMs });
}

export interface LatencyFit {
  model: LinearLatencyModel;
  coefficients: LinearLatencyCoefficients;
  /** Root-mean-square residual (ms). */
  rmseMs: number;
  /** Coefficient of determination (1 = perfect; NaN when every sample has the same latency). */
  r2: number;
  samples: number;
}

const FEATURES = ['interceptMs', 'perDecodeRowMs', 'perPrefillTokenMs', 'perKvTokenMs'] as const;

function featuresOf(s: StepShape): [number, number, number, number] {
  return [1, s.decodeRows, s.prefillTokens, s.kvTokens];
}

/**
 * Ordinary least squares of ms on (1, decodeRows, prefillTokens, kvTokens). A feature that is zero in every sample
 * (e.g. no prefill step was measured) gets coefficient 0; the others must be determined by the samples (at least
 * as many samples as features, not collinear), else LatencyFitError.
 */
export function fitLatencyModel(samples: readonly LatencySample[]): LatencyFit {
  for (const [i, s] of samples.entries()) {
    for (const v of [s.ms, ...featuresOf(s)]) {
      if (!Number.isFinite(v)) throw new SimArgumentError(`fitLatencyModel: sample ${i} has a non-finite field (${JSON.stringify(s)})`);
    }
  }
  const rows = samples.map(featuresOf);
  const active = FEATURES.map((_, j) => j).filter((j) => j === 0 || rows.some((r) => r[j] !== 0));
  const k = active.length;
  if (samples.length < k) {
    throw new LatencyFitError(`fitLatencyModel: ${samples.length} samples cannot determine ${k} coefficients (${active.map((j) => FEATURES[j]).join(', ')})`);
  }
  // Scale each column to max |x| = 1 so kvTokens (thousands) and the intercept (1) condition alike.
  const scale = active.map((j) => Math.max(...rows.map((r) => Math.abs(r[j]!))) || 1);
  const ata = Array.from({ length: k }, () => new Float64Array(k + 1));
  for (const [n, r] of rows.entries()) {
    const x = active.map((j, a) => r[j]! / scale[a]!);
    for (let a = 0; a < k; a++) {
      for (let b = 0; b < k; b++) ata[a]![b]! += x[a]! * x[b]!;
      ata[a]![k]! += x[a]! * samples[n]!.ms;
    }
  }
  const solution = solve(ata, k);
  if (!solution) {
    throw new LatencyFitError(
      `fitLatencyModel: the samples do not determine ${active.map((j) => FEATURES[j]).join(', ')} (collinear features: vary batch size and context length)`,
    );
  }
  const coefficients: LinearLatencyCoefficients = { interceptMs: 0, perDecodeRowMs: 0, perPrefillTokenMs: 0, perKvTokenMs: 0 };
  active.forEach((j, a) => (coefficients[FEATURES[j]!] = solution[a]! / scale[a]!));
  const model = new LinearLatencyModel(coefficients);
  const raw = (s: StepShape) =>
    coefficients.interceptMs + coefficients.perDecodeRowMs * s.decodeRows + coefficients.perPrefillTokenMs * s.prefillTokens + coefficients.perKvTokenMs * s.kvTokens;
  const mean = samples.reduce((a, s) => a + s.ms, 0) / samples.length;
  let ssRes = 0;
  let ssTot = 0;
  for (const s of samples) {
    ssRes += (s.ms - raw(s)) ** 2;
    ssTot += (s.ms - mean) ** 2;
  }
  return { model, coefficients, rmseMs: Math.sqrt(ssRes / samples.length), r2: ssTot > 0 ? 1 - ssRes / ssTot : Number.NaN, samples: samples.length };
}

/** Gauss–Jordan elimination with partial pivoting on an augmented k × (k + 1) system; null when singular. */
function solve(m: Float64Array[], k: number): number[] | null {
  const largest = Math.max(...m.map((row) => Math.max(...Array.from(row.subarray(0, k), Math.abs))));
  for (let col = 0; col < k; col++) {
    let pivot = col;
    for (let r = col + 1; r < k; r++) if (Math.abs(m[r]![col]!) > Math.abs(m[pivot]![col]!)) pivot = r;
    if (!(Math.abs(m[pivot]![col]!) > 1e-10 * largest)) return null;
    [m[col], m[pivot]] = [m[pivot]!, m[col]!];
    const p = m[col]!;
    for (let r = 0; r < k; r++) {
      if (r === col) continue;
      const row = m[r]!;
      const f = row[col]! / p[col]!;
      if (f === 0) continue;
      for (let c = col; c <= k; c++) row[c]! -= f * p[c]!;
    }
  }
  return m.map((row, i) => row[k]! / row[i]!);
}
