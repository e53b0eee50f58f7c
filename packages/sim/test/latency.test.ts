/**
 * Step-latency models: the least-squares fit recovers known coefficients, the paper model passes through the
 * Fig. 1 corners it is pinned to. (Profiling a real decoder is bench/test/latency-profile.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import {
  LatencyFitError,
  type LatencySample,
  LinearLatencyModel,
  MIN_STEP_MS,
  fitLatencyModel,
  mulberry32,
  paperLatencyModel,
} from '../src/index.js';

const truth = { interceptMs: 4.5, perDecodeRowMs: 0.12, perPrefillTokenMs: 0.05, perKvTokenMs: 0.0008 };

function syntheticSamples(noiseMs: number, withPrefill = true): LatencySample[] {
  const model = new LinearLatencyModel(truth);
  const random = mulberry32(11);
  const samples: LatencySample[] = [];
  for (const decodeRows of [1, 2, 4, 8, 16, 32]) {
    for (const context of [64, 256, 1024]) {
      for (const prefill of withPrefill ? [0, 24, 300] : [0]) {
        const shape = { batchSize: decodeRows + (prefill > 0 ? 1 : 0), decodeRows, prefillTokens: prefill, kvTokens: decodeRows * context + prefill };
        samples.push({ ...shape, ms: model.stepMs(shape) + (random() * 2 - 1) * noiseMs });
      }
    }
  }
  return samples;
}

describe('fitLatencyModel', () => {
  it('recovers the coefficients of noiseless samples', () => {
    const fit = fitLatencyModel(syntheticSamples(0));
    for (const [k, v] of Object.entries(truth)) expect(fit.coefficients[k as keyof typeof truth]).toBeCloseTo(v, 9);
    expect(fit.rmseMs).toBeLessThan(1e-9);
    expect(fit.r2).toBeCloseTo(1, 12);
    expect(fit.samples).toBe(54);
  });

  it('recovers them within a few percent under ±0.2 ms of uniform noise', () => {
    const fit = fitLatencyModel(syntheticSamples(0.2));
    expect(fit.coefficients.perDecodeRowMs).toBeGreaterThan(truth.perDecodeRowMs * 0.95);
    expect(fit.coefficients.perDecodeRowMs).toBeLessThan(truth.perDecodeRowMs * 1.05);
    expect(fit.coefficients.perKvTokenMs).toBeGreaterThan(truth.perKvTokenMs * 0.97);
    expect(fit.coefficients.perKvTokenMs).toBeLessThan(truth.perKvTokenMs * 1.03);
    expect(fit.coefficients.interceptMs).toBeGreaterThan(truth.interceptMs - 0.2);
    expect(fit.coefficients.interceptMs).toBeLessThan(truth.interceptMs + 0.2);
    expect(fit.rmseMs).toBeGreaterThan(0.05);
    expect(fit.rmseMs).toBeLessThan(0.2);
  });

  it('a feature never seen (no prefill) gets 0; the others are still recovered', () => {
    const fit = fitLatencyModel(syntheticSamples(0, false));
    expect(fit.coefficients.perPrefillTokenMs).toBe(0);
    expect(fit.coefficients.perDecodeRowMs).toBeCloseTo(truth.perDecodeRowMs, 9);
    expect(fit.coefficients.perKvTokenMs).toBeCloseTo(truth.perKvTokenMs, 9);
  });

  it('refuses samples that cannot determine the coefficients', () => {
    // KV tokens always 100 per row: perDecodeRow and perKvToken are not separable.
    const collinear = [1, 2, 4, 8, 16].map((rows) => ({ batchSize: rows, decodeRows: rows, prefillTokens: 0, kvTokens: 100 * rows, ms: 3 + rows }));
    expect(() => fitLatencyModel(collinear)).toThrow(LatencyFitError);
    expect(() => fitLatencyModel(collinear.slice(0, 2).map((s, i) => ({ ...s, kvTokens: 50 * i + 7 })))).toThrow(LatencyFitError);
  });
});

describe('paperLatencyModel', () => {
  const model = paperLatencyModel();
  const decode = (batch: number, context: number) => model.stepMs({ batchSize: batch, decodeRows: batch, prefillTokens: 0, kvTokens: batch * context });

  it('passes through Fig. 1 at batch 1 and 32 for 128-token sequences and at batch 32 for 2048-token ones', () => {
    expect(decode(1, 128)).toBeCloseTo(11, 10);
    expect(decode(32, 128)).toBeCloseTo(13, 10);
    expect(decode(32, 2048)).toBeCloseTo(34, 10);
    // The corner a linear model cannot also hit (documented): one long sequence alone.
    expect(decode(1, 2048)).toBeCloseTo(11.66, 2);
  });

  it('prefill adds 0.08 ms a token; no step is shorter than MIN_STEP_MS', () => {
    expect(model.stepMs({ batchSize: 1, decodeRows: 0, prefillTokens: 100, kvTokens: 100 }) - model.stepMs({ batchSize: 0, decodeRows: 0, prefillTokens: 0, kvTokens: 100 })).toBeCloseTo(8, 10);
    const negative = new LinearLatencyModel({ interceptMs: -5, perDecodeRowMs: 0, perPrefillTokenMs: 0, perKvTokenMs: 0 });
    expect(negative.stepMs({ batchSize: 1, decodeRows: 1, prefillTokens: 0, kvTokens: 1 })).toBe(MIN_STEP_MS);
  });
});
