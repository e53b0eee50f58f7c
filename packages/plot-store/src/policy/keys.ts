/**
 * Tri-gram keys (hmi.md §1.3, A1, §5 item 22). A key is three token ids packed into one 64-bit integer, 21 bits per
 * slot: `key = left << 42 | centre << 21 | right`, so vocabularies up to 2^21 = 2,097,152 ids fit (BERT's 30,522
 * needs 15 bits). Token id 0 is PAD. The all-PAD key (0,0,0) is the separator between sequences and always reads the
 * reserved zero row; no table stores it.
 *
 * Encoder (hBERT) keys are centred, `X_i = (x_{i-1}, x_i, x_{i+1})`, with PAD past either end of the sequence.
 * Causal (hGPT) keys end at the token, `X_i = (x_{i-2}, x_{i-1}, x_i)`. Back-off keys live in the same key space with
 * PAD in the dropped slots: encoder tri (l,c,r) → bi (PAD,c,r) → uni (PAD,c,PAD); causal tri (a,b,c) → bi (PAD,b,c)
 * → uni (PAD,PAD,c) (SkipBERT's convention, A2).
 */
import { PlotStoreArgumentError, ReservedKeyError, TokenIdOutOfRangeError } from './errors.js';

/** A packed tri-gram key: `left << 42 | centre << 21 | right`, each field a token id below 2^21. */
export type PlotKey = bigint;

/** The padding token id: the empty slot of a boundary or back-off key. */
export const PAD = 0;
/** Bits per slot of a packed key. */
export const KEY_ID_BITS = 21;
/** The largest vocabulary a key can hold: ids 0 … 2^21 − 1. */
export const MAX_VOCAB_SIZE = 1 << KEY_ID_BITS;
/** The separator key (PAD, PAD, PAD): one after every sequence of a batch; it always reads row 0. */
export const SEPARATOR_KEY: PlotKey = 0n;

/** Which tri-gram each position reads: centred (encoder, hBERT) or ending at the token (causal, hGPT). */
export type KeyMode = 'encoder' | 'causal';

const FIELD_MASK = (1 << KEY_ID_BITS) - 1;
const LITTLE_ENDIAN_KEYS = new Uint8Array(new BigUint64Array([1n]).buffer)[0] === 1;
const FIELD_MASK_N = BigInt(FIELD_MASK);
const SHIFT_MID = BigInt(KEY_ID_BITS);
const SHIFT_LEFT = BigInt(2 * KEY_ID_BITS);
const KEY_LIMIT = 1n << BigInt(3 * KEY_ID_BITS);

/**
 * Packs three ids into a key without a vocabulary check (each id must only fit its 21-bit field). Use a
 * {@link TrigramKeyCodec} to check ids against a model's vocabulary.
 */
export function packKey(left: number, centre: number, right: number): PlotKey {
  checkField(left);
  checkField(centre);
  checkField(right);
  return (BigInt(left) << SHIFT_LEFT) | (BigInt(centre) << SHIFT_MID) | BigInt(right);
}

/** The three ids of a packed key, `[left, centre, right]`. */
export function unpackKey(key: PlotKey): [number, number, number] {
  checkPacked(key);
  return [Number((key >> SHIFT_LEFT) & FIELD_MASK_N), Number((key >> SHIFT_MID) & FIELD_MASK_N), Number(key & FIELD_MASK_N)];
}

/** The key as `(l,c,r)`, for messages and logs. */
export function formatKey(key: PlotKey): string {
  if (key < 0n || key >= KEY_LIMIT) return `0x${key.toString(16)}`;
  const [l, c, r] = unpackKey(key);
  return `(${l},${c},${r})`;
}

/** True when `key` is a 63-bit value (three 21-bit fields, nothing above). */
export function isPackedKey(key: PlotKey): boolean {
  return typeof key === 'bigint' && key >= 0n && key < KEY_LIMIT;
}

function checkField(id: number): void {
  if (!Number.isInteger(id) || id < 0 || id > FIELD_MASK) throw new TokenIdOutOfRangeError(id, MAX_VOCAB_SIZE);
}

function checkPacked(key: PlotKey): void {
  if (!isPackedKey(key)) throw new ReservedKeyError(`0x${key.toString(16)}`, `a packed key is a 63-bit value (3 × ${KEY_ID_BITS}-bit ids)`);
}

/**
 * The keys of a batch, flattened: sequence b's keys are `keys[offsets[b] … offsets[b] + lengths[b])`, followed by
 * one separator key, so `keys.length = Σ (lengths[b] + 1)` and neighbouring sequences never share a tri-gram.
 */
export interface TrigramKeyBatch {
  keys: BigUint64Array;
  /** Tokens of each sequence up to its first PAD. */
  lengths: Int32Array;
  /** Index in `keys` of each sequence's first key. */
  offsets: Int32Array;
}

export interface TrigramKeyCodecOptions {
  /** Ids must lie in [0, vocabSize); at most {@link MAX_VOCAB_SIZE}. */
  vocabSize: number;
  /** Centred (encoder, the default) or causal keys. */
  mode?: KeyMode;
}

/** Where a versioned lookup found a key's row (A2): the key itself, one of its back-offs, or nowhere. */
export type BackoffStep = 'exact' | 'bigram' | 'unigram';

/**
 * Packs, checks and extracts keys for one model: its vocabulary size and key mode. Every id is checked against
 * the vocabulary, so a key from a tokenizer with a larger vocabulary fails loudly instead of aliasing.
 */
