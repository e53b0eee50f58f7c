/** The BenchContext the figure tests run with: --quick, 2 threads, silent, and fixed machine limits (no probe). */
import type { BenchContext, RooflineSummary } from '../src/types.js';

export const fixedRoofline: RooflineSummary = {
  triadGBs: 20,
  triadGBs1t: 15,
  readGBs: 30,
  readGBs1t: 20,
  peakGflops: 200,
  peakGflops1t: 100,
  isa: 'avx2',
  threads: 2,
  arrayMiB: 64,
  measuredAt: new Date(0).toISOString(),
  source: 'quick probe',
};

export const quickContext: BenchContext = { quick: true, threads: 2, log: () => {}, roofline: async () => fixedRoofline };
