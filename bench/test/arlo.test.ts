/**
 * The arlo bench at toy sizes, end to end: every section produces its rows, the ratios are there and
 * finite (including the two measured at the target sizes, G = 1000 / I = 16 and 1,200 instances, which are cheap),
 * the solvers agree on the optimum (an exact comparison, no timing), the real testbed (two native runtime workers
 * on the tiny encoder, 0.7 s of trace, two repeats) serves every request under each scheme with the allocation the
 * simulator chose from the same inputs, and every SVG is well-formed. Timing values are not asserted: they are
 * measurements, not behaviour.
 */
import { describe, expect, it } from 'vitest';
import { lognormalSigma } from '../src/arlo/testbed.js';
import { type ArloSizes, arloBench, dispatchBurstMs, runArloBench, solveProblem } from '../src/benches/arlo.js';
import { findAll, parseXml } from './xml.js';
import { quickContext as ctx } from './quick-context.js';

const toySetting = (key: string, model: 'bert-base' | 'bert-large', instances: number, ratePerSec: number) => ({ key, model, instances, ratePerSec, durationMs: 4_000, periodMs: 2_000 });

const TOY: ArloSizes = {
  solve: [
    { G: 50, I: 8 },
    { G: 1000, I: 16 },
  ],
  solveReps: 1,
  dispatchInstances: [24, 1200],
  dispatchPeek: [1, 6],
  dispatchReps: 2,
  fig10: [toySetting('base-10', 'bert-base', 10, 900), toySetting('large-12', 'bert-large', 12, 1000)],
  table4: [toySetting('large-8', 'bert-large', 8, 650)],
  fig11: toySetting('large-8', 'bert-large', 8, 650),
  table3: toySetting('large-8-drift', 'bert-large', 8, 650),
  fig8: { ...toySetting('large-autoscale', 'bert-large', 3, 500), durationMs: 20_000 },
  testbed: { model: 'tiny', lengths: [32, 64, 128], ratePerSec: 60, durationMs: 700, repeats: 2, profileReps: 3, sloFactor: 30, seed: 7 },
  cpuFacts: { model: 'tiny', step: 32, maxLength: 128, reps: 2 },
};

