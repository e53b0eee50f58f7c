/**
 * The native half: NativePlotIndex against the TS reference index (same slot layout, so same entry order), and the
 * fused lookupAggregate against a plain TS A2 + A3 over the policy objects (codec keys, reference indexes, the heap
 * value store), at every ISA this CPU has.
 */
import { mulberry32 } from '@tessera/core';
import { deviceInfo, getCpuBackend, type Isa, setIsa, Tensor } from '@tessera/native';
import { describe, expect, it } from 'vitest';
import {
  f16BitsToF32,
  HeapPlotValueStore,
  MISSING_ROW,
  OpenAddressingPlotIndex,
  packKey,
  PlotVersionTree,
  rootKeys,
  selectByCoverage,
  TrigramCounts,
  PlotStoreArgumentError,
  ReservedKeyError,
  ReservedRowError,
  TrigramKeyCodec,
  type KeyMode,
  type PlotIndex,
} from '../src/index.js';
import { lookupAggregate, lookupRows, NativePlotIndex, nativeChain } from '../src/native/index.js';

// The fused call's fast path sums five terms in f32 and normalises with f32 outputs; against the double TS A3 below
// (values in [-1, 1], gamma in [0.5, 1.5], outputs up to ~4) it stays within 1e-5 absolute + 1e-5 relative. The
// reference path (double throughout, one rounding to f32) within 1e-6.
const FAST_TOL = 1e-5;
const REF_TOL = 1e-6;

function isas(): Isa[] {
  const best = deviceInfo(getCpuBackend()).bestIsa ?? 'scalar';
  const order: Isa[] = ['scalar', 'avx2', 'avx512'];
  return order.slice(0, order.indexOf(best) + 1);
}

function expectClose(got: Float32Array, want: Float64Array, tol: number, label: string): void {
  expect(got.length).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (!(Math.abs(got[i]! - want[i]!) <= tol + tol * Math.abs(want[i]!))) expect.fail(`${label}: at ${i} got ${got[i]}, want ${want[i]}`);
  }
}

describe('NativePlotIndex against OpenAddressingPlotIndex', () => {
  it('same answers, sizes, bytes and slot order over random set / delete / get, growth, deletes then reinserts', () => {
    const rand = mulberry32(3);
    const native = new NativePlotIndex();
    const ref = new OpenAddressingPlotIndex();
    const key = () => packKey(Math.floor(rand() * 40), 1 + Math.floor(rand() * 40), Math.floor(rand() * 40));
    const probe = Array.from({ length: 500 }, key);
    for (let op = 0; op < 20_000; op++) {
      const k = key();
      const r = rand();
      if (r < 0.5) {
        const row = 1 + Math.floor(rand() * 1e6);
        expect(native.set(k, row)).toBe(ref.set(k, row));
      } else if (r < 0.8) {
        expect(native.delete(k)).toBe(ref.delete(k));
      } else {
        expect(native.get(k)).toBe(ref.get(k));
      }
      if (op % 2000 === 0) {
        expect(native.capacity).toBe(ref.capacity);
        const a = new Int32Array(probe.length);
        const b = new Int32Array(probe.length);
        native.getBatch(BigUint64Array.from(probe), a);
        ref.getBatch(BigUint64Array.from(probe), b);
        expect(a).toEqual(b);
      }
    }
    expect(native.size).toBe(ref.size);
    expect(native.byteLength).toBe(ref.byteLength);
    expect([...native.entries()]).toEqual([...ref.entries()]); // same hash, probing and growth: same slots
    expect(native.rows()).toEqual(ref.rows());
    // Delete everything, then reinsert in another order.
    const all = [...ref.entries()];
    for (const [k] of all) expect(native.delete(k)).toBe(ref.delete(k));
    expect(native.size).toBe(0);
    for (const [k, row] of all.reverse()) expect(native.set(k, row)).toBe(ref.set(k, row));
    expect([...native.entries()]).toEqual([...ref.entries()]);
    // Empty batch, and a clone that does not share slots.
    native.getBatch(new BigUint64Array(0), new Int32Array(0));
    const copy = native.clone();
    copy.set(all[0]![0], 99);
    expect(native.get(all[0]![0])).toBe(all[0]![1]);
    copy.dispose();
    native.dispose();
  });

  it('the reference index errors for reserved keys and rows', () => {
    const native = new NativePlotIndex({ expectedKeys: 8 });
    const wide = 1n << 63n;
    expect(native.get(wide)).toBe(MISSING_ROW);
    expect(native.get(-1n)).toBe(MISSING_ROW);
    expect(native.delete(wide)).toBe(MISSING_ROW);
    expect(() => native.set(wide, 1)).toThrow(ReservedKeyError);
    expect(() => native.set(packKey(1, 2, 3), 0)).toThrow(ReservedRowError);
    expect(() => native.set(packKey(1, 2, 3), 2 ** 31)).toThrow(PlotStoreArgumentError);
    expect(() => native.getBatch(new BigUint64Array(2), new Int32Array(1))).toThrow(PlotStoreArgumentError);
    expect(() => new NativePlotIndex({ expectedKeys: -1 })).toThrow(PlotStoreArgumentError);
    // A wide key in a batch reads the zero row, as in the reference.
    native.set(packKey(1, 2, 3), 5);
    const out = new Int32Array(2);
    native.getBatch(BigUint64Array.from([wide | packKey(1, 2, 3), packKey(1, 2, 3)]), out);
    expect([...out]).toEqual([0, 5]);
    native.dispose();
  });
});

