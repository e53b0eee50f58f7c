/**
 * Loss and optimiser kernels for training (f32): fused cross-entropy over the vocabulary, the AdamW step, and the
 * global gradient norm with clipping. Sums run in a fixed order (per-row losses in double, the mean over rows in
 * row order on the host, sums of squares in fixed chunks), so results are bitwise identical for any thread count.
 */
import { callNative, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectRank, expectSameShape, formatShape } from '../shape.js';
import { sameBackend, Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

export interface CrossEntropyOptions {
  /** Rows whose target is this get loss 0 and a zero gradient, and do not count in the mean (default -100). */
  ignoreIndex?: number;
  /** Label smoothing s in [0, 1]: the target distribution is (1 - s) one-hot + s / vocab (default 0). */
  labelSmoothing?: number;
  /** 'mean' over the non-ignored rows (default), 'sum', or 'none' (`loss` is then the sum; see `losses`). */
  reduction?: 'mean' | 'sum' | 'none';
  /** Compute dL/dlogits (default true). */
  grad?: boolean;
  /** Write dlogits here; may be `logits` itself (in place, saving a [rows, vocab] buffer). */
  dlogits?: Tensor;
  /** Multiplies the gradient (e.g. 1 / micro-batches for gradient accumulation; default 1). */
  gradScale?: number;
  /** Run the plain scalar reference kernel (double accumulation; CPU only). */
  reference?: boolean;
}

export interface CrossEntropyResult {
  /** The reduced loss ('mean': NaN when every row is ignored, as PyTorch). */
  loss: number;
  /** Per-row losses f32 [rows] (0 for ignored rows). */
  losses: Tensor;
  /** dL/dlogits f32 [rows, vocab] for the reduced loss, or null with `grad: false`. */
  dlogits: Tensor | null;
  /** Rows that count (targets other than ignoreIndex). */
  count: number;
}

/**
 * Fused log-softmax + negative log-likelihood over logits f32 [rows, vocab] with targets i32 [rows]:
 * loss_r = (1 - s)(lse_r - x_r[t_r]) + s (lse_r - mean_j x_r[j]), and in the same pass
 * dlogits = gradScale · c · (softmax(x_r) - s / vocab - (1 - s) onehot(t_r)) with c = 1 / count for 'mean', else 1.
 * A target outside [0, vocab) other than ignoreIndex throws InvalidArgumentError naming it.
 */
export function crossEntropy(logits: Tensor, targets: Tensor, options: CrossEntropyOptions = {}): CrossEntropyResult {
  const op = 'crossEntropy';
  const backend = sameBackend(op, logits, targets, options.dlogits);
  expectDtype(op, 'logits', logits, 'f32');
  expectRank(op, 'logits', logits, 2);
  expectDtype(op, 'targets', targets, 'i32');
  const [rows, vocab] = logits.shape as [number, number];
  if (targets.rank !== 1 || targets.shape[0] !== rows) {
    throw new ShapeMismatchError(`${op}: targets ${formatShape(targets.shape)} must be [rows] = [${rows}] for logits ${formatShape(logits.shape)}`);
  }
  const ignoreIndex = options.ignoreIndex ?? -100;
  if (!Number.isInteger(ignoreIndex) || ignoreIndex < -2147483648 || ignoreIndex > 2147483647) {
    throw new InvalidArgumentError(`${op}: ignoreIndex must be an i32 integer, got ${ignoreIndex}`);
  }
  const labelSmoothing = options.labelSmoothing ?? 0;
  if (!(labelSmoothing >= 0 && labelSmoothing <= 1)) {
    throw new InvalidArgumentError(`${op}: labelSmoothing must be in [0, 1], got ${labelSmoothing}`);
  }
  const reduction = options.reduction ?? 'mean';
  if (reduction !== 'mean' && reduction !== 'sum' && reduction !== 'none') {
    throw new InvalidArgumentError(`${op}: reduction must be mean, sum or none, got ${String(reduction)}`);
  }
  const gradScale = options.gradScale ?? 1;
  if (!Number.isFinite(gradScale)) throw new InvalidArgumentError(`${op}: gradScale must be finite, got ${gradScale}`);
  const t = targets.toArray() as Int32Array;
  let count = 0;
  for (let i = 0; i < t.length; i++) {
    const v = t[i]!;
    if (v === ignoreIndex) continue;
    if (v < 0 || v >= vocab) {
      throw new InvalidArgumentError(`${op}: targets[${i}] = ${v} is outside [0, ${vocab}) and not the ignore index ${ignoreIndex}`);
    }
    count++;
  }
  const grad = options.grad ?? true;
  const dlogits = grad ? resolveOut(op, options.dlogits, logits.shape, 'f32', backend) : null;
  const losses = Tensor.empty([rows], 'f32', backend);
  const c = reduction === 'mean' ? (count > 0 ? 1 / count : 0) : 1;
  callNative(() => backend.binding.crossEntropy(logits.native, targets.native, losses.native, dlogits?.native ?? null, {
    ignoreIndex,
    labelSmoothing,
    gradScale: gradScale * c,
    reference: options.reference ?? false,
  }));
  const per = losses.toArray() as Float32Array;
  let sum = 0;
  for (let i = 0; i < per.length; i++) sum += per[i]!;  // row order, in double
  const loss = reduction === 'mean' ? (count > 0 ? sum / count : Number.NaN) : sum;
  return { loss, losses, dlogits, count };
}

export interface AdamWOptions {
  /** Learning rate (default 1e-3). */
  lr?: number;
  beta1?: number;
  beta2?: number;
  /** Added to sqrt(v̂) (default 1e-8). */
  eps?: number;
  /** Decoupled weight decay: param *= 1 - lr · weightDecay before the Adam update (default 0.01, as PyTorch). */
  weightDecay?: number;
  /** The 1-based step count t (bias corrections 1 - β^t). Required. */
  step: number;
  /** Multiplies the gradient first (e.g. the clip coefficient of {@link clipGradNorm} with `apply: false`). */
  gradScale?: number;
  /** Run the double-precision reference kernel (CPU only). */
  reference?: boolean;
}

/**
 * One fused AdamW step in place over f32 param, m, v (the optimiser state, zeros at step 1) with grad, all the same
 * shape — PyTorch's torch.optim.AdamW: m = β1 m + (1-β1) g, v = β2 v + (1-β2) g², param = param (1 - lr·wd) -
 * lr / (1-β1^t) · m / (sqrt(v) / sqrt(1-β2^t) + eps). param holds the f32 master weights.
 */
export function adamw(param: Tensor, grad: Tensor, m: Tensor, v: Tensor, options: AdamWOptions): void {
  const op = 'adamw';
  const backend = sameBackend(op, param, grad, m, v);
  for (const [name, t] of [['param', param], ['grad', grad], ['m', m], ['v', v]] as const) expectDtype(op, name, t, 'f32');
  expectSameShape(op, 'grad', grad, 'param', param);
  expectSameShape(op, 'm', m, 'param', param);
  expectSameShape(op, 'v', v, 'param', param);
  const named = { param, grad, m, v };
  const names = Object.keys(named) as (keyof typeof named)[];
  for (let i = 0; i < names.length; i++) {
    for (let j = i + 1; j < names.length; j++) {
      if (named[names[i]!] === named[names[j]!]) throw new InvalidArgumentError(`${op}: ${names[i]} and ${names[j]} must be different tensors`);
    }
  }
  const lr = options.lr ?? 1e-3;
  const beta1 = options.beta1 ?? 0.9;
  const beta2 = options.beta2 ?? 0.999;
  const eps = options.eps ?? 1e-8;
  const weightDecay = options.weightDecay ?? 0.01;
  const gradScale = options.gradScale ?? 1;
  const { step } = options;
  if (!Number.isFinite(lr) || lr < 0) throw new InvalidArgumentError(`${op}: lr must be a finite number >= 0, got ${lr}`);
  for (const [name, b] of [['beta1', beta1], ['beta2', beta2]] as const) {
    if (!(b >= 0 && b < 1)) throw new InvalidArgumentError(`${op}: ${name} must be in [0, 1), got ${b}`);
  }
  if (!Number.isFinite(eps) || eps <= 0) throw new InvalidArgumentError(`${op}: eps must be a finite number > 0, got ${eps}`);
  if (!Number.isFinite(weightDecay) || weightDecay < 0) throw new InvalidArgumentError(`${op}: weightDecay must be a finite number >= 0, got ${weightDecay}`);
  if (!Number.isSafeInteger(step) || step < 1) throw new InvalidArgumentError(`${op}: step must be an integer >= 1 (the 1-based step count), got ${step}`);
  if (!Number.isFinite(gradScale)) throw new InvalidArgumentError(`${op}: gradScale must be finite, got ${gradScale}`);
  callNative(() => backend.binding.adamw(param.native, grad.native, m.native, v.native, {
    lr, beta1, beta2, eps, weightDecay, step, gradScale, reference: options.reference ?? false,
  }));
}

/** Σ x² over every element of an f32 tensor, accumulated in double in fixed chunks (the same value for any thread count). */
export function sumSquares(x: Tensor, options: { reference?: boolean } = {}): number {
  expectDtype('sumSquares', 'x', x, 'f32');
  return callNative(() => x.backend.binding.sumSquares(x.native, { reference: options.reference ?? false }));
}

/** The global L2 norm over a list of f32 tensors: sqrt of the tensors' sums of squares added in list order. */
export function globalGradNorm(tensors: readonly Tensor[]): number {
  let total = 0;
  for (const t of tensors) total += sumSquares(t);
  return Math.sqrt(total);
}

export interface ClipGradNormOptions {
  /** Added to the norm in the coefficient maxNorm / (norm + eps) (default 1e-6, as PyTorch). */
  eps?: number;
  /** Scale the tensors in place when the coefficient is below 1 (default true). With false, pass `coefficient` on,
   *  e.g. as adamw's gradScale, and nothing is written. */
  apply?: boolean;
}

/**
 * Clip by global norm (torch.nn.utils.clip_grad_norm_): norm = {@link globalGradNorm}, coefficient =
 * min(1, maxNorm / (norm + eps)); when below 1 every tensor is multiplied by it in place. Returns both. A non-finite
 * norm is returned as is and nothing is scaled.
 */
export function clipGradNorm(tensors: readonly Tensor[], maxNorm: number, options: ClipGradNormOptions = {}): { norm: number; coefficient: number } {
  const op = 'clipGradNorm';
  if (!(maxNorm > 0) || !Number.isFinite(maxNorm)) throw new InvalidArgumentError(`${op}: maxNorm must be a finite number > 0, got ${maxNorm}`);
  const eps = options.eps ?? 1e-6;
  if (!Number.isFinite(eps) || eps < 0) throw new InvalidArgumentError(`${op}: eps must be a finite number >= 0, got ${eps}`);
  for (const t of tensors) expectDtype(op, 'tensor', t, 'f32');
  const norm = globalGradNorm(tensors);
  if (!Number.isFinite(norm)) return { norm, coefficient: 1 };
  const coefficient = Math.min(1, maxNorm / (norm + eps));
  if (coefficient < 1 && (options.apply ?? true)) {
    for (const t of tensors) callNative(() => t.backend.binding.scale(t.native, coefficient, t.native, { reference: false }));
  }
  return { norm, coefficient };
}
