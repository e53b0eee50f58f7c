/**
 * Q8_0 int8 weights (llama.cpp's block layout) and the decode GEMM over them.
 *
 * - Quantization is checked byte for byte against a TS model of the rule (d = the smallest f16 >= max|v| / 127,
 *   q = round-to-nearest-even(v / d)), and the round trip against its bound: |v - q·d| <= d/2 for every weight.
 * - The GEMM is checked against a float64 TS model of the whole op (the activations quantized by the same rule as the
 *   kernel: f32 scale max|x| / 127, q = rne(x · 127/max|x|)); the integer block dots are exact, so the only error is
 *   the f32 summation: |got - want| <= 2^-22 · (nb + 8) · T with T = sum over blocks of |dw·dx| · sum |qw·qx|
 *   (a worst-case bound for the chain of nb f32 steps per output and a rounded scale product).
 * - Every fast body (scalar, avx2, avx2-vnni, avx512, avx512-vnni: those this CPU has) gives the same bits as the
 *   scalar body, on 1 and 2 threads, for m = 0..32, ragged n and k = 0; k not a multiple of 32 is refused; a row
 *   gets the same bits alone (the GEMV path) as in a batch (the packed column-lane tiles).
 * - Accuracy of the int8 product against the float64 product of the unquantized f32 operands is measured and printed
 *   (normwise relative error), and bounded loosely (< 2e-2) so a broken scale shows.
 */
import { describe, expect, it } from 'vitest';
import {
  cast,
  DTypeMismatchError,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  InvalidArgumentError,
  q8Dequantize,
  q8Gemm,
  q8Kernels,
  q8Linear,
  q8Quantize,
  Q8_BLOCK_BYTES,
  ShapeMismatchError,
  Tensor,
  UnsupportedOpError,
} from '../src/index.js';
import { cpu, expectBitwiseEqual, f32, forEachIsa, randomFloats, tensorF32, withThreads } from './helpers.js';

const F16_MAX = 65504;

/** Round half to even of a double. */
function rne(x: number): number {
  const r = Math.round(x); // half up
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** The smallest f16 value >= t (t a positive f32 value), as bits. */
function f16Up(t: number): number {
  let h = f32ToF16Bits(t);
  if (f16BitsToF32(h) < t) h += 1;
  return h;
}

interface QBlocks {
  d: Float32Array; // [n * nb]
  q: Int8Array; // [n * nb * 32]
}

/** The TS model of weight quantization (v holds f32 values). */
function quantizeModel(v: Float32Array, n: number, k: number): QBlocks {
  const nb = k / 32;
  const d = new Float32Array(n * nb);
  const q = new Int8Array(n * k);
  for (let blk = 0; blk < n * nb; blk++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(v[blk * 32 + i]!));
    if (amax === 0) continue;
    const dv = f16BitsToF32(f16Up(Math.fround(amax / 127)));
    d[blk] = dv;
    for (let i = 0; i < 32; i++) q[blk * 32 + i] = Math.max(-127, Math.min(127, rne(Math.fround(v[blk * 32 + i]! / dv))));
  }
  return { d, q };
}

/** Parses a Q8_0 byte tensor. */
function parseQ8(bytes: Uint8Array, n: number, k: number): QBlocks {
  const nb = k / 32;
  const d = new Float32Array(n * nb);
  const q = new Int8Array(n * k);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  for (let blk = 0; blk < n * nb; blk++) {
    d[blk] = f16BitsToF32(view.getUint16(blk * Q8_BLOCK_BYTES, true));
    for (let i = 0; i < 32; i++) q[blk * 32 + i] = view.getInt8(blk * Q8_BLOCK_BYTES + 2 + i);
  }
  return { d, q };
}

