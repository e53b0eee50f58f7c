/**
 * The blockllm bench at toy sizes, end to end: every section produces its rows, Table 1 reproduces the paper's
 * shares where design note §2.1 says it should, the ratios are there and finite, the real-miniature ratio
 * is not invented, and every SVG is well-formed. Latencies and throughputs are not asserted: they are results.
 */
import { describe, expect, it } from 'vitest';

import { type BlockllmSizes, blockllmBench, runBlockllmBench } from '../src/benches/blockllm.js';
import { quickContext as ctx } from './quick-context.js';
import { findAll, parseXml } from './xml.js';

const TOY: BlockllmSizes = {
  memoryApps: [1, 20],
  sim: { apps: 6, requests: 16, durationMs: 10_000, output: [2, 8], seed: 1 },
  scaling: [6],
  table2: [3],
  table2Sim: { requests: 12, durationMs: 10_000, output: [2, 8] },
  real: null, // blockllm-real.test.ts runs the miniature at toy size
};

describe('blockllm bench (toy sizes)', () => {
  it('runs Table 1, the memory curve and the simulation and reports the issue ratios', async () => {
    const out = await runBlockllmBench(ctx, TOY);
    const byFigure = (f: string) => out.rows.filter((r) => r.figure === f);
    expect(byFigure('table1')).toHaveLength(6);
    // Five of the six Table 1 shares are reproduced to 0.01 points (NeoX LoRA matches no clean configuration).
    expect(byFigure('table1').filter((r) => Math.abs(r.diff_pts as number) < 0.01)).toHaveLength(5);
    expect(byFigure('fig5')).toHaveLength(2);
    for (const r of byFigure('fig5')) expect(r.zoo_gb as number).toBeLessThanOrEqual(r.per_model_gb as number);
    expect(byFigure('fig18').map((r) => r.config)).toEqual(['PM', 'PS', 'BlockLLM']);
    expect(byFigure('ablation')).toHaveLength(6);
    expect(byFigure('fig22')).toHaveLength(1);
    expect(byFigure('table2')).toHaveLength(1);
    for (const key of ['sim_p95_vs_pm', 'sim_throughput_vs_pm', 'zoo_memory_vs_pm_20_apps']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
      expect(out.ratios[key]!).toBeGreaterThan(0);
    }
    expect(out.ratios).not.toHaveProperty('real_throughput_vs_pm');
    const notes = [out.table, ...(out.moreTables ?? [])].flatMap((t) => t.notes ?? []).join('\n');
    for (const target of ['target ≤ 0.7', 'target within 5 %', 'target BlockLLM > PS > PM', 'target ≤ 0.4']) expect(notes).toContain(target);
    expect(Object.keys(out.moreSvgs ?? {}).sort()).toEqual(['fig19', 'fig20', 'fig21', 'fig22', 'fig24-26', 'fig5', 'table2']);
    for (const svg of [out.svg, ...Object.values(out.moreSvgs ?? {})]) {
      const doc = parseXml(svg);
      expect(doc.name).toBe('svg');
      expect(findAll(doc, 'text').length).toBeGreaterThan(0);
    }
    expect(blockllmBench.name).toBe('blockllm');
  }, 120_000);
});
