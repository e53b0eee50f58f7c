import { describe, expect, it } from 'vitest';
import {
  allocatorStats,
  DisposedTensorError,
  InvalidArgumentError,
  ShapeMismatchError,
  Tensor,
} from '../src/index.js';
import { cpu, withThreads } from './helpers.js';

describe('Tensor', () => {
  it('round-trips every dtype through native memory', () => {
    const b = cpu();
    const cases = [
      [new Float32Array([1.5, -2, 3.25, 0]), 'f32'],
      [new Uint16Array([0x3c00, 0xc000, 0x7c00, 1]), 'f16'],
      [new Uint16Array([0x3f80, 0xbf80, 0x7f80, 1]), 'bf16'],
      [new Int32Array([1, -2, 2 ** 31 - 1, -(2 ** 31)]), 'i32'],
      [new BigInt64Array([1n, -2n, 2n ** 62n, -(2n ** 63n)]), 'i64'],
      [new Uint8Array([0, 1, 254, 255]), 'u8'],
    ] as const;
    for (const [data, dtype] of cases) {
      const t = Tensor.from(data, [2, 2], { dtype, backend: b });
      expect(t.dtype).toBe(dtype);
      expect(t.shape).toEqual([2, 2]);
      expect(t.nbytes).toBe(data.byteLength);
      expect(Array.from(t.toArray() as ArrayLike<number | bigint>)).toEqual(Array.from(data as ArrayLike<number | bigint>));
      t.dispose();
    }
  });

  it('infers dtypes from arrays and refuses ambiguous Uint16Array', () => {
    expect(Tensor.from(new Int32Array(3), [3], { backend: cpu() }).dtype).toBe('i32');
    expect(Tensor.from([1, 2, 3], [3], { backend: cpu() }).dtype).toBe('f32');
    expect(() => Tensor.from(new Uint16Array(3), [3], { backend: cpu() })).toThrow(InvalidArgumentError);
  });

  it('rejects data whose size does not match the shape, naming both', () => {
    expect(() => Tensor.from(new Float32Array(5), [2, 3], { backend: cpu() })).toThrow(ShapeMismatchError);
    expect(() => Tensor.from(new Float32Array(5), [2, 3], { backend: cpu() })).toThrow(/20 bytes.*\[2, 3\].*24/);
    expect(() => Tensor.empty([2, -1], 'f32', cpu())).toThrow(InvalidArgumentError);
  });

  it('supports empty tensors', () => {
    const t = Tensor.from(new Float32Array(0), [0, 8], { backend: cpu() });
    expect(t.numel).toBe(0);
    expect((t.toArray() as Float32Array).length).toBe(0);
    expect(t.rows(0, 0).shape).toEqual([0, 8]);
  });

  it('row views and reshapes share storage', () => {
    const t = Tensor.from(Float32Array.from({ length: 12 }, (_, i) => i), [4, 3], { backend: cpu() });
    const v = t.rows(1, 2);
    expect(v.shape).toEqual([2, 3]);
    expect(Array.from(v.toArray() as Float32Array)).toEqual([3, 4, 5, 6, 7, 8]);
    v.write(new Float32Array([9, 9, 9, 9, 9, 9]));
    expect(Array.from(t.toArray() as Float32Array).slice(3, 9)).toEqual([9, 9, 9, 9, 9, 9]);
    expect(t.native.sameStorage(v.native)).toBe(true);
    const r = t.reshape([2, 6]);
    expect(r.shape).toEqual([2, 6]);
    expect(() => t.reshape([5])).toThrow(ShapeMismatchError);
    expect(() => t.rows(3, 2)).toThrow(InvalidArgumentError);
  });

  it('a view keeps its parent storage alive after the parent is disposed', () => {
    const before = allocatorStats(cpu()).inUse;
    const t = Tensor.from(new Float32Array([1, 2, 3, 4]), [2, 2], { backend: cpu() });
    const v = t.rows(1, 1);
    t.dispose();
    expect(allocatorStats(cpu()).inUse).toBe(before + 64);
    expect(Array.from(v.toArray() as Float32Array)).toEqual([3, 4]);
    v.dispose();
    expect(allocatorStats(cpu()).inUse).toBe(before);
  });

  it('dispose frees memory at once, is idempotent, and later use is a typed error', () => {
    const before = allocatorStats(cpu()).inUse;
    const t = Tensor.zeros([1000], 'f32', cpu());
    expect(allocatorStats(cpu()).inUse).toBe(before + 4032); // 4000 rounded up to 64 bytes
    t.dispose();
    t.dispose();
    expect(t.disposed).toBe(true);
    expect(allocatorStats(cpu()).inUse).toBe(before);
    expect(() => t.toArray()).toThrow(DisposedTensorError);
  });

  it('the finalizer frees tensors that were never disposed', async () => {
    const gc = (globalThis as { gc?: () => void }).gc;
    expect(gc, 'run with --expose-gc').toBeTypeOf('function');
    const before = allocatorStats(cpu()).inUse;
    (() => {
      for (let i = 0; i < 50; i++) Tensor.zeros([1024, 64], 'f32', cpu());
    })();
    expect(allocatorStats(cpu()).inUse).toBeGreaterThan(before);
    for (let i = 0; i < 10 && allocatorStats(cpu()).inUse > before; i++) {
      gc!();
      await new Promise((r) => setTimeout(r, 10));
    }
    // <=: the collection may also reclaim garbage from earlier tests.
    expect(allocatorStats(cpu()).inUse).toBeLessThanOrEqual(before);
  });

  it('copies from host asynchronously off the calling thread', async () => {
    const data = Float32Array.from({ length: 1 << 20 }, (_, i) => i % 977);
    const t = await Tensor.fromAsync(data, [1024, 1024], { backend: cpu() });
    const back = t.toArray() as Float32Array;
    expect(back[12345]).toBe(12345 % 977);
    expect(back[(1 << 20) - 1]).toBe(((1 << 20) - 1) % 977);
    // Several copies in flight at once all land.
    const many = await Promise.all([1, 2, 3, 4].map((k) => Tensor.fromAsync(new Float32Array(4096).fill(k), [4096], { backend: cpu() })));
    many.forEach((m, i) => expect((m.toArray() as Float32Array)[4095]).toBe(i + 1));
  });
});

describe('thread pool', () => {
  it('turns a failing task into a JS error on the caller and stays usable', () => {
    const probe = (cpu().binding as unknown as { _poolFailureProbe(tasks: number, throwAt: number): number })._poolFailureProbe;
    for (const threads of [1, 2]) {
      withThreads(threads, () => {
        expect(() => probe(64, 17)).toThrow(/pool task 17 failed on purpose/);
        expect(probe(64, -1)).toBe(64);
      });
    }
  });
});