/** The activation quantization of the kernels (f32 scales; NaN scale for a non-finite block). */
function quantizeActModel(x: Float32Array, m: number, k: number): QBlocks {
  const nb = k / 32;
  const d = new Float32Array(m * nb);
  const q = new Int8Array(m * k);
  for (let blk = 0; blk < m * nb; blk++) {
    let amax = 0;
    let bad = false;
    for (let i = 0; i < 32; i++) {
      const a = Math.abs(x[blk * 32 + i]!);
      if (!Number.isFinite(a)) bad = true;
      else amax = Math.max(amax, a);
    }
    if (bad) {
      d[blk] = NaN;
      continue;
    }
    d[blk] = Math.fround(amax / 127);
    const id = amax > 0 ? Math.fround(127 / amax) : 0;
    for (let i = 0; i < 32; i++) q[blk * 32 + i] = rne(Math.fround(x[blk * 32 + i]! * id));
  }
  return { d, q };
}

/** float64 model of q8Gemm and the error scale T per output. */
function gemmModel(x: Float32Array, m: number, k: number, w: QBlocks, n: number, bias?: Float32Array): { y: Float64Array; t: Float64Array } {
  const nb = k / 32;
  const a = quantizeActModel(x, m, k);
  const y = new Float64Array(m * n);
  const t = new Float64Array(m * n);
  for (let r = 0; r < m; r++) {
    for (let c = 0; c < n; c++) {
      let acc = 0;
      let mag = 0;
      for (let b = 0; b < nb; b++) {
        let isum = 0;
        let iabs = 0;
        for (let i = 0; i < 32; i++) {
          const p = w.q[(c * nb + b) * 32 + i]! * a.q[(r * nb + b) * 32 + i]!;
          isum += p;
          iabs += Math.abs(p);
        }
        const s = w.d[c * nb + b]! * a.d[r * nb + b]!;
        acc += s * isum;
        mag += Math.abs(s) * iabs;
      }
      y[r * n + c] = acc + (bias ? bias[c]! : 0);
      t[r * n + c] = mag;
    }
  }
  return { y, t };
}

function expectWithinModel(got: Float32Array, model: { y: Float64Array; t: Float64Array }, nb: number, label: string): void {
  expect(got.length, label).toBe(model.y.length);
  for (let i = 0; i < got.length; i++) {
    const want = model.y[i]!;
    if (Number.isNaN(want)) {
      if (!Number.isNaN(got[i]!)) expect.fail(`${label}: output ${i} = ${got[i]}, want NaN`);
      continue;
    }
    const tol = 2 ** -22 * (nb + 8) * model.t[i]! + 1e-30;
    const err = Math.abs(got[i]! - want);
    if (!(err <= tol)) expect.fail(`${label}: output ${i} = ${got[i]}, want ${want} (|err| ${err} > tol ${tol})`);
  }
}

/** Random weights whose blocks span several magnitudes (scale per block from 1e-3 to 10), with a zero block. */
function weights(n: number, k: number, seed: number): Float32Array {
  const v = randomFloats(n * k, seed);
  const mags = randomFloats(Math.max(1, (n * k) / 32), seed + 7, -3, 1);
  for (let i = 0; i < v.length; i++) v[i] = Math.fround(v[i]! * 10 ** mags[Math.floor(i / 32)]!);
  if (v.length >= 64) v.fill(0, 32, 64);
  return v;
}

function quantized(n: number, k: number, seed: number): { v: Float32Array; wq: Tensor; blocks: QBlocks } {
  const v = weights(n, k, seed);
  const wt = tensorF32(v, [n, k]);
  const wq = q8Quantize(wt);
  wt.dispose();
  return { v, wq, blocks: parseQ8(wq.toArray() as Uint8Array, n, k) };
}

