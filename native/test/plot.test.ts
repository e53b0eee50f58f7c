import { describe, expect, it } from 'vitest';
import {
  DisposedTensorError,
  DTypeMismatchError,
  f16BitsToF32,
  f32ToF16Bits,
  getCpuBackend,
  InvalidArgumentError,
  NativePlotTable,
  type PlotBackoff,
  plotLookupAggregate,
  plotLookupRows,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, rng, tensorF32, withThreads } from './helpers.js';

// Tolerances of the fused lookup → gather → aggregate against plain JS doubles (values in [-1, 1], gamma in
// [0.5, 1.5], outputs up to ~4):
//  - reference (double sums and LayerNorm, one final rounding to f32): rtol 1e-6, atol 1e-6.
//  - fast path: z = centre + next-left + prev-right + pos + type summed in f32 (4 roundings of terms up to ~5, so
//    ~1e-6 absolute), then layerNorm's row kernel (double reductions, ~5e-7). rtol 1e-5, atol 1e-5.
const REF_TOL = 1e-6;
const FAST_TOL = 1e-5;

const FIELD = 21n;
const BIGRAM_MASK = (1n << 42n) - 1n;
const ENCODER_UNI = ((1n << 21n) - 1n) << 21n;
const CAUSAL_UNI = (1n << 21n) - 1n;

function pack(l: number, c: number, r: number): bigint {
  return (BigInt(l) << (2n * FIELD)) | (BigInt(c) << FIELD) | BigInt(r);
}

/** A2 in plain JS over Maps (child first). */
function jsLookup(chain: Map<bigint, number>[], key: bigint, backoff: PlotBackoff): number {
  if (key === 0n) return 0;
  const cands = backoff === 'none' ? [key] : [key, key & BIGRAM_MASK, key & (backoff === 'encoder' ? ENCODER_UNI : CAUSAL_UNI)];
  for (const k of cands) for (const t of chain) if (t.has(k)) return t.get(k)!;
  return 0;
}

interface Case {
  maps: Map<bigint, number>[];
  tables: NativePlotTable[];
  keys: BigUint64Array;
  lengths: Int32Array;
  types: Int32Array | undefined;
  seqLen: number;
  bits: Uint16Array;
  rows: number;
  d: number;
  pos: Float32Array;
  typeEmb: Float32Array;
  nTypes: number;
  gamma: Float32Array | undefined;
  beta: Float32Array | undefined;
  eps: number;
}

/** Random tables over a small vocabulary (so tri-, bi- and uni-gram keys all hit and miss) and a ragged batch. */
function makeCase(seed: number, d: number, lengthList: number[], opts: { chain?: number; extraT?: number; types?: boolean; affine?: boolean } = {}): Case {
  const next = rng(seed);
  const vocab = 6;
  const rows = 40;
  const maps: Map<bigint, number>[] = [];
  const tables: NativePlotTable[] = [];
  for (let t = 0; t < (opts.chain ?? 2); t++) {
    const m = new Map<bigint, number>();
    const table = NativePlotTable.create();
    for (let l = 0; l < vocab; l++) {
      for (let c = 1; c < vocab; c++) {
        for (let r = 0; r < vocab; r++) {
          if (next() < 0.3) {
            const row = 1 + Math.floor(next() * (rows - 1));
            m.set(pack(l, c, r), row);
            table.set(pack(l, c, r), row);
          }
        }
      }
    }
    maps.push(m);
    tables.push(table);
  }
  const lengths = Int32Array.from(lengthList);
  const total = lengthList.reduce((s, n) => s + n + 1, 0);
  const keys = new BigUint64Array(total);
  let k = 0;
  for (const n of lengthList) {
    const ids = Array.from({ length: n }, () => 1 + Math.floor(next() * (vocab - 1)));
    for (let i = 0; i < n; i++) keys[k + i] = pack(i === 0 ? 0 : ids[i - 1]!, ids[i]!, i === n - 1 ? 0 : ids[i + 1]!);
    k += n + 1; // the separator stays 0
  }
  const seqLen = Math.max(0, ...lengthList) + (opts.extraT ?? 0);
  const values = randomFloats(rows * 3 * d, seed + 1);
  values.fill(0, 0, 3 * d); // row 0 is the zero row
  const bits = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) bits[i] = f32ToF16Bits(values[i]!);
  const nTypes = 2;
  const types = opts.types ? Int32Array.from({ length: lengthList.length * seqLen }, () => Math.floor(next() * nTypes)) : undefined;
  const affine = opts.affine ?? true;
  return {
    maps,
    tables,
    keys,
    lengths,
    types,
    seqLen,
    bits,
    rows,
    d,
    pos: randomFloats(Math.max(seqLen, 1) * d, seed + 2),
    typeEmb: randomFloats(nTypes * d, seed + 3),
    nTypes,
    gamma: affine ? randomFloats(d, seed + 4, 0.5, 1.5) : undefined,
    beta: affine ? randomFloats(d, seed + 5) : undefined,
    eps: 1e-5,
  };
}

