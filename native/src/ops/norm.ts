/**
 * Row-wise f32 ops over the last dimension: LayerNorm, RMSNorm, softmax.
 *
 * Numerics (every backend path): each row is computed by one task with a fixed reduction order, so results
 * are bitwise identical for any thread count; sums accumulate in double. Against a double-precision
 * reference, LayerNorm and RMSNorm are within a few f32 ulp; softmax within 3e-7 + |x*scale - max| * 6e-8
 * relative (the f32 rounding of the exp argument), i.e. ~1e-6 for logits spread over 10.
 */
import { callNative, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

export interface RowOpOptions {
  /** Write here instead of allocating. May be `x` itself (in place); must not overlap it otherwise. */
  out?: Tensor;
  /** Run the plain scalar reference kernel (CPU only; tests compare against it). */
  reference?: boolean;
}

export interface LayerNormOptions extends RowOpOptions {
  /** Added to the variance (default 1e-5, PyTorch's default). */
  eps?: number;
}

export interface RmsNormOptions extends RowOpOptions {
  /** Added to the mean square (default 1e-6, Llama's default). */
  eps?: number;
}

export interface SoftmaxOptions extends RowOpOptions {
  /** Multiplies x before the softmax (e.g. 1/sqrt(headDim)); default 1. */
  scale?: number;
}

/** An f32 tensor of rows (rank ≥ 1); returns its row length. Shared with the backward ops (backward.ts). */
export function checkRowInput(op: string, x: Tensor, name = 'x'): number {
  expectDtype(op, name, x, 'f32');
  if (x.rank < 1) throw new ShapeMismatchError(`${op}: ${name} must have rank >= 1, got ${formatShape(x.shape)}`);
  return x.shape[x.rank - 1]!;
}

/** A per-column parameter (gamma, beta): f32 [dim], dim the last dimension of x. */
export function checkRowParam(op: string, name: string, p: Tensor | null | undefined, x: Tensor, dim: number): void {
  if (!p) return;
  expectDtype(op, name, p, 'f32');
  if (p.rank !== 1 || p.shape[0] !== dim) {
    throw new ShapeMismatchError(`${op}: ${name} ${formatShape(p.shape)} must be [${dim}], the last dimension of x ${formatShape(x.shape)}`);
  }
}

export function checkEps(op: string, eps: number): void {
  if (!Number.isFinite(eps) || eps < 0) throw new InvalidArgumentError(`${op}: eps must be a finite number >= 0, got ${eps}`);
}

/**
 * LayerNorm over the last dimension: (x - mean) / sqrt(var + eps) * gamma + beta, with the biased variance
 * (as PyTorch). gamma and beta are optional f32 [dim] (absent: 1 and 0). Two-pass (mean, then variance), so
 * rows with a large mean relative to their spread stay accurate.
 */
export function layerNorm(x: Tensor, gamma?: Tensor | null, beta?: Tensor | null, options: LayerNormOptions = {}): Tensor {
  const op = 'layerNorm';
  const backend = sameBackend(op, x, gamma, beta, options.out);
  const dim = checkRowInput(op, x);
  checkRowParam(op, 'gamma', gamma, x, dim);
  checkRowParam(op, 'beta', beta, x, dim);
  const eps = options.eps ?? 1e-5;
  checkEps(op, eps);
  const out = resolveOut(op, options.out, x.shape, 'f32', backend);
  callNative(() =>
    backend.binding.layerNorm(x.native, gamma?.native ?? null, beta?.native ?? null, out.native, { eps, reference: options.reference ?? false }),
  );
  return out;
}

/** RMSNorm over the last dimension: x / sqrt(mean(x^2) + eps) * gamma (gamma optional f32 [dim]), as Llama. */
export function rmsNorm(x: Tensor, gamma?: Tensor | null, options: RmsNormOptions = {}): Tensor {
  const op = 'rmsNorm';
  const backend = sameBackend(op, x, gamma, options.out);
  const dim = checkRowInput(op, x);
  checkRowParam(op, 'gamma', gamma, x, dim);
  const eps = options.eps ?? 1e-6;
  checkEps(op, eps);
  const out = resolveOut(op, options.out, x.shape, 'f32', backend);
  callNative(() => backend.binding.rmsNorm(x.native, gamma?.native ?? null, out.native, { eps, reference: options.reference ?? false }));
  return out;
}

/**
 * softmax(x * scale) over the last dimension, max-subtracted. A row whose every entry is -Infinity (fully
 * masked) gives all zeros rather than NaN (PyTorch gives NaN); a NaN or +Infinity anywhere in a row makes
 * that whole row NaN.
 */
export function softmax(x: Tensor, options: SoftmaxOptions = {}): Tensor {
  const op = 'softmax';
  const backend = sameBackend(op, x, options.out);
  checkRowInput(op, x);
  const scale = options.scale ?? 1;
  if (!Number.isFinite(scale)) throw new InvalidArgumentError(`${op}: scale must be finite, got ${scale}`);
  const out = resolveOut(op, options.out, x.shape, 'f32', backend);
  callNative(() => backend.binding.softmax(x.native, out.native, { scale, reference: options.reference ?? false }));
  return out;
}
