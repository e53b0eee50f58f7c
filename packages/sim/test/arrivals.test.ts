/**
 * T26: Poisson arrivals match their rate, the ramp goes monotonically up then down, same seed → same trace.
 * Statistical checks use 4 standard deviations of a Poisson count (a count N with mean m has sd √m): a correct
 * generator fails one with probability about 6e-5, and the seeds are fixed, so the tests are deterministic.
 */
import { describe, expect, it } from 'vitest';
import {
  constantProfile,
  drawLengths,
  expectedArrivals,
  generateTrace,
  mulberry32,
  poissonArrivals,
  popularitySampler,
  rampProfile,
  rateProfile,
  SimArgumentError,
} from '../src/index.js';

const within4sd = (count: number, mean: number) => expect(Math.abs(count - mean)).toBeLessThanOrEqual(4 * Math.sqrt(mean));

describe('poissonArrivals', () => {
  it('a constant rate: the count matches rate × duration, gaps are exponential (mean 1/rate, CV 1)', () => {
    const rate = 5;
    const durationMs = 2_000_000;
    const times = poissonArrivals(constantProfile(rate, durationMs), mulberry32(1));
    within4sd(times.length, (rate * durationMs) / 1000);
    const gaps = times.slice(1).map((t, i) => t - times[i]!);
    const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
    const sd = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / gaps.length);
    // Mean of ~10k exponential gaps: relative sd 1%; CV of an exponential is 1 (sample CV sd ≈ 1%).
    expect(Math.abs(mean - 1000 / rate) / (1000 / rate)).toBeLessThan(0.04);
    expect(Math.abs(sd / mean - 1)).toBeLessThan(0.05);
    expect(times.every((t, i) => i === 0 || t > times[i - 1]!)).toBe(true);
  });

  it('a ramp: the rate is monotone up, flat, then monotone down, and every window holds its expected count', () => {
    const profile = rampProfile({ peakPerSec: 20, durationMs: 1_000_000, rampUpFrac: 0.4, plateauFrac: 0.2 });
    const grid = Array.from({ length: 1001 }, (_, i) => profile.rate(i * 1000));
    const peak = grid.indexOf(Math.max(...grid));
    expect(peak).toBe(400);
    for (let i = 1; i <= 400; i++) expect(grid[i]!).toBeGreaterThanOrEqual(grid[i - 1]!);
    for (let i = 401; i <= 1000; i++) expect(grid[i]!).toBeLessThanOrEqual(grid[i - 1]!);
    expect(grid[0]).toBe(0);
    expect(grid[500]).toBe(20);
    expect(grid[1000]).toBe(0);

    const times = poissonArrivals(profile, mulberry32(2));
    // Expected total = 20/s × (0.4/2 + 0.2 + 0.4/2) × 1000 s = 12,000.
    expect(expectedArrivals(profile)).toBeCloseTo(12_000, 3);
    within4sd(times.length, 12_000);
    const windows = 10;
    const counts = new Array<number>(windows).fill(0);
    for (const t of times) counts[Math.min(windows - 1, Math.floor(t / 100_000))]!++;
    counts.forEach((c, w) => within4sd(c, expectedArrivals(profile, w * 100_000, (w + 1) * 100_000)));
    // The empirical counts rise over the ramp-up windows and fall over the ramp-down ones.
    expect(counts[0]!).toBeLessThan(counts[1]!);
    expect(counts[1]!).toBeLessThan(counts[3]!);
    expect(counts[9]!).toBeLessThan(counts[8]!);
    expect(counts[8]!).toBeLessThan(counts[6]!);
  });

  it('any rate function, thinned under its bound; a rate above the bound is an error', () => {
    const sine = rateProfile((t) => 5 + 4 * Math.sin(t / 50_000), { maxPerSec: 9, durationMs: 500_000 });
    within4sd(poissonArrivals(sine, mulberry32(3)).length, expectedArrivals(sine));
    const liar = rateProfile(() => 10, { maxPerSec: 5, durationMs: 10_000 });
    expect(() => poissonArrivals(liar, mulberry32(4))).toThrow(SimArgumentError);
  });

  it('rejects bad ramp parameters', () => {
    expect(() => rampProfile({ peakPerSec: 0, durationMs: 1000 })).toThrow(SimArgumentError);
    expect(() => rampProfile({ peakPerSec: 1, durationMs: 1000, rampUpFrac: 0.7, plateauFrac: 0.5 })).toThrow(SimArgumentError);
  });
});