/** A3 in plain JS doubles. */
function jsAggregate(c: Case, backoff: PlotBackoff): Float64Array {
  const { d, seqLen: T } = c;
  const B = c.lengths.length;
  const rowOf = Array.from(c.keys, (key) => jsLookup(c.maps, key, backoff));
  const v = (row: number, slot: number, j: number) => f16BitsToF32(c.bits[(row * 3 + slot) * d + j]!);
  const out = new Float64Array(B * T * d);
  let k = 0;
  for (let b = 0; b < B; b++) {
    const len = c.lengths[b]!;
    for (let i = 0; i < len; i++) {
      const type = c.types ? c.types[b * T + i]! : 0;
      const z = new Float64Array(d);
      for (let j = 0; j < d; j++) {
        let acc = v(rowOf[k + i]!, 1, j);
        if (i + 1 < len) acc += v(rowOf[k + i + 1]!, 0, j);
        if (i > 0) acc += v(rowOf[k + i - 1]!, 2, j);
        z[j] = acc + c.pos[i * d + j]! + c.typeEmb[type * d + j]!;
      }
      const mean = z.reduce((s, x) => s + x, 0) / d;
      const variance = z.reduce((s, x) => s + (x - mean) ** 2, 0) / d;
      const rstd = 1 / Math.sqrt(variance + c.eps);
      for (let j = 0; j < d; j++) out[(b * T + i) * d + j] = (z[j]! - mean) * rstd * (c.gamma ? c.gamma[j]! : 1) + (c.beta ? c.beta[j]! : 0);
    }
    k += len + 1;
  }
  return out;
}

function run(c: Case, backoff: PlotBackoff, reference = false): Float32Array {
  const values = Tensor.from(c.bits, [c.rows, 3, c.d], { dtype: 'f16', backend: getCpuBackend() });
  const posEmb = tensorF32(c.pos, [Math.max(c.seqLen, 1), c.d]);
  const typeEmb = tensorF32(c.typeEmb, [c.nTypes, c.d]);
  const gamma = c.gamma ? tensorF32(c.gamma, [c.d]) : undefined;
  const beta = c.beta ? tensorF32(c.beta, [c.d]) : undefined;
  const out = plotLookupAggregate(
    c.tables,
    { keys: c.keys, lengths: c.lengths },
    { values, posEmb, typeEmb, ...(gamma ? { gamma } : {}), ...(beta ? { beta } : {}), eps: c.eps },
    { backoff, reference, seqLen: c.seqLen, ...(c.types ? { types: c.types } : {}) },
  );
  expect(out.shape).toEqual([c.lengths.length, c.seqLen, c.d]);
  const result = f32(out);
  for (const t of [values, posEmb, typeEmb, gamma, beta, out]) t?.dispose();
  return result;
}

function dispose(c: Case): void {
  for (const t of c.tables) t.dispose();
}

