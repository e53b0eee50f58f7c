/**
 * The key → row index of one PLOT table, and its reference implementation: open addressing with linear probing over
 * typed arrays (hmi.md §1.3, "a hash map from packed key to row id"). The native index implements the same
 * interface later and is tested against this one.
 *
 * Row 0 is the reserved zero row (OOV, separator): no key ever maps to it, so a lookup that finds nothing answers
 * {@link MISSING_ROW} = 0 and a batch lookup's rows can go straight to a gather.
 */
import { PlotStoreArgumentError, ReservedKeyError, ReservedRowError } from './errors.js';
import { formatKey, isPackedKey, type PlotKey } from './keys.js';

/** What a lookup answers for a key that is not in the index: the reserved zero row. */
export const MISSING_ROW = 0;

/** A key → row map. Rows are positive integers; 0 means "absent". */
export interface PlotIndex {
  /** Keys held. */
  readonly size: number;
  /** Bytes the index occupies (its slot arrays, whatever their fill). */
  readonly byteLength: number;
  /** The key's row, or {@link MISSING_ROW}. */
  get(key: PlotKey): number;
  has(key: PlotKey): boolean;
  /** Maps `key` to `row` (≥ 1), replacing any previous row; returns the previous row or {@link MISSING_ROW}. */
  set(key: PlotKey, row: number): number;
  /** Removes `key`; returns its row or {@link MISSING_ROW}. */
  delete(key: PlotKey): number;
  /** `out[i] = get(keys[i])` for every i (the first step of the fused lookup → gather → aggregate). */
  getBatch(keys: BigUint64Array, out: Int32Array): void;
  /** Every (key, row), in slot order (unspecified but deterministic). */
  entries(): IterableIterator<[PlotKey, number]>;
  /** Every row held, in the order of {@link entries} (for reference counting and accounting, without the keys). */
  rows(): Int32Array;
  /** An independent copy: changing either never changes the other. */
  clone(): PlotIndex;
}

export interface OpenAddressingIndexOptions {
  /** Keys to size for without growing. */
  expectedKeys?: number;
}

/** True where a BigUint64Array's low word comes first in memory (every platform Node ships for today). */
const LITTLE_ENDIAN = new Uint8Array(new BigUint64Array([1n]).buffer)[0] === 1;

const MIN_CAPACITY = 16;
/** Slots per key at most 1/MAX_LOAD: half-empty keeps linear-probe chains short. */
const MAX_LOAD = 0.5;
/** Bytes per slot: key low word, key high word, row. */
const SLOT_BYTES = 12;

/** 32-bit mix of the two words of a key (murmur3's finaliser over a multiplicative combine). */
/** What every PlotIndex's `set` accepts: a packed key and a row in [1, 2^31). @internal */
export function checkKeyRow(key: PlotKey, row: number): void {
  if (!isPackedKey(key)) throw new ReservedKeyError(`0x${key.toString(16)}`, 'a packed key is a 63-bit value');
  if (!Number.isInteger(row) || row < 0 || row > 0x7fffffff) throw new PlotStoreArgumentError(`row must be an integer in [1, 2^31), got ${row}`);
  if (row === MISSING_ROW) throw new ReservedRowError(row, `the zero row cannot be mapped to key ${formatKey(key)}`);
}

