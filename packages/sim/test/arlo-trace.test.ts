/**
 * The Arlo simulator's inputs: Stable and Bursty traces (rates, burstiness, the Twitter length mix, determinism per
 * seed) and the latency profiles (the §10.6 staircase, the injected dynamic-shape penalty, measured tables) against
 * plain references.
 */
import { describe, expect, it } from 'vitest';
import {
  SimArgumentError,
  cpuLatencyProfile,
  generateArloTrace,
  gpuDynamicPenalty,
  measuredLatencyProfile,
  paperLatencyProfile,
  resolveDynamicPenalty,
  twitterLengthSample,
} from '../src/index.js';

function perSecondCounts(arrivalMs: Float64Array, durationMs: number): number[] {
  const counts = new Array<number>(Math.ceil(durationMs / 1000)).fill(0);
  for (const t of arrivalMs) counts[Math.floor(t / 1000)]!++;
  return counts;
}

function meanVar(xs: readonly number[]): { mean: number; variance: number } {
  const mean = xs.reduce((a, b) => a + b, 0) / xs.length;
  const variance = xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (xs.length - 1);
  return { mean, variance };
}

function quantile(xs: ArrayLike<number>, q: number): number {
  const s = Array.from(xs).sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!;
}

describe('Stable trace', () => {
  const trace = generateArloTrace({ kind: 'stable', ratePerSec: 200, durationMs: 600_000, seed: 3 });

  it('is Poisson at the given rate: count within 4σ, per-second counts with variance ≈ mean', () => {
    const n = trace.arrivalMs.length;
    expect(Math.abs(n - 120_000)).toBeLessThan(4 * Math.sqrt(120_000));
    const { mean, variance } = meanVar(perSecondCounts(trace.arrivalMs, trace.durationMs));
    expect(mean).toBeCloseTo(n / 600, 6);
    // Index of dispersion of a Poisson process is 1 (standard error ≈ √(2/599) ≈ 0.06).
    expect(variance / mean).toBeGreaterThan(0.8);
    expect(variance / mean).toBeLessThan(1.2);
    expect(trace.rates).toEqual([{ startMs: 0, endMs: 600_000, ratePerSec: 200 }]);
  });

  it('has non-decreasing arrivals inside the window', () => {
    for (let k = 1; k < trace.arrivalMs.length; k++) expect(trace.arrivalMs[k]! >= trace.arrivalMs[k - 1]!).toBe(true);
    expect(trace.arrivalMs[0]!).toBeGreaterThanOrEqual(0);
    expect(trace.arrivalMs[trace.arrivalMs.length - 1]!).toBeLessThan(600_000);
  });

  it('draws the Twitter length mix rescaled to 512: p50 ≈ 21·512/125 ≈ 86, p98 ≈ 72·512/125 ≈ 295', () => {
    const p50 = quantile(trace.length, 0.5);
    const p98 = quantile(trace.length, 0.98);
    expect(p50).toBeGreaterThanOrEqual(80);
    expect(p50).toBeLessThanOrEqual(92);
    expect(p98).toBeGreaterThanOrEqual(265);
    expect(p98).toBeLessThanOrEqual(335);
    expect(Math.min(...trace.length)).toBeGreaterThanOrEqual(1);
    expect(Math.max(...trace.length)).toBeLessThanOrEqual(512);
  });

  it('keeps its lengths unscaled when scaleTo = rawMax, and without fluctuation matches the sample generator', () => {
    const raw = twitterLengthSample(50_000, 9, { scaleTo: 125 });
    expect(quantile(raw, 0.5)).toBe(21);
    const p98 = quantile(raw, 0.98);
    expect(p98).toBeGreaterThanOrEqual(68);
    expect(p98).toBeLessThanOrEqual(76);
    // Padding every raw request to 125 wastes ≈80 % of the tokens (the paper's 80.6 % is of FLOPs).
    const waste = 1 - raw.reduce((a, b) => a + b, 0) / (raw.length * 125);
    expect(waste).toBeGreaterThan(0.7);
    expect(waste).toBeLessThan(0.85);
  });
});

