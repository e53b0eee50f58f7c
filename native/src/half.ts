/**
 * Host-side f16 / bf16 conversions (round to nearest even, NaNs kept quiet, f16 subnormals and overflow to
 * infinity), bit-identical to the native `cast`. For preparing half-precision weights in JS without a native call.
 */

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

function bitsOf(x: number): number {
  f32Scratch[0] = x;
  return u32Scratch[0]!;
}

function floatOf(bits: number): number {
  u32Scratch[0] = bits >>> 0;
  return f32Scratch[0]!;
}

/** bf16 is the top half of an f32: round to nearest even on the low 16 bits, keep NaNs quiet. */
export function f32ToBf16Bits(x: number): number {
  const u = bitsOf(x);
  if ((u & 0x7fffffff) >>> 0 > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}

export function bf16BitsToF32(h: number): number {
  return floatOf((h & 0xffff) << 16);
}

/** IEEE binary16 with round to nearest even, subnormals, overflow to infinity and NaN. */
export function f32ToF16Bits(x: number): number {
  const u = bitsOf(x);
  const sign = (u >>> 16) & 0x8000;
  const a = (u & 0x7fffffff) >>> 0;
  if (a > 0x7f800000) return sign | 0x7e00;
  if (a >= 0x477ff000) return sign | 0x7c00; // rounds up past 65504
  if (a < 0x38800000) {
    // f16 subnormal: value = h * 2^-24, so h = mantissa * 2^(exponent - 126).
    if (a < 0x33000000) return sign; // at most half the smallest subnormal: rounds to zero
    const exp = a >>> 23;
    const mant = (a & 0x7fffff) | 0x800000;
    const shift = 126 - exp;
    let h = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (rem > half || (rem === half && (h & 1) !== 0)) h++;
    return sign | h;
  }
  let h = (a >>> 13) - (112 << 10);
  const rem = a & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) !== 0)) h++;
  return sign | h;
}

export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

export type HalfDtype = 'f16' | 'bf16';

/** Rounds every element to f16 or bf16 bits. */
export function toHalfBits(data: Float32Array, dtype: HalfDtype): Uint16Array {
  const out = new Uint16Array(data.length);
  const conv = dtype === 'f16' ? f32ToF16Bits : f32ToBf16Bits;
  for (let i = 0; i < data.length; i++) out[i] = conv(data[i]!);
  return out;
}

/** The f32 values that f16 / bf16 bits stand for. */
export function fromHalfBits(bits: Uint16Array, dtype: HalfDtype): Float32Array {
  const out = new Float32Array(bits.length);
  const conv = dtype === 'f16' ? f16BitsToF32 : bf16BitsToF32;
  for (let i = 0; i < bits.length; i++) out[i] = conv(bits[i]!);
  return out;
}
