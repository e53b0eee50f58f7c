import { describe, expect, it } from 'vitest';
import {
  cast,
  type DType,
  DTypeMismatchError,
  embedding,
  gatherRows,
  InvalidArgumentError,
  scatterRows,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, f32, forEachIsa, randomFloats, randomInts, rng, tensorF32, withThreads } from './helpers.js';

// Sizes straddle the SIMD widths (8, 16) and the 32k-element task grain.
const sizes = [0, 1, 7, 8, 15, 16, 17, 33, 1000, 70_001];
const floatDtypes: DType[] = ['f32', 'f16', 'bf16'];

// ---- bit helpers (JS-side decoding, independent of the addon)

const f32Bits = (v: number): number => new Uint32Array(Float32Array.of(v).buffer)[0]!;
const bitsF32 = (u: number): number => new Float32Array(Uint32Array.of(u).buffer)[0]!;

function f16Value(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}
const bf16Value = (h: number): number => bitsF32(h << 16);

function exponentOf(a: number): number {
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  return e;
}

function roundHalfEven(n: number): number {
  const f = Math.floor(n);
  const d = n - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * The value an f32 `v` takes in a float format with `mant` stored mantissa bits, minimum normal exponent
 * `minExp` and overflow threshold `max` (first value that rounds to infinity), by round-to-nearest-even,
 * computed from the value (not the bits), so it checks the kernels' integer tricks independently.
 */
function roundToFormat(v: number, mant: number, minExp: number, overflowAt: number): number {
  if (Number.isNaN(v) || v === 0 || !Number.isFinite(v)) return v;
  const a = Math.abs(v);
  if (a >= overflowAt) return Math.sign(v) * Number.POSITIVE_INFINITY;
  const q = 2 ** (Math.max(exponentOf(a), minExp) - mant); // spacing of representable values near a
  const r = roundHalfEven(a / q) * q; // a / q is exact: q is a power of two
  return Math.sign(v) * r;
}
// f16: 10 mantissa bits, min normal 2^-14, rounds to inf from 65520 (halfway past 65504).
const toF16Value = (v: number): number => roundToFormat(v, 10, -14, 65520);
// bf16: 7 mantissa bits, min normal 2^-126, rounds to inf from (2 - 2^-8) * 2^127.
const toBf16Value = (v: number): number => roundToFormat(v, 7, -126, (2 - 2 ** -8) * 2 ** 127);

/** Random f32 values over every binade that matters for f16/bf16, plus raw random bit patterns (NaNs, subnormals). */
function interestingF32(n: number, seed: number): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n);
  const bits = new Uint32Array(out.buffer);
  for (let i = 0; i < n; i++) {
    if (i % 4 === 3) bits[i] = Math.floor(r() * 2 ** 32);
    else out[i] = (r() < 0.5 ? -1 : 1) * (1 + r()) * 2 ** Math.floor(-30 + r() * 50);
  }
  return out;
}

function randomBits16(n: number, seed: number): Uint16Array {
  const r = rng(seed);
  return Uint16Array.from({ length: n }, () => Math.floor(r() * 65536));
}

function tensorOf(dtype: DType, data: ArrayBufferView, shape: number[]): Tensor {
  return Tensor.from(data, shape, { dtype, backend: cpu() });
}

function bitsOf(t: Tensor): Uint32Array | Uint16Array {
  const a = t.toArray();
  return t.dtype === 'f32' ? new Uint32Array((a as Float32Array).buffer) : (a as Uint16Array);
}

function expectSameBits(got: ArrayLike<number>, want: ArrayLike<number>, label: string): void {
  expect(got.length, `${label} length`).toBe(want.length);
  for (let i = 0; i < want.length; i++) {
    if (got[i] !== want[i]) expect.fail(`${label} differs at ${i}: 0x${got[i]!.toString(16)} vs 0x${want[i]!.toString(16)}`);
  }
}

