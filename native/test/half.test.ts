import { describe, expect, it } from 'vitest';
import { bf16BitsToF32, cast, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, fromHalfBits, Tensor, toHalfBits } from '../src/index.js';
import { cpu, randomFloats } from './helpers.js';

describe('host bf16 rounding', () => {
  it('rounds to nearest, ties to even', () => {
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
    // 1 + 2^-8 lies halfway between 1 (even mantissa) and 1 + 2^-7: ties go to the even one.
    expect(f32ToBf16Bits(1 + 2 ** -8)).toBe(0x3f80);
    // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
    expect(f32ToBf16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    // Just above halfway rounds up.
    expect(f32ToBf16Bits(1 + 2 ** -8 + 2 ** -20)).toBe(0x3f81);
    expect(f32ToBf16Bits(-2)).toBe(0xc000);
    expect(f32ToBf16Bits(Infinity)).toBe(0x7f80);
    expect(f32ToBf16Bits(-Infinity)).toBe(0xff80);
    expect(Number.isNaN(bf16BitsToF32(f32ToBf16Bits(Number.NaN)))).toBe(true);
    // The largest finite f32 rounds up to infinity in bf16, as IEEE rounding says.
    expect(f32ToBf16Bits(3.4028234663852886e38)).toBe(0x7f80);
  });

  it('the array conversion matches the scalar one and round-trips bf16 values exactly', () => {
    const x = randomFloats(10_000, 7, -100, 100);
    x[0] = Number.NaN;
    x[1] = -0;
    const bits = toHalfBits(x, 'bf16');
    for (let i = 0; i < x.length; i++) expect(bits[i]).toBe(f32ToBf16Bits(x[i]!));
    const widened = fromHalfBits(bits, 'bf16');
    expect(toHalfBits(widened, 'bf16')).toEqual(bits);
    for (let i = 2; i < x.length; i++) expect(Math.abs(widened[i]! - x[i]!)).toBeLessThanOrEqual(Math.abs(x[i]!) * 2 ** -8);
  });
});

describe('host f16/bf16 conversions agree with the native cast', () => {
  it('bit for bit on random values, specials, subnormals and overflow', () => {
    const x = randomFloats(20_000, 11, -70_000, 70_000);
    const specials = [0, -0, 1, -1, 65504, 65520, 1e-8, -6e-8, 2 ** -24, 2 ** -25, 3e38, Infinity, -Infinity, Number.NaN, 1 + 2 ** -11];
    specials.forEach((v, i) => (x[i] = v));
    for (let i = specials.length; i < 2000; i++) x[i] = x[i]! * 1e-9; // f16 subnormal range
    const t = Tensor.from(x, [x.length], { backend: cpu() });
    for (const dtype of ['f16', 'bf16'] as const) {
      const native = cast(t, dtype).toArray() as Uint16Array;
      const host = toHalfBits(x, dtype);
      for (let i = 0; i < x.length; i++) {
        if (Number.isNaN(x[i]!)) expect(Number.isNaN(dtype === 'f16' ? f16BitsToF32(host[i]!) : bf16BitsToF32(host[i]!))).toBe(true);
        else if (host[i] !== native[i]) expect.fail(`${dtype} ${x[i]}: host ${host[i]} vs native ${native[i]}`);
      }
      const widened = fromHalfBits(host, dtype);
      const nativeWide = cast(Tensor.from(host, [host.length], { dtype, backend: cpu() }), 'f32').toArray() as Float32Array;
      for (let i = 0; i < x.length; i++) {
        if (!Number.isNaN(widened[i]!)) expect(widened[i]).toBe(nativeWide[i]);
      }
    }
    expect(f32ToF16Bits(65504)).toBe(0x7bff);
    expect(f32ToBf16Bits(1)).toBe(0x3f80);
  });
});
