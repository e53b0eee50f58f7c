/**
 * roofline: the machine's limits, which the other benches quote as "% of machine limit".
 *   - STREAM triad a = b + s*c over three f32 arrays much larger than the last-level cache, parallel over the
 *     kernel thread pool; GB/s counts 12 bytes per element (read b, read c, write a) as STREAM does.
 *   - read bandwidth: a sum over one large array (4 bytes per element), the access pattern of a decode GEMV.
 *   - peak FLOP/s: independent FMA chains in registers, per ISA, on one thread and on all kernel threads.
 */
import { deviceInfo, fmaPeakProbe, getCpuBackend, type Isa, readSumProbe, setIsa, setThreads, streamTriad, Tensor } from '@tessera/native';

import { measure, type Timing } from '../stats.js';
import { lineChart } from '../svg.js';
import type { Row } from '../table.js';
import type { Bench, BenchContext, BenchOutput, RooflineSummary } from '../types.js';

export interface RooflineConfig {
  /** Size of each triad array (the read probe streams one of them). */
  arrayMiB: number;
  /** Time spent sampling each measurement. */
  budgetMs: number;
  /** ISAs the FMA probe runs on (the bandwidth probes use the best one). */
  fmaIsas: 'all' | 'best';
}

export const ROOFLINE_FULL: RooflineConfig = { arrayMiB: 128, budgetMs: 1500, fmaIsas: 'all' };
export const ROOFLINE_QUICK: RooflineConfig = { arrayMiB: 64, budgetMs: 400, fmaIsas: 'all' };
/** What another bench runs when no recent roofline.json exists: a few seconds. */
export const ROOFLINE_PROBE: RooflineConfig = { arrayMiB: 64, budgetMs: 250, fmaIsas: 'best' };

const ISA_ORDER: Isa[] = ['scalar', 'avx2', 'avx512'];
/** Each FMA probe call should last about this long, so one call is one sample. */
const FMA_CALL_MS = 20;

interface Measured {
  summary: RooflineSummary;
  rows: Row[];
}

function withThreads<T>(n: number, restore: number, fn: () => T): T {
  setThreads(n);
  try {
    return fn();
  } finally {
    setThreads(restore);
  }
}

/** The median is the reported value; `best` (from the fastest sample, STREAM's convention) shows the headroom. */
function timingColumns(t: Timing, work: number): Row {
  return { best: work / (t.minMs * 1e6), median_ms: t.medianMs, samples: t.samples, spread: t.spread };
}

/** Picks iters so one fmaPeakProbe call lasts about FMA_CALL_MS at the current ISA and thread count. */
function calibrateFmaIters(): number {
  fmaPeakProbe(1000); // the first call after setThreads wakes fresh pool threads: keep it out of the estimate
  let iters = 10_000;
  for (;;) {
    const t0 = performance.now();
    fmaPeakProbe(iters);
    const ms = performance.now() - t0;
    // Extrapolate only from a call long enough that wake-up latency is noise.
    if (ms >= FMA_CALL_MS / 4 || iters >= 2 ** 34) return Math.max(1, Math.round((iters * FMA_CALL_MS) / Math.max(ms, 1e-3)));
    iters *= 4;
  }
}