function sourceOf(dtype: DType, n: number, seed: number): Tensor {
  return dtype === 'f32' ? tensorOf('f32', interestingF32(n, seed), [n]) : tensorOf(dtype, randomBits16(n, seed), [n]);
}

describe('cast (convert)', () => {
  it('every ISA is bitwise equal to the reference for all f32/f16/bf16 pairs, NaNs included', () => {
    forEachIsa((isa) => {
      for (const from of floatDtypes) {
        for (const to of floatDtypes) {
          if (from === to) continue;
          for (const n of sizes) {
            const x = sourceOf(from, n, n * 3 + from.length);
            expectSameBits(bitsOf(cast(x, to)), bitsOf(cast(x, to, { reference: true })), `${isa} ${from}->${to} n=${n}`);
          }
        }
      }
    });
  });

  it('f32 -> f16 and f32 -> bf16 round to nearest even, checked against a value-level JS rounding', () => {
    const xs = interestingF32(20_000, 5);
    forEachIsa((isa) => {
      const h = cast(tensorF32(xs, [xs.length]), 'f16').toArray() as Uint16Array;
      const b = cast(tensorF32(xs, [xs.length]), 'bf16').toArray() as Uint16Array;
      for (let i = 0; i < xs.length; i++) {
        const v = xs[i]!;
        if (Number.isNaN(v)) {
          expect(Number.isNaN(f16Value(h[i]!)) && Number.isNaN(bf16Value(b[i]!)), `${isa} NaN at ${i}`).toBe(true);
          continue;
        }
        if (!Object.is(f16Value(h[i]!), toF16Value(v))) expect.fail(`${isa} f16(${v}) = ${f16Value(h[i]!)}, want ${toF16Value(v)}`);
        if (!Object.is(bf16Value(b[i]!), toBf16Value(v))) expect.fail(`${isa} bf16(${v}) = ${bf16Value(b[i]!)}, want ${toBf16Value(v)}`);
      }
    });
  });

  it('known f16 encodings: ties to even, subnormals, overflow, infinities, NaN', () => {
    const cases: [number, number][] = [
      [1, 0x3c00],
      [-2, 0xc000],
      [65504, 0x7bff], // max finite
      [65519.99, 0x7bff],
      [65520, 0x7c00], // halfway past max: ties to even = inf
      [1e6, 0x7c00],
      [2 ** -14, 0x0400], // min normal
      [1023 * 2 ** -24, 0x03ff], // max subnormal
      [2 ** -24, 0x0001], // min subnormal
      [2 ** -25, 0x0000], // tie between 0 and 2^-24: even is 0
      [3 * 2 ** -25, 0x0002], // tie between 1 and 2 units: even is 2
      [2 ** -25 * 1.0000001, 0x0001], // just above the tie
      [1 + 2 ** -11, 0x3c00], // tie, lower is even
      [1 + 3 * 2 ** -11, 0x3c02], // tie, upper is even
      [1e-8, 0x0000],
      [-0, 0x8000],
      [Number.POSITIVE_INFINITY, 0x7c00],
      [Number.NEGATIVE_INFINITY, 0xfc00],
      [Number.NaN, 0x7e00],
    ];
    const x = tensorF32(Float32Array.from(cases.map((c) => c[0])), [cases.length]);
    forEachIsa((isa) => {
      const got = cast(x, 'f16').toArray() as Uint16Array;
      cases.forEach(([v, want], i) => expect(got[i], `${isa} f16(${v})`).toBe(want));
      // A negative NaN keeps its sign.
      const negNan = tensorOf('f32', Uint32Array.of(0xffc00000), [1]);
      expect((cast(negNan, 'f16').toArray() as Uint16Array)[0], `${isa} -NaN`).toBe(0xfe00);
    });
  });

  it('known bf16 encodings: ties to even, f32 subnormals, overflow, quiet NaNs', () => {
    const cases: [number, number][] = [
      [0x3f800000, 0x3f80], // 1
      [0x3f808000, 0x3f80], // 1 + 2^-8: tie, lower even
      [0x3f818000, 0x3f82], // tie, upper even
      [0x3f808001, 0x3f81], // just above the tie
      [0x00000001, 0x0000], // smallest f32 subnormal
      [0x00008000, 0x0000], // subnormal tie, lower even
      [0x00018000, 0x0002], // subnormal tie, upper even
      [0x00008001, 0x0001],
      [0x7f7fffff, 0x7f80], // FLT_MAX rounds to inf
      [0xff800000, 0xff80], // -inf
      [0x7fc00001, 0x7fc0], // quiet NaN
      [0x7f800001, 0x7fc0], // signalling NaN becomes quiet
      [0xff812345, 0xffc1], // negative sNaN: payload top bits kept, quiet bit set
    ];
    const x = tensorOf('f32', Uint32Array.from(cases.map((c) => c[0])), [cases.length]);
    forEachIsa((isa) => {
      const got = cast(x, 'bf16').toArray() as Uint16Array;
      cases.forEach(([u, want], i) => expect(got[i], `${isa} bf16(0x${u.toString(16)})`).toBe(want));
    });
  });

  it('f16 and bf16 round-trip through f32 exactly; NaNs come back quiet', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    forEachIsa((isa) => {
      for (const dtype of ['f16', 'bf16'] as const) {
        const x = tensorOf(dtype, all, [65536]);
        const wide = cast(x, 'f32');
        const back = cast(wide, dtype).toArray() as Uint16Array;
        const values = f32(wide);
        for (let h = 0; h < 65536; h++) {
          const want = dtype === 'f16' ? f16Value(h) : bf16Value(h);
          if (Number.isNaN(want)) {
            expect(Number.isNaN(values[h]!), `${isa} ${dtype} 0x${h.toString(16)} NaN`).toBe(true);
            expect(f32Bits(values[h]!) & 0x00400000, `${isa} ${dtype} 0x${h.toString(16)} quiet`).not.toBe(0);
            // f16 NaNs narrow to the canonical quiet NaN; bf16 NaNs keep their payload with the quiet bit.
            const wantBack = dtype === 'f16' ? (h & 0x8000) | 0x7e00 : h | 0x40;
            expect(back[h], `${isa} ${dtype} 0x${h.toString(16)} NaN back`).toBe(wantBack);
          } else {
            if (!Object.is(values[h], want)) expect.fail(`${isa} ${dtype} 0x${h.toString(16)} -> ${values[h]}, want ${want}`);
            if (back[h] !== h) expect.fail(`${isa} ${dtype} 0x${h.toString(16)} came back as 0x${back[h]!.toString(16)}`);
          }
        }
      }
    });
  });

  it('f16 <-> bf16 round once, through the exact f32 value', () => {
    const all = Uint16Array.from({ length: 65536 }, (_, i) => i);
    forEachIsa((isa) => {
      const fromF16 = cast(tensorOf('f16', all, [65536]), 'bf16').toArray() as Uint16Array;
      const fromBf16 = cast(tensorOf('bf16', all, [65536]), 'f16').toArray() as Uint16Array;
      for (let h = 0; h < 65536; h++) {
        const a = f16Value(h);
        if (!Number.isNaN(a) && !Object.is(bf16Value(fromF16[h]!), toBf16Value(a))) expect.fail(`${isa} f16 0x${h.toString(16)} -> bf16`);
        const b = bf16Value(h);
        if (!Number.isNaN(b) && !Object.is(f16Value(fromBf16[h]!), toF16Value(b))) expect.fail(`${isa} bf16 0x${h.toString(16)} -> f16`);
      }
    });
  });

  it('same dtype is a copy of any dtype; the result is a new tensor or out', () => {
    const ints = Tensor.from(randomInts(33, 1, -1000, 1000), [3, 11], { dtype: 'i32', backend: cpu() });
    const copy = cast(ints, 'i32');
    expect(copy).not.toBe(ints);
    expect(copy.native.sameStorage(ints.native)).toBe(false);
    expect(Array.from(copy.toArray() as Int32Array)).toEqual(Array.from(ints.toArray() as Int32Array));
    const out = Tensor.empty([3, 11], 'bf16', cpu());
    const x = tensorF32(randomFloats(33, 2), [3, 11]);
    expect(cast(x, 'bf16', { out })).toBe(out);
    expectSameBits(bitsOf(out), bitsOf(cast(x, 'bf16', { reference: true })), 'out');
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const x = tensorF32(interestingF32(200_003, 9), [200_003]);
    for (const to of ['f16', 'bf16'] as const) {
      const one = withThreads(1, () => bitsOf(cast(x, to)));
      const two = withThreads(2, () => bitsOf(cast(x, to)));
      expectSameBits(one, two, `threads ${to}`);
    }
  });

  it('rejects unsupported dtypes and shapes, in TS and in the binding', () => {
    const ints = Tensor.zeros([2, 3], 'i32', cpu());
    expect(() => cast(ints, 'f16')).toThrow(DTypeMismatchError);
    expect(() => cast(ints, 'f16')).toThrow(/\[2, 3\].*i32.*f16/);
    expect(() => cast(Tensor.zeros([2], 'f32', cpu()), 'u8')).toThrow(DTypeMismatchError);
    const x = Tensor.zeros([2, 3], 'f32', cpu());
    expect(() => cast(x, 'f16', { out: Tensor.zeros([3, 2], 'f16', cpu()) })).toThrow(/\[3, 2\].*\[2, 3\]/);
    expect(() => cast(x, 'f16', { out: Tensor.zeros([2, 3], 'bf16', cpu()) })).toThrow(DTypeMismatchError);
    const b = cpu().binding;
    expect(() => b.convert(ints.native, Tensor.zeros([2, 3], 'f32', cpu()).native, {})).toThrow(/no conversion from i32 to f32/);
    expect(() => b.convert(x.native, Tensor.zeros([6], 'f16', cpu()).native, {})).toThrow(/\[6\].*\[2, 3\]/);
    expect(() => b.convert(x.native, x.native, {})).toThrow(/overlaps/);
  });
});

