/**
 * Polymorphing (arlo.md §3, §9-A, §12 item 4): staircase detection on synthetic profiles with and without steps,
 * the uniform fallback, the step hint, and the ideal runtime against a linear scan.
 */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { chooseRuntimeLengths, idealRuntimeIndex, type LatencyPoint, LengthSchedulerArgumentError, uniformLengths } from '../src/index.js';

/** A staircase: flat within each step of `step` tokens (with < `wobble` relative noise), a jump of `jump` ms at each step. */
function staircase(step: number, maxLen: number, every: number, wobble: number, seed: number, jump = 0.53): LatencyPoint[] {
  const rand = mulberry32(seed);
  const out: LatencyPoint[] = [];
  for (let l = every; l <= maxLen; l += every) {
    const stepIndex = Math.ceil(l / step) - 1;
    out.push({ length: l, ms: (1.15 + jump * stepIndex) * (1 + wobble * rand()) });
  }
  return out;
}

describe('chooseRuntimeLengths', () => {
  it('finds the 64-token staircase of TensorRT BERT: 64, 128, …, 512 (sampled every token and every 8)', () => {
    for (const every of [1, 8]) {
      const got = chooseRuntimeLengths(staircase(64, 512, every, 0.04, 1));
      expect(got.method).toBe('staircase');
      expect(got.lengths).toEqual([64, 128, 192, 256, 320, 384, 448, 512]);
    }
  });

  it('finds other steps, uniform or not', () => {
    for (const [step, seed] of [[32, 2], [128, 3], [48, 4]] as const) {
      const got = chooseRuntimeLengths(staircase(step, 384, 1, 0.03, seed));
      const want: number[] = [];
      for (let l = step; l < 384; l += step) want.push(l);
      want.push(384);
      expect(got.lengths).toEqual(want);
    }
    // Steps at 100, 250, 512: not uniform (§3.1: "may vary and not necessarily uniform").
    const ragged: LatencyPoint[] = [];
    for (let l = 1; l <= 512; l++) ragged.push({ length: l, ms: l <= 100 ? 1 : l <= 250 ? 2 : 3.5 });
    expect(chooseRuntimeLengths(ragged)).toEqual({ lengths: [100, 250, 512], method: 'staircase' });
  });

  it('falls back to 8 uniform steps on a linear CPU-like profile (ORT on a CPU, §13.1)', () => {
    // The measured 1-thread tiny model: 0.86 ms at 16 up to 26.9 ms at 512, about linear.
    const linear: LatencyPoint[] = [];
    for (let l = 8; l <= 512; l += 8) linear.push({ length: l, ms: 0.35 + 0.052 * l });
    const got = chooseRuntimeLengths(linear);
    expect(got.method).toBe('uniform');
    expect(got.lengths).toEqual([64, 128, 192, 256, 320, 384, 448, 512]);
    expect(chooseRuntimeLengths(linear, { fallbackCount: 4 }).lengths).toEqual([128, 256, 384, 512]);
  });

  it('returns k·step with a step hint, whatever the profile', () => {
    const got = chooseRuntimeLengths([], { maxLength: 512, stepHint: 64 });
    expect(got).toEqual({ lengths: [64, 128, 192, 256, 320, 384, 448, 512], method: 'step-hint' });
    expect(chooseRuntimeLengths([], { maxLength: 500, stepHint: 64 }).lengths.at(-1)).toBe(500);
  });

  it('gives one runtime for a flat profile (padding costs nothing)', () => {
    const flat = Array.from({ length: 64 }, (_, k) => ({ length: 8 * (k + 1), ms: 2 }));
    expect(chooseRuntimeLengths(flat)).toEqual({ lengths: [512], method: 'staircase' });
  });

  it('rejects bad profiles with the bad value named', () => {
    expect(() => chooseRuntimeLengths([])).toThrow(LengthSchedulerArgumentError);
    expect(() => chooseRuntimeLengths([{ length: 8, ms: 1 }, { length: 8, ms: 2 }])).toThrow(/point 1 has length 8/);
    expect(() => chooseRuntimeLengths([{ length: 8, ms: -1 }])).toThrow(/latency -1/);
    expect(() => chooseRuntimeLengths([], { maxLength: 64, stepHint: 0 })).toThrow(/stepHint/);
  });
});

describe('idealRuntimeIndex and uniformLengths', () => {
  it('agrees with a linear scan on random lengths, including past the longest', () => {
    const rand = mulberry32(11);
    for (let trial = 0; trial < 200; trial++) {
      const lengths = uniformLengths(64 + Math.floor(rand() * 960), 1 + Math.floor(rand() * 16));
      const len = 1 + Math.floor(rand() * 1100);
      const scan = lengths.findIndex((l) => l >= len);
      expect(idealRuntimeIndex(lengths, len)).toBe(scan < 0 ? lengths.length : scan);
    }
    expect(idealRuntimeIndex([], 5)).toBe(0);
  });

  it('spreads uniform steps up to exactly the max length', () => {
    expect(uniformLengths(512, 8)).toEqual([64, 128, 192, 256, 320, 384, 448, 512]);
    expect(uniformLengths(100, 3)).toEqual([34, 67, 100]);
    expect(() => uniformLengths(10, 11)).toThrow(/runtime count/);
  });
});
