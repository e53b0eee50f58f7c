/**
 * profilePetsCostTables: PetS's start-up profiling recipe (the grid of petsProfileGrid, the caps, progress lines
 * every tenth of the cells) over an injected target; no engine here.
 */
import { describe, expect, it } from 'vitest';

import { PETS_MAX_MACRO, PETS_MAX_MINI, petsProfileGrid, profilePetsCostTables, tableCostModel } from '../src/index.js';

describe('profilePetsCostTables', () => {
  it('times every cell of the start-up grid, caps at the PetS batch limits and reports progress by tenths', async () => {
    const shared: [number, number][] = [];
    const pet: [string, number, number][] = [];
    const target = {
      petTypes: ['adapter', 'bitfit'],
      runShared: (N: number, L: number) => void shared.push([N, L]),
      runPet: (type: string, n: number, l: number) => void pet.push([type, n, l]),
    };
    const lines: string[] = [];
    const tables = await profilePetsCostTables(target, 64, (line) => lines.push(line));
    const grid = petsProfileGrid(64);
    // One warm-up and three timed runs per cell.
    expect(shared).toHaveLength(4 * grid.batches.length * grid.lengths.length);
    expect(pet).toHaveLength(4 * 2 * grid.petBatches.length * grid.petLengths.length);
    expect([...tables.beta.keys()]).toEqual(['adapter', 'bitfit']);
    const cost = tableCostModel(tables.alpha, tables.beta);
    expect(cost.alpha(PETS_MAX_MACRO, 64)).toBeLessThan(Infinity);
    expect(cost.alpha(PETS_MAX_MACRO + 1, 64)).toBe(Infinity);
    expect(cost.beta('adapter', PETS_MAX_MINI + 1, 16)).toBe(Infinity);
    expect(lines.length).toBeGreaterThanOrEqual(10);
    expect(lines.length).toBeLessThanOrEqual(11);
    expect(lines.at(-1)).toMatch(/^profiling α\/β tables: (\d+)\/\1 cells \(100%\)$/);
  });
});
