/**
 * The pets bench at its --quick size, end to end: every figure produces its rows, the ratios the issue names are
 * there and finite, the capacity accounting (sizes measured, then counted: no timing involved) shows PetS holding
 * at least 10× the tasks on the mid model, and the SVGs are well-formed. Timing values are not asserted: they are
 * measurements, not behaviour.
 */
import { describe, expect, it } from 'vitest';
import { petsBench } from '../src/benches/pets.js';
import { quickContext as ctx } from './quick-context.js';
import { findAll, parseXml } from './xml.js';

describe('pets bench (--quick)', () => {
  it('runs Table 5, Figs. 7, 9 and 12 and reports the issue ratios', async () => {
        const out = await petsBench.run(ctx);
    const byFigure = (f: string) => out.rows.filter((r) => r.figure === f);
    expect(byFigure('table5')).toHaveLength(9); // 3 models × 3 budgets
    expect(byFigure('fig7')).toHaveLength(6); // tiny × {16, 32} tasks × 3 shapes
    expect(byFigure('fig9')).toHaveLength(2);
    expect(byFigure('fig12')).toHaveLength(2 * 2 * 5); // {32, 64} tasks × std {1, 8} × 5 strategies
    for (const key of ['capacity_ratio_mid', 'pets_vs_seqs_32_tasks', 'cb_vs_fixed_measured', 'cb_vs_fixed_estimated']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
    }
    expect(out.ratios.capacity_ratio_mid).toBeGreaterThanOrEqual(10);
    // Both ran a plan over the same pool: α-only's macro-batches (≤ 128 length-sorted queries) pad less than Fixed's
    // arrival-order chunks.
    for (const config of new Set(byFigure('fig12').map((r) => `${r.tasks}/${r.std}`))) {
      const rows = byFigure('fig12').filter((r) => `${r.tasks}/${r.std}` === config);
      const padded = (s: string) => rows.find((r) => r.strategy === s)!.padded_rows as number;
      expect(padded('alpha-only')).toBeLessThanOrEqual(padded('fixed'));
    }
    for (const svg of [out.svg, ...Object.values(out.moreSvgs ?? {})]) {
      const doc = parseXml(svg);
      expect(findAll(doc, 'rect').length).toBeGreaterThan(0);
    }
  }, 240_000);
});
