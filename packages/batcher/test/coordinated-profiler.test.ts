/**
 * profileCostTables against a fake engine whose run times are injected: each run advances a virtual clock by a
 * known cost (with an outlier on some repeats, which the median must drop), so the profiled tables must reproduce
 * the injected costs exactly.
 */
import { describe, expect, it } from 'vitest';
import {
  type CostProfilerTarget, CostModelError, CostTable, planBatches, profileCostTables, tableCostModel,
} from '../src/index.js';
import { assignPetTypes, cbTaskNames, generateCbPool } from '../src/bench.js';

const trueAlpha = (N: number, L: number): number => 2 + 0.01 * N * L;
const trueBeta = (pt: string, n: number, l: number): number => (pt === 'adapter' ? 0.5 : 0.25) + 0.001 * n * l;

/** A fake engine on a virtual clock: runShared/runPet advance it by the true cost, plus 100 ms on every 3rd run. */
function fakeTarget(options: { async?: boolean } = {}) {
  let t = 0;
  const calls = { shared: 0, pet: 0 };
  const advance = (ms: number, call: number): void => {
    t += ms + (call % 3 === 2 ? 100 : 0);
  };
  const target: CostProfilerTarget = {
    petTypes: ['adapter', 'bitfit'],
    runShared: (N, L) => {
      advance(trueAlpha(N, L), calls.shared++);
      return options.async ? Promise.resolve() : undefined;
    },
    runPet: (pt, n, l) => {
      advance(trueBeta(pt, n, l), calls.pet++);
      return options.async ? new Promise((resolve) => setImmediate(resolve)) : undefined;
    },
  };
  return { target, calls, now: () => t };
}

