/**
 * The synthetic workload of §6.1 (S-LoRA's generator): each application's mean rate is drawn uniformly and used as
 * a weight to apportion the requests; arrivals are Poisson (the superposition of the per-app Poisson processes is
 * one Poisson process whose arrivals pick an app by weight); prompt and output lengths ~ U[8, 512], clipped so the
 * total stays within the maximum sequence length (design note A27).
 */
import { SimArgumentError } from '../errors.js';
import { exponential, substream, uniformInt } from '../random.js';

export interface BlockllmRequest {
  id: string;
  app: string;
  arrivalMs: number;
  promptTokens: number;
  outputTokens: number;
}

/** Prompt and output lengths when none are given: U[8, 512] (design note §8.3). */
export const DEFAULT_LENGTH_RANGE: readonly [number, number] = [8, 512];

export interface BlockllmWorkloadOptions {
  apps: readonly string[];
  seed: number;
  /** Requests in total (default 400) over durationMs (default 20 min). */
  requests?: number;
  durationMs?: number;
  prompt?: readonly [number, number];
  output?: readonly [number, number];
  maxSequence?: number;
}

export interface BlockllmWorkload {
  requests: BlockllmRequest[];
  /** The per-app weights (normalised). */
  weights: Map<string, number>;
}

export function syntheticWorkload(options: BlockllmWorkloadOptions): BlockllmWorkload {
  const n = options.requests ?? 400;
  const duration = options.durationMs ?? 20 * 60_000;
  const [pLo, pHi] = options.prompt ?? DEFAULT_LENGTH_RANGE;
  const [oLo, oHi] = options.output ?? DEFAULT_LENGTH_RANGE;
  const maxSeq = options.maxSequence ?? 1024;
  if (options.apps.length === 0) throw new SimArgumentError('syntheticWorkload: no applications');
  if (!Number.isInteger(n) || n < 1) throw new SimArgumentError(`syntheticWorkload: requests must be a positive integer, got ${n}`);
  if (!(duration > 0)) throw new SimArgumentError(`syntheticWorkload: durationMs must be > 0, got ${duration}`);
  for (const [name, lo, hi] of [['prompt', pLo, pHi], ['output', oLo, oHi]] as const) {
    if (!Number.isInteger(lo) || !Number.isInteger(hi) || lo < 1 || hi < lo) throw new SimArgumentError(`syntheticWorkload: ${name} range [${lo}, ${hi}] is not 1 ≤ lo ≤ hi integers`);
  }
  const rateRng = substream(options.seed, 1);
  const arrivalRng = substream(options.seed, 2);
  const lengthRng = substream(options.seed, 3);
  const raw = options.apps.map(() => rateRng());
  const total = raw.reduce((a, b) => a + b, 0);
  const weights = new Map(options.apps.map((a, i) => [a, raw[i]! / total]));
  const cumulative: number[] = [];
  let acc = 0;
  for (const w of raw) cumulative.push((acc += w / total));
  const requests: BlockllmRequest[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += exponential(arrivalRng, duration / n);
    const u = arrivalRng();
    const found = cumulative.findIndex((c) => u < c);
    const k = found < 0 ? options.apps.length - 1 : found;
    const prompt = uniformInt(lengthRng, pLo, pHi);
    const output = Math.max(1, Math.min(uniformInt(lengthRng, oLo, oHi), maxSeq - prompt));
    requests.push({ id: `r${i}`, app: options.apps[k]!, arrivalMs: t, promptTokens: prompt, outputTokens: output });
  }
  return { requests, weights };
}
