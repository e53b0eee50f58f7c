/**
 * Which keys a table holds. A domain table holds the domain corpus's most frequent tri-grams, just enough of them to
 * cover a share α of the corpus's tri-gram *occurrences* (hmi.md §1.5, A6, §5 item 1: α is occurrence coverage,
 * not "α % of distinct tri-grams"). The root holds every uni-gram, the corpus's bi-grams and its tri-grams (A5).
 */
import { PlotStoreArgumentError } from './errors.js';
import { PAD, packKey, type PlotKey, SEPARATOR_KEY, type TrigramKeyBatch, type TrigramKeyCodec, unpackKey } from './keys.js';

/** Occurrence counts of the keys of a corpus (A1 keys, separators excluded). */
export class TrigramCounts {
  private readonly counts = new Map<PlotKey, number>();
  private occurrences = 0;
  private sequenceCount = 0;
  /** The last {@link sorted} order, until the next count (an α sweep sorts once). */
  private order: { keys: BigUint64Array; counts: Float64Array } | null = null;

  /** Counts every key of a batch from {@link TrigramKeyCodec.keys} except the separators. */
  addBatch(batch: TrigramKeyBatch): this {
    for (const key of batch.keys) if (key !== SEPARATOR_KEY) this.add(key);
    this.sequenceCount += batch.lengths.length;
    return this;
  }

  /** Counts `times` more occurrences of one key. */
  add(key: PlotKey, times = 1): this {
    if (!Number.isInteger(times) || times < 0) throw new PlotStoreArgumentError(`times must be a non-negative integer, got ${times}`);
    if (key === SEPARATOR_KEY) throw new PlotStoreArgumentError('the separator key is not a corpus tri-gram');
    if (times === 0) return this;
    this.order = null;
    this.counts.set(key, (this.counts.get(key) ?? 0) + times);
    this.occurrences += times;
    return this;
  }

  /** A new count holding both (A7: an update recounts over the cumulative corpus). */
  merged(other: TrigramCounts): TrigramCounts {
    const out = new TrigramCounts();
    for (const src of [this, other]) {
      for (const [key, n] of src.counts) out.add(key, n);
      out.sequenceCount += src.sequenceCount;
    }
    return out;
  }

  get(key: PlotKey): number {
    return this.counts.get(key) ?? 0;
  }

  /** Distinct keys counted. */
  get distinct(): number {
    return this.counts.size;
  }

  /** Key occurrences counted: the corpus's tokens, one key each. */
  get total(): number {
    return this.occurrences;
  }

  /** Sequences counted through {@link addBatch}. */
  get sequences(): number {
    return this.sequenceCount;
  }

  /** Every distinct key by count descending, ties by key ascending (so the order, and every selection, is deterministic). */
  sorted(): { keys: BigUint64Array; counts: Float64Array } {
    this.order ??= this.sort();
    return { keys: this.order.keys.slice(), counts: this.order.counts.slice() };
  }

  private sort(): { keys: BigUint64Array; counts: Float64Array } {
    const entries = [...this.counts];
    entries.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const keys = new BigUint64Array(entries.length);
    const counts = new Float64Array(entries.length);
    entries.forEach(([k, n], i) => {
      keys[i] = k;
      counts[i] = n;
    });
    return { keys, counts };
  }

  /** Every (key, count), in insertion order. */
  entries(): IterableIterator<[PlotKey, number]> {
    return this.counts.entries();
  }
}

/**
 * Where the α threshold falls. `'inclusive'` (default): the smallest frequency-sorted prefix whose occurrence mass
 * is ≥ α × total, so α = 0 keeps nothing and α = 1 keeps every distinct key. `'exclusive'`: vBERT's rule, keep a
 * key while the running sum including it stays strictly below α × total (the key that crosses the threshold is
 * dropped; α = 1 then drops the last key).
 */
export type CoverageBoundary = 'inclusive' | 'exclusive';