describe('Bursty trace (MMPP-2)', () => {
  const trace = generateArloTrace({ kind: 'bursty', ratePerSec: 100, durationMs: 4_000_000, seed: 5, lengths: { fluctuationSigma: 0 } });
  const high = (2 * 100 * 2) / 3;
  const low = (2 * 100) / 3;

  it('alternates between two levels burstRatio apart whose time-mean is the given rate', () => {
    const levels = new Set(trace.rates.map((r) => r.ratePerSec));
    expect([...levels].sort((a, b) => a - b)).toEqual([low, high]);
    for (let k = 1; k < trace.rates.length; k++) {
      expect(trace.rates[k]!.startMs).toBe(trace.rates[k - 1]!.endMs);
      expect(trace.rates[k]!.ratePerSec).not.toBe(trace.rates[k - 1]!.ratePerSec);
    }
    expect(trace.rates[0]!.startMs).toBe(0);
    expect(trace.rates.at(-1)!.endMs).toBe(4_000_000);
    const integral = trace.rates.reduce((a, r) => a + (r.ratePerSec * (r.endMs - r.startMs)) / 1000, 0);
    expect(integral / 4000).toBeGreaterThan(90);
    expect(integral / 4000).toBeLessThan(110);
    // The arrivals follow the modulated rate: count ≈ ∫ rate (Poisson given the path: within 4σ).
    expect(Math.abs(trace.arrivalMs.length - integral)).toBeLessThan(4 * Math.sqrt(integral));
  });

  it('has exponential sojourns with the 10 s mean', () => {
    const sojourns = trace.rates.slice(0, -1).map((r) => r.endMs - r.startMs);
    const { mean, variance } = meanVar(sojourns);
    expect(mean).toBeGreaterThan(9_000);
    expect(mean).toBeLessThan(11_000);
    // Exponential: coefficient of variation 1.
    expect(Math.sqrt(variance) / mean).toBeGreaterThan(0.85);
    expect(Math.sqrt(variance) / mean).toBeLessThan(1.15);
  });

  it('arrives at each state’s rate inside that state', () => {
    let inHigh = 0;
    let inLow = 0;
    let highMs = 0;
    let lowMs = 0;
    let k = 0;
    for (const r of trace.rates) {
      let count = 0;
      while (k < trace.arrivalMs.length && trace.arrivalMs[k]! < r.endMs) {
        count++;
        k++;
      }
      if (r.ratePerSec === high) {
        inHigh += count;
        highMs += r.endMs - r.startMs;
      } else {
        inLow += count;
        lowMs += r.endMs - r.startMs;
      }
    }
    expect(((inHigh / highMs) * 1000) / high).toBeCloseTo(1, 1);
    expect(((inLow / lowMs) * 1000) / low).toBeCloseTo(1, 1);
  });

  it('is bursty: per-second counts are overdispersed, unlike Stable at the same rate', () => {
    const { mean, variance } = meanVar(perSecondCounts(trace.arrivalMs, trace.durationMs));
    // Var = mean + Var(rate) ≈ 100 + 33² ≈ 1 200 per second: a dispersion index near 12.
    expect(variance / mean).toBeGreaterThan(6);
    const stable = generateArloTrace({ kind: 'stable', ratePerSec: 100, durationMs: 400_000, seed: 5 });
    const s = meanVar(perSecondCounts(stable.arrivalMs, stable.durationMs));
    expect(s.variance / s.mean).toBeLessThan(1.3);
  });
});

describe('trace determinism and validation', () => {
  it('gives the same trace for the same seed and a different one for another seed', () => {
    const options = { kind: 'bursty' as const, ratePerSec: 500, durationMs: 20_000, seed: 7 };
    const a = generateArloTrace(options);
    const b = generateArloTrace(options);
    expect(b).toEqual(a);
    const c = generateArloTrace({ ...options, seed: 8 });
    expect(c.arrivalMs).not.toEqual(a.arrivalMs);
    expect(c.length).not.toEqual(a.length);
  });

  it('keeps arrival times when only the length mix changes', () => {
    const a = generateArloTrace({ kind: 'stable', ratePerSec: 300, durationMs: 5_000, seed: 2 });
    const b = generateArloTrace({ kind: 'stable', ratePerSec: 300, durationMs: 5_000, seed: 2, lengths: { median: 40 } });
    expect(b.arrivalMs).toEqual(a.arrivalMs);
    expect(b.length).not.toEqual(a.length);
  });

  it('rejects bad options with a typed error naming the value', () => {
    expect(() => generateArloTrace({ kind: 'stable', ratePerSec: 0, durationMs: 1000, seed: 1 })).toThrow(SimArgumentError);
    expect(() => generateArloTrace({ kind: 'stable', ratePerSec: 10, durationMs: -1, seed: 1 })).toThrow(/durationMs/);
    expect(() => generateArloTrace({ kind: 'weird' as never, ratePerSec: 10, durationMs: 1000, seed: 1 })).toThrow(/weird/);
    expect(() => generateArloTrace({ kind: 'bursty', ratePerSec: 10, durationMs: 1000, seed: 1, burst: { burstRatio: 0.5 } })).toThrow(/0.5/);
    expect(() => generateArloTrace({ kind: 'stable', ratePerSec: 10, durationMs: 1000, seed: 1.5 })).toThrow(/1.5/);
  });
});

