/**
 * A seeded synthetic "domain" corpus (hmi.md §4.2 E2) for tests, demos and benches: Zipfian token streams with a
 * few domain-frequent phrases, so a domain's tri-gram counts have the long tail the α-coverage rule (A6) is about.
 */
import { mulberry32 } from '@tessera/core';

export interface ZipfCorpusOptions {
  seed: number;
  vocabSize: number;
  sequences: number;
  /** Zipf exponent (about 1.0–1.2). */
  exponent?: number;
  minLength?: number;
  maxLength?: number;
  /** Phrases spliced in with probability `phraseRate` per position. */
  phrases?: number[][];
  phraseRate?: number;
}

/** Sequences of ids in [1, vocabSize), rank r drawn with probability ∝ r^−exponent (id = a seeded permutation of ranks). */
export function zipfCorpus(options: ZipfCorpusOptions): number[][] {
  const { seed, vocabSize, sequences, exponent = 1.1, minLength = 16, maxLength = 48, phrases = [], phraseRate = 0 } = options;
  const rand = mulberry32(seed);
  const ids = Array.from({ length: vocabSize - 1 }, (_, i) => i + 1);
  for (let i = ids.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [ids[i], ids[j]] = [ids[j]!, ids[i]!];
  }
  const cdf = new Float64Array(ids.length);
  let acc = 0;
  for (let r = 0; r < ids.length; r++) cdf[r] = acc += (r + 1) ** -exponent;
  const draw = (): number => {
    const u = rand() * acc;
    let lo = 0;
    let hi = cdf.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cdf[mid]! < u) lo = mid + 1;
      else hi = mid;
    }
    return ids[lo]!;
  };
  const out: number[][] = [];
  for (let s = 0; s < sequences; s++) {
    const n = minLength + Math.floor(rand() * (maxLength - minLength + 1));
    const seq: number[] = [];
    while (seq.length < n) {
      if (phrases.length > 0 && rand() < phraseRate) seq.push(...phrases[Math.floor(rand() * phrases.length)]!);
      else seq.push(draw());
    }
    out.push(seq.slice(0, n));
  }
  return out;
}