describe('embedding', () => {
  const dims = [1, 7, 8, 15, 16, 17, 33, 768];

  function tableOf(dtype: DType, vocab: number, dim: number, seed: number): { table: Tensor; values: Float32Array } {
    const values = randomFloats(vocab * dim, seed, -4, 4);
    if (dtype === 'f32') return { table: tensorF32(values, [vocab, dim]), values };
    // Narrow with the reference cast; the expected f32 values are decoded from the bits here, in JS.
    const narrow = cast(tensorF32(values, [vocab, dim]), dtype, { reference: true });
    const bits = narrow.toArray() as Uint16Array;
    return { table: narrow, values: Float32Array.from(bits, dtype === 'f16' ? f16Value : bf16Value) };
  }

  it('looks up rows of f32, f16 and bf16 tables on every ISA, bitwise', () => {
    forEachIsa((isa) => {
      for (const dtype of floatDtypes) {
        for (const dim of dims) {
          const vocab = 50;
          const { table, values } = tableOf(dtype, vocab, dim, dim + 1);
          for (const n of [0, 1, 3, 64]) {
            const idValues = randomInts(n, n + dim, 0, vocab);
            if (n > 2) idValues[2] = idValues[0]!; // a repeated id
            const ids = Tensor.from(idValues, [n], { dtype: 'i32', backend: cpu() });
            const got = f32(embedding(table, ids));
            const want = new Float32Array(n * dim);
            idValues.forEach((id, i) => want.set(values.subarray(id * dim, (id + 1) * dim), i * dim));
            const label = `${isa} ${dtype} dim=${dim} n=${n}`;
            expectBitwiseEqual(got, want, label);
            expectBitwiseEqual(got, f32(embedding(table, ids, { reference: true })), `${label} vs ref`);
          }
        }
      }
    });
  });

  it('takes ids of any shape: out is ids.shape + [dim]', () => {
    const { table, values } = tableOf('bf16', 10, 5, 3);
    const ids = Tensor.from(Int32Array.of(1, 9, 0, 4, 4, 2), [2, 3], { dtype: 'i32', backend: cpu() });
    const out = embedding(table, ids);
    expect(out.shape).toEqual([2, 3, 5]);
    expect(out.dtype).toBe('f32');
    expectBitwiseEqual(f32(out).subarray(5, 10), values.subarray(45, 50), 'id 9');
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const { table } = tableOf('f16', 100, 768, 4);
    const ids = Tensor.from(randomInts(256, 5, 0, 100), [256], { dtype: 'i32', backend: cpu() });
    expectBitwiseEqual(withThreads(1, () => f32(embedding(table, ids))), withThreads(2, () => f32(embedding(table, ids))), 'threads');
  });

  it('rejects ids outside the vocabulary, naming the id and the vocabulary size, in TS and natively', () => {
    const table = Tensor.zeros([10, 4], 'f32', cpu());
    for (const bad of [10, -1, 2_000_000_000]) {
      const ids = Tensor.from(Int32Array.of(3, bad), [2], { dtype: 'i32', backend: cpu() });
      expect(() => embedding(table, ids)).toThrow(InvalidArgumentError);
      expect(() => embedding(table, ids)).toThrow(new RegExp(`ids\\[1\\] = ${bad}.*vocabulary size 10`));
      const out = Tensor.empty([2, 4], 'f32', cpu());
      expect(() => cpu().binding.embedding(table.native, ids.native, out.native, {})).toThrow(new RegExp(`ids\\[1\\] = ${bad}.*vocabulary size 10`));
    }
  });

  it('rejects bad shapes and dtypes, naming the shapes', () => {
    const table = Tensor.zeros([10, 4], 'f32', cpu());
    const ids = Tensor.from(Int32Array.of(1, 2, 3), [3], { dtype: 'i32', backend: cpu() });
    expect(() => embedding(table, ids, { out: Tensor.zeros([3, 5], 'f32', cpu()) })).toThrow(/\[3, 5\].*\[3, 4\]/);
    expect(() => embedding(Tensor.zeros([10, 4], 'i32', cpu()), ids)).toThrow(DTypeMismatchError);
    expect(() => embedding(Tensor.zeros([40], 'f32', cpu()), ids)).toThrow(/rank 2.*\[40\]/);
    expect(() => embedding(table, Tensor.zeros([3], 'f32', cpu()))).toThrow(DTypeMismatchError);
    expect(() => cpu().binding.embedding(table.native, ids.native, Tensor.zeros([3, 4], 'f16', cpu()).native, {})).toThrow(/out must be f32/);
  });
});

