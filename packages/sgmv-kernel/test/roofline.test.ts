import { describe, expect, it } from 'vitest';
import { addLoraCost, distinct, gatherBmmCost, gatherBmmExtraElements, identical, rooflineBound, sgmvCost, uniform, zipf } from '../src/bench.js';

// The paper's case study (punica.md §3.3): an expand with h_i = 16, h_o = 4096 in 16-bit floats.
const hIn = 16;
const hOut = 4096;

describe('SGMV roofline (T10)', () => {
  it('FLOP and bytes follow 2·s·h_i·h_o and e·[s·(h_i + h_o) + n·h_i·h_o]', () => {
    const c = sgmvCost({ segments: [3, 0, 2], hIn: 8, hOut: 10, elementBytes: 4 });
    expect(c.flops).toBe(2 * 5 * 8 * 10);
    expect(c.bytes).toBe(4 * (5 * 18 + 2 * 80)); // the empty segment reads no weight
    expect(c.intensity).toBeCloseTo(c.flops / c.bytes, 12);
    expect(sgmvCost({ segments: [4], hIn: 8, hOut: 10 }).bytes).toBe(2 * (4 * 18 + 80)); // fp16 by default
  });

  it('Distinct stays at about 0.941 FLOP/B at every batch size', () => {
    for (const bs of [1, 2, 8, 32, 64, 133]) {
      expect(sgmvCost({ segments: distinct(bs), hIn, hOut }).intensity).toBeCloseTo(0.941, 3);
    }
  });

  it('Identical climbs: 0.94, 5.33, 10.64, 12.76 at batch 1, 8, 32, 64', () => {
    const ai = (bs: number) => sgmvCost({ segments: identical(bs), hIn, hOut }).intensity;
    expect(ai(1)).toBeCloseTo(0.941, 3);
    expect(ai(8)).toBeCloseTo(5.33, 2);
    expect(ai(32)).toBeCloseTo(10.64, 2);
    expect(ai(64)).toBeCloseTo(12.76, 2);
  });

  it('Uniform and Zipf lie between Distinct and Identical', () => {
    for (const bs of [8, 32, 64]) {
      const d = sgmvCost({ segments: distinct(bs), hIn, hOut }).intensity;
      const i = sgmvCost({ segments: identical(bs), hIn, hOut }).intensity;
      for (const s of [uniform(bs), zipf(bs)]) {
        const ai = sgmvCost({ segments: s, hIn, hOut }).intensity;
        expect(ai).toBeGreaterThan(d);
        expect(ai).toBeLessThan(i);
      }
    }
  });

  it('the element size scales bytes, not FLOP (fp32 halves the intensity)', () => {
    const f16 = sgmvCost({ segments: distinct(64), hIn, hOut });
    const f32 = sgmvCost({ segments: distinct(64), hIn, hOut, elementBytes: 4 });
    expect(f32.flops).toBe(f16.flops);
    expect(f32.intensity).toBeCloseTo(f16.intensity / 2, 12);
  });

  it('addLora is a shrink (h_in → r) plus an expand (r → h_out)', () => {
    const segments = zipf(32);
    const c = addLoraCost({ segments, hIn: 4096, hOut: 4096, rank: 16, elementBytes: 4 });
    const s = sgmvCost({ segments, hIn: 4096, hOut: 16, elementBytes: 4 });
    const e = sgmvCost({ segments, hIn: 16, hOut: 4096, elementBytes: 4 });
    expect(c.flops).toBe(s.flops + e.flops);
    expect(c.bytes).toBe(s.bytes + e.bytes);
  });

  it('rooflineBound is min(peak, AI × bandwidth)', () => {
    expect(rooflineBound(0.5, 100, 1000)).toBe(50);
    expect(rooflineBound(50, 100, 1000)).toBe(1000);
  });

  it('rejects bad shapes', () => {
    expect(() => sgmvCost({ segments: [1], hIn: 0, hOut: 4 })).toThrow(/hIn/);
    expect(() => sgmvCost({ segments: [-1], hIn: 4, hOut: 4 })).toThrow(/segment size/);
    expect(() => addLoraCost({ segments: [1], hIn: 4, hOut: 4, rank: 0 })).toThrow(/rank/);
  });
});

describe('Gather-BMM extra traffic (T11)', () => {
  it('moves exactly 2·s_n·h_i·h_o more elements than SGMV for the same FLOP', () => {
    for (const segments of [distinct(64), uniform(32), zipf(64), identical(16), [3, 0, 5]]) {
      const rows = segments.reduce((a, b) => a + b, 0);
      for (const elementBytes of [2, 4]) {
        const s = sgmvCost({ segments, hIn, hOut, elementBytes });
        const g = gatherBmmCost({ segments, hIn, hOut, elementBytes });
        expect(g.flops).toBe(s.flops);
        expect(g.bytes - s.bytes).toBe(elementBytes * 2 * rows * hIn * hOut);
      }
      expect(gatherBmmExtraElements({ segments, hIn, hOut })).toBe(2 * rows * hIn * hOut);
    }
  });
});
