/**
 * PetS coordinated batching (pets.md §5, §9 behaviours 9–13): the worked toy example of §5.4, both DPs against
 * brute force over every contiguous partition (caps making some infinite), the baselines' structure, the ordering
 * of the strategies' Eq. 3 estimates on Fig. 12-style pools, 'auto', determinism and validation.
 */
import { rng } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import {
  type CbQuery, type CostModel, CostModelError, CostTable, type MacroBatch, type MiniBatch, PlanError, type PlanOptions,
  analyticCostModel, estimateCost, interTaskBatching, intraTaskBatching, planBatches, tableCostModel,
} from '../src/index.js';
import { assignPetTypes, cbTaskNames, generateCbPool } from '../src/bench.js';

const lengthsOf = (qs: readonly CbQuery[]): number[] => qs.map((q) => q.length);
const shape = (batches: readonly MacroBatch[]): string[][] =>
  batches.map((b) => b.miniBatches.map((m) => `${m.task}:${lengthsOf(m.queries).join(',')}`));

function planErrorCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(PlanError);
    return (err as PlanError).code;
  }
  return undefined;
}

/** Every way to cut n items into contiguous groups, as lists of [start, end). */
function* contiguousPartitions(n: number): Generator<[number, number][]> {
  for (let mask = 0; mask < 1 << (n - 1); mask++) {
    const groups: [number, number][] = [];
    let start = 0;
    for (let i = 1; i < n; i++) {
      if (mask & (1 << (i - 1))) {
        groups.push([start, i]);
        start = i;
      }
    }
    groups.push([start, n]);
    yield groups;
  }
}

/** A random increasing grid of `count` points from 1..max, always including `must` if given. */
function randomGrid(next: () => number, max: number, count: number): number[] {
  const set = new Set<number>();
  while (set.size < count) set.add(1 + Math.floor(next() * max));
  return [...set].sort((a, b) => a - b);
}

function randomTable(next: () => number, maxBatch: number, maxLength: number, cap?: number): CostTable {
  const batches = randomGrid(next, maxBatch, 1 + Math.floor(next() * 4));
  const lengths = randomGrid(next, maxLength, 1 + Math.floor(next() * 4));
  // Not monotone on purpose: the DPs are exact over contiguous partitions whatever the costs.
  const values = Array.from({ length: batches.length * lengths.length }, () => Math.round(next() * 1000) / 10);
  return new CostTable(cap === undefined ? { batches, lengths, values } : { batches, lengths, values, cap });
}

// ---------------------------------------------------------------------------------------------------------------

