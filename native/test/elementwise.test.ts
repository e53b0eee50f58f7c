import { describe, expect, it } from 'vitest';
import { add, geluErf, geluTanh, mul, scale, ShapeMismatchError, silu, siluMul, Tensor } from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, tensorF32, withThreads } from './helpers.js';

// Sizes straddle the SIMD widths (8 and 16 lanes) and the 16k-element task grain.
const sizes = [0, 1, 7, 8, 15, 16, 17, 33, 1000, 40_003];

describe('elementwise kernels against the scalar reference', () => {
  it('add and mul, same shape and row broadcast, on every ISA', () => {
    forEachIsa((isa) => {
      for (const n of sizes) {
        const a = tensorF32(randomFloats(n, n + 1), [n]);
        const b = tensorF32(randomFloats(n, n + 2), [n]);
        for (const op of [add, mul]) {
          expectBitwiseEqual(f32(op(a, b)), f32(op(a, b, { reference: true })), `${isa} ${op.name} n=${n}`);
        }
      }
      for (const [rows, cols] of [[3, 5], [1, 17], [0, 4], [9, 33]] as const) {
        const a = tensorF32(randomFloats(rows * cols, 3), [rows, cols]);
        const row = tensorF32(randomFloats(cols, 4), [cols]);
        const want = f32(a).map((x, i) => x + f32(row)[i % cols]!);
        expectBitwiseEqual(f32(add(a, row)), Float32Array.from(want), `${isa} broadcast ${rows}x${cols}`);
      }
    });
  });

  // The SIMD erfc (Abramowitz & Stegun 7.1.26) has |error| < 1.5e-7, so GELU's absolute error is below
  // 0.75e-7 * |x| (6e-7 on [-8, 8]): hence atol 1e-6 beside rtol 2e-6.
  it('activations match a double-precision reference (rtol 2e-6, atol 1e-6)', () => {
    forEachIsa((isa) => {
      for (const n of sizes) {
        const x = tensorF32(randomFloats(n, 10 + n, -8, 8), [n]);
        for (const act of [geluErf, geluTanh, silu]) {
          expectClose(f32(act(x)), f32(act(x, { reference: true })), 2e-6, 1e-6, `${isa} ${act.name} n=${n}`);
        }
        const up = tensorF32(randomFloats(n, 20 + n), [n]);
        expectClose(f32(siluMul(x, up)), f32(siluMul(x, up, { reference: true })), 2e-6, 1e-6, `${isa} siluMul n=${n}`);
      }
    });
  });

  it('GELU and SiLU agree with closed forms at known points', () => {
    const x = tensorF32(new Float32Array([0, 1, -1, 3]), [4]);
    expectClose(f32(geluErf(x)), [0, 0.8413447460685429, -0.15865525393145707, 2.995950245902112], 1e-6, 1e-7, 'gelu');
    expectClose(f32(silu(x)), [0, 0.7310585786300049, -0.2689414213699951, 2.8577223804673], 1e-6, 1e-7, 'silu');
  });

  it('scale writes in place when out aliases x', () => {
    const x = tensorF32(randomFloats(100, 5), [10, 10]);
    const before = f32(x);
    scale(x, 0.5, { out: x });
    expectBitwiseEqual(f32(x), before.map((v) => v * 0.5), 'scale');
  });

  it('gives bitwise-identical results on 1 and 2 threads', () => {
    const x = tensorF32(randomFloats(70_001, 6, -5, 5), [70_001]);
    const one = withThreads(1, () => f32(geluErf(x)));
    const two = withThreads(2, () => f32(geluErf(x)));
    expectBitwiseEqual(one, two, 'gelu threads');
  });

  it('rejects mismatched shapes in TS, naming both shapes', () => {
    const a = Tensor.zeros([2, 3], 'f32', cpu());
    const b = Tensor.zeros([4], 'f32', cpu());
    expect(() => add(a, b)).toThrow(ShapeMismatchError);
    expect(() => add(a, b)).toThrow(/\[4\].*\[2, 3\]/);
    expect(() => siluMul(a, Tensor.zeros([3, 2], 'f32', cpu()))).toThrow(/\[2, 3\].*\[3, 2\]/);
  });
});
