/**
 * The README's coordinated-batching example, run. Its ```ts block (the first one under "Coordinated batching
 * (PetS)") is, character for character, the `// #region coordinated-readme-example` block below (the first test
 * checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));
const errors: unknown[][] = [];
vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void errors.push(args));

// #region coordinated-readme-example
import { BatchWindow, analyticCostModel, planBatches, systemClock } from '@tessera/batcher';
import { assignPetTypes, cbTaskNames, generateCbPool } from '@tessera/batcher/bench';

// The paper's Fig. 12 workload: 1024 queries over 32 tasks, lengths ~ N(32, 4), each task a random PET type.
const types = assignPetTypes(cbTaskNames(32), ['maskbert', 'diff', 'bitfit', 'adapter'], 1);
const pool = generateCbPool({ queries: 1024, tasks: 32, meanLength: 32, stdLength: 4, seed: 1 });

// Analytic α/β in ms (a server profiles tables from its engine instead: profileCostTables).
const cost = analyticCostModel({
  a0: 8, a1: 0.019, a2: 6.4e-6, // α(N, L) = a0 + a1·N·L + a2·N·L²
  k: { maskbert: 0.5, diff: 0.5, bitfit: 0.5, adapter: 0.5 }, // β(pt, n, l) = k[pt] + m[pt]·n·l
  m: { maskbert: 1e-4, diff: 2e-4, bitfit: 3e-5, adapter: 5e-5 },
});
const petTypeOf = (task: string): string => types.get(task)!;

// Offline: plan the pool with every strategy and keep the cheapest Eq. 3 estimate.
const plan = planBatches(pool, { strategy: 'auto', cost, petTypeOf });
console.log(plan.strategy, plan.batches.length, plan.estimate.total.toFixed(1));
for (const [strategy, estimate] of Object.entries(plan.candidates!)) console.log(strategy, estimate.total.toFixed(1));

// Online: windows of at most 256 queries or 5 ms, planned with CB, one macro-batch at a time.
const batchWindow = new BatchWindow({
  maxQueries: 256, maxWaitMs: 5, clock: systemClock,
  plan: (queries) => planBatches(queries, { strategy: 'cb', cost, petTypeOf }),
  execute: async (batch, queries) => {
    // Run the engine on `queries` (rows grouped by batch.miniBatches), then resolve each query's result.
  },
  onError: (error, { queries }) => console.error(`${queries.length} queries failed`, error),
});
for (const query of pool.slice(0, 300)) batchWindow.add(query);
await batchWindow.close(); // runs what is still waiting, then resolves
console.log(batchWindow.stats()); // windows, batches, queries, failures, ...
// #endregion coordinated-readme-example

describe('README coordinated-batching example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const section = readme.slice(readme.indexOf('## Coordinated batching (PetS)'));
    const block = /```ts\n([\s\S]*?)```/.exec(section)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region coordinated-readme-example\n([\s\S]*?)\/\/ #endregion coordinated-readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(block).toBe(region);
  });

  it('printed the chosen plan, the four candidates and the window stats', () => {
    expect(printed[0]![0]).toBe('cb');
    expect(printed[0]![1]).toBe(plan.batches.length);
    const candidates = new Map(printed.slice(1, 5).map(([s, total]) => [s as string, Number(total)]));
    expect([...candidates.keys()].sort()).toEqual(['alpha-only', 'beta-only', 'cb', 'fixed']);
    const cb = candidates.get('cb')!;
    expect(Number(printed[0]![2])).toBe(cb);
    for (const total of candidates.values()) expect(total).toBeGreaterThanOrEqual(cb);
    // The ratios the README states.
    expect(candidates.get('fixed')! / cb).toBeCloseTo(1.6, 1);
    expect(candidates.get('beta-only')! / cb).toBeCloseTo(1.3, 1);
    expect(candidates.get('alpha-only')! / cb).toBeGreaterThan(1);
    expect(candidates.get('alpha-only')! / cb).toBeLessThan(1.02);
    expect(printed[5]![0]).toMatchObject({ windows: 2, queries: 300, failedWindows: 0, failedBatches: 0, pending: 0, running: false });
    expect(errors).toEqual([]);
  });
});