describe('latency profiles', () => {
  it('BERT-Base: the §10.6 staircase, 1.15 → 4.86 ms (4.22×), a length costs its 64-step', () => {
    const p = paperLatencyProfile('bert-base');
    expect(p.staticMs(64)).toBeCloseTo(1.15, 10);
    expect(p.staticMs(512)).toBeCloseTo(4.86, 10);
    expect(p.staticMs(512) / p.staticMs(64)).toBeCloseTo(4.22, 1);
    expect(p.staticMs(20)).toBe(p.staticMs(64));
    expect(p.staticMs(65)).toBeCloseTo(1.68, 2);
    const steps = [64, 128, 192, 256, 320, 384, 448, 512].map((l) => p.staticMs(l));
    // Reference: linear between the two printed ends.
    steps.forEach((ms, k) => expect(ms).toBeCloseTo(1.15 + ((4.86 - 1.15) * k) / 7, 10));
    expect(p.sloMs).toBe(150);
    expect(() => p.staticMs(513)).toThrow(SimArgumentError);
    expect(() => p.staticMs(64, 2)).toThrow(/batch 2/);
  });

  it('BERT-Large: 5.25× from 64 to 512, SLO 450 ms', () => {
    const p = paperLatencyProfile('bert-large');
    expect(p.staticMs(512) / p.staticMs(64)).toBeCloseTo(5.25, 10);
    expect(p.sloMs).toBe(450);
    expect(() => paperLatencyProfile('gpt' as never)).toThrow(/gpt/);
  });

  it('the GPU dynamic-shape penalty runs from 3.56× at 1 token to 1.22× at 512, decreasing', () => {
    const penalty = gpuDynamicPenalty();
    expect(penalty(1)).toBeCloseTo(3.56, 10);
    expect(penalty(512)).toBeCloseTo(1.22, 10);
    for (let l = 2; l <= 512; l++) expect(penalty(l)).toBeLessThanOrEqual(penalty(l - 1));
    expect(resolveDynamicPenalty('none')(100)).toBe(1);
    expect(resolveDynamicPenalty(0.85)(100)).toBe(0.85);
    expect(() => resolveDynamicPenalty(0)).toThrow(SimArgumentError);
  });

  it('a measured profile interpolates linearly between its points, per batch, like a plain reference', () => {
    const cpu = cpuLatencyProfile();
    expect(cpu.staticMs(64)).toBeCloseTo(2.96, 10);
    expect(cpu.staticMs(96)).toBeCloseTo((2.96 + 6.02) / 2, 10);
    expect(cpu.staticMs(512)).toBeCloseTo(26.9, 10);
    const runs = [
      { length: 32, batch: 1, ms: 1 },
      { length: 64, batch: 1, ms: 3 },
      { length: 32, batch: 4, ms: 2 },
      { length: 64, batch: 4, ms: 8 },
    ];
    const p = measuredLatencyProfile('toy', runs, { sloMs: 100 });
    const reference = (length: number, batch: number): number => {
      const at = (b: number) => (b === 1 ? 1 + ((3 - 1) * (length - 32)) / 32 : 2 + ((8 - 2) * (length - 32)) / 32);
      if (batch <= 1) return at(1);
      return at(1) + ((at(4) - at(1)) * (batch - 1)) / 3;
    };
    for (const length of [32, 40, 48, 64]) for (const batch of [1, 2, 3, 4]) expect(p.staticMs(length, batch)).toBeCloseTo(reference(length, batch), 10);
    expect(() => measuredLatencyProfile('empty', [], { sloMs: 1 })).toThrow(SimArgumentError);
    expect(() => measuredLatencyProfile('bad', [{ length: 10, batch: 1, ms: -1 }], { sloMs: 1 })).toThrow(/-1/);
  });
});
