/** Benchmark inputs and checks: seeded random data, bf16 rounding, error measures. */

/** mulberry32: small, fast, the same sequence on every machine. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** n uniform floats in [lo, hi). */
export function randomFloats(n: number, seed: number, lo = -1, hi = 1): Float32Array {
  const next = rng(seed);
  const out = new Float32Array(n);
  const span = hi - lo;
  for (let i = 0; i < n; i++) out[i] = lo + span * next();
  return out;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);

/** bf16 bits of one float, rounded to nearest even; NaN stays a (quiet) NaN. */
export function f32ToBf16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0]!;
  if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) return ((bits >>> 16) | 0x0040) & 0xffff;
  const roundingBias = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + roundingBias) >>> 16) & 0xffff;
}

export function bf16BitsToF32(bits: number): number {
  u32Scratch[0] = (bits & 0xffff) << 16;
  return f32Scratch[0]!;
}

/** Rounds a whole f32 array to bf16 bits (round to nearest even). */
export function toBf16(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  const u = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    const bits = u[i]!;
    if ((bits & 0x7f800000) === 0x7f800000 && (bits & 0x007fffff) !== 0) {
      out[i] = ((bits >>> 16) | 0x0040) & 0xffff;
    } else {
      out[i] = ((bits + 0x7fff + ((bits >>> 16) & 1)) >>> 16) & 0xffff;
    }
  }
  return out;
}

/** The f32 values bf16 bits stand for. */
export function fromBf16(bits: Uint16Array): Float32Array {
  const out = new Float32Array(bits.length);
  const u = new Uint32Array(out.buffer);
  for (let i = 0; i < bits.length; i++) u[i] = bits[i]! << 16;
  return out;
}

/**
 * Normwise error of `got` against `want`: max |got - want| / max |want|. Per-element relative error is
 * meaningless for outputs near zero; this scales every element's error by the output's magnitude.
 */
export function maxRelErr(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new RangeError(`maxRelErr: lengths differ (${got.length} vs ${want.length})`);
  let maxDiff = 0;
  let maxRef = 0;
  for (let i = 0; i < want.length; i++) {
    const d = Math.abs(got[i]! - want[i]!);
    if (Number.isNaN(d)) return Number.NaN;
    if (d > maxDiff) maxDiff = d;
    const r = Math.abs(want[i]!);
    if (r > maxRef) maxRef = r;
  }
  return maxRef === 0 ? maxDiff : maxDiff / maxRef;
}

/** [rows, cols] -> [cols, rows]. */
export function transpose(src: Float32Array, rows: number, cols: number): Float32Array {
  if (src.length !== rows * cols) throw new RangeError(`transpose: ${src.length} elements is not ${rows} x ${cols}`);
  const out = new Float32Array(src.length);
  // Blocked so both sides stay in cache for large weights.
  const B = 64;
  for (let r0 = 0; r0 < rows; r0 += B) {
    const r1 = Math.min(rows, r0 + B);
    for (let c0 = 0; c0 < cols; c0 += B) {
      const c1 = Math.min(cols, c0 + B);
      for (let r = r0; r < r1; r++) {
        const base = r * cols;
        for (let c = c0; c < c1; c++) out[c * rows + r] = src[base + c]!;
      }
    }
  }
  return out;
}
