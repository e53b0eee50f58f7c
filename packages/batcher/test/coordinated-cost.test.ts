/**
 * The α/β cost models of coordinated batching: CostTable's look-up rule (pets.md §9 behaviour 13: exact hit,
 * round up batch then length, clamp past the grid, +∞ above the cap), its JSON round trip and validation, and the
 * table-backed and analytic CostModels.
 */
import { describe, expect, it } from 'vitest';
import { CostModelError, CostTable, analyticCostModel, tableCostModel } from '../src/index.js';

// values[b][l] = 100·b_index + l_index, so a lookup tells which cell it hit.
const batches = [1, 2, 4, 8];
const lengths = [8, 16, 32];
const cellValues = batches.flatMap((_, bi) => lengths.map((_, li) => 100 * bi + li));
const table = new CostTable({ batches, lengths, values: cellValues });

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(CostModelError);
    return (err as CostModelError).code;
  }
  return undefined;
}

describe('CostTable.lookup', () => {
  it('returns the stored value on an exact grid hit', () => {
    for (let bi = 0; bi < batches.length; bi++) {
      for (let li = 0; li < lengths.length; li++) {
        expect(table.lookup(batches[bi]!, lengths[li]!)).toBe(100 * bi + li);
        expect(table.at(bi, li)).toBe(100 * bi + li);
      }
    }
  });

  it('rounds an off-grid batch and length up to the next grid point', () => {
    expect(table.lookup(3, 8)).toBe(200); // batch 3 → 4
    expect(table.lookup(3, 16)).toBe(201);
    expect(table.lookup(4, 9)).toBe(201); // length 9 → 16
    expect(table.lookup(5, 17)).toBe(302); // 5 → 8, 17 → 32
    expect(table.lookup(1.5, 8)).toBe(100); // fractional batch → 2
    expect(table.lookup(2, 31.2)).toBe(102);
    // Below the first grid point: the first one (the conservative direction is still "up").
    expect(table.lookup(0, 1)).toBe(0);
    expect(table.lookup(1, 3)).toBe(0);
  });

  it('clamps past the last grid point, and returns +∞ above the cap', () => {
    expect(table.cap).toBe(8);
    expect(table.lookup(8, 1000)).toBe(302);
    expect(table.lookup(9, 8)).toBe(Infinity);
    const wide = new CostTable({ batches, lengths, values: cellValues, cap: 20 });
    expect(wide.lookup(20, 50)).toBe(302); // batch clamped to 8, length to 32
    expect(wide.lookup(20.5, 8)).toBe(Infinity);
    // The artifact's α: profiled to batch 256, capped at 128.
    const narrow = new CostTable({ batches, lengths, values: cellValues, cap: 3 });
    expect(narrow.lookup(3, 8)).toBe(200);
    expect(narrow.lookup(4, 8)).toBe(Infinity);
  });

  it('rejects a NaN or negative batch or length', () => {
    expect(codeOf(() => table.lookup(Number.NaN, 8))).toBe('TESSERA_INVALID_COST_LOOKUP');
    expect(codeOf(() => table.lookup(1, -1))).toBe('TESSERA_INVALID_COST_LOOKUP');
    expect(codeOf(() => table.at(4, 0))).toBe('TESSERA_INVALID_COST_LOOKUP');
  });
});

describe('CostTable construction and JSON', () => {
  it('round-trips through JSON text', () => {
    const t = new CostTable({ batches, lengths, values: Float64Array.from(cellValues, (v) => v / 7), cap: 6 });
    const back = CostTable.fromJSON(JSON.parse(JSON.stringify(t)));
    expect(back.toJSON()).toEqual(t.toJSON());
    for (const b of [0.5, 1, 3, 6, 7]) for (const l of [1, 8, 20, 40]) expect(back.lookup(b, l)).toBe(t.lookup(b, l));
  });

  it('copies its inputs', () => {
    const values = [...cellValues];
    const t = new CostTable({ batches, lengths, values });
    values[0] = 999;
    expect(t.lookup(1, 8)).toBe(0);
  });

  it('rejects malformed grids, values and caps with TESSERA_INVALID_COST_TABLE', () => {
    const bad = (init: unknown): string | undefined => codeOf(() => new CostTable(init as ConstructorParameters<typeof CostTable>[0]));
    expect(bad({ batches: [], lengths, values: [] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1, 1], lengths: [8], values: [1, 2] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [2, 1], lengths: [8], values: [1, 2] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [0, 1], lengths: [8], values: [1, 2] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1], lengths: [Number.NaN], values: [1] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches, lengths, values: cellValues.slice(1) })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1], lengths: [8], values: [-1] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1], lengths: [8], values: [Infinity] })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1], lengths: [8], values: [1], cap: 0 })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad({ batches: [1], lengths: [8], values: [1], cap: Infinity })).toBe('TESSERA_INVALID_COST_TABLE');
    expect(bad(null)).toBe('TESSERA_INVALID_COST_TABLE');
    expect(codeOf(() => CostTable.fromJSON({ batches: [1], lengths: [8] }))).toBe('TESSERA_INVALID_COST_TABLE');
    expect(codeOf(() => CostTable.fromJSON('table'))).toBe('TESSERA_INVALID_COST_TABLE');
    expect(codeOf(() => CostTable.fromJSON({ batches: [1], lengths: [8], values: [1], cap: '4' }))).toBe('TESSERA_INVALID_COST_TABLE');
  });

  it('names the offending cell', () => {
    expect(() => new CostTable({ batches: [1, 2], lengths: [8, 16], values: [1, 2, 3, Number.NaN] })).toThrow(/values\[3\] \(batch 2, length 16\)/);
  });
});

