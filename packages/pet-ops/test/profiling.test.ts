/**
 * α/β profiling runs (pets.md §4): petsCostProfilerTarget drives the engine's shared-only and PET-only runs for
 * every type over a grid, as @tessera/batcher's profileCostTables does. No timing is asserted.
 */
import { allocatorStats } from '@tessera/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PetEngine, petsCostProfilerTarget } from '../src/engine/pet-engine.js';
import { PET_TYPES } from '../src/types.js';
import { type EngineFixture, TAG, engineFixture } from './engine-fixture.js';

let fx: EngineFixture;
let engine: PetEngine;

beforeAll(() => {
  fx = engineFixture(PET_TYPES);
  engine = new PetEngine(fx.tasks, TAG);
}, 30_000);
afterAll(() => {
  engine?.dispose();
  fx?.dispose();
});

describe('petsCostProfilerTarget', () => {
  it('lists the loaded types and runs every type and grid point', async () => {
    const target = petsCostProfilerTarget(engine);
    expect([...target.petTypes].sort()).toEqual([...PET_TYPES].sort());
    for (const N of [1, 3]) for (const L of [1, 16, 128]) await target.runShared(N, L);
    for (const type of target.petTypes) {
      for (const n of [1, 2, 4]) for (const l of [1, 8, 32]) await target.runPet(type, n, l);
    }
  });

  it('times several identical segments per β run while they are small, and says how many', () => {
    const target = petsCostProfilerTarget(engine);
    // Up to 8 segments while their rows stay under 2048; one once a segment is that large on its own.
    expect(target.runPet('maskbert', 1, 8)).toBe(8);
    expect(target.runPet('adapter', 16, 32)).toBe(4);
    expect(target.runPet('diff', 32, 64)).toBe(1);
    for (const type of target.petTypes) expect(() => engine.runPetOnly(type as never, 2, 8, { segments: 3 })).not.toThrow();
    expect(() => engine.runPetOnly('adapter', 2, 8, { segments: 0 })).toThrow(/segments must be a positive integer/);
  });

  it('frees everything a run allocated (the scratch stays until dispose)', () => {
    const target = petsCostProfilerTarget(engine, ['maskbert', 'prefix']);
    expect(target.petTypes).toEqual(['maskbert', 'prefix']);
    target.runPet('prefix', 4, 32); // grows the scratch to its largest size first
    const inUse = allocatorStats().inUse;
    target.runShared(2, 8);
    target.runPet('maskbert', 4, 32);
    target.runPet('prefix', 2, 16);
    expect(allocatorStats().inUse).toBe(inUse);
  });

  it('rejects types it does not profile and bad sizes', () => {
    const target = petsCostProfilerTarget(engine, ['adapter']);
    expect(() => target.runPet('bitfit', 1, 1)).toThrow(/type "bitfit" is not profiled/);
    expect(() => target.runShared(0, 8)).toThrow(/N must be a positive integer/);
    expect(() => target.runShared(1, 129)).toThrow(/L = 129 exceeds the model's 128 positions/);
    expect(() => engine.runPetOnly('adapter', 2, 0)).toThrow(/l must be a positive integer/);
    fx.tasks.unloadTask(fx.ids[PET_TYPES.indexOf('diff')]!);
    try {
      expect(() => engine.runPetOnly('diff', 1, 1)).toThrow(/no loaded task of type "diff"/);
      expect(petsCostProfilerTarget(engine).petTypes).not.toContain('diff');
    } finally {
      fx.tasks.loadTasks([fx.ids[PET_TYPES.indexOf('diff')]!]);
    }
  });
});