interface World {
  codec: TrigramKeyCodec;
  refs: OpenAddressingPlotIndex[];
  natives: NativePlotIndex[];
  store: HeapPlotValueStore;
  d: number;
}

/** A child and a root table over a small vocabulary: tri-, bi- and uni-gram entries, each present with some probability. */
function world(mode: KeyMode, d: number, seed: number): World {
  const rand = mulberry32(seed);
  const vocab = 7;
  const codec = new TrigramKeyCodec({ vocabSize: vocab, mode });
  const store = new HeapPlotValueStore({ hidden: d });
  const refs = [new OpenAddressingPlotIndex(), new OpenAddressingPlotIndex()];
  const natives = [new NativePlotIndex(), new NativePlotIndex()];
  for (let t = 0; t < 2; t++) {
    for (let l = 0; l < vocab; l++) {
      for (let c = 0; c < vocab; c++) {
        for (let r = 0; r < vocab; r++) {
          if (l + c + r === 0 || rand() > 0.35) continue;
          let key: bigint;
          try {
            key = codec.checkStorable(packKey(l, c, r));
          } catch {
            continue;
          }
          const values = Float32Array.from({ length: 3 * d }, () => rand() * 2 - 1);
          const [row] = store.append(values);
          refs[t]!.set(key, row!);
          natives[t]!.set(key, row!);
        }
      }
    }
  }
  return { codec, refs, natives, store, d };
}

/** A2 over the reference indexes (the version tree's order: each back-off step across the whole chain). */
function tsLookup(w: World, key: bigint, backoff: boolean): number {
  if (key === 0n) return 0;
  const cands = backoff ? w.codec.backoff(key).map((c) => c.key) : [key];
  for (const k of cands) for (const index of w.refs as PlotIndex[]) if (index.get(k) !== MISSING_ROW) return index.get(k);
  return 0;
}

function allValues(w: World): Uint16Array {
  const rows = w.store.accounting().allocatedRows;
  const bits = new Uint16Array(rows * 3 * w.d);
  const live = Int32Array.from({ length: w.store.liveRows + 1 }, (_, i) => i);
  w.store.gather(live, bits);
  return bits;
}

