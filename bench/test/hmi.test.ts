/**
 * The hmi bench at toy sizes, end to end: every section produces its rows, Table 6's simulation reproduces the
 * paper's throughputs from its calibrated costs (deterministic), the memory table counts the registered tenants
 * byte for byte, the α sweep is monotone, the issue's ratios are there, and the SVGs are well-formed. Timings are
 * not asserted: they are results.
 */
import { describe, expect, it } from 'vitest';

import { type HmiSizes, hmiFigures } from '../src/benches/hmi.js';
import { quickContext as ctx } from './quick-context.js';
import { parseXml } from './xml.js';

const TOY: HmiSizes = {
  batch: 2, seqLen: 16, domainSequences: 400, tenants: 500, timing: { budgetMs: 5, warmup: 1, minSamples: 1 }, rounds: 1,
  tenantCounts: [1, 40], requests: 8, requestTokens: 12,
};

describe('hmi bench (toy sizes)', () => {
  it('measures PLOT against the lower layers, storage against α, the memory table and Table 6, and reports the ratios', async () => {
    const out = await hmiFigures(ctx, TOY);
    const section = (s: string) => out.rows.filter((r) => r.section === s);

    const [plot] = section('plot');
    expect(plot!.lookup_aggregate_ms as number).toBeGreaterThan(0);
    expect(plot!.lower_layers_ms as number).toBeGreaterThan(0);

    const sweep = section('alpha');
    expect(sweep.map((r) => r.alpha)).toEqual([0.1, 0.3, 0.5, 0.7, 0.9, 1]);
    for (let i = 1; i < sweep.length; i++) expect(sweep[i]!.stored_trigrams as number).toBeGreaterThanOrEqual(sweep[i - 1]!.stored_trigrams as number);
    expect(sweep.at(-1)!.stored_frac).toBe(1);
    for (const r of sweep) expect(r.covered_frac as number).toBeGreaterThanOrEqual(r.alpha as number);
    expect(section('alpha_by_corpus')).toHaveLength(3);

    const memory = section('memory');
    const max = (prefix: string) => memory.find((r) => String(r.method).startsWith(prefix))!.max_instances as number;
    // The paper's ordering (Table 2): dedicated < compress < PLOT only < hPLM.
    expect(max('dedicated')).toBeLessThan(max('compress'));
    expect(max('compress')).toBeLessThan(max('PLOT only'));
    expect(max('hPLM')).toBe(TOY.tenants);

    // Table 6 from the paper's calibrated costs: within 2.5 % of every printed throughput.
    for (const r of section('pipeline_sim')) {
      if (r.paper_req_per_s === null) continue;
      expect(Math.abs((r.req_per_s as number) / (r.paper_req_per_s as number) - 1), String(r.setting)).toBeLessThan(0.025);
    }

    const tenants = section('tenants');
    expect(tenants.map((r) => r.tenants)).toEqual([1, 40]);
    // One tenant: its model loads once and its requests share batches; 40 tenants over 8 requests: a load per batch.
    expect(tenants[0]!.dedicated_loads).toBe(1);
    expect(tenants[1]!.dedicated_loads).toBe(Math.round(TOY.requests / (tenants[1]!.dedicated_mean_batch as number)));
    for (const r of tenants) for (const k of ['hplm_req_s', 'hplm_sequential_req_s', 'dedicated_req_s']) expect(r[k] as number, k).toBeGreaterThan(0);

    for (const key of ['plot_vs_lower_layers', 'alpha50_storage_frac', 'tenants_in_budget', 'pipeline_gain_sim', 'pipeline_gain_measured', 'hplm_vs_dedicated_max_tenants']) {
      expect(Number.isFinite(out.ratios[key]), key).toBe(true);
    }
    expect(out.ratios.pipeline_gain_sim!).toBeGreaterThan(0.2);
    expect(Object.keys(out.moreSvgs ?? {}).sort()).toEqual(['table6', 'tenants']);
    for (const svg of [out.svg, ...Object.values(out.moreSvgs ?? {})]) expect(() => parseXml(svg)).not.toThrow();
  });
});
