/**
 * profileDecoderSteps (the measured source of the simulator's fitted latency): it profiles a real tiny decoder
 * and returns well-formed samples. No assertion reads a measured time: only that it is a positive number.
 */
import { fitLatencyModel } from '@tessera/sim';
import { describe, expect, it } from 'vitest';
import { profileDecoderSteps } from '../src/latency-profile.js';

describe('profileDecoderSteps', () => {
  it('measures real batcher steps of the tiny decoder: one sample per step, shapes as the punica policy runs them', async () => {
    const samples = await profileDecoderSteps({ batchSizes: [1, 3], contextLengths: [8, 24], decodeSteps: 2 });
    // Per point: B prefill steps (one admission each) then 2 decode-only steps.
    expect(samples.length).toBe(2 * (1 + 2 + 3 + 2));
    for (const s of samples) {
      expect(s.ms).toBeGreaterThan(0);
      expect(Number.isFinite(s.ms)).toBe(true);
      expect(s.batchSize).toBe(s.decodeRows + (s.prefillTokens > 0 ? 1 : 0));
    }
    // The second point (batch 3, context 8): prefills of 8 tokens joining 0, 1, 2 decodes, then 3 decodes.
    const point = samples.slice(3, 8);
    expect(point.map((s) => [s.prefillTokens, s.decodeRows])).toEqual([[8, 0], [8, 1], [8, 2], [0, 3], [0, 3]]);
    // kvTokens: the context each sequence attends to after the step (decodes grow by one per step).
    expect(point.map((s) => s.kvTokens)).toEqual([8, 8 + 9, 8 + 10 + 9, 11 + 10 + 9, 12 + 11 + 10]);
    const fit = fitLatencyModel(samples);
    expect(Number.isFinite(fit.coefficients.interceptMs)).toBe(true);
  });

  it('runs the batch through SgmvLoraDelta when asked for adapters', async () => {
    const samples = await profileDecoderSteps({ batchSizes: [2], contextLengths: [8], decodeSteps: 1, adapters: 2 });
    expect(samples.map((s) => s.batchSize)).toEqual([1, 2, 2]);
    expect(samples.every((s) => s.ms > 0)).toBe(true);
  });
});