describe('empty tensors', () => {
  it('zero-sized rows, tables and index lists work and write nothing', () => {
    forEachIsa(() => {
      const ids = Tensor.from(Int32Array.of(1, 2), [2], { dtype: 'i32', backend: cpu() });
      expect(embedding(Tensor.zeros([10, 0], 'bf16', cpu()), ids).shape).toEqual([2, 0]);
      expect(embedding(Tensor.zeros([0, 4], 'f32', cpu()), Tensor.zeros([0], 'i32', cpu())).shape).toEqual([0, 4]);
      expect(gatherRows(Tensor.zeros([4, 0], 'bf16', cpu()), ids).shape).toEqual([2, 0]);
      const dst = Tensor.zeros([4, 0, 3], 'i32', cpu());
      expect(scatterRows(Tensor.zeros([2, 0, 3], 'i32', cpu()), ids, dst)).toBe(dst);
      expect(scatterRows(Tensor.zeros([0, 3], 'i32', cpu()), Tensor.zeros([0], 'i32', cpu()), Tensor.zeros([4, 3], 'i32', cpu())).shape).toEqual([4, 3]);
      expect(cast(Tensor.zeros([3, 0], 'f32', cpu()), 'f16').shape).toEqual([3, 0]);
      expect(cast(Tensor.zeros([0], 'u8', cpu()), 'u8').shape).toEqual([0]);
    });
  });
});