describe('NativePlotTable', () => {
  it('matches a Map over random set / delete / get, with growth and reinsertion', () => {
    const next = rng(7);
    const table = NativePlotTable.create();
    const m = new Map<bigint, number>();
    const keyPool = Array.from({ length: 600 }, (_, i) => (i === 0 ? 0n : (BigInt(Math.floor(next() * 2 ** 31)) << 32n) | BigInt(i)));
    for (let step = 0; step < 6000; step++) {
      const key = keyPool[Math.floor(next() * keyPool.length)]!;
      const r = next();
      if (r < 0.55) {
        const row = 1 + Math.floor(next() * 1000);
        expect(table.set(key, row)).toBe(m.get(key) ?? 0);
        m.set(key, row);
      } else if (r < 0.85) {
        expect(table.delete(key)).toBe(m.get(key) ?? 0);
        m.delete(key);
      } else {
        expect(table.get(key)).toBe(m.get(key) ?? 0);
      }
      expect(table.size).toBe(m.size);
    }
    const got = table.getBatch(BigUint64Array.from(keyPool));
    expect(Array.from(got)).toEqual(keyPool.map((k) => m.get(k) ?? 0));
    expect(table.capacity).toBeGreaterThanOrEqual(2 * m.size);
    expect(table.byteLength).toBe(table.capacity * 12);
    const { keys, rows } = table.entries();
    expect(new Map(Array.from(keys, (k, i) => [k, rows[i]!]))).toEqual(m);
    const copy = table.clone();
    copy.set(keyPool[1]!, 4242);
    expect(table.get(keyPool[1]!)).toBe(m.get(keyPool[1]!) ?? 0);
    table.clear();
    expect(table.size).toBe(0);
    expect(table.capacity).toBe(16);
    expect(copy.get(keyPool[1]!)).toBe(4242);
    expect(table.getBatch(new BigUint64Array(0)).length).toBe(0);
    copy.dispose();
    table.dispose();
    table.dispose(); // idempotent
    expect(() => table.get(1n)).toThrow(DisposedTensorError);
  });

  it('refuses bad rows, keys and handles with typed errors', () => {
    const table = NativePlotTable.create(10);
    expect(() => table.set(1n, 0)).toThrow(InvalidArgumentError);
    expect(() => table.set(1n, -3)).toThrow(InvalidArgumentError);
    expect(() => table.set(1n, 1.5)).toThrow(InvalidArgumentError);
    expect(() => table.set(-1n, 2)).toThrow(InvalidArgumentError);
    expect(() => table.set(1n << 64n, 2)).toThrow(InvalidArgumentError);
    expect(() => table.getBatch(new BigUint64Array(3), new Int32Array(2))).toThrow(ShapeMismatchError);
    expect(() => table.getBatch(new BigInt64Array(3) as unknown as BigUint64Array)).toThrow(DTypeMismatchError);
    expect(() => NativePlotTable.create(-1)).toThrow(InvalidArgumentError);
    // A direct binding call with something that is not a handle is an error, not a crash.
    const b = getCpuBackend().binding;
    expect(() => b.plotIndexSize!({} as never)).toThrow(/not a plot index handle/);
    expect(() => b.plotIndexGet!(Tensor.zeros([1]).native as never, 1n)).toThrow(/not a plot index handle/);
    table.dispose();
  });
});

describe('plotLookupRows (A2 over a chain)', () => {
  for (const backoff of ['none', 'encoder', 'causal'] as const) {
    it(`matches the JS lookup, backoff ${backoff}`, () => {
      const c = makeCase(11, 4, [5, 1, 0, 9, 3]);
      const want = Array.from(c.keys, (k) => jsLookup(c.maps, k, backoff));
      expect(Array.from(plotLookupRows(c.tables, c.keys, { backoff }))).toEqual(want);
      expect(Array.from(plotLookupRows([c.tables[1]!], c.keys, { backoff }))).toEqual(Array.from(c.keys, (k) => jsLookup([c.maps[1]!], k, backoff)));
      expect(Array.from(plotLookupRows([], c.keys, { backoff }))).toEqual(want.map(() => 0));
      // Back-off must change something for the test to mean anything.
      if (backoff !== 'none') expect(want).not.toEqual(Array.from(c.keys, (k) => jsLookup(c.maps, k, 'none')));
      dispose(c);
    });
  }
});

