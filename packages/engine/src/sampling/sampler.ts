/**
 * Token sampling with Hugging Face `generate` semantics: logits / temperature → top-k → top-p (nucleus) →
 * softmax in float64 → one draw by inverse CDF. Temperature 0 (or absent) is greedy: argmax, ties to the
 * lowest token id, and top-k / top-p are ignored (as with HF's do_sample=False).
 *
 * Each sampler owns its random stream: mulberry32 (a 32-bit integer generator, the one @tessera/test-utils
 * uses) seeded from `seed`, two outputs per draw combined into a 53-bit uniform double. Integer arithmetic
 * only, so a seed gives the same stream on every machine. The softmax uses Math.exp, which V8 computes in
 * software (fdlibm) rather than through the platform libm, so the same Node gives the same token ids.
 *
 * Where this differs from HF on purpose: top-k keeps exactly k tokens, ties at the k-th logit broken by lower
 * id (HF keeps every token tied with the k-th), so top-k = 1 is always the greedy token.
 */
import { InvalidArgumentError } from '@tessera/native';

export interface SamplingParams {
  /** Divides the logits. 0 or absent = greedy. */
  temperature?: number | undefined;
  /** Keep the k most probable tokens. 0 or absent = off. */
  topK?: number | undefined;
  /** Keep the smallest set of most probable tokens whose probability sums to at least topP. 1 or absent = off. */
  topP?: number | undefined;
  /** Seed of this request's random stream (any safe integer). Absent = 0: unseeded requests are reproducible too. */
  seed?: number | undefined;
}

export interface Sampler {
  /** The validated parameters, defaults filled in. */
  readonly params: Readonly<Required<{ [K in keyof SamplingParams]: number }>>;
  /** True when every call returns the argmax (no randomness consumed). */
  readonly greedy: boolean;
  /** One token id drawn from `logits` (one row, length = vocabulary size). */
  sample(logits: Float32Array): number;
}

/**
 * Filtering sorts only a candidate prefix of the vocabulary. One O(V) pass buckets every finite token by its
 * logit gap below the maximum, in quarters of the temperature (bucket b: gap·4/T in [b, b + 1); weights in
 * bucket b are ≥ e^−(b+1)/4), with one last bucket for gaps ≥ 64·T. Any union of the first buckets is a prefix of
 * the sorted order, so the smallest one holding k tokens (top-k) and probability ≥ topP (top-p) contains the
 * exact answer: only it gets sorted, instead of the whole vocabulary.
 */
const BUCKETS_PER_TEMPERATURE = 4;
const LAST_BUCKET = 64 * BUCKETS_PER_TEMPERATURE;
const NO_BUCKET = LAST_BUCKET + 1;

const TWO_POW_32 = 4294967296;

function validate(params: SamplingParams): { temperature: number; topK: number; topP: number; seed: number } {
  const temperature = params.temperature ?? 0;
  const topK = params.topK ?? 0;
  const topP = params.topP ?? 1;
  const seed = params.seed ?? 0;
  if (typeof temperature !== 'number' || !Number.isFinite(temperature) || temperature < 0) {
    throw new InvalidArgumentError(`sampling: temperature must be a finite number >= 0 (0 = greedy), got ${String(params.temperature)}`);
  }
  if (typeof topK !== 'number' || !Number.isSafeInteger(topK) || topK < 0) {
    throw new InvalidArgumentError(`sampling: topK must be a non-negative integer (0 = off), got ${String(params.topK)}`);
  }
  if (typeof topP !== 'number' || !(topP > 0 && topP <= 1)) {
    throw new InvalidArgumentError(`sampling: topP must be in (0, 1] (1 = off), got ${String(params.topP)}`);
  }
  if (typeof seed !== 'number' || !Number.isSafeInteger(seed)) {
    throw new InvalidArgumentError(`sampling: seed must be a safe integer, got ${String(params.seed)}`);
  }
  return { temperature, topK, topP, seed };
}

/**
 * A uniform double in [0, 1) from mulberry32, 53 random bits per draw. Seeds in [0, 2^32) start mulberry32
 * exactly there; larger or negative safe integers fold their high 32 bits in (so 2^32 and 0 differ).
 */
function uniformStream(seed: number): () => number {
  const low = seed >>> 0;
  const high = Math.floor(seed / TWO_POW_32) >>> 0;
  let state = (low ^ Math.imul(high, 0x9e3779b9)) >>> 0;
  const next32 = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
  return () => ((next32() >>> 5) * 67108864 + (next32() >>> 6)) / 9007199254740992;
}

/** Index of the largest logit, lowest id on ties. Throws on NaN, on an empty row and when every logit is -Infinity. */
export function argmax(logits: Float32Array): number {
  return scan(logits).best;
}

function scan(logits: Float32Array): { best: number; max: number } {
  if (logits.length === 0) throw new InvalidArgumentError('sampling: logits are empty (vocabulary size 0)');
  let best = -1;
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    const x = logits[i]!;
    if (x !== x) throw new InvalidArgumentError(`sampling: logits[${i}] is NaN (of ${logits.length}); the model produced an invalid score`);
    if (x > max) {
      max = x;
      best = i;
    }
  }
  if (best < 0) throw new InvalidArgumentError(`sampling: all ${logits.length} logits are -Infinity; no token can be chosen`);
  return { best, max };
}

