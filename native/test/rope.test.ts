import { describe, expect, it } from 'vitest';
import { DTypeMismatchError, InvalidArgumentError, rope, ShapeMismatchError, Tensor } from '../src/index.js';
import { cpu, expectBitwiseEqual, expectClose, f32, forEachIsa, randomFloats, randomInts, tensorF32, withThreads } from './helpers.js';

// Tolerance against the all-double reference kernel, for |x| <= 1: the fast path's cos/sin come from a float
// sincos of a double-reduced angle (error <= ~2e-7), then one f32 fma pair per element. Measured max 2.7e-7
// absolute, at positions up to 2e9. atol 1e-6 (rtol is meaningless near 0 crossings).
const ATOL = 1e-6;

function positionsTensor(values: ArrayLike<number>): Tensor {
  return Tensor.from(Int32Array.from(values), [values.length], { dtype: 'i32', backend: cpu() });
}

/** Applies rope to a fresh copy of data (fast or reference) and returns the result. */
function roped(data: Float32Array, shape: [number, number, number], pos: Tensor, opts: { rotDim?: number; base?: number; reference?: boolean } = {}): Float32Array {
  const x = tensorF32(data, shape);
  expect(rope(x, pos, opts)).toBe(x);
  return f32(x);
}

/** Plain JS double version in HF's rotate_half formulation: x * cos + rotate_half(x) * sin. */
function jsRope(data: Float32Array, [tokens, heads, headDim]: [number, number, number], pos: ArrayLike<number>, rotDim: number, base: number): Float64Array {
  const y = Float64Array.from(data);
  const half = rotDim / 2;
  for (let t = 0; t < tokens; t++) {
    for (let h = 0; h < heads; h++) {
      const o = (t * heads + h) * headDim;
      for (let i = 0; i < half; i++) {
        const angle = pos[t]! * base ** (-(2 * i) / rotDim);
        const [a, b] = [data[o + i]!, data[o + i + half]!];
        y[o + i] = a * Math.cos(angle) + -b * Math.sin(angle);
        y[o + i + half] = b * Math.cos(angle) + a * Math.sin(angle);
      }
    }
  }
  return y;
}