describe('plotLookupAggregate (A2 + A3 fused)', () => {
  const shapes: { d: number; lengths: number[]; extraT?: number; types?: boolean; affine?: boolean; chain?: number }[] = [
    { d: 1, lengths: [1] },
    { d: 7, lengths: [3, 1, 0, 5], types: true },
    { d: 8, lengths: [2, 2], extraT: 3, affine: false },
    { d: 17, lengths: [1, 6, 4], chain: 1, types: true },
    { d: 33, lengths: [12, 0, 7, 1, 9], extraT: 2, types: true },
    { d: 64, lengths: [0, 0] },
    { d: 40, lengths: [] },
  ];
  shapes.forEach((s, n) => {
    for (const backoff of ['encoder', 'none'] as const) {
      it(`d ${s.d}, lengths [${s.lengths}], backoff ${backoff}: reference and every ISA match JS doubles`, () => {
        const c = makeCase(100 + n, s.d, s.lengths, s);
        const want = jsAggregate(c, backoff);
        expectClose(run(c, backoff, true), want, REF_TOL, REF_TOL, 'reference');
        forEachIsa((isa) => expectClose(run(c, backoff), want, FAST_TOL, FAST_TOL, isa));
        dispose(c);
      });
    }
  });

  it('positions past each length are exactly 0', () => {
    const c = makeCase(5, 9, [2, 0, 4], { extraT: 2 });
    const got = run(c, 'encoder');
    const T = c.seqLen;
    for (let b = 0; b < 3; b++) {
      for (let i = c.lengths[b]!; i < T; i++) for (let j = 0; j < 9; j++) expect(got[(b * T + i) * 9 + j]).toBe(0);
    }
    dispose(c);
  });

  it('gives the same bits for 1 and 2 threads on every ISA (pool engaged: > 4096 keys, > 2^14 outputs)', () => {
    const lengths = Array.from({ length: 80 }, (_, i) => (i * 37) % 65);
    const c = makeCase(21, 16, lengths, { types: true });
    forEachIsa((isa) => {
      const one = withThreads(1, () => run(c, 'encoder'));
      const two = withThreads(2, () => run(c, 'encoder'));
      expectBitwiseEqual(one, two, isa);
    });
    expectBitwiseEqual(
      withThreads(1, () => run(c, 'encoder', true)),
      withThreads(2, () => run(c, 'encoder', true)),
      'reference',
    );
    dispose(c);
  });

  describe('bad input → typed errors', () => {
    const c = makeCase(31, 8, [3, 2]);
    const values = () => Tensor.from(c.bits, [c.rows, 3, 8], { dtype: 'f16' });
    const pos = () => tensorF32(c.pos, [c.seqLen, 8]);
    const ty = () => tensorF32(c.typeEmb, [2, 8]);
    const batch = { keys: c.keys, lengths: c.lengths };

    it('wrong dtypes and shapes', () => {
      expect(() => plotLookupAggregate(c.tables, batch, { values: tensorF32(new Float32Array(c.rows * 24), [c.rows, 3, 8]), posEmb: pos(), typeEmb: ty() })).toThrow(
        DTypeMismatchError,
      );
      expect(() => plotLookupAggregate(c.tables, batch, { values: Tensor.zeros([c.rows, 2, 8], 'f16'), posEmb: pos(), typeEmb: ty() })).toThrow(ShapeMismatchError);
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: tensorF32(new Float32Array(c.seqLen * 4), [c.seqLen, 4]), typeEmb: ty() })).toThrow(
        ShapeMismatchError,
      );
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: tensorF32(new Float32Array(8), [1, 8]), typeEmb: ty() })).toThrow(ShapeMismatchError);
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty(), gamma: tensorF32(new Float32Array(7), [7]) })).toThrow(
        ShapeMismatchError,
      );
      expect(() => plotLookupAggregate(c.tables, { keys: c.keys.subarray(1), lengths: c.lengths }, { values: values(), posEmb: pos(), typeEmb: ty() })).toThrow(
        ShapeMismatchError,
      );
      expect(() =>
        plotLookupAggregate(c.tables, { keys: new BigInt64Array(c.keys.length) as unknown as BigUint64Array, lengths: c.lengths }, { values: values(), posEmb: pos(), typeEmb: ty() }),
      ).toThrow(DTypeMismatchError);
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { types: new Int32Array(3) })).toThrow(ShapeMismatchError);
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { seqLen: 1 })).toThrow(ShapeMismatchError);
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { out: Tensor.zeros([2, c.seqLen, 9]) })).toThrow(
        ShapeMismatchError,
      );
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { backoff: 'sideways' as never })).toThrow(
        InvalidArgumentError,
      );
      expect(() => plotLookupAggregate([{} as NativePlotTable], batch, { values: values(), posEmb: pos(), typeEmb: ty() })).toThrow(InvalidArgumentError);
    });

    it('a type id beyond typeEmb, a missing separator', () => {
      const types = new Int32Array(2 * c.seqLen);
      types[1] = 2;
      expect(() => plotLookupAggregate(c.tables, batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { types })).toThrow(InvalidArgumentError);
      const keys = c.keys.slice();
      keys[3] = pack(1, 2, 3); // where sequence 0's separator belongs
      expect(() => plotLookupAggregate(c.tables, { keys, lengths: c.lengths }, { values: values(), posEmb: pos(), typeEmb: ty() })).toThrow(/separator/);
    });

    it('a row beyond the value buffer throws before anything is written', () => {
      const t = NativePlotTable.create();
      t.set(c.keys[0]!, c.rows); // one past the last row
      const out = Tensor.from(new Float32Array(2 * c.seqLen * 8).fill(7), [2, c.seqLen, 8]);
      for (const reference of [false, true]) {
        expect(() => plotLookupAggregate([t, ...c.tables], batch, { values: values(), posEmb: pos(), typeEmb: ty() }, { out, reference })).toThrow(
          /outside the value buffer/,
        );
        expect(f32(out).every((x) => x === 7)).toBe(true);
      }
      t.dispose();
    });

    it('a disposed table in the chain', () => {
      const t = NativePlotTable.create();
      t.dispose();
      expect(() => plotLookupAggregate([t], batch, { values: values(), posEmb: pos(), typeEmb: ty() })).toThrow(DisposedTensorError);
      expect(() => plotLookupRows([t], c.keys)).toThrow(DisposedTensorError);
    });
  });
});