function tsAggregate(w: World, bits: Uint16Array, keys: BigUint64Array, lengths: Int32Array, T: number, pos: Float32Array, typeEmb: Float32Array, types: Int32Array, gamma: Float32Array, beta: Float32Array, eps: number, backoff: boolean): Float64Array {
  const d = w.d;
  const rows = Array.from(keys, (k) => tsLookup(w, k, backoff));
  const v = (row: number, slot: number, j: number) => f16BitsToF32(bits[(row * 3 + slot) * d + j]!);
  const out = new Float64Array(lengths.length * T * d);
  let k = 0;
  for (let b = 0; b < lengths.length; b++) {
    const len = lengths[b]!;
    for (let i = 0; i < len; i++) {
      const z: number[] = [];
      for (let j = 0; j < d; j++) {
        let s = v(rows[k + i]!, 1, j);
        if (i + 1 < len) s += v(rows[k + i + 1]!, 0, j);
        if (i > 0) s += v(rows[k + i - 1]!, 2, j);
        z.push(s + pos[i * d + j]! + typeEmb[types[b * T + i]! * d + j]!);
      }
      const mean = z.reduce((a, x) => a + x, 0) / d;
      const rstd = 1 / Math.sqrt(z.reduce((a, x) => a + (x - mean) ** 2, 0) / d + eps);
      for (let j = 0; j < d; j++) out[(b * T + i) * d + j] = (z[j]! - mean) * rstd * gamma[j]! + beta[j]!;
    }
    k += len + 1;
  }
  return out;
}

describe('lookupRows / lookupAggregate against a TS A2 + A3', () => {
  const cases: { mode: KeyMode; d: number; seqs: number[] }[] = [
    { mode: 'encoder', d: 16, seqs: [5, 1, 9, 3] },
    { mode: 'encoder', d: 9, seqs: [1] },
    { mode: 'causal', d: 24, seqs: [12, 2, 7] },
    { mode: 'encoder', d: 8, seqs: [] },
  ];
  cases.forEach(({ mode, d, seqs }, n) => {
    it(`${mode}, d ${d}, ragged lengths [${seqs}]: every ISA and the reference`, () => {
      const rand = mulberry32(50 + n);
      const w = world(mode, d, 60 + n);
      const sequences = seqs.map((len) => Array.from({ length: len }, () => 1 + Math.floor(rand() * 6)));
      const batch = w.codec.keys(sequences);
      const T = Math.max(0, ...seqs) + 1; // one padded position past the longest
      const rnd = (len: number, lo = -1, hi = 1) => Float32Array.from({ length: len }, () => lo + (hi - lo) * rand());
      const pos = rnd(Math.max(T, 1) * d);
      const typeEmb = rnd(2 * d);
      const types = Int32Array.from({ length: seqs.length * T }, () => (rand() < 0.5 ? 0 : 1));
      const gamma = rnd(d, 0.5, 1.5);
      const beta = rnd(d);
      const eps = 1e-5;
      const bits = allValues(w);

      for (const backoff of [true, false]) {
        const rows = lookupRows(w.natives, batch.keys, { backoff: backoff ? mode : 'none' });
        expect([...rows]).toEqual(Array.from(batch.keys, (k) => tsLookup(w, k, backoff)));
      }
      // The case only means something if back-off changes some rows.
      if (seqs.length > 1) expect(Array.from(batch.keys, (k) => tsLookup(w, k, true))).not.toEqual(Array.from(batch.keys, (k) => tsLookup(w, k, false)));
      const values = Tensor.from(bits, [bits.length / (3 * d), 3, d], { dtype: 'f16', backend: getCpuBackend() });
      const t = (data: Float32Array, shape: number[]) => Tensor.from(data, shape, { backend: getCpuBackend() });
      const params = { values, posEmb: t(pos, [Math.max(T, 1), d]), typeEmb: t(typeEmb, [2, d]), gamma: t(gamma, [d]), beta: t(beta, [d]), eps };
      const want = tsAggregate(w, bits, batch.keys, batch.lengths, T, pos, typeEmb, types, gamma, beta, eps, true);
      const run = (reference: boolean) => {
        const out = lookupAggregate(w.natives, batch, params, { backoff: mode, types, seqLen: T, reference });
        expect(out.shape).toEqual([seqs.length, T, d]);
        const got = out.toArray() as Float32Array;
        out.dispose();
        return got;
      };
      expectClose(run(true), want, REF_TOL, 'reference');
      try {
        for (const isa of isas()) {
          setIsa(isa);
          expectClose(run(false), want, FAST_TOL, isa);
        }
      } finally {
        setIsa('best');
      }
      for (const x of Object.values(params)) if (x instanceof Tensor) x.dispose();
      for (const index of w.natives) index.dispose();
    });
  });

  it('refuses a chain of non-native indexes and an unknown back-off', () => {
    const w = world('encoder', 4, 1);
    const batch = w.codec.keys([[1, 2]]);
    const values = Tensor.zeros([1, 3, 4], 'f16', getCpuBackend());
    const posEmb = Tensor.zeros([2, 4], 'f32', getCpuBackend());
    const typeEmb = Tensor.zeros([1, 4], 'f32', getCpuBackend());
    expect(() => lookupAggregate(w.refs as unknown as NativePlotIndex[], batch, { values, posEmb, typeEmb })).toThrow(PlotStoreArgumentError);
    expect(() => lookupRows(w.natives, batch.keys, { backoff: 'both' as KeyMode })).toThrow(PlotStoreArgumentError);
  });
});