describe('q8Quantize / q8Dequantize', () => {
  it('writes llama.cpp Q8_0 blocks byte for byte as the model rule, with the round trip within half a step', () => {
    for (const [n, k] of [[1, 32], [7, 96], [33, 320], [0, 64], [5, 0]] as const) {
      const v = weights(n, k, 11 + n + k);
      const wq = q8Quantize(tensorF32(v, [n, k]));
      expect(wq.dtype).toBe('u8');
      expect(wq.shape).toEqual([n, (k / 32) * 34]);
      const got = parseQ8(wq.toArray() as Uint8Array, n, k);
      const want = quantizeModel(v, n, k);
      expect(Array.from(got.q)).toEqual(Array.from(want.q));
      expect(Array.from(got.d)).toEqual(Array.from(want.d));
      const deq = f32(q8Dequantize(wq));
      for (let i = 0; i < n * k; i++) {
        const d = got.d[Math.floor(i / 32)]!;
        expect(Math.abs(got.q[i]!)).toBeLessThanOrEqual(127);
        expect(deq[i]).toBe(got.q[i]! * d); // exact
        if (!(Math.abs(v[i]! - deq[i]!) <= d / 2)) expect.fail(`round trip ${i}: ${v[i]} -> ${deq[i]} (d ${d})`);
      }
    }
  });

  it('quantizes f16 and bf16 weights as their f32 values', () => {
    const n = 6, k = 64;
    const v = weights(n, k, 5);
    const h16 = Uint16Array.from(v, (x) => f32ToF16Bits(x));
    const b16 = Uint16Array.from(v, (x) => f32ToBf16Bits(x));
    for (const [bits, dtype] of [[h16, 'f16'], [b16, 'bf16']] as const) {
      const t = Tensor.from(bits, [n, k], { dtype, backend: cpu() });
      const asF32 = f32(q8Dequantize(q8Quantize(t))); // through the kernel's conversion
      const wantQ = q8Quantize(cast(t, 'f32'));
      expect(Array.from(asF32)).toEqual(Array.from(f32(q8Dequantize(wantQ))));
    }
  });

  it('refuses ragged k, wrong dtypes, and blocks no f16 scale can hold', () => {
    expect(() => q8Quantize(tensorF32(new Float32Array(2 * 33), [2, 33]))).toThrow(ShapeMismatchError);
    expect(() => q8Quantize(Tensor.from(new Int32Array(64), [2, 32], { backend: cpu() }))).toThrow(DTypeMismatchError);
    const nan = new Float32Array(64);
    nan[40] = NaN;
    expect(() => q8Quantize(tensorF32(nan, [2, 32]))).toThrow(InvalidArgumentError);
    const inf = new Float32Array(64);
    inf[3] = -Infinity;
    expect(() => q8Quantize(tensorF32(inf, [2, 32]))).toThrow(InvalidArgumentError);
    const big = new Float32Array(32);
    big[0] = F16_MAX * 128;
    expect(() => q8Quantize(tensorF32(big, [1, 32]))).toThrow(/65504/);
    big[0] = F16_MAX * 127; // the largest scale: still representable
    expect(() => q8Quantize(tensorF32(big, [1, 32]))).not.toThrow();
    expect(() => q8Dequantize(Tensor.from(new Uint8Array(35), [1, 35], { backend: cpu() }))).toThrow(ShapeMismatchError);
  });
});

