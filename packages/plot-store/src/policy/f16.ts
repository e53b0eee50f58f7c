/**
 * IEEE 754 binary16 ⇄ number, bit-exact: round to nearest, ties to even, with subnormals, ±0, ±∞ and NaN kept.
 * (@tessera/core has no f16 helpers and Node 20 has no Float16Array; these are the scalar reference a native
 * conversion is tested against.)
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The binary16 bits nearest to `x` (rounded through f32 first, as every fp16 store of f32 activations does). */
export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const bits = u32[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  const mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 | (mant >>> 13) : 0);
  const e = exp - 112; // rebias 127 → 15
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    const full = mant | 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rem = full & ((1 << shift) - 1);
    let m = full >>> shift;
    if (rem > half || (rem === half && (m & 1) === 1)) m++;
    return sign | m; // a carry out of the subnormal range lands on the smallest normal, as it should
  }
  let h = sign | (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (h & 1) === 1)) h++; // a carry may reach ∞, as it should
  return h;
}

/** The value of binary16 bits. */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m !== 0 ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1024 + m) * 2 ** (e - 25);
}

/** Converts `src` into `out` (same length) as binary16 bits. */
export function encodeF16(src: ArrayLike<number>, out: Uint16Array = new Uint16Array(src.length)): Uint16Array {
  for (let i = 0; i < src.length; i++) out[i] = f32ToF16Bits(src[i]!);
  return out;
}

/** Converts binary16 bits into numbers. */
export function decodeF16(src: Uint16Array, out: Float32Array = new Float32Array(src.length)): Float32Array {
  for (let i = 0; i < src.length; i++) out[i] = f16BitsToF32(src[i]!);
  return out;
}