describe('the worked toy example (pets.md §5.4)', () => {
  // β = 10 + 0.01·n·l (launch-dominated), α = 5 + 0.1·N·L.
  const cost = analyticCostModel({ a0: 5, a1: 0.1, a2: 0, k: { adapter: 10, bitfit: 10 }, m: { adapter: 0.01, bitfit: 0.01 } });
  const queries: CbQuery[] = [
    { id: 'a8', task: 'A', length: 8 }, { id: 'a9', task: 'A', length: 9 }, { id: 'a30', task: 'A', length: 30 },
    { id: 'b10', task: 'B', length: 10 }, { id: 'b31', task: 'B', length: 31 },
  ];
  const petTypeOf = (t: string): string => (t === 'A' ? 'adapter' : 'bitfit');
  const alpha = (N: number, L: number): number => 5 + 0.1 * N * L;
  const beta = (n: number, l: number): number => 10 + 0.01 * n * l;

  it('Step 1 keeps each task whole; Step 2 merges them into one macro-batch at L = 31', () => {
    const a = intraTaskBatching(queries.slice(0, 3), 'adapter', cost);
    const b = intraTaskBatching(queries.slice(3), 'bitfit', cost);
    expect(a.map((m) => lengthsOf(m.queries))).toEqual([[8, 9, 30]]);
    expect(b.map((m) => lengthsOf(m.queries))).toEqual([[10, 31]]);
    const macros = interTaskBatching([...a, ...b], cost);
    expect(shape(macros)).toEqual([['A:8,9,30', 'B:10,31']]);
    expect(macros[0]!.maxLength).toBe(31);
    expect(macros[0]!.size).toBe(5);
  });

  it('α-only: Step 2 over singletons gives [A8, A9, B10] and [A30, B31]', () => {
    const singletons: MiniBatch[] = queries.map((q) => ({ task: q.task, petType: petTypeOf(q.task), queries: [q], maxLength: q.length }));
    expect(shape(interTaskBatching(singletons, cost))).toEqual([['A:8', 'A:9', 'B:10'], ['A:30', 'B:31']]);
  });

  it('Eq. 3: CB ≈ 42.0 and α-only ≈ 60.1, each exactly as the stated models give', () => {
    const cb = planBatches(queries, { strategy: 'cb', cost, petTypeOf });
    expect(shape(cb.batches)).toEqual([['A:8,9,30', 'B:10,31']]);
    const cbAlpha = alpha(5, 31);
    const cbBeta = beta(3, 30) + beta(2, 31);
    expect(cb.estimate.alpha).toBeCloseTo(cbAlpha, 9);
    expect(cb.estimate.beta).toBeCloseTo(cbBeta, 9);
    expect(cb.estimate.total).toBeCloseTo(cbAlpha + cbBeta, 9);
    expect(cb.estimate.total).toBeCloseTo(42.02, 9);

    const ao = planBatches(queries, { strategy: 'alpha-only', cost, petTypeOf });
    // After merging: one segment per (macro-batch, task): {8,9}, {10} | {30}, {31}.
    expect(shape(ao.batches)).toEqual([['A:8,9', 'B:10'], ['A:30', 'B:31']]);
    const aoAlpha = alpha(3, 10) + alpha(2, 31);
    const aoBeta = beta(2, 9) + beta(1, 10) + beta(1, 30) + beta(1, 31);
    expect(ao.estimate.alpha).toBeCloseTo(aoAlpha, 9);
    expect(ao.estimate.beta).toBeCloseTo(aoBeta, 9);
    expect(ao.estimate.total).toBeCloseTo(60.09, 9);
    // α-only wins the shared part (19.2 < 20.5) and loses overall.
    expect(ao.estimate.alpha).toBeLessThan(cb.estimate.alpha);
  });

  it("'auto' keeps CB; an equal Fixed estimate loses the tie", () => {
    const plan = planBatches(queries, { strategy: 'auto', cost, petTypeOf });
    expect(plan.strategy).toBe('cb');
    expect(plan.candidates!.cb!.total).toBeCloseTo(42.02, 9);
    expect(plan.candidates!['alpha-only']!.total).toBeCloseTo(60.09, 9);
    // Five queries in one Fixed chunk of 32 is the same plan as CB's.
    expect(plan.candidates!.fixed!.total).toBe(plan.candidates!.cb!.total);
    expect(plan.candidates!['beta-only']!.total).toBeCloseTo(alpha(3, 30) + alpha(2, 31) + beta(3, 30) + beta(2, 31), 9);
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe('Step 1 (intra-task, Eq. 4) against brute force', () => {
  it('finds a minimal-β contiguous partition of the length-sorted queries, within maxMini (400 seeded instances)', () => {
    const next = rng(11);
    let infeasible = 0;
    let capsBit = 0;
    for (let instance = 0; instance < 400; instance++) {
      const n = 1 + Math.floor(next() * 10);
      // The table's own +∞ cap; below 1 even single queries are unpriceable.
      const r = next();
      const cap = r < 0.05 ? 0.5 : r < 0.35 ? 1 + Math.floor(next() * 6) : undefined;
      const betaTable = randomTable(next, 12, 40, cap);
      const cost = tableCostModel(new CostTable({ batches: [1], lengths: [1], values: [0] }), { pt: betaTable });
      const maxMini = 1 + Math.floor(next() * (n + 1));
      // Ties in length on purpose (lengths from a small range), arrival given for some.
      const queries: CbQuery[] = Array.from({ length: n }, (_, i) => ({ id: `q${i}`, task: 't', length: 1 + Math.floor(next() * 12) }));
      const sorted = queries.map((q, i) => ({ q, i })).sort((a, b) => a.q.length - b.q.length || a.i - b.i).map((x) => x.q);

      let best = Infinity;
      let someInfinite = false;
      for (const groups of contiguousPartitions(n)) {
        let total = 0;
        for (const [s, e] of groups) total += e - s > maxMini ? Infinity : cost.beta('pt', e - s, sorted[e - 1]!.length);
        best = Math.min(best, total);
        someInfinite ||= total === Infinity;
      }
      if (someInfinite) capsBit++;
      if (best === Infinity) {
        infeasible++;
        expect(planErrorCode(() => intraTaskBatching(queries, 'pt', cost, maxMini))).toBe('TESSERA_PLAN_INFEASIBLE');
        continue;
      }
      const minis = intraTaskBatching(queries, 'pt', cost, maxMini);
      // A contiguous partition of the sorted list, each group within the cap, maxLength its last (= max) length.
      expect(minis.flatMap((m) => m.queries)).toEqual(sorted);
      let total = 0;
      for (const m of minis) {
        expect(m.queries.length).toBeLessThanOrEqual(maxMini);
        expect(m.maxLength).toBe(Math.max(...lengthsOf(m.queries)));
        expect(m.task).toBe('t');
        expect(m.petType).toBe('pt');
        total += cost.beta('pt', m.queries.length, m.maxLength);
      }
      expect(total).toBeCloseTo(best, 9);
    }
    // The caps made some partitions infinite in many instances, and every partition in a few.
    expect(capsBit).toBeGreaterThan(100);
    expect(infeasible).toBeGreaterThan(0);
    expect(infeasible).toBeLessThan(50);
  });

  it("breaks ties with strict '<': the earliest split, i.e. the largest last group", () => {
    // β = n: every partition costs n, so every candidate ties.
    const linear: CostModel = { alpha: () => 0, beta: (_pt, n) => n };
    const queries = Array.from({ length: 7 }, (_, i) => ({ id: i, task: 't', length: 10 + i }));
    expect(intraTaskBatching(queries, 'x', linear, 100).map((m) => m.queries.length)).toEqual([7]);
    // With a cap of 3 the backtrack takes the largest group allowed from the end: 1 + 3 + 3.
    expect(intraTaskBatching(queries, 'x', linear, 3).map((m) => m.queries.length)).toEqual([1, 3, 3]);
  });

  it('sorts by length, then arrival, then input position', () => {
    const cost: CostModel = { alpha: () => 0, beta: () => 1 };
    const queries: CbQuery[] = [
      { id: 'late', task: 't', length: 5, arrival: 9 }, { id: 'long', task: 't', length: 6, arrival: 0 },
      { id: 'early', task: 't', length: 5, arrival: 1 }, { id: 'tie', task: 't', length: 5, arrival: 1 },
    ];
    expect(intraTaskBatching(queries, 'x', cost)[0]!.queries.map((q) => q.id)).toEqual(['early', 'tie', 'late', 'long']);
  });

  it('rejects mixed tasks and returns nothing for no queries', () => {
    const cost: CostModel = { alpha: () => 0, beta: () => 1 };
    expect(intraTaskBatching([], 'x', cost)).toEqual([]);
    expect(planErrorCode(() => intraTaskBatching([{ id: 1, task: 'a', length: 1 }, { id: 2, task: 'b', length: 1 }], 'x', cost))).toBe('TESSERA_INVALID_QUERY');
    expect(planErrorCode(() => intraTaskBatching([{ id: 1, task: 'a', length: 1 }], 'x', cost, 0))).toBe('TESSERA_INVALID_PLAN_OPTIONS');
  });
});

describe('Step 2 (inter-task, Eq. 5) against brute force', () => {
  it('finds a minimal-α contiguous partition of the sorted mini-batches, within maxMacro (400 seeded instances)', () => {
    const next = rng(23);
    let infeasible = 0;
    let id = 0;
    for (let instance = 0; instance < 400; instance++) {
      const M = 1 + Math.floor(next() * 10);
      const minis: MiniBatch[] = [];
      for (let i = 0; i < M; i++) {
        const task = `t${Math.floor(next() * 3)}`;
        const size = 1 + Math.floor(next() * 4);
        const queries = Array.from({ length: size }, () => ({ id: id++, task, length: 1 + Math.floor(next() * 10) }));
        minis.push({ task, petType: 'pt', queries, maxLength: Math.max(...lengthsOf(queries)) });
      }
      const totalQueries = minis.reduce((s, m) => s + m.queries.length, 0);
      const cap = next() < 0.3 ? 1 + Math.floor(next() * 8) : undefined;
      const alphaTable = randomTable(next, 16, 12, cap);
      const cost = tableCostModel(alphaTable, {});
      const maxMacro = 1 + Math.floor(next() * (totalQueries + 1));
      const sorted = minis.map((m, i) => ({ m, i })).sort((a, b) => a.m.maxLength - b.m.maxLength || a.i - b.i).map((x) => x.m);

      let best = Infinity;
      for (const groups of contiguousPartitions(M)) {
        let total = 0;
        for (const [s, e] of groups) {
          let N = 0;
          for (let k = s; k < e; k++) N += sorted[k]!.queries.length;
          total += N > maxMacro ? Infinity : cost.alpha(N, sorted[e - 1]!.maxLength);
        }
        best = Math.min(best, total);
      }
      if (best === Infinity) {
        infeasible++;
        expect(planErrorCode(() => interTaskBatching(minis, cost, maxMacro))).toBe('TESSERA_PLAN_INFEASIBLE');
        continue;
      }
      const macros = interTaskBatching(minis, cost, maxMacro);
      expect(macros.flatMap((b) => b.miniBatches)).toEqual(sorted); // contiguous, same objects, sorted order
      const seen = new Set<CbQuery>();
      let total = 0;
      for (const b of macros) {
        expect(b.maxLength).toBe(Math.max(...b.miniBatches.map((m) => m.maxLength)));
        expect(b.size).toBe(b.miniBatches.reduce((s, m) => s + m.queries.length, 0));
        expect(b.size).toBeLessThanOrEqual(maxMacro);
        for (const m of b.miniBatches) for (const q of m.queries) seen.add(q);
        total += cost.alpha(b.size, b.maxLength);
      }
      expect(seen.size).toBe(totalQueries); // every query exactly once
      expect(total).toBeCloseTo(best, 9);
    }
    expect(infeasible).toBeGreaterThan(0);
    expect(infeasible).toBeLessThan(200);
  });

  it('rejects malformed mini-batches', () => {
    const cost: CostModel = { alpha: () => 1, beta: () => 1 };
    const q = { id: 1, task: 'a', length: 4 };
    const code = (minis: unknown): string | undefined => planErrorCode(() => interTaskBatching(minis as MiniBatch[], cost));
    expect(code([{ task: 'a', petType: 'p', queries: [], maxLength: 1 }])).toBe('TESSERA_INVALID_MINI_BATCH');
    expect(code([{ task: 'a', petType: 'p', queries: [q], maxLength: 5 }])).toBe('TESSERA_INVALID_MINI_BATCH');
    expect(code([{ task: 'b', petType: 'p', queries: [q], maxLength: 4 }])).toBe('TESSERA_INVALID_MINI_BATCH');
    expect(code([{ task: 'a', petType: 'p', queries: [q], maxLength: 4 }, { task: 'a', petType: 'p', queries: [q], maxLength: 4 }])).toBe('TESSERA_INVALID_MINI_BATCH');
    expect(interTaskBatching([], cost)).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------------------------------

const PET_TYPES = ['maskbert', 'diff', 'bitfit', 'adapter'];
/** Fig. 12-like analytic costs: α padding-sensitive (quadratic attention term), β launch-heavy. */
const fig12Cost = analyticCostModel({
  a0: 8, a1: 0.019, a2: 6.4e-6,
  k: { maskbert: 0.5, diff: 0.5, bitfit: 0.5, adapter: 0.5 },
  m: { maskbert: 1e-4, diff: 2e-4, bitfit: 3e-5, adapter: 5e-5 },
});

function fig12Options(tasks: number, strategy: PlanOptions['strategy']): PlanOptions {
  const types = assignPetTypes(cbTaskNames(tasks), PET_TYPES, 1);
  return { strategy, cost: fig12Cost, petTypeOf: (t) => types.get(t)! };
}

/** Every query exactly once; caps respected; macro fields consistent. */
function expectWellFormed(queries: readonly CbQuery[], batches: readonly MacroBatch[], maxMini: number, maxMacro: number): void {
  const seen = new Set<CbQuery>();
  for (const b of batches) {
    expect(b.size).toBeLessThanOrEqual(maxMacro);
    let size = 0;
    let maxLength = 0;
    for (const m of b.miniBatches) {
      expect(m.queries.length).toBeGreaterThan(0);
      expect(m.queries.length).toBeLessThanOrEqual(maxMini);
      expect(m.maxLength).toBe(Math.max(...lengthsOf(m.queries)));
      for (const q of m.queries) {
        expect(q.task).toBe(m.task);
        expect(seen.has(q)).toBe(false);
        seen.add(q);
      }
      size += m.queries.length;
      maxLength = Math.max(maxLength, m.maxLength);
    }
    expect(b.size).toBe(size);
    expect(b.maxLength).toBe(maxLength);
  }
  expect(seen.size).toBe(queries.length);
}

describe('the strategies (pets.md §5.2, behaviour 11)', () => {
  const pool = generateCbPool({ queries: 300, tasks: 24, meanLength: 32, stdLength: 6, seed: 5 });
  const options = fig12Options(24, 'cb');
  const petTypeOf = options.petTypeOf;

  it('fixed: arrival-order chunks of fixedSize, the last partial chunk kept, same-task queries merged', () => {
    // Arrival order differs from input order here, to check chunks follow arrival.
    const shuffled = pool.map((q, i) => ({ ...q, arrival: (i * 7919) % pool.length }));
    const plan = planBatches(shuffled, { ...options, strategy: 'fixed' });
    const byArrival = [...shuffled].sort((a, b) => a.arrival - b.arrival);
    expect(plan.batches.map((b) => b.size)).toEqual([32, 32, 32, 32, 32, 32, 32, 32, 32, 12]);
    plan.batches.forEach((b, i) => {
      const chunk = byArrival.slice(32 * i, 32 * (i + 1));
      expect(new Set(b.miniBatches.flatMap((m) => m.queries))).toEqual(new Set(chunk));
      expect(b.miniBatches.map((m) => m.task)).toEqual([...new Set(chunk.map((q) => q.task))]); // one segment per task
    });
    expectWellFormed(shuffled, plan.batches, 32, 128);
    expect(planBatches(shuffled, { ...options, strategy: 'fixed', fixedSize: 100 }).batches.map((b) => b.size)).toEqual([100, 100, 100]);
  });

  it('beta-only: Step 1 output, one mini-batch per macro-batch', () => {
    const plan = planBatches(pool, { ...options, strategy: 'beta-only' });
    const step1 = cbTaskNames(24).flatMap((t) => {
      const qs = pool.filter((q) => q.task === t);
      return qs.length === 0 ? [] : intraTaskBatching(qs, petTypeOf(t), fig12Cost, 32);
    });
    expect(plan.batches.every((b) => b.miniBatches.length === 1)).toBe(true);
    const key = (m: MiniBatch): string => m.queries.map((q) => q.id).join(',');
    expect(plan.batches.map((b) => key(b.miniBatches[0]!)).sort()).toEqual(step1.map(key).sort());
    const lengths = plan.batches.map((b) => b.maxLength);
    expect(lengths).toEqual([...lengths].sort((a, b) => a - b));
    expectWellFormed(pool, plan.batches, 32, 128);
  });

  it('cb: Step 2 over the Step 1 mini-batches, each kept as its own segment', () => {
    const plan = planBatches(pool, { ...options, strategy: 'cb' });
    const step1 = planBatches(pool, { ...options, strategy: 'beta-only' }).batches.map((b) => b.miniBatches[0]!);
    expect(plan.batches).toEqual(interTaskBatching(step1, fig12Cost, 128));
    expectWellFormed(pool, plan.batches, 32, 128);
  });

  it('alpha-only: Step 2 over singletons, then one segment per (macro-batch, task)', () => {
    const plan = planBatches(pool, { ...options, strategy: 'alpha-only' });
    const singletons: MiniBatch[] = pool.map((q) => ({ task: q.task, petType: petTypeOf(q.task), queries: [q], maxLength: q.length }));
    const stepTwo = interTaskBatching(singletons, fig12Cost, 128);
    expect(plan.batches.length).toBe(stepTwo.length);
    plan.batches.forEach((b, i) => {
      const expected = stepTwo[i]!.miniBatches.map((m) => m.queries[0]!);
      expect(new Set(b.miniBatches.flatMap((m) => m.queries))).toEqual(new Set(expected));
      expect(b.maxLength).toBe(stepTwo[i]!.maxLength);
      expect(new Set(b.miniBatches.map((m) => m.task)).size).toBe(b.miniBatches.length);
    });
    expectWellFormed(pool, plan.batches, 32, 128);
  });

  it('merged segments over maxMini are cut into chunks of maxMini', () => {
    const same = Array.from({ length: 10 }, (_, i) => ({ id: i, task: 'only', length: 16 }));
    const cheapAlpha = analyticCostModel({ a0: 100, a1: 0, a2: 0, k: { x: 0 }, m: { x: 1 } });
    for (const strategy of ['alpha-only', 'fixed'] as const) {
      const plan = planBatches(same, { strategy, cost: cheapAlpha, petTypeOf: () => 'x', maxMini: 4 });
      expect(plan.batches.map((b) => b.miniBatches.map((m) => m.queries.length))).toEqual([[4, 4, 2]]);
    }
  });

  it('respects maxMini and maxMacro in every strategy', () => {
    const big = generateCbPool({ queries: 400, tasks: 3, meanLength: 20, stdLength: 2, seed: 9 });
    const flat = analyticCostModel({ a0: 10, a1: 0, a2: 0, k: { x: 10 }, m: { x: 0 } }); // bigger is always better
    for (const strategy of ['cb', 'alpha-only', 'beta-only', 'fixed'] as const) {
      const plan = planBatches(big, { strategy, cost: flat, petTypeOf: () => 'x', maxMini: 16, maxMacro: 48, fixedSize: 48 });
      expectWellFormed(big, plan.batches, 16, 48);
    }
  });
});

describe("Eq. 3 estimates on Fig. 12 pools (behaviour 12) and 'auto'", () => {
  it('CB ≤ Fixed and CB ≤ β-only on every pool; auto returns the cheapest candidate', () => {
    for (const tasks of [32, 64, 128]) {
      for (const std of [1, 2, 4, 8]) {
        for (const seed of [1, 2]) {
          const pool = generateCbPool({ queries: 1024, tasks, meanLength: 32, stdLength: std, seed });
          const plan = planBatches(pool, fig12Options(tasks, 'auto'));
          const c = plan.candidates!;
          expect(Object.keys(c).sort()).toEqual(['alpha-only', 'beta-only', 'cb', 'fixed']);
          expect(c.cb!.total).toBeLessThanOrEqual(c.fixed!.total);
          expect(c.cb!.total).toBeLessThanOrEqual(c['beta-only']!.total);
          const cheapest = Math.min(...Object.values(c).map((e) => e.total));
          expect(plan.estimate.total).toBe(cheapest);
          expect(c[plan.strategy]).toEqual(plan.estimate);
          expect(estimateCost(plan.batches, fig12Cost)).toEqual(plan.estimate);
          expectWellFormed(pool, plan.batches, 32, 128);
        }
      }
    }
  });

  it('CB beats α-only at low length spread and loses at high spread (the §5.3 selection rule)', () => {
    for (const seed of [1, 2, 3]) {
      const ratio = (std: number): number => {
        const pool = generateCbPool({ queries: 1024, tasks: 32, meanLength: 32, stdLength: std, seed });
        const c = planBatches(pool, fig12Options(32, 'auto')).candidates!;
        return c['alpha-only']!.total / c.cb!.total;
      };
      const ratios = [1, 2, 4, 8].map(ratio);
      expect(ratios[0]).toBeGreaterThan(1);
      expect(ratios[3]).toBeLessThan(1);
      expect(ratios[0]).toBeGreaterThan(ratios[3]!);
    }
    const pool = (std: number): CbQuery[] => generateCbPool({ queries: 1024, tasks: 32, meanLength: 32, stdLength: std, seed: 1 });
    expect(planBatches(pool(1), fig12Options(32, 'auto')).strategy).toBe('cb');
    expect(planBatches(pool(8), fig12Options(32, 'auto')).strategy).toBe('alpha-only');
  });

  it('skips a candidate the cost model cannot price and picks among the rest', () => {
    // α is +∞ above 4 rows: one task's 10 queries form one mini-batch of 10 in Step 1 (β launch-heavy), so CB
    // has no feasible Step 2, β-only and Fixed price at +∞, and only α-only (singletons) fits.
    const alphaTable = new CostTable({ batches: [1, 4], lengths: [64], values: [1, 2] });
    const betaTable = new CostTable({ batches: [1, 32], lengths: [64], values: [100, 101] });
    const cost = tableCostModel(alphaTable, { x: betaTable });
    const queries = Array.from({ length: 10 }, (_, i) => ({ id: i, task: 't', length: 8 }));
    const plan = planBatches(queries, { strategy: 'auto', cost, petTypeOf: () => 'x' });
    expect(plan.strategy).toBe('alpha-only');
    // Three macro-batches of α = 2 in any order tie; strict '<' keeps the earliest split: 2 + 4 + 4.
    expect(plan.batches.map((b) => b.size)).toEqual([2, 4, 4]);
    expect(plan.candidates!.cb).toBeUndefined();
    expect(plan.candidates!['beta-only']!.total).toBe(Infinity);
    expect(plan.candidates!.fixed!.total).toBe(Infinity);
    expect(planErrorCode(() => planBatches(queries, { strategy: 'cb', cost, petTypeOf: () => 'x' }))).toBe('TESSERA_PLAN_INFEASIBLE');
    expect(planErrorCode(() => planBatches(queries, { strategy: 'fixed', cost, petTypeOf: () => 'x' }))).toBe('TESSERA_PLAN_INFEASIBLE');
    const none = tableCostModel(alphaTable, { x: new CostTable({ batches: [1], lengths: [64], values: [1], cap: 0.5 }) });
    expect(planErrorCode(() => planBatches(queries, { strategy: 'auto', cost: none, petTypeOf: () => 'x' }))).toBe('TESSERA_PLAN_INFEASIBLE');
  });
});

describe('planBatches: determinism, cost, validation', () => {
  it('is a function of (length, arrival): a shuffled input plans the same', () => {
    const pool = generateCbPool({ queries: 500, tasks: 16, meanLength: 32, stdLength: 4, seed: 3 });
    const next = rng(4);
    const shuffled = [...pool];
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = Math.floor(next() * (i + 1));
      [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
    }
    const ids = (b: readonly MacroBatch[]): unknown => b.map((m) => m.miniBatches.map((mb) => [mb.task, mb.queries.map((q) => q.id)]));
    for (const strategy of ['cb', 'alpha-only', 'beta-only', 'fixed'] as const) {
      const a = planBatches(pool, fig12Options(16, strategy));
      const b = planBatches(shuffled, fig12Options(16, strategy));
      expect(ids(b.batches)).toEqual(ids(a.batches));
      expect(b.estimate).toEqual(a.estimate);
    }
  });

  it('plans R = 1024 with O(R·cap) cost-model calls', () => {
    const pool = generateCbPool({ queries: 1024, tasks: 64, meanLength: 32, stdLength: 8, seed: 8 });
    const types = assignPetTypes(cbTaskNames(64), PET_TYPES, 1);
    let calls = 0;
    const counting: CostModel = {
      alpha: (N, L) => (calls++, fig12Cost.alpha(N, L)),
      beta: (pt, n, l) => (calls++, fig12Cost.beta(pt, n, l)),
    };
    for (const strategy of ['cb', 'alpha-only'] as const) {
      calls = 0;
      const plan = planBatches(pool, { strategy, cost: counting, petTypeOf: (t) => types.get(t)! });
      // Step 1 ≤ R·maxMini, Step 2 ≤ R·maxMacro, Eq. 3 ≤ 2R.
      expect(calls).toBeLessThanOrEqual(1024 * (32 + 128) + 2 * 1024);
      expect(plan.batches.length).toBeGreaterThan(0);
    }
  });

  it('plans an empty pool as no batches', () => {
    for (const strategy of ['cb', 'alpha-only', 'beta-only', 'fixed', 'auto'] as const) {
      const plan = planBatches([], { strategy, cost: fig12Cost, petTypeOf: () => 'x' });
      expect(plan.batches).toEqual([]);
      expect(plan.estimate).toEqual({ alpha: 0, beta: 0, total: 0 });
      expect(plan.strategy).toBe(strategy === 'auto' ? 'cb' : strategy);
    }
  });

  it('rejects malformed queries with TESSERA_INVALID_QUERY / TESSERA_DUPLICATE_QUERY', () => {
    const opts = fig12Options(4, 'cb');
    const code = (qs: unknown[]): string | undefined => planErrorCode(() => planBatches(qs as CbQuery[], opts));
    for (const length of [0, -3, 1.5, Number.NaN, Infinity, '8']) expect(code([{ id: 1, task: 'task0', length }])).toBe('TESSERA_INVALID_QUERY');
    expect(code([{ id: 1, task: '', length: 3 }])).toBe('TESSERA_INVALID_QUERY');
    expect(code([{ id: null, task: 'task0', length: 3 }])).toBe('TESSERA_INVALID_QUERY');
    expect(code([{ id: 1, task: 'task0', length: 3, arrival: Number.NaN }])).toBe('TESSERA_INVALID_QUERY');
    expect(code([null])).toBe('TESSERA_INVALID_QUERY');
    expect(code([{ id: 'x', task: 'task0', length: 3 }, { id: 'x', task: 'task1', length: 4 }])).toBe('TESSERA_DUPLICATE_QUERY');
    expect(() => planBatches([{ id: 'q7', task: 'task0', length: 0 }], opts)).toThrow(/query 'q7'.*length must be an integer >= 1/);
  });

  it('reports an unknown task with TESSERA_UNKNOWN_TASK (cause: petTypeOf’s error)', () => {
    const cause = new Error('no such task');
    let err: unknown;
    try {
      planBatches([{ id: 1, task: 'ghost', length: 4 }], { strategy: 'cb', cost: fig12Cost, petTypeOf: () => { throw cause; } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PlanError);
    expect((err as PlanError).code).toBe('TESSERA_UNKNOWN_TASK');
    expect((err as PlanError).cause).toBe(cause);
    expect((err as PlanError).message).toMatch(/'ghost'/);
    expect(planErrorCode(() => planBatches([{ id: 1, task: 'a', length: 4 }], { strategy: 'cb', cost: fig12Cost, petTypeOf: () => '' }))).toBe('TESSERA_UNKNOWN_TASK');
  });

  it("lets the cost model's own errors through (unknown PET type, NaN)", () => {
    const q = [{ id: 1, task: 'a', length: 4 }];
    expect(() => planBatches(q, { strategy: 'cb', cost: fig12Cost, petTypeOf: () => 'lora' })).toThrow(CostModelError);
    const nan: CostModel = { alpha: () => Number.NaN, beta: () => 1 };
    expect(() => planBatches(q, { strategy: 'cb', cost: nan, petTypeOf: () => 'x' })).toThrow(/NaN for α\(1, 4\)/);
  });

  it('rejects malformed options with TESSERA_INVALID_PLAN_OPTIONS', () => {
    const q = [{ id: 1, task: 'a', length: 4 }];
    const base = { strategy: 'cb' as const, cost: fig12Cost, petTypeOf: () => 'adapter' };
    const code = (o: Record<string, unknown>): string | undefined => planErrorCode(() => planBatches(q, { ...base, ...o } as PlanOptions));
    expect(code({ strategy: 'greedy' })).toBe('TESSERA_INVALID_PLAN_OPTIONS');
    expect(code({ cost: {} })).toBe('TESSERA_INVALID_PLAN_OPTIONS');
    expect(code({ petTypeOf: 'adapter' })).toBe('TESSERA_INVALID_PLAN_OPTIONS');
    expect(code({ maxMini: 0 })).toBe('TESSERA_INVALID_PLAN_OPTIONS');
    expect(code({ maxMacro: 2.5 })).toBe('TESSERA_INVALID_PLAN_OPTIONS');
    expect(code({ fixedSize: 200 })).toBe('TESSERA_INVALID_PLAN_OPTIONS'); // > maxMacro 128
    // Without an explicit fixedSize, a small maxMacro lowers the default chunk.
    expect(planBatches(q, { ...base, strategy: 'fixed', maxMacro: 8 }).batches).toHaveLength(1);
  });
});
