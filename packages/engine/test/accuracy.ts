/**
 * Accuracy of a model against the f32 model on the same weights (int8 weights, bf16 compute): free-running greedy
 * agreement over 4 prompts x 32 tokens, and teacher-forced on the f32 sequences the per-position argmax agreement and
 * the max |Δlogit| (with the f32 logits' span, to judge it by).
 */
import type { DecoderConfig } from '../src/config.js';
import { generateBatch } from '../src/generate.js';
import type { LoraDelta } from '../src/hooks/lora-delta.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import type { DecoderModel } from '../src/models/decoder.js';

const host = (t: { toArray(): unknown }): Float32Array => t.toArray() as Float32Array;

export const TOKENS = 32;

export function greedy(model: DecoderModel, prompts: number[][]): number[][] {
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: prompts.length * 8 }, model.backend);
  try {
    return generateBatch(model, prompts.map((prompt) => ({ prompt, maxTokens: TOKENS, ignoreEos: true })), { cache }).map((r) => r.tokens);
  } finally {
    cache.dispose();
  }
}

/** Logits [len, vocab] of every position of `tokens` (one prefill). */
export function allLogits(model: DecoderModel, tokens: number[], deltas: LoraDelta[] = [], key: string | null = null): Float32Array {
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
  try {
    const out = model.forward([{ id: 's', tokens, key }], { cache, logits: 'all', deltas });
    out.layout.dispose();
    try {
      return host(out.logits!);
    } finally {
      out.logits!.dispose();
    }
  } finally {
    cache.dispose();
  }
}

export function argmax(v: Float32Array, off: number, n: number): number {
  let best = off;
  for (let i = off + 1; i < off + n; i++) if (v[i]! > v[best]!) best = i;
  return best - off;
}

export interface Agreement {
  /** Generated tokens equal to the f32 model's, position by position. */
  freeRunning: number;
  firstDivergence: number;
  /** Teacher-forced argmax agreement per position. */
  forced: number;
  positions: number;
  maxDelta: number;
  lo: number;
  hi: number;
}

export function agreementWithF32(f32: DecoderModel, other: DecoderModel, config: DecoderConfig): Agreement {
  const V = config.vocabSize;
  const prompts = [0, 1, 2, 3].map((p) => [config.bosTokenId, ...Array.from({ length: 15 }, (_, i) => (p * 977 + i * 131 + 7) % (V - 2))]);
  const want = greedy(f32, prompts);
  const got = greedy(other, prompts);
  let same = 0;
  let firstDivergence = TOKENS;
  got.forEach((g, s) => {
    g.forEach((t, i) => (same += t === want[s]![i] ? 1 : 0));
    const d = g.findIndex((t, i) => t !== want[s]![i]);
    if (d >= 0) firstDivergence = Math.min(firstDivergence, d);
  });
  const freeRunning = same / (prompts.length * TOKENS);

  // Teacher-forced on the f32 sequences: per-position argmax agreement and the logit error.
  let agree = 0, positions = 0, maxDelta = 0, lo = Infinity, hi = -Infinity;
  prompts.forEach((p, s) => {
    const seq = [...p, ...want[s]!.slice(0, TOKENS - 1)];
    const a = allLogits(f32, seq), b = allLogits(other, seq);
    for (let pos = p.length - 1; pos < seq.length; pos++) {
      const off = pos * V;
      agree += argmax(a, off, V) === argmax(b, off, V) ? 1 : 0;
      positions++;
      for (let i = off; i < off + V; i++) {
        maxDelta = Math.max(maxDelta, Math.abs(a[i]! - b[i]!));
        lo = Math.min(lo, a[i]!);
        hi = Math.max(hi, a[i]!);
      }
    }
  });
  const forced = agree / positions;
  return { freeRunning, firstDivergence, forced, positions, maxDelta, lo, hi };
}

export function describeAgreement(what: string, a: Agreement, prompts = 4): string {
  return (
    `${what} (mini decoder, ${prompts} prompts x ${TOKENS} greedy tokens): free-running token agreement ${(a.freeRunning * 100).toFixed(1)}% ` +
    `(first divergence at token ${a.firstDivergence}); teacher-forced argmax agreement ${(a.forced * 100).toFixed(1)}% over ${a.positions} positions; ` +
    `max |Δlogit| ${a.maxDelta.toFixed(4)} (f32 logits span [${a.lo.toFixed(2)}, ${a.hi.toFixed(2)}])`
  );
}
