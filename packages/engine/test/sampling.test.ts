import { InvalidArgumentError } from '@tessera/native';
import fc from 'fast-check';
import { randomFloats, rng } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import { argmax, createSampler, type SamplingParams } from '../src/sampling/sampler.js';
import { type StopReason, StopChecker, type StopStep } from '../src/sampling/stop.js';
import { tokenLogprobs, validateTopLogprobs } from '../src/sampling/logprobs.js';

/**
 * The filtered distribution, computed the slow obvious way: full sort (logit desc, id asc), keep k, softmax of
 * the survivors' logits / T, keep the smallest prefix reaching topP. Probabilities by token id.
 */
function filteredDistribution(logits: Float32Array, { temperature = 1, topK = 0, topP = 1 }: SamplingParams): Float64Array {
  const order = Array.from(logits.keys()).sort((a, b) => (logits[b]! - logits[a]! || a - b));
  let kept = order.filter((i) => logits[i] !== -Infinity);
  if (topK! > 0) kept = kept.slice(0, topK);
  const max = logits[kept[0]!]!;
  const softmax = (ids: number[]) => {
    const w = ids.map((i) => Math.exp((logits[i]! - max) / temperature!));
    const total = w.reduce((a, b) => a + b, 0);
    return w.map((x) => x / total);
  };
  if (topP! < 1) {
    const p = softmax(kept);
    let cumulative = 0;
    const n = p.findIndex((x) => (cumulative += x) >= topP!);
    kept = kept.slice(0, n < 0 ? kept.length : n + 1);
  }
  const probs = new Float64Array(logits.length);
  softmax(kept).forEach((p, j) => (probs[kept[j]!] = p));
  return probs;
}

function counts(params: SamplingParams, logits: Float32Array, draws: number): Float64Array {
  const sampler = createSampler(params);
  const c = new Float64Array(logits.length);
  for (let i = 0; i < draws; i++) c[sampler.sample(logits)]! += 1;
  return c;
}

describe('sampling parameters', () => {
  it('rejects invalid values with a message naming the parameter', () => {
    const bad: [SamplingParams, RegExp][] = [
      [{ temperature: -0.5 }, /temperature must be a finite number >= 0 \(0 = greedy\), got -0.5/],
      [{ temperature: Number.NaN }, /temperature .* got NaN/],
      [{ temperature: Infinity }, /temperature .* got Infinity/],
      [{ topK: -1 }, /topK must be a non-negative integer \(0 = off\), got -1/],
      [{ topK: 2.5 }, /topK .* got 2.5/],
      [{ topP: 0 }, /topP must be in \(0, 1\] \(1 = off\), got 0/],
      [{ topP: 1.01 }, /topP .* got 1.01/],
      [{ topP: Number.NaN }, /topP .* got NaN/],
      [{ seed: 1.5 }, /seed must be a safe integer, got 1.5/],
    ];
    for (const [params, message] of bad) {
      expect(() => createSampler(params), JSON.stringify(params)).toThrow(InvalidArgumentError);
      expect(() => createSampler(params)).toThrow(message);
    }
    expect(createSampler({ temperature: undefined, topK: undefined }).params).toEqual({ temperature: 0, topK: 0, topP: 1, seed: 0 });
  });
});

describe('greedy', () => {
  it('is the argmax with ties to the lowest id, and ignores top-k / top-p', () => {
    const logits = Float32Array.from([1, 5, -2, 5, 5, 0]);
    expect(createSampler().sample(logits)).toBe(1);
    expect(createSampler({ temperature: 0, topK: 3, topP: 0.2, seed: 9 }).sample(logits)).toBe(1);
    expect(createSampler({}).greedy).toBe(true);
    expect(argmax(Float32Array.from([-Infinity, -Infinity, -3]))).toBe(2);
    expect(argmax(Float32Array.from([0, -0, 0]))).toBe(0);
  });

  it('top-k = 1 and a tiny top-p pick the greedy token, ties included', () => {
    const r = rng(7);
    for (let trial = 0; trial < 200; trial++) {
      // Few distinct values over many ids, so ties for the maximum are common.
      const logits = Float32Array.from({ length: 50 }, () => Math.floor(r() * 6));
      const want = argmax(logits);
      const topK1 = createSampler({ temperature: 1.3, topK: 1, seed: trial });
      const topPTiny = createSampler({ temperature: 0.7, topP: 1e-9, seed: trial });
      for (let i = 0; i < 5; i++) {
        expect(topK1.sample(logits)).toBe(want);
        expect(topPTiny.sample(logits)).toBe(want);
      }
    }
  });
});

