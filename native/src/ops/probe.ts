/**
 * Machine probes (CPU backend only) for roofline measurements: STREAM triad, a read-only sum, and a peak-FMA
 * probe. They run on the kernel thread pool and return when done, so the caller times them.
 */
import { callNative, InvalidArgumentError, UnsupportedOpError } from '../errors.js';
import { type Backend, getBackend } from '../loader.js';
import { expectDtype, expectSameShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';

function missing(op: string, backend: Backend): never {
  throw new UnsupportedOpError(`${op}: the ${backend.device} backend has no machine probes (CPU only)`);
}

/** STREAM triad: a = b + s * c over same-shaped f32 tensors (a is written; it may alias b or c). */
export function streamTriad(a: Tensor, b: Tensor, c: Tensor, s: number): void {
  const backend = sameBackend('streamTriad', a, b, c);
  expectDtype('streamTriad', 'a', a, 'f32');
  expectDtype('streamTriad', 'b', b, 'f32');
  expectDtype('streamTriad', 'c', c, 'f32');
  expectSameShape('streamTriad', 'a', a, 'b', b);
  expectSameShape('streamTriad', 'a', a, 'c', c);
  if (!Number.isFinite(s)) throw new InvalidArgumentError(`streamTriad: s must be a finite number, got ${s}`);
  const fn = backend.binding.streamTriad ?? missing('streamTriad', backend);
  callNative(() => fn(a.native, b.native, c.native, s));
}

/** Sums an f32 tensor by streaming it once (every element read, nothing written): read bandwidth. */
export function readSumProbe(x: Tensor): number {
  const backend = sameBackend('readSumProbe', x);
  expectDtype('readSumProbe', 'x', x, 'f32');
  const fn = backend.binding.readSumProbe ?? missing('readSumProbe', backend);
  return callNative(() => fn(x.native));
}

/**
 * Runs `iters` rounds of independent FMA chains in registers on every kernel thread (the ISA is the active one,
 * see setIsa) and returns the floating-point operations performed (an FMA counts as 2).
 */
export function fmaPeakProbe(iters: number, backend: Backend = getBackend('cpu')): number {
  if (!Number.isInteger(iters) || iters < 0 || iters > 2 ** 40) {
    throw new InvalidArgumentError(`fmaPeakProbe: iters must be an integer in [0, 2^40], got ${iters}`);
  }
  const fn = backend.binding.fmaPeakProbe ?? missing('fmaPeakProbe', backend);
  return callNative(() => fn(iters));
}