describe('rope', () => {
  it('matches the double reference on every ISA for odd shapes, partial rotary and large positions', () => {
    // half = rotDim/2 straddles the 8 and 16 lane widths.
    const halves = [1, 4, 7, 8, 9, 16, 17, 32, 64];
    forEachIsa((isa) => {
      for (const half of halves) {
        for (const tokens of [0, 1, 3, 64]) {
          for (const heads of [1, 3]) {
            const headDim = 2 * half + (half % 2 === 1 ? 2 : 0); // odd halves also get unrotated dims
            const shape: [number, number, number] = [tokens, heads, headDim];
            const data = randomFloats(tokens * heads * headDim, tokens * 1000 + half * 10 + heads, -1, 1);
            const pos = positionsTensor(randomInts(tokens, half + tokens, -100, 1_000_000));
            const label = `${isa} [${tokens}, ${heads}, ${headDim}] rotDim=${2 * half}`;
            const opts = { rotDim: 2 * half };
            expectClose(roped(data, shape, pos, opts), roped(data, shape, pos, { ...opts, reference: true }), 0, ATOL, label);
          }
        }
      }
      // Llama 3's base and positions near the i32 limit.
      const shape: [number, number, number] = [16, 2, 128];
      const data = randomFloats(16 * 2 * 128, 7);
      const pos = positionsTensor(randomInts(16, 8, 2_000_000_000, 2_147_483_647));
      expectClose(roped(data, shape, pos, { base: 500000 }), roped(data, shape, pos, { base: 500000, reference: true }), 0, ATOL, `${isa} huge pos`);
    });
  });

  it('reference kernel agrees with plain JS doubles in the HF rotate_half formulation', () => {
    const shape: [number, number, number] = [5, 2, 12];
    const data = randomFloats(5 * 2 * 12, 11);
    const posValues = [0, 1, 7, 300, 4095];
    const ref = roped(data, shape, positionsTensor(posValues), { rotDim: 8, reference: true });
    // One f32 rounding of a double result (the f32 base is exact for 10000).
    expectClose(ref, jsRope(data, shape, posValues, 8, 10000), 6e-8, 1e-7, 'ref vs js');
  });

  it('is the identity at position 0 and leaves dims past rotDim untouched', () => {
    const shape: [number, number, number] = [2, 3, 20];
    const data = randomFloats(2 * 3 * 20, 21);
    forEachIsa((isa) => {
      expectBitwiseEqual(roped(data, shape, positionsTensor([0, 0])), data, `${isa} pos 0`);
      const y = roped(data, shape, positionsTensor([5, 9]), { rotDim: 12 });
      for (let row = 0; row < 6; row++) {
        expectBitwiseEqual(y.subarray(row * 20 + 12, row * 20 + 20), data.subarray(row * 20 + 12, row * 20 + 20), `${isa} tail dims`);
        expect(y[row * 20]).not.toBe(data[row * 20]);
      }
    });
  });

  it('preserves the norm of every rotated pair', () => {
    const [tokens, heads, headDim] = [8, 2, 64];
    const data = randomFloats(tokens * heads * headDim, 31);
    const pos = positionsTensor(randomInts(tokens, 32, 0, 100_000));
    forEachIsa((isa) => {
      const y = roped(data, [tokens, heads, headDim], pos);
      for (let row = 0; row < tokens * heads; row++) {
        for (let i = 0; i < headDim / 2; i++) {
          const [a, b] = [row * headDim + i, row * headDim + i + headDim / 2];
          const before = Math.hypot(data[a]!, data[b]!);
          const after = Math.hypot(y[a]!, y[b]!);
          expect(Math.abs(after - before), `${isa} pair ${row}/${i}`).toBeLessThan(1e-6);
        }
      }
    });
  });

  it('encodes relative position: dot(rope(q, p), rope(k, p2)) depends only on p - p2', () => {
    const headDim = 64;
    const q = randomFloats(headDim, 41);
    const k = randomFloats(headDim, 42);
    const dotAt = (p: number, p2: number): number => {
      const rq = roped(q, [1, 1, headDim], positionsTensor([p]));
      const rk = roped(k, [1, 1, headDim], positionsTensor([p2]));
      let s = 0;
      for (let i = 0; i < headDim; i++) s += rq[i]! * rk[i]!;
      return s;
    };
    forEachIsa((isa) => {
      const base = dotAt(7, 3);
      for (const shift of [1, 100, 5000, 123_456]) {
        // |q|,|k| ~ sqrt(64/3): the dot has magnitude ~ 20, so f32 rotation errors give ~1e-5.
        expect(Math.abs(dotAt(7 + shift, 3 + shift) - base), `${isa} shift ${shift}`).toBeLessThan(5e-5);
      }
      expect(Math.abs(dotAt(8, 3) - base), `${isa} different offset`).toBeGreaterThan(1e-3);
    });
  });

  it('does nothing on empty tensors and with rotDim 0', () => {
    forEachIsa(() => {
      for (const shape of [[0, 2, 8], [2, 0, 8], [2, 3, 0]] as [number, number, number][]) {
        const x = Tensor.zeros(shape, 'f32', cpu());
        expect(rope(x, positionsTensor(Array.from({ length: shape[0] }, (_, i) => i + 1))).shape).toEqual(shape);
      }
      const data = randomFloats(2 * 2 * 6, 61);
      expectBitwiseEqual(roped(data, [2, 2, 6], positionsTensor([3, 4]), { rotDim: 0 }), data, 'rotDim 0');
    });
  });

  it('is bitwise identical on 1 and 2 threads', () => {
    const shape: [number, number, number] = [64, 4, 64];
    const data = randomFloats(64 * 4 * 64, 51);
    const pos = positionsTensor(randomInts(64, 52, 0, 8192));
    forEachIsa((isa) => {
      const one = withThreads(1, () => roped(data, shape, pos));
      const two = withThreads(2, () => roped(data, shape, pos));
      expectBitwiseEqual(one, two, `${isa} rope threads`);
    });
  });

  it('rejects bad shapes, dtypes and options in TS, naming the shapes', () => {
    const x = Tensor.zeros([4, 2, 8], 'f32', cpu());
    expect(() => rope(x, positionsTensor([0, 1, 2]))).toThrow(ShapeMismatchError);
    expect(() => rope(x, positionsTensor([0, 1, 2]))).toThrow(/positions \[3\].*x \[4, 2, 8\]/);
    expect(() => rope(Tensor.zeros([4, 8], 'f32', cpu()), positionsTensor([0, 1, 2, 3]))).toThrow(/rank 3.*\[4, 8\]/);
    expect(() => rope(Tensor.zeros([1, 1, 7], 'f32', cpu()), positionsTensor([0]))).toThrow(/odd head dimension/);
    expect(() => rope(x, Tensor.zeros([4], 'f32', cpu()))).toThrow(DTypeMismatchError);
    expect(() => rope(Tensor.zeros([4, 2, 8], 'f16', cpu()), positionsTensor([0, 1, 2, 3]))).toThrow(DTypeMismatchError);
    for (const rotDim of [3, 10, -2, 2.5]) {
      expect(() => rope(x, positionsTensor([0, 1, 2, 3]), { rotDim })).toThrow(InvalidArgumentError);
    }
    expect(() => rope(x, positionsTensor([0, 1, 2, 3]), { base: 0 })).toThrow(InvalidArgumentError);
  });

  it('native binding validates a bad direct call instead of crashing', () => {
    const b = cpu().binding;
    const x = Tensor.zeros([4, 2, 8], 'f32', cpu());
    expect(() => b.rope(x.native, positionsTensor([0, 1]).native, { rotDim: 8, base: 10000 })).toThrow(/positions \[2\].*\[4, 2, 8\]/);
    expect(() => b.rope(x.native, positionsTensor([0, 1, 2, 3]).native, { rotDim: 9, base: 10000 })).toThrow(/rotDim/);
    expect(() => b.rope(x.native, positionsTensor([0, 1, 2, 3]).native, { rotDim: 8, base: -1 })).toThrow(/base/);
    expect(() => b.rope(x.native, x.native, { rotDim: 8, base: 10000 })).toThrow(/positions must be i32/);
  });
});