describe('arlo bench (toy sizes)', () => {
  it('runs Table 2, Fig. 9 and the simulated figures and reports the issue ratios', async () => {
    const out = await runArloBench(ctx, TOY);
    const byFigure = (f: string) => out.rows.filter((r) => r.figure === f);
    expect(byFigure('table2')).toHaveLength(2);
    expect(byFigure('fig9')).toHaveLength(4); // 2 instance counts × 2 L
    expect(byFigure('fig10')).toHaveLength(8); // 2 settings × {st, dt, infaas, arlo}
    expect(byFigure('table4')).toHaveLength(3);
    expect(byFigure('fig11')).toHaveLength(4);
    expect(byFigure('table3')).toHaveLength(2);
    expect(byFigure('fig8')).toHaveLength(4);
    for (const row of byFigure('fig8')) expect(row.mean_instances as number).toBeGreaterThan(0);
    expect(Number.isFinite(out.ratios.sim_fig8_instances_vs_st)).toBe(true);
    for (const key of ['sim_mean_vs_st', 'sim_mean_vs_dt', 'solve_ms_g1000_i16', 'dispatch_us_1200']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
      expect(out.ratios[key]!).toBeGreaterThan(0);
    }
    // The real testbed: one row per scheme × repeat (alternating), one summary per scheme, every request served.
    const runs = byFigure('testbed-run');
    expect(runs.map((r) => `${r.repeat}:${r.scheme}`)).toEqual(['0:st', '0:ilb', '0:arlo', '1:st', '1:ilb', '1:arlo']);
    const testbed = byFigure('testbed');
    expect(testbed.map((r) => r.scheme)).toEqual(['st', 'ilb', 'arlo']);
    for (const row of [...runs, ...testbed]) expect(row.requests).toBe(runs[0]!.requests);
    expect(runs[0]!.requests as number).toBeGreaterThan(0);
    // ST pads everything to the longest runtime; the others run the allocation the simulator chose from the same profile and prior.
    for (const row of runs.filter((r) => r.scheme === 'st')) expect(row.mean_padded_to).toBe(128);
    for (const row of [...runs, ...testbed]) expect(row.allocation).toBe(row.sim_allocation);
    for (const row of runs) expect(row.fidelity_mean).toBeCloseTo(Math.abs((row.sim_mean_ms as number) - (row.mean_ms as number)) / (row.mean_ms as number), 12);
    expect(testbed[0]!.allocation).toBe('2');
    // One profile before the first run and one after each (alone and at once); the slowdown is their ratio, never below 1.
    const cals = (out.params?.testbed as { calibrations: { table: unknown[]; pairedTable: unknown[]; pairedSlowdown: number }[] }).calibrations;
    expect(cals).toHaveLength(1 + runs.length);
    for (const c of cals) {
      expect(c.pairedTable).toHaveLength(c.table.length);
      expect(c.pairedSlowdown).toBeGreaterThanOrEqual(1);
    }
    for (const key of ['real_mean_vs_st', 'sim_fidelity_mean']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
      expect(out.ratios[key]!).toBeGreaterThan(0);
    }
    expect(out.ratios.real_mean_vs_st).toBeCloseTo((testbed[2]!.mean_ms as number) / (testbed[0]!.mean_ms as number), 12);
    // The exact DP and HiGHS find the same optimum (objectives within HiGHS's certified gap).
    for (const row of byFigure('table2')) expect(row.highs_gap as number).toBeLessThan(1e-3);
    // The headline ratios are the worst of the per-setting ones.
    expect(out.ratios.sim_mean_vs_st).toBe(Math.max(out.ratios.sim_mean_vs_st_base_10!, out.ratios.sim_mean_vs_st_large_12!));
    for (const row of byFigure('fig10')) expect(row.requests as number).toBeGreaterThan(0);
    // Each target is reported in the notes against the measured value.
    const notes = [out.table, ...(out.moreTables ?? [])].flatMap((t) => t.notes ?? []).join('\n');
    for (const target of ['target ≤ 0.5', 'target ≤ 0.8', 'target ≤ 2000 ms', 'target ≤ 50 µs', 'target < 1', 'target ≤ 0.15']) expect(notes).toContain(target);
    const svgs = [out.svg, ...Object.values(out.moreSvgs ?? {})];
    // The CPU facts: one row per length, both staircase verdicts and the ORT penalty (values are measurements).
    expect(byFigure('cpu-facts').map((r) => r.length)).toEqual([32, 64, 96, 128]);
    for (const row of byFigure('cpu-facts')) expect(row.dynamic_over_static).toBeCloseTo((row.ort_dynamic_ms as number) / (row.ort_static_ms as number), 12);
    for (const key of ['cpu_plateau_tokens_native', 'cpu_plateau_tokens_ort']) {
      expect(out.ratios[key]!).toBeGreaterThanOrEqual(32); // at least one measured step per plateau
      expect(out.ratios[key]!).toBeLessThanOrEqual(128);
    }
    expect(out.ratios.cpu_ort_dynamic_over_static!).toBeGreaterThan(0);
    expect(Object.keys(out.moreSvgs ?? {}).sort()).toEqual(['cpu-facts', 'fig10-p98', 'fig11', 'fig12', 'fig8', 'fig9', 'table2', 'testbed']);
    for (const svg of svgs) {
      const doc = parseXml(svg);
      expect(doc.name).toBe('svg');
      expect(findAll(doc, 'text').length).toBeGreaterThan(0);
    }
  }, 120_000);

  it('builds the Table 2 problem at ≈60 % utilisation and times a dispatch burst without completions', () => {
    const problem = solveProblem(100, 8);
    expect(problem.q).toHaveLength(8);
    const work = problem.q.reduce((s, q, i) => s + q * problem.profiles[i]!.serviceMs, 0);
    const sloMs = 450;
    expect(work / (sloMs * 100)).toBeCloseTo(0.6, 6);
    expect(dispatchBurstMs(24, 48, 6, Int32Array.from([20, 100, 300]))).toBeGreaterThanOrEqual(0);
    expect(arloBench.name).toBe('arlo');
  });

  it('estimates the simulator jitter from a profile mean over its median (lognormal), 0 when not skewed', () => {
    const sigma = 0.3;
    expect(lognormalSigma(Math.exp(sigma * sigma / 2) * 10, 10)).toBeCloseTo(sigma, 12);
    expect(lognormalSigma(10, 10)).toBe(0);
    expect(lognormalSigma(9, 10)).toBe(0);
  });
});