describe('q8Gemm', () => {
  const { available } = q8Kernels();

  it('lists the kernels this CPU runs, scalar and auto always', () => {
    expect(available[0]).toBe('scalar');
    expect(available).toContain(q8Kernels().auto);
    for (const k of ['avx2', 'avx2-vnni', 'avx512', 'avx512-vnni'] as const) {
      if (available.includes(k)) continue;
      const x = tensorF32(new Float32Array(32), [1, 32]);
      const w = q8Quantize(tensorF32(new Float32Array(32), [1, 32]));
      expect(() => q8Gemm(x, w, { kernel: k })).toThrow(UnsupportedOpError);
    }
  });

  function checkShape(m: number, n: number, k: number, seed: number, withBias: boolean): void {
    const { wq, blocks } = quantized(n, k, seed);
    const x = randomFloats(m * k, seed + 1, -2, 2);
    const bias = withBias ? randomFloats(n, seed + 2) : undefined;
    const xt = tensorF32(x, [m, k]);
    const bt = bias ? tensorF32(bias, [n]) : undefined;
    const model = gemmModel(x, m, k, blocks, n, bias);
    const label = `m ${m} n ${n} k ${k}${withBias ? ' bias' : ''}`;
    const opts = bt ? { bias: bt } : {};
    expectWithinModel(f32(q8Gemm(xt, wq, { ...opts, reference: true })), model, k / 32, `${label} reference`);
    const scalar = f32(withThreads(1, () => q8Gemm(xt, wq, { ...opts, kernel: 'scalar' })));
    expectWithinModel(scalar, model, k / 32, `${label} scalar`);
    for (const kernel of available) {
      const one = f32(withThreads(1, () => q8Gemm(xt, wq, { ...opts, kernel })));
      const two = f32(withThreads(2, () => q8Gemm(xt, wq, { ...opts, kernel })));
      expectBitwiseEqual(one, scalar, `${label} ${kernel} vs scalar`);
      expectBitwiseEqual(two, scalar, `${label} ${kernel} on 2 threads`);
    }
  }

  it('every kernel gives the scalar body\'s bits, within the f32-summation bound of the float64 model, m = 0..32', () => {
    for (let m = 0; m <= 32; m++) checkShape(m, 37, 96, 100 + m, m % 3 === 0);
  });

  it('handles large and ragged n, long k, and empty shapes', () => {
    // [1, 45, 800] and [6, 45, 800]: an odd block count (the GEMV's single last block; packed pieces of 16 + 9 blocks),
    // a last column group of 13 and a last row tile of 2.
    for (const [m, n, k] of [[1, 300, 1024], [16, 129, 512], [32, 70, 2048], [5, 1, 32], [3, 0, 64], [0, 5, 64], [4, 9, 0], [2, 2000, 64], [1, 45, 800], [6, 45, 800]] as const) {
      checkShape(m, n, k, 7 * m + n + k, true);
    }
    // k = 0: y is the bias (or 0), whatever the kernel
    const y = f32(q8Gemm(tensorF32(new Float32Array(0), [3, 0]), Tensor.empty([4, 0], 'u8', cpu()), { bias: tensorF32(Float32Array.of(1, 2, 3, 4), [4]) }));
    expect(Array.from(y)).toEqual([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4]);
  });

  it("gives a row the same bits alone (the GEMV path) as among 23 others (the packed tiles), on every kernel", () => {
    const m = 24, n = 70, k = 1056;
    const { wq } = quantized(n, k, 91);
    const x = randomFloats(m * k, 92, -2, 2);
    for (const kernel of available) {
      const all = f32(q8Gemm(tensorF32(x, [m, k]), wq, { kernel }));
      for (const r of [0, 5, 23]) {
        const alone = f32(q8Gemm(tensorF32(x.slice(r * k, (r + 1) * k), [1, k]), wq, { kernel }));
        expectBitwiseEqual(alone, all.slice(r * n, (r + 1) * n), `${kernel} row ${r}`);
      }
    }
  });

  it('auto follows the active ISA (every ISA this CPU has) and gives the same bits', () => {
    const { wq } = quantized(40, 256, 3);
    const x = tensorF32(randomFloats(8 * 256, 4), [8, 256]);
    const want = f32(q8Gemm(x, wq, { kernel: 'scalar' }));
    forEachIsa((isa) => {
      const picked = q8Kernels().auto;
      expect(picked.startsWith(isa === 'scalar' ? 'scalar' : isa)).toBe(true);
      expectBitwiseEqual(f32(q8Gemm(x, wq)), want, `auto under ${isa} (${picked})`);
    });
  });

  it('reads foreign Q8_0 bytes exactly, -128 weights included (llama.cpp never writes them; the kernels still agree)', () => {
    const n = 6, k = 96, m = 3;
    const bytes = new Uint8Array(n * (k / 32) * Q8_BLOCK_BYTES);
    const view = new DataView(bytes.buffer);
    for (let blk = 0; blk < n * (k / 32); blk++) {
      view.setUint16(blk * Q8_BLOCK_BYTES, f32ToF16Bits(0.01 * (1 + (blk % 5))), true);
      for (let i = 0; i < 32; i++) view.setInt8(blk * Q8_BLOCK_BYTES + 2 + i, i % 3 === 0 ? -128 : ((blk * 37 + i * 11) % 255) - 127);
    }
    const wq = Tensor.from(bytes, [n, (k / 32) * Q8_BLOCK_BYTES], { dtype: 'u8', backend: cpu() });
    const x = randomFloats(m * k, 77, -3, 3);
    const xt = tensorF32(x, [m, k]);
    const model = gemmModel(x, m, k, parseQ8(bytes, n, k), n);
    const scalar = f32(q8Gemm(xt, wq, { kernel: 'scalar' }));
    expectWithinModel(scalar, model, k / 32, 'scalar with -128 weights');
    for (const kernel of available) expectBitwiseEqual(f32(q8Gemm(xt, wq, { kernel })), scalar, `${kernel} with -128 weights`);
  });

  it('propagates a NaN or infinite activation to the outputs of its row', () => {
    const { wq } = quantized(5, 64, 9);
    const x = randomFloats(3 * 64, 10);
    x[64 + 40] = NaN;
    x[128 + 3] = Infinity;
    for (const kernel of available) {
      const y = f32(q8Gemm(tensorF32(x, [3, 64]), wq, { kernel }));
      for (let c = 0; c < 5; c++) {
        expect(Number.isFinite(y[c]!)).toBe(true);
        expect(Number.isNaN(y[5 + c]!)).toBe(true);
        expect(Number.isNaN(y[10 + c]!)).toBe(true);
      }
    }
  });

  it('refuses mismatched shapes and dtypes with typed errors', () => {
    const { wq } = quantized(4, 64, 1);
    expect(() => q8Gemm(tensorF32(new Float32Array(2 * 32), [2, 32]), wq)).toThrow(ShapeMismatchError);
    expect(() => q8Gemm(tensorF32(new Float32Array(2 * 64), [2, 64]), Tensor.empty([4, 35], 'u8', cpu()))).toThrow(ShapeMismatchError);
    expect(() => q8Gemm(tensorF32(new Float32Array(2 * 64), [2, 64]), tensorF32(new Float32Array(4 * 64), [4, 64]))).toThrow(DTypeMismatchError);
    expect(() => q8Gemm(tensorF32(new Float32Array(2 * 64), [2, 64]), wq, { bias: tensorF32(new Float32Array(3), [3]) })).toThrow(ShapeMismatchError);
    expect(() => q8Gemm(tensorF32(new Float32Array(2 * 64), [2, 64]), wq, { kernel: 'avx9' as never })).toThrow(InvalidArgumentError);
  });

  it('q8Linear flattens leading dimensions like linear', () => {
    const { wq } = quantized(6, 64, 2);
    const x = randomFloats(2 * 3 * 64, 3);
    const y3 = q8Linear(tensorF32(x, [2, 3, 64]), wq);
    expect(y3.shape).toEqual([2, 3, 6]);
    expectBitwiseEqual(f32(y3), f32(q8Gemm(tensorF32(x, [6, 64]), wq)), 'q8Linear');
  });

  it('accuracy against the float64 product of the f32 operands (stated, loosely bounded)', () => {
    const m = 4, n = 256, k = 1024;
    const v = randomFloats(n * k, 21, -0.05, 0.05); // Linear-like weights
    const x = randomFloats(m * k, 22, -1, 1);
    const wq = q8Quantize(tensorF32(v, [n, k]));
    const y = f32(q8Gemm(tensorF32(x, [m, k]), wq));
    let num = 0, den = 0, maxAbs = 0;
    for (let r = 0; r < m; r++) {
      for (let c = 0; c < n; c++) {
        let s = 0;
        for (let i = 0; i < k; i++) s += x[r * k + i]! * v[c * k + i]!;
        const e = y[r * n + c]! - s;
        num += e * e;
        den += s * s;
        maxAbs = Math.max(maxAbs, Math.abs(e));
      }
    }
    const rel = Math.sqrt(num / den);
    console.log(`q8 accuracy (m ${m}, n ${n}, k ${k}, uniform weights/activations): normwise relative error ${rel.toExponential(2)}, max |err| ${maxAbs.toExponential(2)}`);
    expect(rel).toBeLessThan(2e-2);
    expect(rel).toBeGreaterThan(0); // it is a quantized product
  });
});
