/** hmi.md §4.1 behaviour 1 (key extraction, A1) and the key packing of §5 item 22. */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import {
  formatKey,
  KEY_ID_BITS,
  MAX_VOCAB_SIZE,
  PAD,
  packKey,
  PlotStoreArgumentError,
  ReservedKeyError,
  SEPARATOR_KEY,
  TokenIdOutOfRangeError,
  TrigramKeyCodec,
  unpackKey,
} from '../src/index.js';

const triples = (keys: BigUint64Array): number[][] => [...keys].map((k) => unpackKey(k));

describe('packing', () => {
  it('puts left, centre and right in 21-bit fields, left highest', () => {
    expect(KEY_ID_BITS).toBe(21);
    expect(MAX_VOCAB_SIZE).toBe(2_097_152);
    expect(packKey(1, 2, 3)).toBe((1n << 42n) | (2n << 21n) | 3n);
    expect(packKey(0, 0, 0)).toBe(SEPARATOR_KEY);
    const max = MAX_VOCAB_SIZE - 1;
    expect(packKey(max, max, max)).toBe((1n << 63n) - 1n);
    expect(unpackKey(packKey(max, 0, max))).toEqual([max, 0, max]);
    expect(formatKey(packKey(7, 8, 9))).toBe('(7,8,9)');
  });

  it('round-trips and never collides on random ids over the whole documented range', () => {
    const rand = mulberry32(15);
    const seen = new Map<bigint, string>();
    const bad: string[] = [];
    let repeats = 0;
    for (let i = 0; i < 50_000; i++) {
      // Half the draws from a small range, so equal triples (which must give equal keys) do occur.
      const span = i % 2 === 0 ? MAX_VOCAB_SIZE : 40;
      const ids = [0, 1, 2].map(() => Math.floor(rand() * span)) as [number, number, number];
      const key = packKey(...ids);
      const name = ids.join(',');
      if (unpackKey(key).join(',') !== name) bad.push(`round trip ${name}`);
      const before = seen.get(key);
      if (before !== undefined && before !== name) bad.push(`collision ${before} / ${name}`);
      if (before !== undefined) repeats++;
      seen.set(key, name);
    }
    expect(bad).toEqual([]);
    expect(repeats).toBeGreaterThan(0);
    // Distinct triples ↔ distinct keys.
    expect(new Set(seen.values()).size).toBe(seen.size);
  });

  it('refuses ids that do not fit a field, and values that are not packed keys', () => {
    expect(() => packKey(MAX_VOCAB_SIZE, 0, 0)).toThrow(TokenIdOutOfRangeError);
    expect(() => packKey(0, -1, 0)).toThrow(TokenIdOutOfRangeError);
    expect(() => packKey(0, 1.5, 0)).toThrow(TokenIdOutOfRangeError);
    expect(() => unpackKey(1n << 63n)).toThrow(ReservedKeyError);
    expect(() => unpackKey(-1n)).toThrow(ReservedKeyError);
  });
});

