/** hmi.md §4.1 behaviour 6 (α-coverage selection, A6) and the root key set (A5). */
import { describe, expect, it } from 'vitest';
import { packKey, PAD, PlotStoreArgumentError, rootKeys, selectByCoverage, TrigramCounts, TrigramKeyCodec, unpackKey } from '../src/index.js';
import { zipfCorpus } from '../src/corpus/zipf.js';

const codec = new TrigramKeyCodec({ vocabSize: 1000 });
// Thirty domain phrases of four tokens each ((5,6,7,8), (8,9,10,11), …) spliced into a Zipf (s = 1.2) stream.
const phrases = Array.from({ length: 30 }, (_, i) => [5 + 3 * i, 6 + 3 * i, 7 + 3 * i, 8 + 3 * i]);
const corpus = zipfCorpus({ seed: 6, vocabSize: 1000, sequences: 3000, exponent: 1.2, phrases, phraseRate: 0.1 });
const counts = new TrigramCounts().addBatch(codec.keys(corpus));
const tokens = corpus.reduce((a, s) => a + s.length, 0);
const ALPHAS = [0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1];

describe('TrigramCounts', () => {
  it('counts one key per token, separators excluded', () => {
    expect(counts.total).toBe(tokens);
    expect(counts.sequences).toBe(3000);
    let sum = 0;
    for (const [, n] of counts.entries()) sum += n;
    expect(sum).toBe(tokens);
    // A spliced phrase is frequent: its inner tri-gram (5,6,7) is counted at least once per splice.
    expect(counts.get(packKey(5, 6, 7))).toBeGreaterThan(100);
  });

  it('sorts by count descending, ties by key ascending', () => {
    const { keys, counts: n } = counts.sorted();
    for (let i = 1; i < keys.length; i++) {
      const ok = n[i - 1]! > n[i]! || (n[i - 1] === n[i] && keys[i - 1]! < keys[i]!);
      if (!ok) throw new Error(`order broken at ${i}`);
    }
    expect(keys.length).toBe(counts.distinct);
  });

  it('merging equals counting the concatenated corpus', () => {
    const a = new TrigramCounts().addBatch(codec.keys(corpus.slice(0, 700)));
    const b = new TrigramCounts().addBatch(codec.keys(corpus.slice(700)));
    const m = a.merged(b);
    expect(m.total).toBe(counts.total);
    expect(m.distinct).toBe(counts.distinct);
    expect(m.sequences).toBe(3000);
    for (const [k, n] of counts.entries()) if (m.get(k) !== n) throw new Error(`count of ${k}`);
  });
});