export class TrigramKeyCodec {
  readonly vocabSize: number;
  readonly mode: KeyMode;

  constructor(options: TrigramKeyCodecOptions) {
    const { vocabSize, mode = 'encoder' } = options;
    if (!Number.isInteger(vocabSize) || vocabSize < 2 || vocabSize > MAX_VOCAB_SIZE) {
      throw new PlotStoreArgumentError(`vocabSize must be an integer in [2, ${MAX_VOCAB_SIZE}] (PAD plus at least one token), got ${vocabSize}`);
    }
    if (mode !== 'encoder' && mode !== 'causal') throw new PlotStoreArgumentError(`mode must be 'encoder' or 'causal', got ${String(mode)}`);
    this.vocabSize = vocabSize;
    this.mode = mode;
  }

  /** Throws {@link TokenIdOutOfRangeError} unless `id` is an integer in [0, vocabSize). */
  checkId(id: number): number {
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new TokenIdOutOfRangeError(id, this.vocabSize);
    return id;
  }

  /** The key of three ids, each checked against the vocabulary. */
  pack(left: number, centre: number, right: number): PlotKey {
    this.checkId(left);
    this.checkId(centre);
    this.checkId(right);
    return packKey(left, centre, right);
  }

  /** The ids of a key, each checked against the vocabulary. */
  unpack(key: PlotKey): [number, number, number] {
    const ids = unpackKey(key);
    for (const id of ids) this.checkId(id);
    return ids;
  }

  /**
   * Checks every key of a batch as {@link unpack} would (a packed key, ids below the vocabulary size), without
   * BigInt arithmetic per key where the platform is little-endian.
   */
  checkKeys(keys: BigUint64Array): void {
    if (!LITTLE_ENDIAN_KEYS) {
      for (const key of keys) this.unpack(key);
      return;
    }
    const words = new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
    const v = this.vocabSize;
    for (let i = 0; i < keys.length; i++) {
      const lo = words[2 * i]!;
      const hi = words[2 * i + 1]!;
      if (hi > 0x7fffffff || hi >>> 10 >= v || ((lo >>> 21) | ((hi & 0x3ff) << 11)) >= v || (lo & FIELD_MASK) >= v) this.unpack(keys[i]!);
    }
  }

  /**
   * Throws {@link ReservedKeyError} unless a table may store `key`: not the separator, and the slot every real
   * position fills (the centre for encoders, the last slot for causal keys) is not PAD. Returns the key.
   */
  checkStorable(key: PlotKey): PlotKey {
    const [l, c, r] = this.unpack(key);
    if (l === PAD && c === PAD && r === PAD) throw new ReservedKeyError(formatKey(key), 'the separator always reads the zero row');
    if (this.mode === 'encoder' && c === PAD) throw new ReservedKeyError(formatKey(key), 'an encoder key has a token in its centre slot');
    if (this.mode === 'causal' && r === PAD) throw new ReservedKeyError(formatKey(key), 'a causal key has a token in its last slot');
    return key;
  }

  /**
   * The back-off chain of a key, most context first (A2): encoder (l,c,r) → (PAD,c,r) → (PAD,c,PAD); causal
   * (a,b,c) → (PAD,b,c) → (PAD,PAD,c). Steps that equal the previous key (a boundary key is already a bi-gram) are
   * listed once. The separator has no chain: it always reads row 0.
   */
  backoff(key: PlotKey): { key: PlotKey; step: BackoffStep }[] {
    const [l, c, r] = this.unpack(key);
    if (l === PAD && c === PAD && r === PAD) return [];
    const bi = packKey(PAD, c, r);
    const uni = this.mode === 'encoder' ? packKey(PAD, c, PAD) : packKey(PAD, PAD, r);
    const out: { key: PlotKey; step: BackoffStep }[] = [{ key, step: 'exact' }];
    if (bi !== key && bi !== uni) out.push({ key: bi, step: 'bigram' });
    if (uni !== key) out.push({ key: uni, step: 'unigram' });
    return out;
  }

  /**
   * A1: one key per token of each sequence (up to its first PAD), then one separator per sequence. Encoder:
   * `(s[i-1] or PAD, s[i], s[i+1] or PAD)`; causal: `(s[i-2] or PAD, s[i-1] or PAD, s[i])`.
   */
  keys(sequences: readonly ArrayLike<number>[]): TrigramKeyBatch {
    const lengths = new Int32Array(sequences.length);
    const offsets = new Int32Array(sequences.length);
    let total = 0;
    sequences.forEach((s, b) => {
      let n = 0;
      while (n < s.length && this.checkId(s[n]!) !== PAD) n++;
      // Ids after the first PAD are ignored by A1, but they must still be ids: a bad tail is a caller bug.
      for (let i = n + 1; i < s.length; i++) this.checkId(s[i]!);
      lengths[b] = n;
      offsets[b] = total;
      total += n + 1;
    });
    const keys = new BigUint64Array(total);
    sequences.forEach((s, b) => {
      const n = lengths[b]!;
      const base = offsets[b]!;
      for (let i = 0; i < n; i++) {
        keys[base + i] =
          this.mode === 'encoder'
            ? packKey(i === 0 ? PAD : s[i - 1]!, s[i]!, i === n - 1 ? PAD : s[i + 1]!)
            : packKey(i < 2 ? PAD : s[i - 2]!, i < 1 ? PAD : s[i - 1]!, s[i]!);
      }
      keys[base + n] = SEPARATOR_KEY;
    });
    return { keys, lengths, offsets };
  }
}
