/** Shared test data: seeded adapters and activations, host views of them, and the error measure. */
import { Tensor } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import type { HostMatrix, HostWeightStack } from '../src/index.js';

/** The tolerance of every f32-kernel vs float64-reference comparison (normwise, see normwiseError). */
export const TOL = 1e-5;

/** max |got − want| / max |want| over the whole output (per-element relative error is meaningless near zero). */
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

/** A host matrix and the same values as an f32 tensor. */
export interface Mat {
  host: HostMatrix<Float32Array>;
  t: Tensor;
}

export function randomMat(rows: number, cols: number, seed: number): Mat {
  const data = randomFloats(rows * cols, seed);
  return { host: { data, rows, cols }, t: Tensor.from(data, [rows, cols]) };
}

/** One adapter's weight for all layers, [layers, rank, features], on host and as a tensor. */
export interface Stack {
  host: HostWeightStack;
  t: Tensor;
}

export function randomStack(layers: number, rank: number, features: number, seed: number, scale = 1): Stack {
  const data = randomFloats(layers * rank * features, seed, -scale, scale);
  return { host: { data, layers, rank, features }, t: Tensor.from(data, [layers, rank, features]) };
}

export function readF32(t: Tensor): Float32Array {
  return t.toArray() as Float32Array;
}

/** Disposes every tensor reachable in the arguments (Stacks, Mats, tensors, arrays of them, nulls). */
export function disposeAll(...things: unknown[]): void {
  for (const thing of things) {
    if (thing === null || thing === undefined) continue;
    if (Array.isArray(thing)) disposeAll(...thing);
    else if (thing instanceof Tensor) thing.dispose();
    else if (typeof thing === 'object' && 't' in thing && (thing as { t: unknown }).t instanceof Tensor) (thing as { t: Tensor }).t.dispose();
  }
}

/** Bitwise equality of two f32 arrays (NaN payloads and signed zeros included). */
export function sameBits(a: Float32Array, b: Float32Array): boolean {
  if (a.length !== b.length) return false;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) if (ua[i] !== ub[i]) return false;
  return true;
}