describe('selectByCoverage on a Zipf corpus', () => {
  const sorted = counts.sorted();
  const prefix = new Float64Array(sorted.counts.length + 1);
  sorted.counts.forEach((n, i) => (prefix[i + 1] = prefix[i]! + n));
  const prefixMass = (k: number): number => prefix[k]!;

  it('keeps the smallest frequency-sorted prefix whose mass is ≥ α (inclusive, the default)', () => {
    for (const alpha of ALPHAS) {
      const sel = selectByCoverage(counts, alpha);
      const k = sel.keys.length;
      expect([...sel.keys]).toEqual([...sorted.keys.subarray(0, k)]);
      expect(prefixMass(k)).toBeGreaterThanOrEqual(alpha * counts.total);
      if (k > 0) expect(prefixMass(k - 1)).toBeLessThan(alpha * counts.total);
      expect(sel.coveredOccurrences).toBe(prefixMass(k));
      expect(sel.coveredFraction).toBeCloseTo(prefixMass(k) / tokens, 12);
      expect(sel.keptFraction).toBe(k / counts.distinct);
    }
  });

  it('α = 0 keeps nothing, α = 1 keeps every distinct tri-gram', () => {
    expect(selectByCoverage(counts, 0).keys.length).toBe(0);
    const all = selectByCoverage(counts, 1);
    expect(all.keys.length).toBe(counts.distinct);
    expect(all.coveredOccurrences).toBe(tokens);
  });

  it("vBERT's exclusive rule drops the key that crosses α × total", () => {
    for (const alpha of ALPHAS) {
      const sel = selectByCoverage(counts, alpha, { boundary: 'exclusive' });
      const k = sel.keys.length;
      expect(prefixMass(k)).toBeLessThan(Math.max(alpha * counts.total, Number.MIN_VALUE));
      if (k < sorted.keys.length && alpha > 0) expect(prefixMass(k + 1)).toBeGreaterThanOrEqual(alpha * counts.total);
      const inclusive = selectByCoverage(counts, alpha).keys.length;
      expect(k === inclusive || k === inclusive - 1).toBe(true);
    }
    expect(selectByCoverage(counts, 1, { boundary: 'exclusive' }).keys.length).toBe(counts.distinct - 1);
  });

  it('the keep-set is monotone in α (each one a prefix of the next)', () => {
    let previous = 0;
    for (const alpha of ALPHAS) {
      const k = selectByCoverage(counts, alpha).keys.length;
      expect(k).toBeGreaterThanOrEqual(previous);
      previous = k;
    }
  });

  it('a small share of the distinct tri-grams covers half of the occurrences (the shape of §7.7)', () => {
    const half = selectByCoverage(counts, 0.5);
    // Deterministic for this seed (≈ 12 % here, ≈ 1 % at α = 0.3); the paper's corpora (≈ 10^8 distinct
    // tri-grams) give ≈ 0.4 % at α = 0.5.
    expect(half.keptFraction).toBeLessThan(0.15);
    expect(half.keptFraction).toBeGreaterThan(0);
    expect(selectByCoverage(counts, 0.3).keptFraction).toBeLessThan(0.02);
  });

  it('refuses α outside [0, 1] and unknown boundaries', () => {
    expect(() => selectByCoverage(counts, 1.5)).toThrow(PlotStoreArgumentError);
    expect(() => selectByCoverage(counts, Number.NaN)).toThrow(PlotStoreArgumentError);
    expect(() => selectByCoverage(counts, 0.5, { boundary: 'both' as never })).toThrow(PlotStoreArgumentError);
  });

  it('an empty corpus selects nothing at any α', () => {
    const empty = new TrigramCounts();
    expect(selectByCoverage(empty, 1)).toMatchObject({ keys: new BigUint64Array(0), coveredFraction: 0, keptFraction: 0 });
  });
});

describe('rootKeys (A5)', () => {
  it('holds every uni-gram, the bi-gram of every corpus key, and the corpus keys (optionally capped)', () => {
    const small = new TrigramKeyCodec({ vocabSize: 50 });
    const c = new TrigramCounts().addBatch(small.keys([[3, 4, 5, 6], [3, 4, 5]]));
    const keys = rootKeys(small, c);
    const set = new Set(keys);
    for (let t = 1; t < 50; t++) expect(set.has(packKey(PAD, t, PAD))).toBe(true);
    for (const [k] of c.entries()) {
      expect(set.has(k)).toBe(true);
      const [, m, r] = unpackKey(k);
      expect(set.has(packKey(PAD, m, r))).toBe(true);
    }
    expect([...keys]).toEqual([...keys].sort((a, b) => (a < b ? -1 : 1)));
    // (0,3,4) and (3,4,5) occur twice, the others once: a cap of two keeps only them among the exact keys.
    const capped = new Set(rootKeys(small, c, { maxExact: 2 }));
    expect(capped.has(packKey(3, 4, 5))).toBe(true);
    expect(capped.has(packKey(4, 5, 6))).toBe(false);
    expect(capped.has(packKey(PAD, 5, 6))).toBe(true);
    const causal = new TrigramKeyCodec({ vocabSize: 50, mode: 'causal' });
    expect(new Set(rootKeys(causal, new TrigramCounts())).has(packKey(PAD, PAD, 7))).toBe(true);
  });
});
