/**
 * The prefix-cache bench at toy sizes: the hit rate reaches the best possible for the workload (each tenant computes
 * the shared system prompt once), the cache cuts the prefill tokens computed, greedy outputs never differ, and the
 * chart is well-formed. (Throughput is a measurement, not asserted.)
 */
import { describe, expect, it } from 'vitest';
import { prefixCacheFigure } from '../src/benches/prefix-cache.js';
import { quickContext as ctx } from './quick-context.js';
import { parseXml } from './xml.js';

describe('prefix-cache bench', () => {
  it('reaches the best hit rate with identical outputs', async () => {
    const f = await prefixCacheFigure(ctx, { requests: 10, systemTokens: 48, maxTokens: 3, rounds: 1 });
    expect(f.ratios.differing_outputs).toBe(0);
    expect(f.ratios.prefix_hit_rate_of_best).toBeCloseTo(1, 12);
    expect(f.ratios.prefix_hit_rate).toBeGreaterThan(0.3);
    expect(f.ratios.prefill_tokens_on_vs_off).toBeLessThan(0.7);
    expect(f.rows.map((r) => r.prefix_cache)).toEqual(['off', 'on']);
    expect(() => parseXml(f.svg)).not.toThrow();
  }, 120_000);
});