/** Runs the probes. Restores the ISA and thread count it found. */
export function measureRoofline(config: RooflineConfig, log: (m: string) => void = () => {}): Measured {
  const backend = getCpuBackend();
  const info = deviceInfo(backend);
  const threads = info.threads ?? 1;
  const startIsa = info.isa ?? 'scalar';
  const bestIsa = info.bestIsa ?? 'scalar';
  const n = (config.arrayMiB * 2 ** 20) / 4;
  const rows: Row[] = [];
  const threadCounts = threads > 1 ? [1, threads] : [1];
  const opts = { budgetMs: config.budgetMs, warmup: 2, minSamples: 5, minSampleMs: 0 };

  // ---- bandwidth (best ISA: the loops are memory-bound, the ISA only has to keep up)
  const a = Tensor.empty([n], 'f32', backend);
  const b = Tensor.empty([n], 'f32', backend);
  const c = Tensor.empty([n], 'f32', backend);
  try {
    setIsa(bestIsa);
    // Values are small multiples of 1/4 so a = b + 3c and the sum of b are exact in f32: checked exactly below.
    const host = new Float32Array(n);
    for (let i = 0; i < n; i++) host[i] = (i % 1000) * 0.25;
    b.write(host);
    let expectedSum = 0;
    for (let i = 0; i < n; i++) expectedSum += host[i]!;
    for (let i = 0; i < n; i++) host[i] = (i % 17) * 0.5;
    c.write(host);
    const s = 3;
    streamTriad(a, b, c, s);
    const got = a.toArray() as Float32Array;
    for (let i = 0; i < n; i++) {
      const want = (i % 1000) * 0.25 + s * ((i % 17) * 0.5);
      if (got[i] !== want) throw new Error(`roofline: streamTriad is wrong at ${i}: got ${got[i]}, want ${want}`);
    }
    const sum = readSumProbe(b);
    if (Math.abs(sum - expectedSum) > 1e-6 * expectedSum) {
      throw new Error(`roofline: readSumProbe returned ${sum}, want ${expectedSum}`);
    }

    for (const t of threadCounts) {
      withThreads(t, threads, () => {
        log(`roofline: triad 3 x ${config.arrayMiB} MiB, ${t} thread(s)`);
        const triad = measure(() => streamTriad(a, b, c, s), opts);
        rows.push({ probe: 'triad', isa: bestIsa, threads: t, value: (12 * n) / (triad.medianMs * 1e6), unit: 'GB/s', ...timingColumns(triad, 12 * n) });
        log(`roofline: read ${config.arrayMiB} MiB, ${t} thread(s)`);
        const read = measure(() => readSumProbe(b), opts);
        rows.push({ probe: 'read', isa: bestIsa, threads: t, value: (4 * n) / (read.medianMs * 1e6), unit: 'GB/s', ...timingColumns(read, 4 * n) });
      });
    }
  } finally {
    a.dispose();
    b.dispose();
    c.dispose();
    setIsa(startIsa);
  }

  // ---- FMA peak, per ISA
  const isas = config.fmaIsas === 'all' ? ISA_ORDER.slice(0, ISA_ORDER.indexOf(bestIsa) + 1) : [bestIsa];
  try {
    for (const isa of isas) {
      setIsa(isa);
      for (const t of threadCounts) {
        withThreads(t, threads, () => {
          log(`roofline: FMA peak, ${isa}, ${t} thread(s)`);
          const iters = calibrateFmaIters();
          let flops = 0;
          const timing = measure(() => (flops = fmaPeakProbe(iters)), { ...opts, warmup: 1 });
          rows.push({ probe: 'fma', isa, threads: t, value: flops / (timing.medianMs * 1e6), unit: 'GFLOP/s', ...timingColumns(timing, flops) });
        });
      }
    }
  } finally {
    setIsa(startIsa);
  }

  const pick = (probe: string, t: number, isa: Isa = bestIsa): number => {
    const row = rows.find((r) => r.probe === probe && r.threads === t && r.isa === isa);
    if (!row) throw new Error(`roofline: no ${probe} row for ${t} thread(s), ${isa}`);
    return row.value as number;
  };
  const summary: RooflineSummary = {
    triadGBs: pick('triad', threads),
    triadGBs1t: pick('triad', 1),
    readGBs: pick('read', threads),
    readGBs1t: pick('read', 1),
    peakGflops: pick('fma', threads),
    peakGflops1t: pick('fma', 1),
    isa: bestIsa,
    threads,
    arrayMiB: config.arrayMiB,
    measuredAt: new Date().toISOString(),
    source: 'this run',
  };
  return { summary, rows };
}

