import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { allocatorStats, BudgetExceededError, resetPeak, setBudget, Tensor } from '../src/index.js';
import { cpu } from './helpers.js';

describe('byte budget', () => {
  let saved = 0;
  beforeEach(() => {
    saved = allocatorStats(cpu()).budget;
  });
  afterEach(() => {
    setBudget(saved, cpu());
  });

  it('tracks in-use and peak bytes, rounded to 64-byte allocations', () => {
    const b = cpu();
    resetPeak(b);
    const base = allocatorStats(b).inUse;
    const a = Tensor.empty([100], 'f32', b); // 400 -> 448
    const c = Tensor.empty([3], 'u8', b); // 3 -> 64
    expect(allocatorStats(b).inUse - base).toBe(512);
    a.dispose();
    expect(allocatorStats(b).inUse - base).toBe(64);
    expect(allocatorStats(b).peak - base).toBe(512);
    c.dispose();
  });

  it('exceeding the budget is a typed error and allocates nothing', () => {
    const b = cpu();
    const base = allocatorStats(b).inUse;
    setBudget(base + 4096, b);
    const ok = Tensor.empty([512], 'f32', b); // 2048 bytes
    const failedBefore = allocatorStats(b).failed;
    expect(() => Tensor.empty([1024], 'f32', b)).toThrow(BudgetExceededError);
    expect(() => Tensor.empty([1024], 'f32', b)).toThrow(/cannot allocate 4096 bytes/);
    expect(allocatorStats(b).inUse).toBe(base + 2048);
    expect(allocatorStats(b).failed).toBe(failedBefore + 2);
    ok.dispose();
    // Freed memory is usable again.
    const again = Tensor.empty([1024], 'f32', b);
    expect(allocatorStats(b).inUse).toBe(base + 4096);
    again.dispose();
  });

  it('an async copy that does not fit rejects at once with the typed error', async () => {
    const b = cpu();
    setBudget(allocatorStats(b).inUse + 1024, b);
    await expect(Tensor.fromAsync(new Float32Array(1024), [1024], { backend: b })).rejects.toBeInstanceOf(BudgetExceededError);
  });

  it('lowering the budget below use blocks new allocations until memory is freed', () => {
    const b = cpu();
    const t = Tensor.empty([1024], 'f32', b);
    setBudget(allocatorStats(b).inUse - 1, b);
    expect(() => Tensor.empty([1], 'f32', b)).toThrow(BudgetExceededError);
    t.dispose();
    Tensor.empty([1], 'f32', b).dispose();
  });
});
