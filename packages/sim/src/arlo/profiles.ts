/**
 * Latency profiles for the Arlo simulator (arlo.md §10.6, §13.1): how long one run of a runtime takes on an input
 * of shape [batch, length], and how much slower a dynamic-shape runtime is than a static one at the same length.
 *
 * The paper's profiles are GPU facts (TensorRT on an RTX 3090, batch 1): a staircase with a jump every 64 tokens,
 * BERT-Base at 1.15 ms (64) to 4.86 ms (512), BERT-Large 5.25× from 64 to 512 (absolute values not printed: 3.0
 * and 15.75 ms are our assumption), and dynamic-shape kernels 1.22–3.56× slower than static ones. None of that
 * holds on ONNX Runtime on a CPU, where latency is about linear in length and the dynamic-axis model is not slower
 * (measured, §13.1), so the penalty is injected: `gpuDynamicPenalty()` to reproduce the paper, `'none'` for CPU.
 */
import { SimArgumentError } from '../errors.js';

/** Service time of one run of a static-shape runtime (compute only; the per-request overhead is added by the simulator). */
export interface ArloLatencyProfile {
  readonly name: string;
  /** The model's SLO (ms) in the paper's evaluation. */
  readonly sloMs: number;
  /** The longest input (tokens). */
  readonly maxLength: number;
  /** ms for one run on [batch, length]; `length` is the padded length for static runtimes. */
  staticMs(length: number, batch?: number): number;
}

/** Factor by which a dynamic-shape runtime is slower than the static one at a length (1 = no penalty). */
export type DynamicPenalty = (length: number) => number;

/** The staircase step of the paper's static profiles (TensorRT tiles: a jump every 64 tokens, §3.3). */
export const PAPER_STAIRCASE_STEP = 64;

/** The paper's fixed per-request overhead in its simulator (§5.2.1). */
export const PAPER_OVERHEAD_MS = 0.8;

export type PaperModel = 'bert-base' | 'bert-large';

/**
 * §10.6 profiles: staircase steps at 64, 128, …, 512, linearly interpolated between the printed (or assumed) ends;
 * a length runs at the step that holds it (ceil to 64). Batch 1 only: the paper profiles nothing else.
 */
export function paperLatencyProfile(model: PaperModel): ArloLatencyProfile {
  const [t64, t512, sloMs] = model === 'bert-base' ? [1.15, 4.86, 150] : model === 'bert-large' ? [3.0, 15.75, 450] : [NaN, NaN, NaN];
  if (!Number.isFinite(t64)) throw new SimArgumentError(`paperLatencyProfile: unknown model "${String(model)}"; expected bert-base or bert-large`);
  const steps = 512 / PAPER_STAIRCASE_STEP;
  const stepMs = Array.from({ length: steps }, (_, k) => t64 + ((t512 - t64) * k) / (steps - 1));
  return {
    name: model,
    sloMs,
    maxLength: 512,
    staticMs(length: number, batch = 1): number {
      checkRun(this.name, length, batch, 512);
      if (batch !== 1) throw new SimArgumentError(`${model} profile: the paper profiles batch 1 only, got batch ${batch} (use measuredLatencyProfile for other batches)`);
      return stepMs[Math.ceil(length / PAPER_STAIRCASE_STEP) - 1]!;
    },
  };
}

/** One measured run: [batch, length] took `ms`. */
export interface MeasuredRun {
  length: number;
  batch: number;
  ms: number;
}

/**
 * A profile from measurements (e.g. the offline profiler on ORT CPU: §13.1 measured 0.86, 2.96, 6.02, 11.8 and
 * 26.9 ms at 16…512 tokens on one thread): per batch size, piecewise-linear in length between measured lengths,
 * extrapolated along the end segments; a batch between measured ones interpolates linearly.
 */