describe('seeded sampling', () => {
  it('is deterministic per seed and differs across seeds', () => {
    const logits = randomFloats(1000, 3, -4, 4);
    const run = (seed: number) => {
      const s = createSampler({ temperature: 1, topK: 50, topP: 0.95, seed });
      return Array.from({ length: 64 }, () => s.sample(logits));
    };
    expect(run(42)).toEqual(run(42));
    expect(run(42)).not.toEqual(run(43));
    // Pinned: the same ids on every machine (mulberry32 is integer arithmetic).
    const plain = createSampler({ temperature: 1, seed: 1234 });
    const small = Float32Array.from([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(Array.from({ length: 12 }, () => plain.sample(small))).toMatchInlineSnapshot(`
      [
        0,
        7,
        0,
        1,
        3,
        4,
        7,
        2,
        3,
        7,
        4,
        7,
      ]
    `);
  });

  it('seeds beyond 32 bits fold in their high bits', () => {
    const logits = Float32Array.from({ length: 64 }, () => 0);
    const run = (seed: number) => {
      const s = createSampler({ temperature: 1, seed });
      return Array.from({ length: 32 }, () => s.sample(logits));
    };
    expect(run(2 ** 32)).not.toEqual(run(0));
    expect(run(-1)).not.toEqual(run(2 ** 32 - 1));
  });

  // Chi-square goodness of fit against the filtered distribution. Seeds are fixed, so each case is
  // deterministic; the bound is the 0.999 quantile of chi-square with df degrees of freedom (Wilson–Hilferty),
  // so a correct sampler fails about once per thousand seeds, while a wrong filter or normalisation (an extra or
  // missing token, T applied twice, top-p over the wrong set) lands far beyond it. Cells expected to get fewer
  // than 5 draws are pooled into one, as the test requires.
  const chiSquareBound = (df: number) => df * (1 - 2 / (9 * df) + 3.09 * Math.sqrt(2 / (9 * df))) ** 3;
  function expectFits(got: Float64Array, want: Float64Array, draws: number, label: string): void {
    let chi = 0;
    let cells = 0;
    let pooledGot = 0;
    let pooledExpected = 0;
    for (let i = 0; i < want.length; i++) {
      if (want[i] === 0) {
        expect(got[i], `${label}: token ${i} is filtered out but was drawn`).toBe(0);
        continue;
      }
      const expected = want[i]! * draws;
      if (expected < 5) {
        pooledGot += got[i]!;
        pooledExpected += expected;
        continue;
      }
      chi += (got[i]! - expected) ** 2 / expected;
      cells++;
    }
    if (pooledExpected > 0) {
      chi += (pooledGot - pooledExpected) ** 2 / pooledExpected;
      cells++;
    }
    expect(cells, label).toBeGreaterThan(1);
    expect(chi, label).toBeLessThan(chiSquareBound(cells - 1));
  }

  const small = Float32Array.from([2.0, 1.5, 1.5, 0.3, -0.2, -1, -Infinity, 0.9, -3, 2.2, 0.1, -0.7]);
  const smallCases: SamplingParams[] = [
    { temperature: 1 },
    { temperature: 0.6, topK: 5 },
    { temperature: 1.4, topP: 0.8 },
    { temperature: 0.9, topK: 6, topP: 0.7 },
    { temperature: 2, topK: 3 },
  ];
  it('matches the filtered distribution over 20 000 draws (12 tokens; chi-square)', () => {
    for (const [index, params] of smallCases.entries()) {
      expectFits(counts({ ...params, seed: 100 + index }, small, 20_000), filteredDistribution(small, params), 20_000, JSON.stringify(params));
    }
  });

  it('matches it on a 4000-token vocabulary whose filter boundary lies several buckets down, ties included', () => {
    // A head of spaced logits (0.3 apart, so the top-k / nucleus boundary crosses several candidate buckets)
    // over a long low tail; ids 50 and 100 tie at the 6th logit, so top-k = 6 keeps 50 and drops 100.
    const logits = randomFloats(4000, 11, -8, -2);
    const head = [3917, 5, 2048, 7, 999, 50, 100, 3000, 1234, 2];
    const headLogits = [4, 3.7, 3.4, 3.1, 2.8, 2.5, 2.5, 2.2, 1.9, 1.6];
    head.forEach((id, j) => (logits[id] = headLogits[j]!));
    const cases: SamplingParams[] = [
      { temperature: 1, topK: 6 },
      { temperature: 0.7, topP: 0.8 },
      { temperature: 1.5, topK: 8, topP: 0.9 },
      { temperature: 1, topP: 0.97 },
    ];
    for (const [index, params] of cases.entries()) {
      const want = filteredDistribution(logits, params);
      if (params.topK === 6) expect([want[50]! > 0, want[100]]).toEqual([true, 0]);
      expectFits(counts({ ...params, seed: 200 + index }, logits, 2500), want, 2500, JSON.stringify(params));
    }
  });
});

describe('non-finite logits', () => {
  it('never draws a -Infinity logit, even with nothing filtered', () => {
    const logits = Float32Array.from([-Infinity, 0, -Infinity, -50, -Infinity]);
    const got = counts({ temperature: 50, seed: 1 }, logits, 5000);
    expect([got[0], got[2], got[4]]).toEqual([0, 0, 0]);
    expect(got[1]! + got[3]!).toBe(5000);
    expect(got[3]).toBeGreaterThan(1000);
  });

  it('NaN and all -Infinity are clear errors; +Infinity takes all the mass', () => {
    const sampler = createSampler({ temperature: 1, seed: 3 });
    expect(() => sampler.sample(Float32Array.from([0, 1, Number.NaN, 2]))).toThrow(/logits\[2\] is NaN \(of 4\)/);
    expect(() => createSampler().sample(Float32Array.from([0, Number.NaN]))).toThrow(InvalidArgumentError);
    expect(() => sampler.sample(Float32Array.from([-Infinity, -Infinity]))).toThrow(/all 2 logits are -Infinity/);
    expect(() => sampler.sample(new Float32Array(0))).toThrow(/empty/);
    const got = counts({ temperature: 1, topP: 0.9, seed: 4 }, Float32Array.from([3, Infinity, 1e30, Infinity]), 2000);
    expect([got[0], got[2]]).toEqual([0, 0]);
    expect(Math.abs(got[1]! - 1000)).toBeLessThan(150);
  });

  it('samples a row of a larger buffer (a subarray of batched logits)', () => {
    const batch = new Float32Array(30).fill(-5);
    batch[10 + 4] = 5;
    batch[20 + 7] = 5;
    expect(createSampler({ temperature: 0.01, topK: 1 }).sample(batch.subarray(10, 20))).toBe(4);
    expect(createSampler().sample(batch.subarray(20, 30))).toBe(7);
  });
});

// ---------------------------------------------------------------------------------------------------------
// StopChecker, with two fake tokenizers: byte-level (ids 0–255 are UTF-8 bytes, decoded with TextDecoder so
// an incomplete character at the end becomes U+FFFD) and a small word-piece vocabulary.

const EOS = 256;
const utf8 = new TextDecoder();
const bytesOf = (s: string): number[] => Array.from(new TextEncoder().encode(s));
/** Byte-level decode; EOS (only decoded when ignoreEos is set) reads as "</s>". */
const decodeBytes = (ids: number[]): string => {
  let out = '';
  let run: number[] = [];
  for (const id of ids) {
    if (id === EOS) {
      out += utf8.decode(Uint8Array.from(run)) + '</s>';
      run = [];
    } else run.push(id);
  }
  return out + utf8.decode(Uint8Array.from(run));
};
const VOCAB = ['Hel', 'lo', ' wor', 'ld', '!', '\n\n', 'User', ':', 'one two', ' three'];
const decodeWords = (ids: number[]): string => ids.map((id) => VOCAB[id]!).join('');

function pushAll(checker: StopChecker, ids: readonly number[]): StopStep[] {
  const steps: StopStep[] = [];
  for (const id of ids) {
    const step = checker.push(id);
    steps.push(step);
    if (step.finished) break;
  }
  return steps;
}

describe('StopChecker', () => {
  it('cuts a stop string that spans several tokens and holds its beginning back until it completes', () => {
    const checker = new StopChecker({ eosTokenIds: [99], stopStrings: ['\n\nUser:'], maxTokens: 100, decode: decodeWords });
    const steps = pushAll(checker, [0, 1, 2, 3, 4, 5, 6, 7, 0]);
    expect(steps).toEqual([
      { text: 'Hel', finished: null },
      { text: 'lo', finished: null },
      { text: ' wor', finished: null },
      { text: 'ld', finished: null },
      { text: '!', finished: null },
      { text: '', finished: null }, // "\n\n" could start the stop string
      { text: '', finished: null }, // "\n\nUser" still could
      { text: '', finished: 'stop' },
    ]);
    expect(checker.fullText).toBe('Hello world!');
    expect([checker.finishReason, checker.matchedStop]).toEqual(['stop', '\n\nUser:']);
    expect(checker.tokenIds).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(() => checker.push(0)).toThrow(/already finished \(stop\)/);
  });

  it('cuts a stop string that begins inside a token', () => {
    const checker = new StopChecker({ eosTokenIds: [], stopStrings: ['lo w'], maxTokens: 10, decode: decodeWords });
    expect(pushAll(checker, [0, 1, 2, 3])).toEqual([
      { text: 'He', finished: null }, // the last "l" might begin "lo w"
      { text: 'l', finished: null }, // now "lo" might
      { text: '', finished: 'stop' },
    ]);
    expect(checker.fullText).toBe('Hel');
  });

  it('releases held-back text once it turns out not to be a stop string', () => {
    const checker = new StopChecker({ eosTokenIds: [EOS], stopStrings: ['END'], maxTokens: 100, decode: decodeBytes });
    const texts = pushAll(checker, bytesOf('aEbENx')).map((s) => s.text);
    expect(texts).toEqual(['a', '', 'Eb', '', '', 'ENx']);
    expect(checker.fullText).toBe('aEbENx');
    expect(checker.finishReason).toBeNull();
  });

  it('holds back a multi-byte character split across tokens until it is complete', () => {
    const checker = new StopChecker({ eosTokenIds: [EOS], maxTokens: 100, decode: decodeBytes });
    const steps = pushAll(checker, bytesOf('é€😀!'));
    expect(steps.map((s) => s.text)).toEqual(['', 'é', '', '', '€', '', '', '', '😀', '!']);
    expect(checker.fullText).toBe('é€😀!');
    // A stop string made of multi-byte characters is found once its last byte arrives.
    const stopper = new StopChecker({ eosTokenIds: [EOS], stopStrings: ['€😀'], maxTokens: 100, decode: decodeBytes });
    const stopSteps = pushAll(stopper, bytesOf('é€😀!'));
    expect(stopSteps.length).toBe(9);
    expect(stopSteps.at(-1)).toEqual({ text: '', finished: 'stop' });
    expect(stopper.fullText).toBe('é');
  });

  it('EOS ends generation without text of its own and flushes what was held back', () => {
    const plain = new StopChecker({ eosTokenIds: [EOS, 300], maxTokens: 100, decode: decodeBytes });
    expect(pushAll(plain, [...bytesOf('hi'), 300])).toEqual([
      { text: 'h', finished: null },
      { text: 'i', finished: null },
      { text: '', finished: 'eos' },
    ]);
    expect([plain.fullText, plain.tokenIds, plain.finishReason]).toEqual(['hi', [104, 105, 300], 'eos']);

    const held = new StopChecker({ eosTokenIds: [EOS], stopStrings: ['END'], maxTokens: 100, decode: decodeBytes });
    expect(pushAll(held, [...bytesOf('hiEN'), EOS]).at(-1)).toEqual({ text: 'EN', finished: 'eos' });
    expect(held.fullText).toBe('hiEN');

    // An incomplete character at EOS is flushed as the decoder renders it (U+FFFD).
    const partial = new StopChecker({ eosTokenIds: [EOS], maxTokens: 100, decode: decodeBytes });
    expect(pushAll(partial, [0x61, 0xe2, 0x82, EOS]).map((s) => s.text)).toEqual(['a', '', '', '\uFFFD']);
  });

  it('maxTokens counts generated tokens, EOS included, and finishing by length flushes held-back text', () => {
    const checker = new StopChecker({ eosTokenIds: [EOS], stopStrings: ['cd'], maxTokens: 3, decode: decodeBytes });
    expect(pushAll(checker, bytesOf('abcd'))).toEqual([
      { text: 'a', finished: null },
      { text: 'b', finished: null },
      { text: 'c', finished: 'length' },
    ]);
    expect(checker.fullText).toBe('abc');

    const eosLast = new StopChecker({ eosTokenIds: [EOS], maxTokens: 2, decode: decodeBytes });
    expect(pushAll(eosLast, [0x61, EOS]).at(-1)).toEqual({ text: '', finished: 'eos' });

    const split = new StopChecker({ eosTokenIds: [EOS], maxTokens: 2, decode: decodeBytes });
    expect(pushAll(split, bytesOf('€')).map((s) => s.text)).toEqual(['', '\uFFFD']);
    expect(split.finishReason).toBe('length');

    // A stop string completed by the last allowed token is still a stop.
    const both = new StopChecker({ eosTokenIds: [EOS], stopStrings: ['bc'], maxTokens: 3, decode: decodeBytes });
    expect(pushAll(both, bytesOf('abc')).at(-1)).toEqual({ text: '', finished: 'stop' });
    expect(both.fullText).toBe('a');
  });

  it('with several stop strings, the earliest occurrence wins (not the first listed)', () => {
    const checker = new StopChecker({ eosTokenIds: [], stopStrings: [' three', 'two', 'one'], maxTokens: 10, decode: decodeWords });
    expect(pushAll(checker, [0, 8, 9])).toEqual([
      { text: 'Hel', finished: null },
      { text: '', finished: 'stop' },
    ]);
    expect([checker.fullText, checker.matchedStop]).toEqual(['Hel', 'one']);
  });

  it('empty stopStrings hold nothing back; ignoreEos decodes EOS as text and runs to the length limit', () => {
    const checker = new StopChecker({ eosTokenIds: [EOS], stopStrings: [], maxTokens: 4, decode: decodeBytes, ignoreEos: true });
    expect(pushAll(checker, [0x45, EOS, 0x4e, 0x44])).toEqual([
      { text: 'E', finished: null },
      { text: '</s>', finished: null },
      { text: 'N', finished: null },
      { text: 'D', finished: 'length' },
    ]);
    expect(checker.fullText).toBe('E</s>ND');
  });

  it('validates its options with clear messages', () => {
    const base = { eosTokenIds: [EOS], maxTokens: 4, decode: decodeBytes };
    expect(() => new StopChecker({ ...base, stopStrings: ['ok', ''] })).toThrow(/stopStrings\[1\] must be a non-empty string/);
    expect(() => new StopChecker({ ...base, maxTokens: 0 })).toThrow(/maxTokens must be a positive integer, got 0/);
    expect(() => new StopChecker({ ...base, eosTokenIds: [-1] })).toThrow(InvalidArgumentError);
    expect(() => new StopChecker(base).push(1.5)).toThrow(/token id 1.5/);
  });

  it('streams exactly the reference output for random byte strings, stops, EOS positions and limits (property)', () => {
    const alphabet = ['a', 'b', 'E', 'N', 'D', 'é', '€', '😀'];
    const text = fc.array(fc.constantFrom(...alphabet), { maxLength: 24 }).map((cs) => cs.join(''));
    const stop = fc.array(fc.constantFrom(...alphabet), { minLength: 1, maxLength: 4 }).map((cs) => cs.join(''));
    fc.assert(
      fc.property(text, fc.array(stop, { maxLength: 3 }), fc.option(fc.nat(40)), fc.integer({ min: 1, max: 60 }), (s, stops, eosAt, maxTokens) => {
        const tokens = bytesOf(s);
        tokens.splice(Math.min(eosAt ?? tokens.length, tokens.length), 0, EOS); // always ends by EOS at the latest
        // Reference: after each token, the text of all bytes so far (an incomplete character dropped unless the
        // limit is reached); the first time a stop string occurs, cut at its earliest occurrence.
        let want: { text: string; reason: StopReason } | undefined;
        const bytes: number[] = [];
        for (let k = 1; k <= tokens.length && !want; k++) {
          const token = tokens[k - 1]!;
          if (token === EOS) {
            want = { text: decodeBytes(bytes), reason: 'eos' };
            break;
          }
          bytes.push(token);
          const full = decodeBytes(bytes);
          const complete = k === maxTokens ? full : full.replace(/\uFFFD$/, '');
          const at = Math.min(...stops.map((x) => complete.indexOf(x)).filter((i) => i >= 0));
          if (Number.isFinite(at)) want = { text: complete.slice(0, at), reason: 'stop' };
          else if (k === maxTokens) want = { text: full, reason: 'length' };
        }
        const checker = new StopChecker({ eosTokenIds: [EOS], stopStrings: stops, maxTokens, decode: decodeBytes });
        const steps = pushAll(checker, tokens);
        expect(steps.map((x) => x.text).join('')).toBe(want!.text);
        expect(checker.fullText).toBe(want!.text);
        expect(checker.finishReason).toBe(want!.reason);
        expect(steps.filter((x) => x.finished !== null).length).toBe(1);
      }),
      { seed: 7, numRuns: 400 },
    );
  });
});

describe('extreme temperatures', () => {
  it('a subnormal temperature behaves like greedy and a huge one like uniform over the kept tokens', () => {
    const logits = Float32Array.from([0.5, 2, 1, 2 - 2 ** -20]);
    const cold = createSampler({ temperature: 5e-324, topP: 0.9, seed: 1 });
    const coldAll = createSampler({ temperature: 5e-324, seed: 1 });
    for (let i = 0; i < 50; i++) {
      expect(cold.sample(logits)).toBe(1);
      expect(coldAll.sample(logits)).toBe(1);
    }
    const got = counts({ temperature: 1e300, topK: 3, seed: 2 }, logits, 3000);
    expect(got[0]).toBe(0);
    for (const id of [1, 2, 3]) expect(Math.abs(got[id]! - 1000)).toBeLessThan(150);
  });
});

describe('StopChecker without a decode function', () => {
  it('tracks token ids only: EOS and length end it, text stays empty, stop strings are refused', () => {
    const ids = new StopChecker({ eosTokenIds: [9], maxTokens: 3, decode: null });
    expect(ids.push(1)).toEqual({ text: '', finished: null });
    expect(ids.push(9)).toEqual({ text: '', finished: 'eos' });
    expect(ids.tokenIds).toEqual([1, 9]);
    expect(ids.fullText).toBe('');
    const long = new StopChecker({ eosTokenIds: [9], maxTokens: 2, decode: null, ignoreEos: true });
    long.push(9);
    expect(long.push(9)).toEqual({ text: '', finished: 'length' });
    expect(() => long.push(1)).toThrow(/already finished/);
    expect(() => new StopChecker({ eosTokenIds: [9], maxTokens: 2, decode: null, stopStrings: ['x'] })).toThrow(/stop strings need a decode function/);
  });
});

describe('tokenLogprobs', () => {
  it('log-softmax in float64 of the raw row; top k most likely first, ties by lower id; k = 0 gives none', () => {
    const row = new Float32Array([1, 3, 3, 2, -Infinity]);
    const lse = Math.log(Math.exp(1) + 2 * Math.exp(3) + Math.exp(2));
    const r = tokenLogprobs(row, 3, 3);
    expect(r.logprob).toBeCloseTo(2 - lse, 12);
    expect(r.top.map((t) => t.token)).toEqual([1, 2, 3]);
    expect(r.top[0]!.logprob).toBeCloseTo(3 - lse, 12);
    expect(tokenLogprobs(row, 4, 0)).toEqual({ logprob: -Infinity, top: [] });
    expect(tokenLogprobs(row, 0, 9).top.map((t) => t.token)).toEqual([1, 2, 3, 0, 4]);
    expect(() => validateTopLogprobs(21)).toThrow(/from 0 to 20/);
    expect(() => validateTopLogprobs(1.5)).toThrow();
  });
});
