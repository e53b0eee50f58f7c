/**
 * The optimiser around the native fused `adamw`: per-param moments, weight decay on matrices only, the learning
 * rate schedule (linear warm-up, then cosine or linear decay or constant) and clipping by the global gradient norm
 * (`clipGradNorm` with apply: false; its coefficient is adamw's gradScale, so gradients are never rewritten).
 */
import { Tensor, adamw, clipGradNorm, globalGradNorm } from '@tessera/native';
import { TrainConfigError } from './errors.js';
import type { TrainParam } from './params.js';

export interface ScheduleOptions {
  /** Peak learning rate. */
  lr: number;
  /** Optimiser steps in the whole run. */
  totalSteps: number;
  /** Linear warm-up over the first steps: step t (1-based) ≤ warmupSteps gets lr · t / warmupSteps. Default 0. */
  warmupSteps?: number;
  /** After warm-up: 'cosine' (default) or 'linear' towards minLr (reached one step after the last), or 'constant'. */
  schedule?: 'cosine' | 'linear' | 'constant';
  /** The floor as a fraction of lr (default 0). */
  minLrRatio?: number;
}

/** The learning rate of optimiser step `step` (1-based). */
export function learningRate(step: number, o: ScheduleOptions): number {
  const warmup = o.warmupSteps ?? 0;
  const minLr = o.lr * (o.minLrRatio ?? 0);
  if (step <= warmup) return (o.lr * step) / warmup;
  const schedule = o.schedule ?? 'cosine';
  if (schedule === 'constant') return o.lr;
  // As HF's schedules with their 0-based step (t - 1): the first step after warm-up runs at the peak, the last one
  // just above the floor (never at it, so no step is wasted at lr 0).
  const span = Math.max(1, o.totalSteps - warmup);
  const progress = Math.min(1, (step - 1 - warmup) / span);
  const f = schedule === 'cosine' ? 0.5 * (1 + Math.cos(Math.PI * progress)) : 1 - progress;
  return minLr + (o.lr - minLr) * f;
}

export function checkSchedule(o: ScheduleOptions): void {
  if (!(o.lr > 0) || !Number.isFinite(o.lr)) throw new TrainConfigError(`lr must be a finite number > 0, got ${o.lr}`);
  if (!Number.isInteger(o.totalSteps) || o.totalSteps < 1) throw new TrainConfigError(`steps must be an integer >= 1, got ${o.totalSteps}`);
  const w = o.warmupSteps ?? 0;
  if (!Number.isInteger(w) || w < 0 || w > o.totalSteps) throw new TrainConfigError(`warmupSteps must be an integer in [0, steps], got ${w}`);
  const m = o.minLrRatio ?? 0;
  if (!(m >= 0 && m <= 1)) throw new TrainConfigError(`minLrRatio must be in [0, 1], got ${m}`);
}

export interface AdamWConfig {
  beta1?: number | undefined;
  beta2?: number | undefined;
  eps?: number | undefined;
  /** Decoupled weight decay on params with `decay` (matrices), default 0 (the HF Trainer's default). */
  weightDecay?: number | undefined;
}

export interface OptimizerStepOptions {
  lr: number;
  /** Clip the global gradient norm to this (default: no clipping). */
  maxGradNorm?: number;
}

/** AdamW over a fixed list of params; `t` counts the steps taken (bias corrections use it). */
export class AdamW {
  readonly params: readonly TrainParam[];
  readonly config: { beta1: number; beta2: number; eps: number; weightDecay: number };
  /** First and second moments, by param, zero at the start. */
  readonly m: Tensor[];
  readonly v: Tensor[];
  t = 0;

  constructor(params: readonly TrainParam[], config: AdamWConfig = {}) {
    this.params = params;
    this.config = { beta1: config.beta1 ?? 0.9, beta2: config.beta2 ?? 0.999, eps: config.eps ?? 1e-8, weightDecay: config.weightDecay ?? 0 };
    this.m = params.map((p) => Tensor.zeros(p.value.shape, 'f32', p.value.backend));
    this.v = params.map((p) => Tensor.zeros(p.value.shape, 'f32', p.value.backend));
  }

  /** The global L2 norm of the gradients (before clipping). */
  gradNorm(): number {
    return globalGradNorm(this.params.map((p) => p.grad));
  }

  /**
   * One step on the accumulated gradients: clip coefficient from the global norm, then the fused AdamW update of
   * every param. Returns the norm before clipping. A non-finite norm skips the update (and does not count a step).
   */
  step(options: OptimizerStepOptions): { gradNorm: number; skipped: boolean } {
    const grads = this.params.map((p) => p.grad);
    let gradScale = 1;
    let gradNorm: number;
    if (options.maxGradNorm !== undefined) {
      const clip = clipGradNorm(grads, options.maxGradNorm, { apply: false });
      gradNorm = clip.norm;
      gradScale = clip.coefficient;
    } else {
      gradNorm = globalGradNorm(grads);
    }
    if (!Number.isFinite(gradNorm)) return { gradNorm, skipped: true };
    this.t++;
    const { beta1, beta2, eps, weightDecay } = this.config;
    this.params.forEach((p, i) => {
      adamw(p.value, p.grad, this.m[i]!, this.v[i]!, {
        lr: options.lr, beta1, beta2, eps, weightDecay: p.decay ? weightDecay : 0, step: this.t, gradScale,
      });
    });
    return { gradNorm, skipped: false };
  }

  dispose(): void {
    for (const t of [...this.m, ...this.v]) t.dispose();
  }
}