export function measuredLatencyProfile(name: string, runs: readonly MeasuredRun[], options: { sloMs: number; maxLength?: number }): ArloLatencyProfile {
  if (runs.length === 0) throw new SimArgumentError('measuredLatencyProfile needs at least one measured run');
  if (!(options.sloMs > 0)) throw new SimArgumentError(`measuredLatencyProfile: sloMs must be > 0, got ${options.sloMs}`);
  const byBatch = new Map<number, { length: number; ms: number }[]>();
  for (const r of runs) {
    if (!(Number.isInteger(r.length) && r.length >= 1)) throw new SimArgumentError(`measured run length must be a positive integer, got ${r.length}`);
    if (!(Number.isInteger(r.batch) && r.batch >= 1)) throw new SimArgumentError(`measured run batch must be a positive integer, got ${r.batch}`);
    if (!(Number.isFinite(r.ms) && r.ms > 0)) throw new SimArgumentError(`measured run ms must be finite and > 0, got ${r.ms} at [${r.batch}, ${r.length}]`);
    const list = byBatch.get(r.batch) ?? [];
    list.push({ length: r.length, ms: r.ms });
    byBatch.set(r.batch, list);
  }
  const batches = [...byBatch.keys()].sort((a, b) => a - b);
  for (const list of byBatch.values()) list.sort((a, b) => a.length - b.length);
  const maxLength = options.maxLength ?? Math.max(...runs.map((r) => r.length));
  const atLength = (points: { length: number; ms: number }[], length: number): number => {
    if (points.length === 1) return (points[0]!.ms * length) / points[0]!.length; // one point: proportional to length
    let k = 1;
    while (k < points.length - 1 && points[k]!.length < length) k++;
    const a = points[k - 1]!;
    const b = points[k]!;
    const ms = a.ms + ((b.ms - a.ms) * (length - a.length)) / (b.length - a.length);
    return Math.max(ms, Number.MIN_VALUE);
  };
  return {
    name,
    sloMs: options.sloMs,
    maxLength,
    staticMs(length: number, batch = 1): number {
      checkRun(name, length, batch, maxLength);
      if (batch <= batches[0]!) return atLength(byBatch.get(batches[0]!)!, length) * (batch / batches[0]!);
      let k = 1;
      while (k < batches.length - 1 && batches[k]! < batch) k++;
      const lo = batches[k - 1]!;
      const hi = batches[k] ?? lo;
      const msLo = atLength(byBatch.get(lo)!, length);
      if (hi === lo) return (msLo * batch) / lo;
      const msHi = atLength(byBatch.get(hi)!, length);
      return msLo + ((msHi - msLo) * (batch - lo)) / (hi - lo);
    },
  };
}

/** §13.1's measurement: the tiny BERT-like model on ONNX Runtime, one intra-op thread (no staircase). */
export function cpuLatencyProfile(): ArloLatencyProfile {
  return measuredLatencyProfile(
    'ort-cpu-tiny',
    [
      { length: 16, batch: 1, ms: 0.86 },
      { length: 64, batch: 1, ms: 2.96 },
      { length: 128, batch: 1, ms: 6.02 },
      { length: 256, batch: 1, ms: 11.8 },
      { length: 512, batch: 1, ms: 26.9 },
    ],
    { sloMs: 450, maxLength: 512 },
  );
}

export interface GpuPenaltyOptions {
  /** Inflation at length 1 (default 3.56, the paper's maximum). */
  shortest?: number;
  /** Inflation at `maxLength` (default 1.22, the paper's minimum). */
  longest?: number;
  maxLength?: number;
}

/**
 * The TensorRT dynamic-shape penalty (§2.2, Fig. 2): largest at short lengths, smallest at the longest. The curve's
 * shape is not printed; ours is linear in log(length) from 3.56× at 1 token to 1.22× at 512 (≈1.9× at the
 * Twitter-like median of 86 tokens: at light load DT's mean is then ≈1.4× Arlo's, near the testbed's Arlo 23.7 %
 * below DT, where a curve linear in length would put DT above ST). It multiplies the static time at the request's own staircase step, never a smooth curve
 * (a smooth DT would beat the staircase at short lengths, which contradicts Fig. 2).
 */
export function gpuDynamicPenalty(options: GpuPenaltyOptions = {}): DynamicPenalty {
  const shortest = options.shortest ?? 3.56;
  const longest = options.longest ?? 1.22;
  const maxLength = options.maxLength ?? 512;
  if (!(shortest >= 1 && longest >= 1)) throw new SimArgumentError(`gpuDynamicPenalty: factors must be >= 1, got ${shortest} and ${longest}`);
  if (!(maxLength > 1)) throw new SimArgumentError(`gpuDynamicPenalty: maxLength must be > 1, got ${maxLength}`);
  const span = Math.log(maxLength);
  return (length) => {
    const f = Math.min(1, Math.max(0, Math.log(Math.max(1, length)) / span));
    return shortest + (longest - shortest) * f;
  };
}

/** No penalty: the dynamic-shape runtime is as fast as a static one of the request's own length (ORT on CPU, §13.1). */
export const noDynamicPenalty: DynamicPenalty = () => 1;

/** `'gpu'` (the default {@link gpuDynamicPenalty}), `'none'`, a constant factor, or any curve. */
export type DynamicPenaltySpec = 'gpu' | 'none' | number | DynamicPenalty;

export function resolveDynamicPenalty(spec: DynamicPenaltySpec): DynamicPenalty {
  if (spec === 'gpu') return gpuDynamicPenalty();
  if (spec === 'none') return noDynamicPenalty;
  if (typeof spec === 'number') {
    if (!(Number.isFinite(spec) && spec > 0)) throw new SimArgumentError(`dynamic penalty factor must be finite and > 0, got ${spec}`);
    return () => spec;
  }
  if (typeof spec === 'function') return spec;
  throw new SimArgumentError(`unknown dynamic penalty ${String(spec)}; expected 'gpu', 'none', a factor or a function`);
}

function checkRun(name: string, length: number, batch: number, maxLength: number): void {
  if (!(Number.isInteger(length) && length >= 1 && length <= maxLength)) {
    throw new SimArgumentError(`${name} profile: length must be an integer in [1, ${maxLength}], got ${length}`);
  }
  if (!(Number.isInteger(batch) && batch >= 1)) throw new SimArgumentError(`${name} profile: batch must be a positive integer, got ${batch}`);
}