export interface CoverageOptions {
  boundary?: CoverageBoundary;
}

/** The outcome of an α-coverage selection, with the corpus statistics a domain version records. */
export interface CoverageSelection {
  alpha: number;
  boundary: CoverageBoundary;
  /** The kept keys, most frequent first. */
  keys: BigUint64Array;
  /** Their counts, aligned with `keys`. */
  counts: Float64Array;
  /** Key occurrences in the corpus (its token count). */
  totalOccurrences: number;
  /** Occurrences the kept keys cover. */
  coveredOccurrences: number;
  /** Distinct keys in the corpus. */
  distinct: number;
  /** coveredOccurrences / totalOccurrences (0 for an empty corpus). */
  coveredFraction: number;
  /** keys.length / distinct: the table's share of the distinct tri-grams (§7.7: ≈ 0.4 % at α = 0.5). */
  keptFraction: number;
}

/** A6: the frequent keys of a corpus that cover a share α of its key occurrences (see {@link CoverageBoundary}). */
export function selectByCoverage(counts: TrigramCounts, alpha: number, options: CoverageOptions = {}): CoverageSelection {
  const { boundary = 'inclusive' } = options;
  if (typeof alpha !== 'number' || !(alpha >= 0 && alpha <= 1)) throw new PlotStoreArgumentError(`alpha must be a number in [0, 1], got ${alpha}`);
  if (boundary !== 'inclusive' && boundary !== 'exclusive') throw new PlotStoreArgumentError(`boundary must be 'inclusive' or 'exclusive', got ${String(boundary)}`);
  const sorted = counts.sorted();
  const budget = alpha * counts.total;
  let kept = 0;
  let covered = 0;
  if (boundary === 'inclusive') {
    while (covered < budget && kept < sorted.keys.length) covered += sorted.counts[kept++]!;
  } else {
    while (kept < sorted.keys.length && covered + sorted.counts[kept]! < budget) covered += sorted.counts[kept++]!;
  }
  return {
    alpha,
    boundary,
    keys: sorted.keys.slice(0, kept),
    counts: sorted.counts.slice(0, kept),
    totalOccurrences: counts.total,
    coveredOccurrences: covered,
    distinct: counts.distinct,
    coveredFraction: counts.total === 0 ? 0 : covered / counts.total,
    keptFraction: counts.distinct === 0 ? 0 : kept / counts.distinct,
  };
}

export interface RootKeyOptions {
  /** Keep only this many of the corpus's most frequent exact keys (default: all of them). */
  maxExact?: number;
  /** Include the back-off bi-gram of every counted key (default true). */
  bigrams?: boolean;
}

/**
 * A5: the keys of a root table, ascending: the full uni-gram table (every non-PAD id of the vocabulary), the
 * back-off bi-gram of every key seen in the general corpus, and the corpus's keys themselves (optionally only the
 * `maxExact` most frequent).
 */
export function rootKeys(codec: TrigramKeyCodec, counts: TrigramCounts, options: RootKeyOptions = {}): BigUint64Array {
  const { maxExact = Number.POSITIVE_INFINITY, bigrams = true } = options;
  if (!(maxExact >= 0)) throw new PlotStoreArgumentError(`maxExact must be ≥ 0, got ${maxExact}`);
  const out = new Set<PlotKey>();
  for (let t = 1; t < codec.vocabSize; t++) out.add(codec.mode === 'encoder' ? codec.pack(0, t, 0) : codec.pack(0, 0, t));
  const sorted = counts.sorted();
  for (let i = 0; i < sorted.keys.length; i++) {
    const key = codec.checkStorable(sorted.keys[i]!);
    if (i < maxExact) out.add(key);
    if (bigrams) {
      // Both modes drop the leftmost slot for the bi-gram: encoder (PAD,c,r), causal (PAD,b,c).
      const [, c, r] = unpackKey(key);
      out.add(packKey(PAD, c, r));
    }
  }
  return BigUint64Array.from([...out].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
}