describe('profileCostTables', () => {
  it('reproduces the injected costs (median of repeats; warm-up runs not timed)', async () => {
    for (const async of [false, true]) {
      const { target, calls, now } = fakeTarget({ async });
      const progress: [number, number][] = [];
      const { alpha, beta } = await profileCostTables(target, {
        batches: [1, 4, 16], lengths: [8, 32], petBatches: [1, 8], petLengths: [8, 16, 32],
        repeats: 3, warmup: 2, now, onProgress: (done, total) => progress.push([done, total]),
      });
      expect(alpha.batches).toEqual([1, 4, 16]);
      expect(alpha.lengths).toEqual([8, 32]);
      expect(alpha.cap).toBe(16);
      for (let bi = 0; bi < 3; bi++) {
        for (let li = 0; li < 2; li++) expect(alpha.at(bi, li)).toBeCloseTo(trueAlpha(alpha.batches[bi]!, alpha.lengths[li]!), 9);
      }
      expect([...beta.keys()]).toEqual(['adapter', 'bitfit']);
      for (const [pt, table] of beta) {
        expect(table.cap).toBe(8);
        for (let bi = 0; bi < 2; bi++) {
          for (let li = 0; li < 3; li++) expect(table.at(bi, li)).toBeCloseTo(trueBeta(pt, table.batches[bi]!, table.lengths[li]!), 9);
        }
      }
      // (warm-up + repeats) runs per cell.
      expect(calls.shared).toBe(6 * 5);
      expect(calls.pet).toBe(2 * 6 * 5);
      const total = 6 + 2 * 6;
      expect(progress).toEqual(Array.from({ length: total }, (_, i) => [i + 1, total]));
    }
  });

  it('divides a run by the number of segments it timed (engines that share a call among segments)', async () => {
    let t = 0;
    // Each run times `per` identical segments: a fixed 1 ms call cost plus 0.5 ms per segment.
    const per = (n: number) => (n === 1 ? 4 : 1);
    const target: CostProfilerTarget = {
      petTypes: ['adapter'],
      runShared: () => void (t += 1),
      runPet: (_pt, n) => {
        t += 1 + 0.5 * per(n);
        return per(n);
      },
    };
    const { beta } = await profileCostTables(target, { batches: [1], lengths: [8], petBatches: [1, 2], petLengths: [8], repeats: 1, warmup: 0, now: () => t });
    expect(beta.get('adapter')!.at(0, 0)).toBeCloseTo((1 + 0.5 * 4) / 4, 12);
    expect(beta.get('adapter')!.at(1, 0)).toBeCloseTo(1.5, 12);
    const bad: CostProfilerTarget = { petTypes: ['adapter'], runShared: () => undefined, runPet: () => 0 };
    await expect(profileCostTables(bad, { batches: [1], lengths: [8], petBatches: [1], petLengths: [8], repeats: 1, warmup: 0 })).rejects.toThrow(/returned 0; a run returns nothing or the number of segments/);
  });

  it('takes the mean of the middle two for an even repeat count, and sets the caps', async () => {
    // Each cell's 4 timed runs cost c, c, c + 100 (3rd), c (the outlier lands on call 2 mod 3).
    const { target, now } = fakeTarget();
    const { alpha, beta } = await profileCostTables(target, {
      batches: [2], lengths: [10], petBatches: [1], petLengths: [4], repeats: 4, warmup: 0, now, maxMacro: 64, maxMini: 16,
    });
    expect(alpha.at(0, 0)).toBeCloseTo(trueAlpha(2, 10), 9);
    expect(alpha.cap).toBe(64);
    expect(beta.get('adapter')!.cap).toBe(16);
  });

  it('sorts and deduplicates grids, and uses the default grids', async () => {
    const { target, now } = fakeTarget();
    const sorted = await profileCostTables(target, { batches: [4, 1, 4], lengths: [16, 8], petBatches: [2], petLengths: [8], repeats: 1, warmup: 0, now });
    expect(sorted.alpha.batches).toEqual([1, 4]);
    expect(sorted.alpha.lengths).toEqual([8, 16]);
    const { target: t2, now: now2 } = fakeTarget();
    const defaults = await profileCostTables(t2, { repeats: 1, warmup: 0, now: now2 });
    expect(defaults.alpha.batches).toEqual([1, 2, 4, 8, 16, 32, 64, 128]);
    expect(defaults.alpha.lengths).toEqual(Array.from({ length: 16 }, (_, i) => 8 * (i + 1)));
    expect(defaults.beta.get('bitfit')!.batches).toEqual([1, 2, 4, 8, 16, 32]);
    expect(defaults.beta.get('bitfit')!.lengths).toEqual(defaults.alpha.lengths);
  });

  it('feeds a cost model that plans, and survives a JSON round trip', async () => {
    const { target, now } = fakeTarget();
    const { alpha, beta } = await profileCostTables(target, { batches: [1, 8, 32, 128], lengths: [16, 32, 64], repeats: 1, warmup: 0, now });
    const reloaded = new Map([...beta].map(([pt, t]) => [pt, CostTable.fromJSON(JSON.parse(JSON.stringify(t)))]));
    const cost = tableCostModel(CostTable.fromJSON(JSON.parse(JSON.stringify(alpha))), reloaded);
    const types = assignPetTypes(cbTaskNames(8), ['adapter', 'bitfit'], 2);
    const pool = generateCbPool({ queries: 200, tasks: 8, meanLength: 32, stdLength: 4, seed: 1 });
    const plan = planBatches(pool, { strategy: 'auto', cost, petTypeOf: (t) => types.get(t)! });
    expect(plan.batches.reduce((s, b) => s + b.size, 0)).toBe(200);
    expect(plan.estimate.total).toBeGreaterThan(0);
  });

  it('rejects malformed targets and options with TESSERA_INVALID_PROFILE_OPTIONS', async () => {
    const { target, now } = fakeTarget();
    const reject = async (t: unknown, o: object): Promise<string | undefined> => {
      try {
        await profileCostTables(t as CostProfilerTarget, { repeats: 1, warmup: 0, now, batches: [1], lengths: [8], petBatches: [1], ...o });
      } catch (err) {
        expect(err).toBeInstanceOf(CostModelError);
        return (err as CostModelError).code;
      }
      return undefined;
    };
    expect(await reject({}, {})).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject({ ...target, petTypes: ['a', 'a'] }, {})).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { batches: [] })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { lengths: [0, 8] })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { petBatches: [1.5] })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { repeats: 0 })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { warmup: -1 })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, { maxMini: 0 })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    // A clock that goes backwards.
    let t = 100;
    expect(await reject(target, { now: () => (t -= 1) })).toBe('TESSERA_INVALID_PROFILE_OPTIONS');
    expect(await reject(target, {})).toBeUndefined();
  });

  it('propagates an engine failure', async () => {
    const failing: CostProfilerTarget = { petTypes: [], runShared: () => Promise.reject(new Error('engine down')), runPet: () => undefined };
    await expect(profileCostTables(failing, { batches: [1], lengths: [8], repeats: 1, warmup: 0 })).rejects.toThrow('engine down');
  });
});