describe('lengths and popularity', () => {
  it("'punica-synthetic': prompts lognormal around 24 tokens, totals uniform up to maxLength", () => {
    const random = mulberry32(5);
    const draws = Array.from({ length: 20_000 }, () => drawLengths({ kind: 'punica-synthetic', maxLength: 2048 }, random));
    const meanPrompt = draws.reduce((a, d) => a + d.prompt, 0) / draws.length;
    const meanTotal = draws.reduce((a, d) => a + d.prompt + d.output, 0) / draws.length;
    // E[prompt] = −1 + 18·e^0.32 ≈ 23.8; E[total] ≈ (2047)/2 plus the prompt + 2 floor's small lift.
    expect(meanPrompt).toBeGreaterThan(22.5);
    expect(meanPrompt).toBeLessThan(25);
    expect(meanTotal).toBeGreaterThan(1000);
    expect(meanTotal).toBeLessThan(1050);
    expect(Math.min(...draws.map((d) => d.prompt))).toBe(1);
    expect(Math.min(...draws.map((d) => d.output))).toBeGreaterThanOrEqual(2);
    expect(Math.max(...draws.map((d) => d.prompt + d.output))).toBeLessThanOrEqual(2047);
  });

  it('zipf-α: each rank about α times as popular as the next; uniform even; distinct unique; identical one', () => {
    const n = 60_000;
    const zipf = popularitySampler({ kind: 'zipf', adapters: 8, alpha: 1.5 }, mulberry32(6));
    const counts = new Array<number>(8).fill(0);
    for (let i = 0; i < n; i++) counts[zipf(i)]!++;
    // Expected share of rank i: 1.5^−i / Σ; checked within 4 sd (binomial ≤ Poisson sd).
    const sum = Array.from({ length: 8 }, (_, i) => 1.5 ** -i).reduce((a, b) => a + b, 0);
    counts.forEach((c, i) => within4sd(c, (n * 1.5 ** -i) / sum));
    expect(counts[0]! / counts[1]!).toBeGreaterThan(1.4);
    expect(counts[0]! / counts[1]!).toBeLessThan(1.6);

    const uniform = popularitySampler({ kind: 'uniform', adapters: 10 }, mulberry32(7));
    const u = new Array<number>(10).fill(0);
    for (let i = 0; i < n; i++) u[uniform(i)]!++;
    u.forEach((c) => within4sd(c, n / 10));

    const distinct = popularitySampler({ kind: 'distinct' }, mulberry32(8));
    expect(new Set(Array.from({ length: 100 }, (_, i) => distinct(i))).size).toBe(100);
    const identical = popularitySampler({ kind: 'identical' }, mulberry32(9));
    expect(new Set(Array.from({ length: 100 }, (_, i) => identical(i)))).toEqual(new Set([0]));
  });
});

describe('generateTrace', () => {
  const options = { profile: rampProfile({ peakPerSec: 10, durationMs: 300_000 }), seed: 42 };

  it('same seed → the same trace; another seed → another', () => {
    const a = generateTrace(options);
    expect(generateTrace(options)).toEqual(a);
    expect(generateTrace({ ...options, seed: 43 })).not.toEqual(a);
    expect(a.length).toBeGreaterThan(1000);
    expect(a.map((r) => r.id)).toEqual(a.map((_, i) => `req-${String(i).padStart(6, '0')}`));
  });

  it('arrival times do not depend on the length distribution (separate random streams)', () => {
    const a = generateTrace(options);
    const b = generateTrace({ ...options, lengths: { kind: 'fixed', prompt: 4, output: 8 } });
    expect(b.map((r) => r.atMs)).toEqual(a.map((r) => r.atMs));
    expect(b.map((r) => r.adapter)).toEqual(a.map((r) => r.adapter));
    expect(b.every((r) => r.promptTokens === 4 && r.outputTokens === 8)).toBe(true);
  });
});