describe('NativePlotIndex in the version tree, and nativeChain', () => {
  it('a tree on native indexes answers as one on the reference index; the fused lookup over nativeChain agrees', () => {
    const codec = new TrigramKeyCodec({ vocabSize: 60 });
    const lower = (keys: BigUint64Array, salt: number) => Float32Array.from({ length: keys.length * 12 }, (_, i) => Math.sin(i + salt));
    const natives: NativePlotIndex[] = [];
    const trees = [
      new PlotVersionTree({ codec, values: new HeapPlotValueStore({ hidden: 4 }) }),
      new PlotVersionTree({
        codec,
        values: new HeapPlotValueStore({ hidden: 4 }),
        createIndex: (n) => {
          const index = new NativePlotIndex({ expectedKeys: n });
          natives.push(index);
          return index;
        },
      }),
    ];
    const general = new TrigramCounts().addBatch(codec.keys([[5, 6, 7, 8], [9, 6, 7], [10, 11, 12, 13, 14]]));
    const root = rootKeys(codec, general);
    const bio = new TrigramCounts().addBatch(codec.keys([[40, 41, 42], [40, 41, 42, 43], [5, 40, 41, 42], [6, 7, 44]]));
    const selection = selectByCoverage(bio, 0.8);
    const ids = trees.map((tree) => {
      tree.createRoot({ keys: root, values: lower(root, 0) });
      const { id } = tree.createBranch({ domain: 'bio', selection, values: lower(selection.keys, 1) });
      const drop = selection.keys.slice(0, 2);
      const extra = codec.keys([[50, 51, 52]]).keys.slice(0, 3);
      return tree.derive(id, { remove: drop, upsert: { keys: extra, values: lower(extra, 2) } }).id;
    });
    expect(ids[0]).toBe(ids[1]);
    const batch = codec.keys([[40, 41, 42, 6, 7], [50, 51, 52, 53], [5], [59, 58, 57, 6, 7, 8]]);
    for (const version of [...trees[0]!.chain(ids[0]!), ids[0]!]) {
      const want = trees[0]!.lookupRows(version, batch.keys);
      expect(want.some((r) => r !== 0)).toBe(true);
      expect(trees[1]!.lookupRows(version, batch.keys)).toEqual(want);
      const chain = nativeChain(trees[0]!, version);
      expect(chain.length).toBe(trees[0]!.chain(version).length);
      expect(lookupRows(chain, batch.keys, { backoff: 'encoder' })).toEqual(want);
      for (const index of chain) index.dispose();
    }
    expect(natives.length).toBeGreaterThan(0);
  });
});