describe('gatherRows / scatterRows', () => {
  it('gathers i32 and bf16 rows (rank 1 to 3) and empty index lists', () => {
    const r = rng(1);
    for (const [dtype, shape] of [['i32', [9, 3]], ['bf16', [7, 2, 5]], ['i32', [6]], ['bf16', [5, 17]]] as const) {
      const rows = shape[0];
      const rowLen = shape.slice(1).reduce((a, b) => a * b, 1);
      const data = dtype === 'i32' ? randomInts(rows * rowLen, 2, -1e6, 1e6) : randomBits16(rows * rowLen, 3);
      const src = tensorOf(dtype, data, [...shape]);
      for (const n of [0, 1, 4, 40]) {
        const idxValues = Int32Array.from({ length: n }, () => Math.floor(r() * rows));
        const idx = tensorOf('i32', idxValues, [n]);
        const out = gatherRows(src, idx);
        expect(out.shape).toEqual([n, ...shape.slice(1)]);
        expect(out.dtype).toBe(dtype);
        const got = out.toArray() as Int32Array | Uint16Array;
        for (let i = 0; i < n; i++) {
          const want = Array.from(data.subarray(idxValues[i]! * rowLen, (idxValues[i]! + 1) * rowLen));
          expect(Array.from(got.subarray(i * rowLen, (i + 1) * rowLen)), `${dtype} row ${i}`).toEqual(want);
        }
      }
    }
  });

  it('scatters i32 and bf16 rows; duplicate indices: the last occurrence wins (small and parallel paths)', () => {
    // Small: 5 rows of 3 i32. Large (> 1 MiB, parallel path): 600 rows of 1024 bf16 = 1.2 MiB, many duplicates.
    for (const [dtype, n, rowLen, dstRows] of [['i32', 5, 3, 4], ['bf16', 600, 1024, 97]] as const) {
      const data = dtype === 'i32' ? randomInts(n * rowLen, 4, -1e6, 1e6) : randomBits16(n * rowLen, 5);
      const src = tensorOf(dtype, data, [n, rowLen]);
      const idxValues = randomInts(n, 6, 0, dstRows);
      if (dtype === 'i32') idxValues.set([2, 0, 2, 3, 2]); // row 2 written three times
      const initial = dtype === 'i32' ? randomInts(dstRows * rowLen, 7, 0, 9) : randomBits16(dstRows * rowLen, 7);
      // Expected: write rows one by one in index order.
      const want = initial.slice();
      idxValues.forEach((d, i) => want.set(data.subarray(i * rowLen, (i + 1) * rowLen), d * rowLen));
      for (const threads of [1, 2]) {
        const dst = tensorOf(dtype, initial, [dstRows, rowLen]);
        const result = withThreads(threads, () => scatterRows(src, tensorOf('i32', idxValues, [n]), dst));
        expect(result).toBe(dst);
        expectSameBits(dst.toArray() as Int32Array | Uint16Array, want, `${dtype} n=${n} threads=${threads}`);
      }
    }
  });

  it('gather is bitwise identical on 1 and 2 threads (scatter: see the duplicate-index test)', () => {
    const src = tensorOf('bf16', randomBits16(300 * 700, 8), [300, 700]);
    const idx = tensorOf('i32', randomInts(500, 9, 0, 300), [500]);
    const one = withThreads(1, () => gatherRows(src, idx).toArray());
    const two = withThreads(2, () => gatherRows(src, idx).toArray());
    expectSameBits(one as Uint16Array, two as Uint16Array, 'gather threads');
  });

  it('rejects out-of-range indices in TS and natively', () => {
    const src = Tensor.zeros([4, 3], 'i32', cpu());
    const bad = tensorOf('i32', Int32Array.of(0, 4), [2]);
    expect(() => gatherRows(src, bad)).toThrow(InvalidArgumentError);
    expect(() => gatherRows(src, bad)).toThrow(/idx\[1\] = 4.*\[4, 3\] has 4 rows/);
    expect(() => cpu().binding.gatherRows(src.native, bad.native, Tensor.empty([2, 3], 'i32', cpu()).native)).toThrow(/idx\[1\] = 4/);
    const dst = Tensor.zeros([3, 3], 'i32', cpu());
    const neg = tensorOf('i32', Int32Array.of(-1, 0), [2]);
    const two = Tensor.zeros([2, 3], 'i32', cpu());
    expect(() => scatterRows(two, neg, dst)).toThrow(/idx\[0\] = -1.*\[3, 3\] has 3 rows/);
    expect(() => cpu().binding.scatterRows(two.native, neg.native, dst.native)).toThrow(/idx\[0\] = -1/);
  });

  it('rejects mismatched shapes and dtypes, naming both shapes', () => {
    const src = Tensor.zeros([4, 3], 'bf16', cpu());
    const idx = tensorOf('i32', Int32Array.of(0, 1), [2]);
    expect(() => gatherRows(src, idx, { out: Tensor.zeros([2, 4], 'bf16', cpu()) })).toThrow(/\[2, 4\].*\[2, 3\]/);
    expect(() => gatherRows(src, idx, { out: Tensor.zeros([2, 3], 'f16', cpu()) })).toThrow(DTypeMismatchError);
    expect(() => gatherRows(src, tensorOf('i32', Int32Array.of(0, 1), [1, 2]))).toThrow(/rank 1/);
    expect(() => scatterRows(Tensor.zeros([2, 3], 'bf16', cpu()), idx, Tensor.zeros([5, 4], 'bf16', cpu()))).toThrow(ShapeMismatchError);
    expect(() => scatterRows(Tensor.zeros([2, 3], 'bf16', cpu()), idx, Tensor.zeros([5, 4], 'bf16', cpu()))).toThrow(/src \[2, 3\] and dst \[5, 4\]/);
    expect(() => scatterRows(Tensor.zeros([3, 3], 'bf16', cpu()), idx, Tensor.zeros([5, 3], 'bf16', cpu()))).toThrow(/idx \[2\].*src \[3, 3\]/);
    expect(() => scatterRows(Tensor.zeros([2, 3], 'bf16', cpu()), idx, Tensor.zeros([5, 3], 'f16', cpu()))).toThrow(DTypeMismatchError);
    expect(() => scatterRows(Tensor.zeros([2, 3], 'bf16', cpu()), idx, Tensor.zeros([5, 3], 'f16', cpu()))).toThrow(/\[5, 3\] f16.*\[2, 3\] bf16/);
    expect(() => scatterRows(Tensor.zeros([2, 3], 'bf16', cpu()), Tensor.zeros([2], 'f32', cpu()), Tensor.zeros([5, 3], 'bf16', cpu()))).toThrow(DTypeMismatchError);
    // Natively: a dst that overlaps src is refused.
    const big = Tensor.zeros([6, 3], 'bf16', cpu());
    expect(() => cpu().binding.scatterRows(big.rows(0, 2).native, idx.native, big.rows(1, 5).native)).toThrow(/overlaps/);
    expect(() => cpu().binding.scatterRows(src.native, idx.native, Tensor.zeros([5, 2], 'bf16', cpu()).native)).toThrow(/do not fit/);
  });
});
