/**
 * PET operator scheduling (PetS §4.2, Algorithm 2; pets.md §6): which stream each mini-batch's PET ops run on, and
 * how many streams a macro-batch gets.
 *
 * Algorithm 2 as printed assigns `stream = ⌊idx / |S|⌋` over the intensity-sorted ops, which is out of range for
 * |O| > |S|² and puts everything on stream 0 for |O| ≤ |S|. Its stated intent is that ops of *different*
 * operational intensity run concurrently, so this module reads it as contiguous chunks of the sorted order,
 * `stream = ⌊idx·|S| / |O|⌋` (pets.md §11.1): stream 0 takes the most memory-bound ops, the last stream the most
 * compute-bound ones, and at any moment the streams progress through different intensity bands. Round-robin by op
 * index is the artifact's behaviour (CUDA context per `task_id mod num_streams`), kept as a baseline.
 */
import { InvalidArgumentError } from '@tessera/native';
import type { OpCost } from '../operators/cost.js';

/** 'intensity': Algorithm 2 (contiguous chunks); 'round-robin': op index mod streams; 'sequential': all on stream 0. */
export type SchedulingMode = 'sequential' | 'intensity' | 'round-robin';

export const SCHEDULING_MODES: readonly SchedulingMode[] = ['sequential', 'intensity', 'round-robin'];

function checkCost(cost: OpCost, what: string): void {
  const ok = (v: number) => typeof v === 'number' && Number.isFinite(v) && v >= 0;
  if (!cost || !ok(cost.flops) || !ok(cost.bytes)) {
    throw new InvalidArgumentError(`${what}: cost must have finite non-negative flops and bytes, got ${JSON.stringify(cost)}`);
  }
}

/**
 * Roofline operational intensity, FLOPs per byte moved. Equal to Algorithm 2's (FLOPs/β)/ω when the bandwidth ω
 * is profiled together with β (both divide by the same time). An op that moves nothing has intensity 0 (nothing
 * to overlap), and one that computes without memory traffic +∞ (never occurs for real ops).
 */
export function intensityOf(cost: OpCost): number {
  checkCost(cost, 'intensityOf');
  if (cost.bytes === 0) return cost.flops === 0 ? 0 : Number.POSITIVE_INFINITY;
  return cost.flops / cost.bytes;
}

function checkStreams(numStreams: number, what: string): void {
  if (!Number.isInteger(numStreams) || numStreams < 1) throw new InvalidArgumentError(`${what}: numStreams must be a positive integer, got ${numStreams}`);
}

/**
 * The stream of every op, in [0, numStreams). Ties in intensity keep op order (a stable sort), so the assignment
 * is deterministic. The result only decides concurrency: the native kernels give bitwise-identical results for
 * any assignment.
 */
export function assignStreams(ops: readonly { readonly cost: OpCost }[], numStreams: number, mode: SchedulingMode): Int32Array {
  checkStreams(numStreams, 'assignStreams');
  if (!SCHEDULING_MODES.includes(mode)) throw new InvalidArgumentError(`assignStreams: mode must be one of ${SCHEDULING_MODES.join(', ')}, got ${String(mode)}`);
  const n = ops.length;
  const streams = new Int32Array(n);
  if (mode === 'sequential' || numStreams === 1) {
    ops.forEach((op, i) => checkCost(op.cost, `assignStreams: op ${i}`));
    return streams;
  }
  if (mode === 'round-robin') {
    ops.forEach((op, i) => {
      checkCost(op.cost, `assignStreams: op ${i}`);
      streams[i] = i % numStreams;
    });
    return streams;
  }
  const intensity = ops.map((op, i) => {
    checkCost(op.cost, `assignStreams: op ${i}`);
    return intensityOf(op.cost);
  });
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => intensity[a]! - intensity[b]! || a - b);
  order.forEach((op, rank) => {
    streams[op] = Math.floor((rank * numStreams) / n);
  });
  return streams;
}

/**
 * Thresholds of the dynamic stream count (pets.md §6.3). `work` below is a macro-batch's median tokens per
 * mini-batch, median(n_k) · L.
 */
export interface StreamThresholds {
  /** Below this work per mini-batch the kernels are too short to overlap: use `few` streams. */
  readonly small: number;
  /** At or above this max length, use `max` streams. */
  readonly long: number;
  /** Streams for small work (the paper: 1–2). */
  readonly few: number;
  /** The most streams (the paper: 32 on a GPU). */
  readonly max: number;
}

/**
 * Defaults read off the paper's Fig. 11 (BERT-base, 1080Ti, 128 queries per batch): with 32 tasks (≈4 queries
 * per task) 32 streams win at every length, i.e. 16 tokens per mini-batch already overlap; with 64–128 tasks
 * (1–2 queries per task) more than 2 streams hurt at length 4 (≤ 8 tokens) but not from length 8 on. Hence
 * small = 16 tokens, few = 2, long = 32, max = 32. These are GPU numbers; on the CPU a stream is a group of the
 * native pool's workers and more groups than workers only serialize, so a CPU deployment passes its own `max`.
 */
export const DEFAULT_STREAM_THRESHOLDS: StreamThresholds = { small: 16, long: 32, few: 2, max: 32 };

function checkThresholds(t: StreamThresholds): void {
  const positive = (v: number) => typeof v === 'number' && Number.isFinite(v) && v > 0;
  if (!positive(t.small) || !positive(t.long)) throw new InvalidArgumentError(`dynamicStreamCount: thresholds small and long must be positive, got ${t.small}, ${t.long}`);
  if (!Number.isInteger(t.few) || !Number.isInteger(t.max) || t.few < 1 || t.max < t.few) {
    throw new InvalidArgumentError(`dynamicStreamCount: thresholds need integers 1 ≤ few ≤ max, got few = ${t.few}, max = ${t.max}`);
  }
}

/**
 * The stream count for one macro-batch (pets.md §6.3): `few` when the median mini-batch is too small to overlap,
 * `max` for long sequences, and in between a geometric interpolation in the max length, from the length where
 * the work crosses `small` (→ few) up to `long` (→ max), so the count doubles at a steady rate as kernels grow.
 */
export function dynamicStreamCount(
  batch: { readonly rowsPerTask: number; readonly maxLength: number },
  thresholds: Partial<StreamThresholds> = {},
): number {
  const t: StreamThresholds = { ...DEFAULT_STREAM_THRESHOLDS, ...thresholds };
  checkThresholds(t);
  const { rowsPerTask, maxLength } = batch;
  if (!(Number.isFinite(rowsPerTask) && rowsPerTask > 0) || !(Number.isFinite(maxLength) && maxLength > 0)) {
    throw new InvalidArgumentError(`dynamicStreamCount: rowsPerTask and maxLength must be positive, got ${rowsPerTask}, ${maxLength}`);
  }
  if (rowsPerTask * maxLength < t.small) return t.few;
  if (maxLength >= t.long) return t.max;
  // Here small / rowsPerTask ≤ maxLength < long, so the fraction lies in [0, 1).
  const from = t.small / rowsPerTask;
  const fraction = Math.log(maxLength / from) / Math.log(t.long / from);
  return Math.min(t.max, Math.max(t.few, Math.round(t.few * (t.max / t.few) ** fraction)));
}

/** The median of positive counts (the lower middle for an even count, so one large mini-batch cannot lift it). */
export function medianOf(values: readonly number[]): number {
  if (values.length === 0) throw new InvalidArgumentError('medianOf: no values');
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[(sorted.length - 1) >> 1]!;
}
