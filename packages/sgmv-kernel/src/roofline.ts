/**
 * The I/O cost model of Punica §7.1 (punica.md §3.3): FLOP and bytes of one SGMV, of the LoRA add-on (shrink +
 * expand) and of the Gather-BMM baseline, and their arithmetic intensity (FLOP per byte), which places each
 * kernel call on a roofline. `elementBytes` is the storage size of one element: 2 for the paper's fp16, 4 for
 * our f32 kernels.
 */
import { InvalidArgumentError } from '@tessera/core';

export interface SgmvCostInput {
  /** Rows per segment (segment sizes). Empty segments read no weight. */
  segments: readonly number[];
  hIn: number;
  hOut: number;
  /** Bytes per element; default 2 (fp16, as in the paper). */
  elementBytes?: number;
}

export interface KernelCost {
  flops: number;
  bytes: number;
  /** flops / bytes */
  intensity: number;
}

function check(what: string, input: SgmvCostInput): { rows: number; n: number; eb: number } {
  const { hIn, hOut } = input;
  const eb = input.elementBytes ?? 2;
  for (const [name, v] of [['hIn', hIn], ['hOut', hOut], ['elementBytes', eb]] as const) {
    if (!(Number.isFinite(v) && v > 0)) throw new InvalidArgumentError(`${what}: ${name} must be a positive number, got ${v}`);
  }
  let rows = 0;
  let n = 0;
  for (const s of input.segments) {
    if (!Number.isSafeInteger(s) || s < 0) throw new InvalidArgumentError(`${what}: segment size ${s} is not a non-negative integer`);
    rows += s;
    if (s > 0) n++;
  }
  return { rows, n, eb };
}

function cost(flops: number, bytes: number): KernelCost {
  return { flops, bytes, intensity: bytes > 0 ? flops / bytes : 0 };
}

/**
 * One SGMV over n (non-empty) segments and s_n rows with an h_i × h_o weight per segment:
 *   FLOP  = 2 · s_n · h_i · h_o
 *   bytes = e · [ s_n · (h_i + h_o) + n · h_i · h_o ]   (read x, write y, read each segment's weight once)
 */
export function sgmvCost(input: SgmvCostInput): KernelCost {
  const { rows, n, eb } = check('sgmvCost', input);
  const { hIn, hOut } = input;
  return cost(2 * rows * hIn * hOut, eb * (rows * (hIn + hOut) + n * hIn * hOut));
}

/** The LoRA add-on y += (x · Aᵀ) · B: a shrink SGMV (h_in → r) plus an expand SGMV (r → h_out), summed. */
export function addLoraCost(input: SgmvCostInput & { rank: number }): KernelCost {
  if (!Number.isSafeInteger(input.rank) || input.rank < 1) throw new InvalidArgumentError(`addLoraCost: rank must be a positive integer, got ${input.rank}`);
  const base = { segments: input.segments, elementBytes: input.elementBytes ?? 2 };
  const shrink = sgmvCost({ ...base, hIn: input.hIn, hOut: input.rank });
  const expand = sgmvCost({ ...base, hIn: input.rank, hOut: input.hOut });
  return cost(shrink.flops + expand.flops, shrink.bytes + expand.bytes);
}

/**
 * Gather-BMM for the same h_i × h_o product: the gather reads n · h_i · h_o weight elements and writes the
 * per-row stack of s_n · h_i · h_o, which the BMM reads again; so it moves 2 · s_n · h_i · h_o elements more
 * than SGMV for the same FLOP.
 */
export function gatherBmmCost(input: SgmvCostInput): KernelCost {
  const { rows, eb } = check('gatherBmmCost', input);
  const base = sgmvCost(input);
  return cost(base.flops, base.bytes + eb * 2 * rows * input.hIn * input.hOut);
}

/** Elements (not bytes) Gather-BMM moves beyond SGMV: 2 · s_n · h_i · h_o. */
export function gatherBmmExtraElements(input: Omit<SgmvCostInput, 'elementBytes'>): number {
  const { rows } = check('gatherBmmExtraElements', input);
  return 2 * rows * input.hIn * input.hOut;
}

/**
 * Attainable FLOP/s on a roofline: min(peak, intensity × bandwidth). `bandwidth` in bytes/s, `peak` in FLOP/s
 * (any consistent units work: GB/s and GFLOP/s give GFLOP/s).
 */
export function rooflineBound(intensity: number, bandwidth: number, peak: number): number {
  return Math.min(peak, intensity * bandwidth);
}
