/** Benchmark inputs and checks: seeded random data (from @tessera/test-utils), error measures, layouts. */

export { randomFloats, rng } from '@tessera/test-utils';

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
