/**
 * Normwise relative error, max |got − want| / max |want| over a whole tensor: the one error measure the engine's
 * tests state their tolerances in (per-element relative error is meaningless for outputs near zero).
 */
export function normwiseError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new RangeError(`normwiseError: lengths differ (${got.length} vs ${want.length})`);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return diff / Math.max(scale, 1e-30);
}