describe('TrigramKeyCodec', () => {
  const codec = new TrigramKeyCodec({ vocabSize: 100 });

  it('checks ids against its vocabulary, with a typed error naming the id', () => {
    expect(codec.pack(99, 1, 0)).toBe(packKey(99, 1, 0));
    const err = (() => {
      try {
        codec.pack(1, 100, 2);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(TokenIdOutOfRangeError);
    expect(err).toMatchObject({ tokenId: 100, vocabSize: 100, kind: 'invalid', code: 'TESSERA_PLOT_TOKEN_OUT_OF_RANGE' });
    expect(() => codec.unpack(packKey(0, 150, 0))).toThrow(TokenIdOutOfRangeError);
    expect(() => codec.keys([[1, 2, 100]])).toThrow(TokenIdOutOfRangeError);
    // Ids after the first PAD are ignored by A1 but must still be ids.
    expect(() => codec.keys([[1, 0, 100]])).toThrow(TokenIdOutOfRangeError);
    expect(() => new TrigramKeyCodec({ vocabSize: MAX_VOCAB_SIZE + 1 })).toThrow(PlotStoreArgumentError);
    expect(() => new TrigramKeyCodec({ vocabSize: 1 })).toThrow(PlotStoreArgumentError);
    expect(new TrigramKeyCodec({ vocabSize: MAX_VOCAB_SIZE }).pack(MAX_VOCAB_SIZE - 1, 1, 0)).toBe(packKey(MAX_VOCAB_SIZE - 1, 1, 0));
  });

  it('checkKeys (word-wise over a batch) fails exactly where unpack (per key) fails', () => {
    const rand = mulberry32(4);
    const fields = [0, 1, 99, 100, 101, 2047, 2048, MAX_VOCAB_SIZE - 1];
    const pick = () => (rand() < 0.5 ? fields[Math.floor(rand() * fields.length)]! : Math.floor(rand() * 100));
    for (let i = 0; i < 2000; i++) {
      const key = rand() < 0.02 ? (1n << 63n) | BigInt(Math.floor(rand() * 1e6)) : packKey(pick(), pick(), pick());
      const viaUnpack = (() => {
        try {
          codec.unpack(key);
          return null;
        } catch (e) {
          return (e as Error).constructor.name;
        }
      })();
      const viaBatch = (() => {
        try {
          codec.checkKeys(BigUint64Array.of(packKey(1, 2, 3), key).subarray(1));
          return null;
        } catch (e) {
          return (e as Error).constructor.name;
        }
      })();
      if (viaBatch !== viaUnpack) throw new Error(`${key.toString(16)}: batch ${viaBatch}, unpack ${viaUnpack}`);
    }
  });

  it('knows which keys a table may store', () => {
    expect(() => codec.checkStorable(SEPARATOR_KEY)).toThrow(ReservedKeyError);
    expect(() => codec.checkStorable(packKey(3, PAD, 4))).toThrow(ReservedKeyError);
    expect(codec.checkStorable(packKey(PAD, 3, PAD))).toBe(packKey(0, 3, 0));
    const causal = new TrigramKeyCodec({ vocabSize: 100, mode: 'causal' });
    expect(() => causal.checkStorable(packKey(3, 4, PAD))).toThrow(ReservedKeyError);
    expect(causal.checkStorable(packKey(PAD, PAD, 4))).toBe(packKey(0, 0, 4));
  });

  it('A1, worked example of §1.4: "I really like the design"', () => {
    const [I, really, like, the, design] = [11, 12, 13, 14, 15];
    const batch = codec.keys([[I, really, like, the, design]]);
    expect(triples(batch.keys)).toEqual([
      [PAD, I, really],
      [I, really, like],
      [really, like, the],
      [like, the, design],
      [the, design, PAD],
      [PAD, PAD, PAD],
    ]);
    expect([...batch.lengths]).toEqual([5]);
    expect([...batch.offsets]).toEqual([0]);
    // "like" sits in the right slot of X_1, the centre of X_2 and the left slot of X_3 (the three tri-grams A3 sums).
    expect(triples(batch.keys)[1]![2]).toBe(like);
    expect(triples(batch.keys)[2]![1]).toBe(like);
    expect(triples(batch.keys)[3]![0]).toBe(like);
  });

  it('A1: stops each sequence at its first PAD, one separator per sequence, single and empty sequences', () => {
    const batch = codec.keys([[5, 6, 7, 0, 0], [9], [], [0, 4], Int32Array.of(1, 2)]);
    expect(triples(batch.keys)).toEqual([
      [0, 5, 6],
      [5, 6, 7],
      [6, 7, 0],
      [0, 0, 0],
      [0, 9, 0],
      [0, 0, 0],
      [0, 0, 0],
      [0, 0, 0],
      [0, 1, 2],
      [1, 2, 0],
      [0, 0, 0],
    ]);
    expect([...batch.lengths]).toEqual([3, 1, 0, 0, 2]);
    expect([...batch.offsets]).toEqual([0, 4, 6, 7, 8]);
    expect(batch.keys.length).toBe([...batch.lengths].reduce((a, n) => a + n + 1, 0));
  });

  it('A1 decoder variant: causal keys (x[i-2], x[i-1], x[i])', () => {
    const causal = new TrigramKeyCodec({ vocabSize: 100, mode: 'causal' });
    expect(triples(causal.keys([[11, 12, 13, 14], [7]]).keys)).toEqual([
      [0, 0, 11],
      [0, 11, 12],
      [11, 12, 13],
      [12, 13, 14],
      [0, 0, 0],
      [0, 0, 7],
      [0, 0, 0],
    ]);
  });

  it('back-off chains: encoder drops left then right, causal drops the oldest slots; duplicates listed once', () => {
    const show = (c: TrigramKeyCodec, k: bigint) => c.backoff(k).map((s) => [s.step, formatKey(s.key)]);
    expect(show(codec, packKey(4, 5, 6))).toEqual([
      ['exact', '(4,5,6)'],
      ['bigram', '(0,5,6)'],
      ['unigram', '(0,5,0)'],
    ]);
    expect(show(codec, packKey(0, 5, 6))).toEqual([
      ['exact', '(0,5,6)'],
      ['unigram', '(0,5,0)'],
    ]);
    expect(show(codec, packKey(4, 5, 0))).toEqual([
      ['exact', '(4,5,0)'],
      ['unigram', '(0,5,0)'],
    ]);
    expect(show(codec, packKey(0, 5, 0))).toEqual([['exact', '(0,5,0)']]);
    expect(codec.backoff(SEPARATOR_KEY)).toEqual([]);
    const causal = new TrigramKeyCodec({ vocabSize: 100, mode: 'causal' });
    expect(show(causal, packKey(4, 5, 6))).toEqual([
      ['exact', '(4,5,6)'],
      ['bigram', '(0,5,6)'],
      ['unigram', '(0,0,6)'],
    ]);
  });
});
