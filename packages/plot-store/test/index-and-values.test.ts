/** The reference key → row index and the fp16 value store (hmi.md §1.3): the contract the native ones will be held to. */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';
import {
  decodeF16,
  encodeF16,
  f16BitsToF32,
  f32ToF16Bits,
  HeapPlotValueStore,
  MAX_VOCAB_SIZE,
  MISSING_ROW,
  OpenAddressingPlotIndex,
  packKey,
  type PlotIndex,
  type PlotValueStore,
  PlotStoreArgumentError,
  ReservedRowError,
  UnknownRowError,
  ZERO_ROW,
} from '../src/index.js';
import { NativePlotIndex } from '../src/native/index.js';

/**
 * Every PlotIndex implementation runs the same contract (test/native.test.ts also holds the native index to the
 * reference's exact slot layout). (`capacity` is checked on the reference; both report their bytes in `byteLength`.)
 */
const INDEXES: [string, (expectedKeys?: number) => PlotIndex][] = [
  ['OpenAddressingPlotIndex', (n) => new OpenAddressingPlotIndex(n === undefined ? {} : { expectedKeys: n })],
  ['NativePlotIndex', (n) => new NativePlotIndex(n === undefined ? {} : { expectedKeys: n })],
];
/** Every PlotValueStore implementation runs the same contract; the mmap value file joins this list when it lands. */
const STORES: [string, (o: { hidden: number; slots?: number; initialRows?: number }) => PlotValueStore][] = [['HeapPlotValueStore', (o) => new HeapPlotValueStore(o)]];

describe.each(INDEXES)('%s', (_name, makeIndex) => {
  it('agrees with a Map over random inserts, overwrites, deletes and lookups, through growth', () => {
    const rand = mulberry32(7);
    const index = makeIndex();
    const ref = new Map<bigint, number>();
    // A small id range so keys repeat (overwrites, deletes of present keys) and probe runs get long.
    const key = () => packKey(Math.floor(rand() * 30), 1 + Math.floor(rand() * 30), Math.floor(rand() * 30));
    const mismatches: string[] = [];
    for (let op = 0; op < 40_000; op++) {
      const k = key();
      const r = rand();
      if (r < 0.55) {
        const row = 1 + Math.floor(rand() * 1e6);
        const prev = index.set(k, row);
        if (prev !== (ref.get(k) ?? MISSING_ROW)) mismatches.push(`set ${k}`);
        ref.set(k, row);
      } else if (r < 0.8) {
        const prev = index.delete(k);
        if (prev !== (ref.get(k) ?? MISSING_ROW)) mismatches.push(`delete ${k}`);
        ref.delete(k);
      } else if (index.get(k) !== (ref.get(k) ?? MISSING_ROW)) mismatches.push(`get ${k}`);
      if (index.size !== ref.size) mismatches.push(`size at ${op}`);
    }
    expect(mismatches.slice(0, 5)).toEqual([]);
    // Every key still reachable after all the backward shifts; nothing extra.
    for (const [k, row] of ref) expect(index.get(k)).toBe(row);
    expect(new Map(index.entries())).toEqual(ref);
    expect([...index.rows()]).toEqual([...index.entries()].map(([, row]) => row));
    if (index instanceof OpenAddressingPlotIndex) {
      expect(index.capacity).toBeGreaterThanOrEqual(2 * ref.size);
      expect(index.byteLength).toBe(index.capacity * 12);
    }
  });

  it('keys that differ only in the high word or only in the low word stay apart', () => {
    const index = makeIndex(4);
    const max = MAX_VOCAB_SIZE - 1;
    const keys = [packKey(0, 1, 0), packKey(1, 1, 0), packKey(max, 1, 0), packKey(0, 1, max), packKey(max, max, max)];
    keys.forEach((k, i) => index.set(k, i + 1));
    keys.forEach((k, i) => expect(index.get(k)).toBe(i + 1));
    expect(index.size).toBe(5);
  });

  it('answers the zero row for a missing key, never maps a key to it, and batch lookup equals single lookups', () => {
    const index = makeIndex();
    expect(index.get(packKey(1, 2, 3))).toBe(MISSING_ROW);
    expect(() => index.set(packKey(1, 2, 3), 0)).toThrow(ReservedRowError);
    expect(() => index.set(packKey(1, 2, 3), -4)).toThrow(PlotStoreArgumentError);
    expect(index.get(1n << 63n)).toBe(MISSING_ROW);
    for (let i = 1; i <= 100; i++) index.set(packKey(i, i, i), i * 3);
    const keys = BigUint64Array.from({ length: 300 }, (_, i) => packKey(i, i, i));
    const out = new Int32Array(300);
    index.getBatch(keys, out);
    expect([...out]).toEqual([...keys].map((k) => index.get(k)));
    expect(out[0]).toBe(MISSING_ROW);
    expect(out[7]).toBe(21);
    expect(() => index.getBatch(keys, new Int32Array(2))).toThrow(PlotStoreArgumentError);
  });

  it('a clone is independent of its source', () => {
    const a = makeIndex();
    for (let i = 1; i <= 50; i++) a.set(packKey(0, i, 0), i);
    const b = a.clone();
    b.set(packKey(0, 1, 0), 99);
    b.delete(packKey(0, 2, 0));
    b.set(packKey(0, 77, 0), 77);
    expect(a.get(packKey(0, 1, 0))).toBe(1);
    expect(a.get(packKey(0, 2, 0))).toBe(2);
    expect(a.has(packKey(0, 77, 0))).toBe(false);
    expect(a.size).toBe(50);
    expect(b.size).toBe(50);
  });
});

