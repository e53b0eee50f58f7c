/** Shared test utilities: seeded data, tolerance checks, ISA and thread sweeps. */
import { expect } from 'vitest';
import { type Backend, deviceInfo, getCpuBackend, type Isa, setIsa, setThreads, Tensor } from '../src/index.js';

export { randomFloats, randomInts, rng } from '@tessera/test-utils';

export function f32(t: Tensor): Float32Array {
  return t.toArray() as Float32Array;
}

/**
 * Asserts |got - want| <= atol + rtol * |want| elementwise, reporting the worst index.
 * Comparisons are against references computed in double where they reduce.
 */
export function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, rtol: number, atol: number, label = ''): void {
  expect(got.length, `${label} length`).toBe(want.length);
  let worst = -1;
  let worstExcess = 0;
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    if (Number.isNaN(w) && Number.isNaN(g)) continue;
    const excess = Math.abs(g - w) - (atol + rtol * Math.abs(w));
    if (!(excess <= 0) && (worst < 0 || excess > worstExcess || Number.isNaN(excess))) {
      worst = i;
      worstExcess = excess;
    }
  }
  if (worst >= 0) {
    expect.fail(`${label} mismatch at ${worst}: got ${got[worst]}, want ${want[worst]} (rtol ${rtol}, atol ${atol})`);
  }
}

export function expectBitwiseEqual(a: Float32Array, b: Float32Array, label = ''): void {
  expect(a.length, `${label} length`).toBe(b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < ua.length; i++) {
    if (ua[i] !== ub[i]) expect.fail(`${label} differs at ${i}: ${a[i]} vs ${b[i]}`);
  }
}

/** ISAs this CPU can run, scalar first. */
export function supportedIsas(backend: Backend = getCpuBackend()): Isa[] {
  const best = deviceInfo(backend).bestIsa ?? 'scalar';
  const order: Isa[] = ['scalar', 'avx2', 'avx512'];
  return order.slice(0, order.indexOf(best) + 1);
}

/** Runs fn once per supported ISA, restoring the best ISA afterwards. */
export function forEachIsa(fn: (isa: Isa) => void): void {
  try {
    for (const isa of supportedIsas()) {
      setIsa(isa);
      fn(isa);
    }
  } finally {
    setIsa('best');
  }
}

/** Runs fn with the CPU pool at n threads, restoring the previous size. */
export function withThreads<T>(n: number, fn: () => T): T {
  const before = deviceInfo(getCpuBackend()).threads ?? 1;
  setThreads(n);
  try {
    return fn();
  } finally {
    setThreads(before);
  }
}

export const cpu = (): Backend => getCpuBackend();

export function tensorF32(data: Float32Array, shape: number[], backend: Backend = cpu()): Tensor {
  return Tensor.from(data, shape, { backend });
}
