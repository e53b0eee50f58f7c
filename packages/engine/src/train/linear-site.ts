/**
 * One Linear site of a training forward / backward, shared by both families: y = x Wᵀ + b (+ LoRA's
 * scale · (dropout(x) Aᵀ) Bᵀ) and its backward: dW (+)= dyᵀ x, db (+)= Σ_rows dy, dB (+)= scale · dyᵀ u,
 * dA (+)= (scale · dy B)ᵀ xd, dx (+)= dy W + (scale · dy B) A (⊙ the dropout mask). Parameter gradients always
 * accumulate (into buffers zeroed once per optimiser step); frozen tensors get none.
 */
import { SplitMix32 } from '@tessera/core';
import { Tensor, add, columnSum, gemm, linear, mul } from '@tessera/native';
import type { Scope } from '../models/scope.js';
import type { LoraParams } from './params.js';

/** What the forward keeps of one Linear's LoRA branch for its backward. */
export interface LoraKeep {
  p: LoraParams;
  /** dropout(x) (x itself without dropout) [T, in]. */
  xd: Tensor;
  /** The dropout mask scaled by 1/(1-p) [T, in], or null. */
  keep: Tensor | null;
  /** xd Aᵀ [T, r]. */
  u: Tensor;
}

export interface SiteDropout {
  rng: SplitMix32;
  p: number;
}

/** y = x Wᵀ (+ bias) into a new [T, out] tensor owned by `scope`, plus the LoRA branch when `lora` is given. */
export function linearSiteForward(
  scope: Scope, x: Tensor, weight: Tensor, bias: Tensor | undefined, lora: LoraParams | undefined, dropout: SiteDropout | null,
): { y: Tensor; keep: LoraKeep | undefined } {
  const T = x.shape[0]!;
  const y = scope.keep(Tensor.empty([T, weight.shape[0]!], 'f32', x.backend));
  linear(x, weight, bias, { out: y });
  if (!lora) return { y, keep: undefined };
  let xd = x;
  let keepMask: Tensor | null = null;
  if (dropout) {
    const inF = x.shape[1]!;
    const m = new Float32Array(T * inF);
    const s = 1 / (1 - dropout.p);
    for (let i = 0; i < m.length; i++) m[i] = dropout.rng.nextFloat() < dropout.p ? 0 : s;
    keepMask = scope.keep(Tensor.from(m, [T, inF], { backend: x.backend }));
    xd = scope.keep(mul(x, keepMask));
  }
  const u = scope.keep(gemm(xd, lora.a.value, { transB: true }));
  gemm(u, lora.b.value, { transB: true, alpha: lora.scale, beta: 1, out: y });
  return { y, keep: { p: lora, xd, keep: keepMask, u } };
}

/** Scratch the LoRA backward reuses across sites: du [T · rMax] and, with dropout, one [T · maxIn] row buffer. */
export interface SiteScratch {
  du: Tensor | null;
  tmp: Tensor | null;
}

export function siteScratch(scope: Scope, T: number, rMax: number, maxIn: number, dropout: boolean, backend: Tensor['backend']): SiteScratch {
  return {
    du: rMax > 0 ? scope.keep(Tensor.empty([T * rMax], 'f32', backend)) : null,
    tmp: rMax > 0 && dropout ? scope.keep(Tensor.empty([T * maxIn], 'f32', backend)) : null,
  };
}

export interface SiteBackwardArgs {
  scope: Scope;
  scratch: SiteScratch;
  /** The site's input [T, in] and weight [out, in]. */
  x: Tensor;
  weight: Tensor;
  /** dL/dy [T, out]. */
  dy: Tensor;
  /** Gradient buffers of W and b, null when frozen (or absent). */
  dWeight: Tensor | null;
  dBias: Tensor | null;
  keep: LoraKeep | undefined;
  /** dL/dx to write, or null when nothing below needs it. */
  dx: Tensor | null;
  /** Add into dx instead of overwriting it. */
  accumulateDx: boolean;
}

export function linearSiteBackward(a: SiteBackwardArgs): void {
  const { scope, x, dy, dx, keep } = a;
  const T = x.shape[0]!;
  if (a.dWeight) gemm(dy, x, { transA: true, beta: 1, out: a.dWeight });
  if (a.dBias) columnSum(dy, { out: a.dBias, accumulate: true });
  if (dx) gemm(dy, a.weight, { beta: a.accumulateDx ? 1 : 0, out: dx });
  if (!keep) return;
  const { p, xd, u } = keep;
  gemm(dy, u, { transA: true, alpha: p.scale, beta: 1, out: p.b.grad });
  const du = scope.reshape(scope.keep(a.scratch.du!.rows(0, T * p.r)), [T, p.r]);
  gemm(dy, p.b.value, { alpha: p.scale, out: du });
  gemm(du, xd, { transA: true, beta: 1, out: p.a.grad });
  if (!dx) return;
  if (keep.keep) {
    const inF = x.shape[1]!;
    const t = scope.reshape(scope.keep(a.scratch.tmp!.rows(0, T * inF)), [T, inF]);
    gemm(du, p.a.value, { out: t });
    mul(t, keep.keep, { out: t });
    add(dx, t, { out: dx });
  } else {
    gemm(du, p.a.value, { beta: 1, out: dx });
  }
}
