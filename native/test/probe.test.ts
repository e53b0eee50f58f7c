import { describe, expect, it } from 'vitest';
import { DTypeMismatchError, fmaPeakProbe, InvalidArgumentError, readSumProbe, ShapeMismatchError, streamTriad, Tensor } from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, tensorF32, withThreads } from './helpers.js';

// Sizes straddle the SIMD widths and unroll steps (8, 16, 32, 64 floats) and the 64 Ki-float task grain
// (3 * 65536 + 5 splits into several chunks with a ragged last one).
const sizes = [0, 1, 7, 8, 15, 16, 17, 31, 33, 63, 65, 1000, 3 * 65536 + 5];

describe('streamTriad', () => {
  // The SIMD paths round once (fused multiply-add), the scalar path twice (multiply, then add), so the error
  // against the double-precision b + s*c is at most 2^-24 (|s*c| + |a|) <= 9e-8 + 6e-8 |a| for |s*c| <= 1.5:
  // atol 1e-7 and rtol 6e-7.
  it('matches a double-precision a = b + s*c on every ISA', () => {
    forEachIsa((isa) => {
      for (const n of sizes) {
        const bData = randomFloats(n, 100 + n);
        const cData = randomFloats(n, 200 + n);
        const a = Tensor.empty([n]);
        streamTriad(a, tensorF32(bData, [n]), tensorF32(cData, [n]), 1.5);
        const want = Array.from(bData, (b, i) => b + 1.5 * cData[i]!);
        expectClose(f32(a), want, 6e-7, 1e-7, `${isa} n=${n}`);
      }
    });
  });

  it('is bitwise identical on 1 and 2 threads, and may write in place', () => {
    const n = 5 * 65536 + 3;
    const b = tensorF32(randomFloats(n, 1), [n]);
    const c = tensorF32(randomFloats(n, 2), [n]);
    const one = withThreads(1, () => {
      const a = Tensor.empty([n]);
      streamTriad(a, b, c, -0.75);
      return f32(a);
    });
    const two = withThreads(2, () => {
      const a = Tensor.empty([n]);
      streamTriad(a, b, c, -0.75);
      return f32(a);
    });
    expectBitwiseEqual(one, two, 'triad threads');
    streamTriad(b, b, c, -0.75);
    expectBitwiseEqual(f32(b), two, 'triad in place');
  });

  it('rejects mismatched shapes and dtypes before the native call, naming both shapes', () => {
    const a = Tensor.empty([4, 8]);
    const b = Tensor.empty([4, 8]);
    expect(() => streamTriad(a, b, Tensor.empty([8, 4]), 1)).toThrow(ShapeMismatchError);
    expect(() => streamTriad(a, b, Tensor.empty([8, 4]), 1)).toThrow(/\[4, 8\].*\[8, 4\]/);
    expect(() => streamTriad(a, Tensor.empty([4, 8], 'bf16'), b, 1)).toThrow(DTypeMismatchError);
    expect(() => streamTriad(a, b, b, Number.NaN)).toThrow(InvalidArgumentError);
  });

  it('the binding itself rejects bad direct calls instead of crashing', () => {
    const binding = cpu().binding;
    const a = Tensor.empty([16]);
    const short = Tensor.empty([15]);
    expect(() => binding.streamTriad!(a.native, a.native, short.native, 1)).toThrow(/shape/);
    expect(() => binding.streamTriad!(a.native, Tensor.empty([16], 'i32').native, a.native, 1)).toThrow();
    expect(() => binding.streamTriad!(a.native, a.native, a.native, 'x' as unknown as number)).toThrow(/number/);
    expect(() => binding.readSumProbe!(Tensor.empty([4], 'f16').native)).toThrow();
    expect(() => binding.fmaPeakProbe!(-1)).toThrow(/iters/);
    expect(() => binding.fmaPeakProbe!(1.5)).toThrow(/iters/);
  });
});

describe('readSumProbe', () => {
  // Lanes accumulate in f32 over at most 64 Ki / (lanes) elements each before widening to double, so the
  // error is bounded by about n * 2^-24 * max|x| / lanes; rtol 1e-6 of sum |x| covers every size here.
  it('sums like a double-precision loop on every ISA', () => {
    forEachIsa((isa) => {
      for (const n of sizes) {
        const data = randomFloats(n, 300 + n);
        let want = 0;
        let scale = 0;
        for (const v of data) {
          want += v;
          scale += Math.abs(v);
        }
        const got = readSumProbe(tensorF32(data, [n]));
        expect(Math.abs(got - want), `${isa} n=${n}`).toBeLessThanOrEqual(1e-6 * scale + 1e-12);
      }
    });
  });

  it('returns the same sum on 1 and 2 threads', () => {
    const n = 7 * 65536 + 11;
    const x = tensorF32(randomFloats(n, 9), [n]);
    expect(withThreads(2, () => readSumProbe(x))).toBe(withThreads(1, () => readSumProbe(x)));
  });

  it('rejects non-f32 input', () => {
    expect(() => readSumProbe(Tensor.empty([3], 'i32'))).toThrow(DTypeMismatchError);
  });
});

describe('fmaPeakProbe', () => {
  // Flops per round and thread: chains x lanes x 2 (scalar: 32 chains; AVX2: 12 x 8 lanes; AVX-512: 16 x 16).
  const perRound = { scalar: 64, avx2: 192, avx512: 512 } as const;

  it('reports exactly the flops it performed, for each ISA and thread count', () => {
    forEachIsa((isa) => {
      for (const threads of [1, 2]) {
        withThreads(threads, () => {
          // 400 rounds split into 4 tasks of 100 per thread.
          expect(fmaPeakProbe(400), `${isa} ${threads}t`).toBe(400 * perRound[isa] * threads);
          expect(fmaPeakProbe(0)).toBe(0);
        });
      }
    });
  });

  it('validates iters', () => {
    expect(() => fmaPeakProbe(-1)).toThrow(InvalidArgumentError);
    expect(() => fmaPeakProbe(0.5)).toThrow(InvalidArgumentError);
    expect(() => fmaPeakProbe(2 ** 41)).toThrow(InvalidArgumentError);
  });
});
