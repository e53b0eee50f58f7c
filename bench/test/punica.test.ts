/**
 * The punica kernel figures at toy sizes: every method is verified against float64 before timing, the rows,
 * ratios and tables have the promised shape, and the three SVGs are well-formed. (Timing values are not
 * asserted: they are measurements, not behaviour.)
 */
import { describe, expect, it } from 'vitest';
import { type PunicaKernelConfig, makePunicaKernelBench, punicaKernelFigures, svgGrid } from '../src/benches/punica.js';
import { lineChart } from '../src/svg.js';
import { quickContext as ctx } from './quick-context.js';
import { findAll, parseXml } from './xml.js';

const tiny: PunicaKernelConfig = {
  h: 256,
  rank: 4,
  batches: [1, 4, 8],
  ranks: [4, 8],
  rankBatches: [2, 8],
  workloads: ['distinct', 'uniform', 'zipf', 'identical'],
  reps: 2,
  warmup: 1,
  poolMiB: 1,
  flushMiB: 1,
  settleMs: 0,
};

describe('punica kernel figures', () => {
  it('verifies, times and reports Fig. 7, 8 and 9 at toy sizes', async () => {
    const f = await punicaKernelFigures(ctx, tiny);
    const fig8 = f.rows.filter((r) => r.figure === 'fig8');
    const fig9 = f.rows.filter((r) => r.figure === 'fig9');
    expect(fig8).toHaveLength(4 * 3);
    expect(fig9).toHaveLength(4 * 2 * 2);
    for (const r of fig8) {
      for (const k of ['sgmv_us', 'loop_us', 'gather_bmm_us', 'gather_us', 'bmm_us', 'intensity_f32', 'sgmv_gflops', 'sgmv_bandwidth_frac']) {
        expect(r[k], `${r.workload} b${r.batch} ${k}`).toBeGreaterThan(0);
      }
    }
    expect(fig8.find((r) => r.workload === 'zipf' && r.batch === 8)!.segments).toBe(5); // zipf(8) = [3, 2, 1, 1, 1]
    expect(Object.keys(f.ratios).sort()).toEqual([
      'sgmv_bandwidth_frac_b8_distinct',
      'sgmv_bandwidth_frac_b8_distinct_best',
      'sgmv_distinct_vs_identical_b8',
      'sgmv_vs_bmm_b8_identical',
      'sgmv_vs_gather_bmm_b8_distinct',
      'sgmv_vs_gather_bmm_b8_distinct_best',
      'sgmv_vs_gemm_b8_identical',
      'sgmv_vs_gemm_b8_identical_best',
      'sgmv_vs_gemm_identical_min',
      'sgmv_vs_loop_b8_distinct',
      'sgmv_vs_loop_b8_distinct_best',
    ]);
    // Identical rows also time our plain GEMM at the same shape; the other workloads do not.
    for (const r of fig8) {
      if (r.workload === 'identical') expect(r.gemm_us as number, `identical b${r.batch} gemm_us`).toBeGreaterThan(0);
      else expect(r.gemm_us, `${r.workload} b${r.batch} gemm_us`).toBeNull();
    }
    for (const [k, v] of Object.entries(f.ratios)) expect(Number.isFinite(v) && v > 0, `${k} = ${v}`).toBe(true);
    // Correctness was checked before timing: every method within 1e-4 of float64.
    const verification = f.params.verification as Record<string, Record<string, number>>;
    expect(Object.keys(verification).length).toBeGreaterThanOrEqual(8);
    for (const errs of Object.values(verification)) for (const e of Object.values(errs)) expect(e).toBeLessThanOrEqual(1e-4);
    expect(f.table.rows).toEqual(fig8);
    expect(f.rankTable.rows).toEqual(fig9);
    for (const svg of Object.values(f.svgs)) {
      expect(parseXml(svg).name).toBe('svg');
    }
    // Fig. 8 and 9: one panel per workload; Fig. 7: one series per workload plus the bandwidth line.
    expect(parseXml(f.svgs.fig8).children.filter((c) => c.name === 'svg')).toHaveLength(4);
    const fig7Texts = findAll(parseXml(f.svgs.fig7), 'text').map((t) => t.text);
    expect(fig7Texts).toEqual(expect.arrayContaining(['distinct', 'identical', 'triad 20.0 GB/s x AI']));
  });

  it('the bench wrapper folds the figures into one BenchOutput', async () => {
    const out = await makePunicaKernelBench({ ...tiny, batches: [2], ranks: [4], rankBatches: [2], workloads: ['distinct'] }).run(ctx);
    expect(out.rows).toHaveLength(2);
    expect(out.ratios.sgmv_vs_loop_b2_distinct).toBeGreaterThan(0);
    expect(parseXml(out.svg).name).toBe('svg');
  });

  it('svgGrid nests charts at their grid positions', () => {
    const chart = lineChart({ title: 't', series: [{ name: 's', points: [{ x: 1, y: 1 }, { x: 2, y: 3 }] }], xLabel: 'x', yLabel: 'y', width: 100, height: 80 });
    const grid = parseXml(svgGrid([chart, chart, chart], 2));
    expect(grid.attrs.width).toBe('200');
    expect(grid.attrs.height).toBe('160');
    const cells = grid.children.filter((c) => c.name === 'svg');
    expect(cells.map((c) => [c.attrs.x, c.attrs.y])).toEqual([['0', '0'], ['100', '0'], ['0', '80']]);
    expect(() => svgGrid(['<svg/>'], 1)).toThrow(/not a chart/);
  });
});