describe('fp16', () => {
  it('every finite binary16 value round-trips bit-exactly', () => {
    const bad: number[] = [];
    for (let h = 0; h < 0x10000; h++) {
      const v = f16BitsToF32(h);
      if (Number.isNaN(v)) {
        if (!Number.isNaN(f16BitsToF32(f32ToF16Bits(v)))) bad.push(h);
      } else if (f32ToF16Bits(v) !== h) bad.push(h);
    }
    expect(bad).toEqual([]);
  });

  it('rounds to nearest, ties to even, with overflow to ∞ and underflow to ±0', () => {
    expect(f32ToF16Bits(1)).toBe(0x3c00);
    expect(f32ToF16Bits(-2)).toBe(0xc000);
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00); // halfway to the next binade: even → ∞
    expect(f32ToF16Bits(1e6)).toBe(0x7c00);
    expect(f32ToF16Bits(-Infinity)).toBe(0xfc00);
    expect(f32ToF16Bits(2 ** -24)).toBe(0x0001);
    expect(f32ToF16Bits(2 ** -25)).toBe(0x0000); // tie between 0 and the smallest subnormal: even
    expect(f32ToF16Bits(-(2 ** -26))).toBe(0x8000);
    expect(f32ToF16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie: even
    expect(f32ToF16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie: even (up)
    // Random values: the result is at least as close as either neighbour, and a tie picks the even one.
    const rand = mulberry32(3);
    const bad: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const x = Math.fround((rand() - 0.5) * 2 ** (Math.floor(rand() * 40) - 26));
      const h = f32ToF16Bits(x);
      const err = Math.abs(f16BitsToF32(h) - x);
      for (const n of [h - 1, h + 1]) {
        if ((n & 0x7fff) >= 0x7c00 || n < 0 || ((n ^ h) & 0x8000) !== 0) continue;
        const e = Math.abs(f16BitsToF32(n) - x);
        if (e < err || (e === err && (h & 1) === 1)) bad.push(x);
      }
    }
    expect(bad).toEqual([]);
    expect([...decodeF16(encodeF16([0.5, -0.25, 3]))]).toEqual([0.5, -0.25, 3]);
  });
});

describe.each(STORES)('%s', (_name, makeStore) => {
  it('keeps row 0 as the all-zero row: never handed out, retained, released or freed', () => {
    const store = makeStore({ hidden: 4, initialRows: 2 });
    expect(store.rowWidth).toBe(12);
    expect(store.bytesPerRow).toBe(24);
    const rows = store.append(new Float32Array(3 * 12).fill(1));
    expect([...rows]).toEqual([1, 2, 3]);
    expect([...store.read(ZERO_ROW)]).toEqual(new Array(12).fill(0));
    expect(() => store.retain(ZERO_ROW)).toThrow(ReservedRowError);
    expect(() => store.release(ZERO_ROW)).toThrow(ReservedRowError);
    expect(store.refCount(ZERO_ROW)).toBe(0);
  });

  it('stores fp32 as fp16 and fp16 bits as they are; gather reads rows in order with zeros for row 0', () => {
    const store = makeStore({ hidden: 2, slots: 3 });
    const rows = store.append(Float32Array.from({ length: 12 }, (_, i) => i + 0.1));
    const bits = store.append(Uint16Array.from({ length: 6 }, (_, i) => 0x3c00 + i));
    expect([...store.read(rows[1]!)]).toEqual([...encodeF16(Float32Array.from({ length: 6 }, (_, i) => i + 6.1))]);
    expect([...store.read(bits[0]!)]).toEqual([0x3c00, 0x3c01, 0x3c02, 0x3c03, 0x3c04, 0x3c05]);
    const out = new Uint16Array(18);
    store.gather([bits[0]!, ZERO_ROW, rows[0]!], out);
    expect([...out.subarray(0, 6)]).toEqual([...store.read(bits[0]!)]);
    expect([...out.subarray(6, 12)]).toEqual([0, 0, 0, 0, 0, 0]);
    expect([...out.subarray(12)]).toEqual([...store.read(rows[0]!)]);
    expect(() => store.append(new Float32Array(5))).toThrow(PlotStoreArgumentError);
    expect(() => store.gather([1, 2], new Uint16Array(6))).toThrow(PlotStoreArgumentError);
  });

  it('counts references; a freed row is zeroed, unreadable, and reused; accounting follows', () => {
    const store = makeStore({ hidden: 8, slots: 3, initialRows: 2 });
    const [a, b] = store.append(new Float32Array(2 * 24).fill(2));
    store.retain(a!);
    expect(store.refCount(a!)).toBe(2);
    expect(store.release(a!)).toBe(false);
    expect(store.release(b!)).toBe(true);
    expect(() => store.read(b!)).toThrow(UnknownRowError);
    expect(() => store.release(b!)).toThrow(UnknownRowError);
    expect(() => store.gather([b!], new Uint16Array(24))).toThrow(UnknownRowError);
    expect(store.accounting()).toMatchObject({ bytesPerRow: 48, liveRows: 1, freeRows: 1, liveBytes: 48, reservedBytes: 48 });
    const [c] = store.append(new Float32Array(24).fill(-1));
    expect(c).toBe(b); // reused
    expect([...store.read(c!)]).toEqual(new Array(24).fill(f32ToF16Bits(-1)));
    expect(store.accounting()).toMatchObject({ liveRows: 2, freeRows: 0, liveBytes: 96 });
    const acc = store.accounting();
    if (store instanceof HeapPlotValueStore) expect(acc.allocatedBytes).toBe(acc.allocatedRows * 48 + acc.allocatedRows * 4);
  });
});
