/** The seeded PetS workload generator (pets.md §7 artifact facts, §10 recipe): Gaussian lengths, uniform tasks and PET types. */
import { describe, expect, it } from 'vitest';
import { assignPetTypes, cbTaskNames, generateCbPool } from '../src/bench.js';
import { PlanError } from '../src/index.js';

describe('generateCbPool / assignPetTypes', () => {
  it('draws lengths clip(round(N(mean, std)), 1, maxLength) and uniform tasks', () => {
    const pool = generateCbPool({ queries: 20000, tasks: 8, meanLength: 32, stdLength: 4, seed: 1 });
    expect(pool).toHaveLength(20000);
    const lengths = pool.map((q) => q.length);
    expect(lengths.every((l) => Number.isInteger(l) && l >= 1 && l <= 128)).toBe(true);
    const mean = lengths.reduce((s, l) => s + l, 0) / lengths.length;
    const std = Math.sqrt(lengths.reduce((s, l) => s + (l - mean) ** 2, 0) / lengths.length);
    expect(mean).toBeGreaterThan(31.8);
    expect(mean).toBeLessThan(32.2);
    expect(std).toBeGreaterThan(3.8); // rounding adds ~1/12 to the variance
    expect(std).toBeLessThan(4.3);
    const perTask = new Map<string, number>();
    for (const q of pool) perTask.set(q.task, (perTask.get(q.task) ?? 0) + 1);
    expect([...perTask.keys()].sort()).toEqual(cbTaskNames(8).sort());
    for (const count of perTask.values()) expect(Math.abs(count - 2500)).toBeLessThan(250);
    expect(pool.every((q, i) => q.id === i && q.arrival === i)).toBe(true);
  });

  it('clips at 1 and at maxLength; std 0 gives the rounded mean', () => {
    expect(generateCbPool({ queries: 500, tasks: 2, meanLength: 1, stdLength: 3, seed: 2 }).some((q) => q.length === 1)).toBe(true);
    expect(generateCbPool({ queries: 100, tasks: 2, meanLength: 40, stdLength: 2, seed: 2, maxLength: 16 }).every((q) => q.length === 16)).toBe(true);
    expect(generateCbPool({ queries: 50, tasks: ['x', 'y'], meanLength: 7.6, stdLength: 0, seed: 2 }).every((q) => q.length === 8)).toBe(true);
  });

  it('is seeded: the same seed gives the same pool, another seed another', () => {
    const a = generateCbPool({ queries: 300, tasks: ['a', 'b', 'c'], meanLength: 32, stdLength: 8, seed: 42 });
    expect(generateCbPool({ queries: 300, tasks: ['a', 'b', 'c'], meanLength: 32, stdLength: 8, seed: 42 })).toEqual(a);
    expect(generateCbPool({ queries: 300, tasks: ['a', 'b', 'c'], meanLength: 32, stdLength: 8, seed: 43 })).not.toEqual(a);
    expect(new Set(a.map((q) => q.task))).toEqual(new Set(['a', 'b', 'c']));
  });

  it('assigns PET types uniformly and reproducibly', () => {
    const tasks = cbTaskNames(4000);
    const types = ['maskbert', 'diff', 'bitfit', 'adapter'];
    const assigned = assignPetTypes(tasks, types, 1);
    expect([...assigned.keys()]).toEqual(tasks);
    const counts = new Map<string, number>();
    for (const t of assigned.values()) counts.set(t, (counts.get(t) ?? 0) + 1);
    expect([...counts.keys()].sort()).toEqual([...types].sort());
    for (const c of counts.values()) expect(Math.abs(c - 1000)).toBeLessThan(120);
    expect(assignPetTypes(tasks, types, 1)).toEqual(assigned);
    expect(assignPetTypes(tasks, types, 2)).not.toEqual(assigned);
  });

  it('rejects malformed arguments with PlanError', () => {
    const ok = { queries: 10, tasks: 2, meanLength: 32, stdLength: 1, seed: 1 };
    for (const bad of [{ queries: -1 }, { queries: 1.5 }, { tasks: 0 }, { tasks: [] }, { tasks: [''] }, { stdLength: -1 }, { meanLength: Number.NaN }, { seed: 0.5 }, { maxLength: 0 }]) {
      expect(() => generateCbPool({ ...ok, ...bad } as Parameters<typeof generateCbPool>[0])).toThrow(PlanError);
    }
    expect(() => assignPetTypes(['a'], [], 1)).toThrow(PlanError);
    expect(() => assignPetTypes(['a', 'a'], ['x'], 1)).toThrow(/appears twice/);
    expect(generateCbPool({ ...ok, queries: 0 })).toEqual([]);
  });
});