describe('tableCostModel', () => {
  const alpha = new CostTable({ batches: [1, 128], lengths: [8, 128], values: [1, 2, 3, 4] });
  const adapter = new CostTable({ batches: [1, 32], lengths: [8, 128], values: [10, 11, 12, 13] });
  const bitfit = new CostTable({ batches: [1, 32], lengths: [8, 128], values: [20, 21, 22, 23] });

  it('looks α and β up in their tables (Map or record)', () => {
    for (const model of [tableCostModel(alpha, new Map([['adapter', adapter], ['bitfit', bitfit]])), tableCostModel(alpha, { adapter, bitfit })]) {
      expect(model.alpha(2, 9)).toBe(4);
      expect(model.alpha(129, 8)).toBe(Infinity);
      expect(model.beta('adapter', 1, 8)).toBe(10);
      expect(model.beta('bitfit', 5, 8)).toBe(22);
      expect(model.beta('bitfit', 33, 8)).toBe(Infinity);
    }
  });

  it('throws TESSERA_PET_UNKNOWN_TYPE for a PET type without a table (prototype keys included)', () => {
    const model = tableCostModel(alpha, { adapter });
    expect(codeOf(() => model.beta('maskbert', 1, 8))).toBe('TESSERA_PET_UNKNOWN_TYPE');
    expect(codeOf(() => model.beta('constructor', 1, 8))).toBe('TESSERA_PET_UNKNOWN_TYPE');
    expect(() => model.beta('maskbert', 1, 8)).toThrow(/'maskbert'.*'adapter'/);
  });

  it('rejects non-tables', () => {
    expect(codeOf(() => tableCostModel({} as CostTable, {}))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => tableCostModel(alpha, { adapter: 3 as unknown as CostTable }))).toBe('TESSERA_INVALID_COST_MODEL');
  });
});

describe('analyticCostModel', () => {
  const model = analyticCostModel({ a0: 5, a1: 0.1, a2: 0.01, k: { adapter: 10, bitfit: 2 }, m: { adapter: 0.5, bitfit: 0.25 }, maxMini: 4, maxMacro: 16 });

  it('computes α = a0 + a1·N·L + a2·N·L² and β = k + m·n·l', () => {
    expect(model.alpha(3, 10)).toBeCloseTo(5 + 0.1 * 30 + 0.01 * 300, 12);
    expect(model.alpha(16, 1)).toBeCloseTo(5 + 1.6 + 0.16, 12);
    expect(model.beta('adapter', 2, 7)).toBeCloseTo(10 + 0.5 * 14, 12);
    expect(model.beta('bitfit', 4, 8)).toBeCloseTo(2 + 0.25 * 32, 12);
  });

  it('is +∞ beyond the caps, uncapped without them', () => {
    expect(model.alpha(17, 1)).toBe(Infinity);
    expect(model.beta('adapter', 5, 1)).toBe(Infinity);
    const open = analyticCostModel({ a0: 1, a1: 0, a2: 0, k: { x: 1 }, m: { x: 0 } });
    expect(open.alpha(1e6, 1)).toBe(1);
    expect(open.beta('x', 1e6, 1)).toBe(1);
  });

  it('rejects bad parameters and unknown PET types', () => {
    const ok = { a0: 1, a1: 1, a2: 1, k: { x: 1 }, m: { x: 1 } };
    expect(codeOf(() => analyticCostModel({ ...ok, a1: -1 }))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => analyticCostModel({ ...ok, a2: Number.NaN }))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => analyticCostModel({ ...ok, m: { y: 1 } }))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => analyticCostModel({ ...ok, maxMini: 0 }))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => analyticCostModel({ ...ok, maxMacro: 2.5 }))).toBe('TESSERA_INVALID_COST_MODEL');
    expect(codeOf(() => analyticCostModel(ok).beta('y', 1, 1))).toBe('TESSERA_PET_UNKNOWN_TYPE');
    expect(codeOf(() => analyticCostModel(ok).alpha(-1, 1))).toBe('TESSERA_INVALID_COST_LOOKUP');
  });
});
