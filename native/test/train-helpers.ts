/** Shared by the training-kernel tests: float64 central differences and small float64 forwards. */
import { Tensor } from '../src/index.js';
import { cpu } from './helpers.js';

/**
 * Central differences of a float64 scalar function at x: (f(x + h e_i) - f(x - h e_i)) / 2h per element, with a
 * step relative to |x_i| (h = step * max(1, |x_i|)). Truncation error ~h²|f'''|, rounding ~1e-16 |f| / h: with
 * step 1e-5 both stay far below the f32 kernels' own error.
 */
export function centralDiff(f: (x: Float64Array) => number, x: ArrayLike<number>, step = 1e-5): Float64Array {
  const xs = Float64Array.from(x);
  const g = new Float64Array(xs.length);
  for (let i = 0; i < xs.length; i++) {
    const x0 = xs[i]!;
    const h = step * Math.max(1, Math.abs(x0));
    xs[i] = x0 + h;
    const up = f(xs);
    xs[i] = x0 - h;
    const down = f(xs);
    xs[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/** Σ dy ⊙ y: the scalar whose gradient a backward kernel computes for the upstream gradient dy. */
export function dotLoss(y: ArrayLike<number>, dy: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < y.length; i++) s += y[i]! * dy[i]!;
  return s;
}

/** erf in double: Maclaurin series (|x| < 3, ~1e-13 absolute), else the asymptotic 1 - erfc. */
export function erf(x: number): number {
  const ax = Math.abs(x);
  if (ax >= 6) return Math.sign(x);
  if (ax < 3) {
    let term = x, sum = x;
    for (let n = 1; n < 200; n++) {
      term *= (-x * x) / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    return (2 / Math.sqrt(Math.PI)) * sum;
  }
  // Continued fraction for erfc (Lentz), converges fast for |x| >= 3.
  let f = ax, c = ax, d = 0;
  for (let n = 1; n < 100; n++) {
    const an = n / 2;
    d = ax + an * d;
    d = 1 / d;
    c = ax + an / c;
    f *= c * d;
  }
  const erfc = Math.exp(-ax * ax) / Math.sqrt(Math.PI) / f;
  return Math.sign(x) * (1 - erfc);
}

export const i32 = (values: ArrayLike<number>, shape: number[] = [values.length]): Tensor =>
  Tensor.from(Int32Array.from(values), shape, { dtype: 'i32', backend: cpu() });

export const u8 = (values: ArrayLike<number>, shape: number[]): Tensor =>
  Tensor.from(Uint8Array.from(values), shape, { dtype: 'u8', backend: cpu() });