export function createSampler(params: SamplingParams = {}): Sampler {
  const valid = validate(params);
  const { temperature, topK, topP } = valid;
  const greedy = temperature === 0;
  const filtering = topK > 0 || topP < 1;
  const uniform = uniformStream(valid.seed);
  // Per-vocabulary scratch, reused across calls (one row per call, the same vocabulary every step).
  let weights = new Float64Array(0);
  let buckets = new Uint16Array(0);
  let candidates = new Int32Array(0);
  const bucketCount = new Float64Array(LAST_BUCKET + 1);
  const bucketMass = new Float64Array(LAST_BUCKET + 1);

  function drawFrom(ids: Int32Array | null, count: number, total: number): number {
    // Inverse CDF: the first token whose running sum exceeds u·total. A zero-weight token never does, since
    // the running sum only exceeds the target by adding a positive weight.
    const target = uniform() * total;
    let running = 0;
    let lastPositive = -1;
    for (let j = 0; j < count; j++) {
      const id = ids ? ids[j]! : j;
      const w = weights[id]!;
      if (w <= 0) continue;
      running += w;
      lastPositive = id;
      if (running > target) return id;
    }
    // Reached only when u·total rounds up to total: the last positive token is the right one then.
    return lastPositive;
  }

  /** The tokens in buckets 0..maxBucket, sorted by logit descending, ties by lower id. */
  function sortedCandidates(logits: Float32Array, maxBucket: number): Int32Array {
    let count = 0;
    for (let i = 0; i < logits.length; i++) if (buckets[i]! <= maxBucket) candidates[count++] = i;
    return candidates.subarray(0, count).sort((a, b) => {
      const la = logits[a]!;
      const lb = logits[b]!;
      return la > lb ? -1 : la < lb ? 1 : a - b;
    });
  }

  function sample(logits: Float32Array): number {
    const { best, max } = scan(logits);
    if (greedy) return best;
    const n = logits.length;
    if (weights.length !== n) {
      weights = new Float64Array(n);
      buckets = new Uint16Array(n);
      candidates = new Int32Array(n);
    }
    // Softmax numerators relative to the max, in float64. A +Infinity logit takes all the mass (the limit of
    // the softmax), shared equally with any other +Infinity; -Infinity gets weight 0 and no bucket.
    // Divisions, not a reciprocal: 1 / T overflows for a subnormal T and 0 · Infinity would be NaN.
    const weightOf = (x: number): number => (max === Infinity ? (x === Infinity ? 1 : 0) : Math.exp((x - max) / temperature));
    let totalAll = 0;
    if (!filtering) {
      for (let i = 0; i < n; i++) totalAll += weights[i] = weightOf(logits[i]!);
      return drawFrom(null, n, totalAll);
    }

    // Bucket every token. Top-p without top-k needs the whole vocabulary's mass now; with top-k, the weights
    // of the candidates alone are computed later (the exp is most of the cost on a large vocabulary).
    const massNeeded = topK === 0;
    bucketCount.fill(0);
    bucketMass.fill(0);
    for (let i = 0; i < n; i++) {
      const x = logits[i]!;
      let bucket: number;
      if (x === -Infinity) bucket = NO_BUCKET;
      else if (max === Infinity) bucket = x === Infinity ? 0 : NO_BUCKET;
      else bucket = Math.min(LAST_BUCKET, Math.floor(((max - x) / temperature) * BUCKETS_PER_TEMPERATURE));
      buckets[i] = bucket;
      if (bucket === NO_BUCKET) continue;
      bucketCount[bucket]! += 1;
      if (massNeeded) {
        const w = weightOf(x);
        weights[i] = w;
        totalAll += w;
        bucketMass[bucket]! += w;
      }
    }

    // The first buckets that hold the top k, or (without top-k) probability topP of the whole vocabulary.
    let maxBucket = 0;
    let count = bucketCount[0]!;
    let mass = bucketMass[0]!;
    while (maxBucket < LAST_BUCKET && (topK > 0 ? count < topK : mass < topP * totalAll)) {
      maxBucket++;
      count += bucketCount[maxBucket]!;
      mass += bucketMass[maxBucket]!;
    }
    for (;;) {
      const sorted = sortedCandidates(logits, maxBucket);
      let kept = topK > 0 ? Math.min(topK, sorted.length) : sorted.length;
      if (!massNeeded) for (let j = 0; j < kept; j++) weights[sorted[j]!] = weightOf(logits[sorted[j]!]!);
      let keptMass = 0;
      for (let j = 0; j < kept; j++) keptMass += weights[sorted[j]!]!;
      if (topP < 1) {
        // Nucleus over the top-k survivors (renormalised), or over the whole vocabulary without top-k.
        const norm = topK > 0 ? keptMass : totalAll;
        let cumulative = 0;
        let reached = -1;
        for (let j = 0; j < kept; j++) {
          cumulative += weights[sorted[j]!]! / norm;
          if (cumulative >= topP) {
            reached = j + 1;
            break;
          }
        }
        if (reached < 0 && massNeeded && maxBucket < LAST_BUCKET) {
          // Rounding (bucket sums vs this walk) left the nucleus just short inside the candidates: take all.
          maxBucket = LAST_BUCKET;
          continue;
        }
        if (reached > 0) {
          kept = reached;
          keptMass = 0;
          for (let j = 0; j < kept; j++) keptMass += weights[sorted[j]!]!;
        }
      }
      return drawFrom(sorted, kept, keptMass);
    }
  }

  return {
    params: valid,
    greedy,
    sample,
  };
}