function hashKey(hi: number, lo: number): number {
  let h = Math.imul(lo ^ Math.imul(hi ^ (hi >>> 16), 0x9e3779b1), 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

function capacityFor(keys: number): number {
  let cap = MIN_CAPACITY;
  while (cap * MAX_LOAD < keys) cap *= 2;
  return cap;
}

/**
 * The reference index: three parallel typed arrays (key low word, key high word, row), power-of-two capacity,
 * linear probing, an empty slot marked by row 0, deletion by backward shift (no tombstones, so probe chains never
 * rot), and doubling when more than half full.
 */
export class OpenAddressingPlotIndex implements PlotIndex {
  private lo: Uint32Array;
  private hi: Uint32Array;
  private slotRows: Int32Array;
  private mask: number;
  private count = 0;

  constructor(options: OpenAddressingIndexOptions = {}) {
    const expected = options.expectedKeys ?? 0;
    if (!Number.isInteger(expected) || expected < 0) throw new PlotStoreArgumentError(`expectedKeys must be a non-negative integer, got ${expected}`);
    const cap = capacityFor(expected);
    this.lo = new Uint32Array(cap);
    this.hi = new Uint32Array(cap);
    this.slotRows = new Int32Array(cap);
    this.mask = cap - 1;
  }

  get size(): number {
    return this.count;
  }

  /** Slots allocated (a power of two). */
  get capacity(): number {
    return this.slotRows.length;
  }

  get byteLength(): number {
    return this.slotRows.length * SLOT_BYTES;
  }

  get(key: PlotKey): number {
    if (!isPackedKey(key)) return MISSING_ROW;
    const lo = Number(key & 0xffffffffn);
    const hi = Number(key >> 32n);
    return this.rowAt(this.find(hi, lo));
  }

  has(key: PlotKey): boolean {
    return this.get(key) !== MISSING_ROW;
  }

  set(key: PlotKey, row: number): number {
    checkKeyRow(key, row);
    const lo = Number(key & 0xffffffffn);
    const hi = Number(key >> 32n);
    const slot = this.find(hi, lo);
    if (slot >= 0) {
      const previous = this.slotRows[slot]!;
      this.slotRows[slot] = row;
      return previous;
    }
    if ((this.count + 1) > this.slotRows.length * MAX_LOAD) this.grow();
    let i = hashKey(hi, lo) & this.mask;
    while (this.slotRows[i] !== MISSING_ROW) i = (i + 1) & this.mask;
    this.lo[i] = lo;
    this.hi[i] = hi;
    this.slotRows[i] = row;
    this.count++;
    return MISSING_ROW;
  }

  delete(key: PlotKey): number {
    if (!isPackedKey(key)) return MISSING_ROW;
    const slot = this.find(Number(key >> 32n), Number(key & 0xffffffffn));
    if (slot < 0) return MISSING_ROW;
    const previous = this.slotRows[slot]!;
    // Backward-shift deletion: pull later members of the probe run into the hole when their home slot does not lie
    // cyclically in (hole, j], so every remaining key stays reachable from its home slot without tombstones.
    let hole = slot;
    let j = slot;
    for (;;) {
      j = (j + 1) & this.mask;
      if (this.slotRows[j] === MISSING_ROW) break;
      const home = hashKey(this.hi[j]!, this.lo[j]!) & this.mask;
      const homeInRange = hole <= j ? hole < home && home <= j : hole < home || home <= j;
      if (homeInRange) continue;
      this.lo[hole] = this.lo[j]!;
      this.hi[hole] = this.hi[j]!;
      this.slotRows[hole] = this.slotRows[j]!;
      hole = j;
    }
    this.slotRows[hole] = MISSING_ROW;
    this.lo[hole] = 0;
    this.hi[hole] = 0;
    this.count--;
    return previous;
  }

  getBatch(keys: BigUint64Array, out: Int32Array): void {
    if (out.length < keys.length) throw new PlotStoreArgumentError(`out holds ${out.length} rows for ${keys.length} keys`);
    if (LITTLE_ENDIAN) {
      // Read the two words of each key straight from its bytes: no BigInt arithmetic per key.
      const words = new Uint32Array(keys.buffer, keys.byteOffset, keys.length * 2);
      for (let i = 0; i < keys.length; i++) out[i] = this.rowAt(this.find(words[2 * i + 1]!, words[2 * i]!));
      return;
    }
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      out[i] = this.rowAt(this.find(Number(key >> 32n), Number(key & 0xffffffffn)));
    }
  }

  *entries(): IterableIterator<[PlotKey, number]> {
    for (let i = 0; i < this.slotRows.length; i++) {
      const row = this.slotRows[i]!;
      if (row !== MISSING_ROW) yield [(BigInt(this.hi[i]!) << 32n) | BigInt(this.lo[i]!), row];
    }
  }

  rows(): Int32Array {
    const out = new Int32Array(this.count);
    let n = 0;
    for (let i = 0; i < this.slotRows.length; i++) if (this.slotRows[i] !== MISSING_ROW) out[n++] = this.slotRows[i]!;
    return out;
  }

  clone(): OpenAddressingPlotIndex {
    const copy = new OpenAddressingPlotIndex();
    copy.lo = this.lo.slice();
    copy.hi = this.hi.slice();
    copy.slotRows = this.slotRows.slice();
    copy.mask = this.mask;
    copy.count = this.count;
    return copy;
  }

  private rowAt(slot: number): number {
    return slot < 0 ? MISSING_ROW : this.slotRows[slot]!;
  }

  /** The slot holding (hi, lo), or −1. */
  private find(hi: number, lo: number): number {
    let i = hashKey(hi, lo) & this.mask;
    for (;;) {
      const row = this.slotRows[i]!;
      if (row === MISSING_ROW) return -1;
      if (this.lo[i] === lo && this.hi[i] === hi) return i;
      i = (i + 1) & this.mask;
    }
  }

  private grow(): void {
    const { lo, hi, slotRows: rows } = this;
    const cap = rows.length * 2;
    this.lo = new Uint32Array(cap);
    this.hi = new Uint32Array(cap);
    this.slotRows = new Int32Array(cap);
    this.mask = cap - 1;
    for (let s = 0; s < rows.length; s++) {
      const row = rows[s]!;
      if (row === MISSING_ROW) continue;
      let i = hashKey(hi[s]!, lo[s]!) & this.mask;
      while (this.slotRows[i] !== MISSING_ROW) i = (i + 1) & this.mask;
      this.lo[i] = lo[s]!;
      this.hi[i] = hi[s]!;
      this.slotRows[i] = row;
    }
  }
}