/** The classic roofline plot: attainable GFLOP/s = min(peak, bandwidth x arithmetic intensity), log-log. */
export function rooflineChart(r: RooflineSummary): string {
  const roof = (gbs: number, peak: number) => {
    const ridge = peak / gbs;
    const xs = new Set<number>([ridge]);
    for (let e = -4; e <= 7; e++) xs.add(2 ** e);
    return [...xs].sort((p, q) => p - q).map((x) => ({ x, y: Math.min(peak, gbs * x) }));
  };
  return lineChart({
    title: `Roofline: ${r.threads} thread(s), ${r.isa}`,
    xLabel: 'arithmetic intensity (flop / byte of DRAM traffic)',
    yLabel: 'attainable GFLOP/s',
    logX: true,
    logY: true,
    series: [
      { name: `all ${r.threads} threads (triad ${r.triadGBs.toFixed(1)} GB/s)`, points: roof(r.triadGBs, r.peakGflops), markers: false },
      { name: `all threads, read-only (${r.readGBs.toFixed(1)} GB/s)`, points: roof(r.readGBs, r.peakGflops), markers: false, dashed: true },
      { name: `1 thread (triad ${r.triadGBs1t.toFixed(1)} GB/s)`, points: roof(r.triadGBs1t, r.peakGflops1t), markers: false },
    ],
    referenceLines: [
      { value: r.peakGflops, label: `peak ${r.peakGflops.toFixed(0)} GFLOP/s` },
      { value: r.peakGflops1t, label: `1-thread peak ${r.peakGflops1t.toFixed(0)} GFLOP/s` },
    ],
  });
}

/** The roofline bench; `fixed` overrides the quick/full sizes (tests run it tiny). */
export function makeRooflineBench(fixed?: RooflineConfig): Bench {
  return {
    name: 'roofline',
    run: (ctx) => runRoofline(ctx, fixed ?? (ctx.quick ? ROOFLINE_QUICK : ROOFLINE_FULL)),
  };
}

export const rooflineBench: Bench = makeRooflineBench();

async function runRoofline(ctx: BenchContext, config: RooflineConfig): Promise<BenchOutput> {
  const { summary, rows } = measureRoofline(config, ctx.log);
  // Register-only FMA chains scale with cores unless something else is running on them; then every number
  // here (and every "% of limit" derived from it) is suspect.
  const fmaScaling = summary.peakGflops / summary.peakGflops1t;
  const busy = summary.threads > 1 && fmaScaling < 0.75 * summary.threads;
  if (busy) {
    ctx.log(`warning: the FMA probe scaled only ${fmaScaling.toFixed(2)}x on ${summary.threads} threads: other processes are using the cores; measure again on an idle machine`);
  }
  return {
    params: { arrayMiB: config.arrayMiB, arrays: 3, budgetMsPerMeasurement: config.budgetMs, bytesPerTriadElement: 12, dtype: 'f32' },
    rows,
    ratios: {
      ridge_flop_per_byte: summary.peakGflops / summary.triadGBs,
      triad_thread_scaling: summary.triadGBs / summary.triadGBs1t,
      fma_thread_scaling: summary.peakGflops / summary.peakGflops1t,
      read_vs_triad_bandwidth: summary.readGBs / summary.triadGBs,
    },
    table: {
      columns: [
        { key: 'probe', header: 'probe' },
        { key: 'isa', header: 'isa' },
        { key: 'threads', header: 'threads' },
        { key: 'value', header: 'median' },
        { key: 'best', header: 'best' },
        { key: 'unit', header: 'unit' },
        { key: 'median_ms', header: 'median ms' },
        { key: 'samples', header: 'samples' },
        { key: 'spread', header: 'IQR/median', format: (v) => `${((v as number) * 100).toFixed(1)}%` },
      ],
      rows,
      notes: [
        `triad: a = b + s*c, 3 x ${config.arrayMiB} MiB f32, 12 bytes/element (STREAM convention; write-allocate traffic not counted)`,
        `read: sum over ${config.arrayMiB} MiB f32; fma: independent FMA chains in registers (FMA = 2 flops)`,
        `ridge point: ${(summary.peakGflops / summary.triadGBs).toFixed(1)} flop/byte (below it a kernel is bandwidth-bound)`,
        ...(busy ? [`WARNING: FMA throughput scaled ${fmaScaling.toFixed(2)}x on ${summary.threads} threads: the machine was busy, numbers are unreliable`] : []),
      ],
    },
    svg: rooflineChart(summary),
    roofline: summary,
  };
}
