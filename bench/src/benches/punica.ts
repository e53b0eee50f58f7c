/**
 * punica (kernel figures): Punica's LoRA-operator microbenchmarks (punica.md §4, §7.1, §14 items 2–4) on our
 * CPU kernels, every method on the same data, side by side.
 *   - Fig. 8: the LoRA add-on y += (x·Aᵀ)·B at h_in = h_out = 4096, r = 16, batch 1…64, four popularity
 *     workloads: SGMV (shrink + expand) vs Loop (two GEMMs per segment) vs Gather-BMM (per-row weight copies,
 *     then batched m = 1 GEMMs), plus Gather and BMM alone for reference.
 *   - Fig. 9: SGMV over ranks 8, 16, 32, 64.
 *   - Fig. 7: achieved GFLOP/s of SGMV against its arithmetic intensity (f32 bytes, roofline.ts of
 *     @tessera/sgmv-kernel), under the measured triad bandwidth line and the FMA peak.
 *   - On Identical (one segment of every row) also our plain GEMM at the same shape, x·Aᵀ then (x·Aᵀ)·B into
 *     preallocated outputs: the same flops and bytes as SGMV, so GEMM us / SGMV us compares their efficiency.
 * Adapters come from a pool several times the last-level cache, and every call takes the next adapters in the
 * pool, so each call streams its weights from DRAM, as on the paper's GPU after its 256 MiB L2 flush: reuse
 * of one adapter is at least (pool / working set) calls apart. A sample times a burst of back-to-back calls (a
 * server's steady state); before each sample a read-only sweep over twice the last-level cache leaves it clean,
 * so no call pays for another's dirty lines. Each method's numbers are checked against the
 * float64 reference (and each other) before anything is timed.
 */
import { type Tensor as TensorT, Tensor, gemm, readSumProbe } from '@tessera/native';
import { addLora, referenceAddLora, rowIndexFromSegments } from '@tessera/sgmv-kernel';
import {
  type GatheredLoraWeights,
  type LoraWeightTable,
  PAPER_POPULARITIES,
  type PopularityName,
  addLoraCost,
  bmm,
  gatherBmm,
  gatherLoraWeights,
  indptrFromSizes,
  loraLoop,
  popularity,
  tableViews,
} from '@tessera/sgmv-kernel/bench';

import { maxRelErr, randomFloats } from '../data.js';
import { lastLevelCacheMiB } from '../machine.js';
import { median, percentile } from '../stats.js';
import { type LineSeries, lineChart } from '../svg.js';
import type { Row, TableSpec } from '../table.js';
import type { Bench, BenchContext, BenchOutput, RooflineSummary } from '../types.js';

export interface PunicaKernelConfig {
  /** h_in = h_out of the adapted projection. */
  h: number;
  /** Rank of Fig. 8 / Fig. 7. */
  rank: number;
  /** Batch sizes of Fig. 8 / Fig. 7. */
  batches: number[];
  /** Ranks and batch sizes of Fig. 9. */
  ranks: number[];
  rankBatches: number[];
  workloads: readonly PopularityName[];
  /** Timed calls per (method, point) after `warmup` untimed ones; the median is reported. */
  reps: number;
  warmup: number;
  /** Adapter pool per rank: at least this many MiB of A + B (and at least 4× the largest working set). */
  poolMiB: number;
  /**
   * Before every timed call, stream (read only) a buffer of this many MiB, default twice the last-level cache:
   * the cache then holds clean lines, so no call pays for writing back what the previous call left dirty (a
   * Gather's stacks, say), and nothing the call reads is still cached. The CPU analogue of the paper's 256 MiB
   * L2 flush.
   */
  flushMiB?: number;
  /**
   * Milliseconds to sleep between the sweep and each timed sample (default 0: none). On a shared machine the
   * call then starts on a fresh scheduler time slice instead of being preempted halfway because the sweep used
   * up the slice; on a quiet machine it costs the call a wake-up from idle, so 0 is the better choice there.
   */
  settleMs?: number;
  /**
   * Calls per timed sample, back to back, each on the next adapters of the pool (default 8). A server runs its
   * LoRA ops back to back between other kernels, with the thread pool awake; a lone call after an idle gap pays a
   * wake-up of the pool's threads on top (tens of µs), which no step of a running server pays.
   */
  burst?: number;
}

export const PUNICA_KERNEL_FULL: PunicaKernelConfig = {
  h: 4096,
  rank: 16,
  batches: [1, 2, 4, 8, 16, 32, 64],
  ranks: [8, 16, 32, 64],
  rankBatches: [1, 2, 4, 8, 16, 32, 64],
  workloads: PAPER_POPULARITIES,
  reps: 25,
  warmup: 3,
  poolMiB: 256,
};

/** --quick: three batch sizes, two for the rank sweep, fewer repetitions: well under a minute. */
export const PUNICA_KERNEL_QUICK: PunicaKernelConfig = {
  ...PUNICA_KERNEL_FULL,
  batches: [1, 8, 64],
  rankBatches: [1, 64],
  reps: 9,
  warmup: 2,
  poolMiB: 160,
};

/** Normwise tolerance of each method vs the float64 reference (f32 sums over 4096 terms; any bug is far above). */
const TOL = 1e-4;

const METHODS = ['sgmv', 'loop', 'gather_bmm', 'gather', 'bmm'] as const;
/** 'gemm' (Identical only): the two plain GEMMs of one segment, x·Aᵀ into v then y += v·B. */
type Method = (typeof METHODS)[number] | 'gemm';
const METHOD_LABEL: Record<(typeof METHODS)[number], string> = { sgmv: 'SGMV', loop: 'Loop', gather_bmm: 'Gather-BMM', gather: 'Gather', bmm: 'BMM' };

/** Median and fastest per-call time of `reps` single calls (ms), and the interquartile spread relative to the median. */
interface PointTiming {
  medianMs: number;
  /** The fastest call: what the machine does without interference (noise only ever adds time). */
  minMs: number;
  spread: number;
}

function summarise(samples: number[]): PointTiming {
  const med = median(samples);
  return { medianMs: med, minMs: Math.min(...samples), spread: med > 0 ? (percentile(samples, 75) - percentile(samples, 25)) / med : 0 };
}

/**
 * A pool of adapters of one rank and one layer in one table (A [P, r, h], B [P, r, h_out]) with per-adapter
 * [1, r, h] views; `next(n)` hands out the next n adapters round-robin, so consecutive calls touch disjoint
 * weights.
 */
class AdapterPool {
  readonly table: LoraWeightTable;
  readonly a: TensorT[];
  readonly b: TensorT[];
  /** The same adapters as [r, h] matrices, for the plain GEMMs. */
  readonly a2: TensorT[];
  readonly b2: TensorT[];
  readonly size: number;
  private cursor = 0;

  constructor(rank: number, h: number, minAdapters: number, poolMiB: number, seed: number) {
    const perAdapter = 2 * rank * h * 4;
    this.size = Math.max(minAdapters, Math.ceil((poolMiB * 2 ** 20) / perAdapter));
    const per = rank * h;
    // Distinct values per adapter without a pool-sized host array: windows of one random block.
    const block = randomFloats(Math.max(4 * per, 1 << 21), seed, -0.05, 0.05);
    const fill = (t: TensorT, salt: number) => {
      for (let i = 0; i < this.size; i++) {
        const view = t.rows(i, 1);
        try {
          const o = ((i + 1) * 104_729 + salt) % (block.length - per);
          view.write(block.subarray(o, o + per));
        } finally {
          view.dispose();
        }
      }
    };
    const a = Tensor.empty([this.size, rank, h]);
    const b = Tensor.empty([this.size, rank, h]);
    this.table = { a, b, layers: 1 };
    fill(a, 0);
    fill(b, 7919);
    const views = tableViews(this.table);
    this.a = views.a;
    this.b = views.b;
    this.a2 = this.a.map((t) => t.reshape([rank, h]));
    this.b2 = this.b.map((t) => t.reshape([rank, h]));
  }

  next(n: number): number[] {
    const ids = Array.from({ length: n }, (_, i) => (this.cursor + i) % this.size);
    this.cursor = (this.cursor + n) % this.size;
    return ids;
  }

  get bytes(): number {
    return this.table.a.nbytes + this.table.b.nbytes;
  }

  dispose(): void {
    for (const t of [...this.a2, ...this.b2, ...this.a, ...this.b, this.table.a, this.table.b]) t.dispose();
  }
}

/** Everything one (workload, batch, rank) point needs, allocated once; the adapters change per call. */
class Point {
  readonly sizes: number[];
  readonly rows: number;
  readonly indptr: Int32Array;
  readonly indptrT: TensorT;
  readonly x: TensorT;
  readonly y: TensorT;
  readonly v: TensorT;
  readonly v3: TensorT;
  /** x and y viewed as [rows, 1, h] once, for the batched GEMMs of BMM. */
  readonly x3: TensorT;
  readonly y3: TensorT;
  readonly stacks: GatheredLoraWeights;

  constructor(
    readonly pool: AdapterPool,
    readonly workload: PopularityName,
    bs: number,
    readonly rank: number,
    readonly h: number,
    seed: number,
  ) {
    this.sizes = popularity(workload, bs);
    this.rows = bs;
    this.indptr = indptrFromSizes(this.sizes);
    this.indptrT = Tensor.from(this.indptr, [this.indptr.length]);
    this.x = Tensor.from(randomFloats(bs * h, seed), [bs, h]);
    this.y = Tensor.zeros([bs, h]);
    this.v = Tensor.empty([bs, rank]);
    this.v3 = Tensor.empty([bs, 1, rank]);
    this.x3 = this.x.reshape([bs, 1, h]);
    this.y3 = this.y.reshape([bs, 1, h]);
    this.stacks = { a: Tensor.empty([bs, rank, h]), b: Tensor.empty([bs, rank, h]) };
  }

  get segments(): number {
    return this.sizes.length;
  }

  /** The call of `method` on adapters `ids` (one per segment), with every host-side list built beforehand. */
  call(method: Method, ids: number[]): () => void {
    const a = ids.map((j) => this.pool.a[j]!);
    const b = ids.map((j) => this.pool.b[j]!);
    const rowAdapter = rowIndexFromSegments(this.indptr, ids);
    switch (method) {
      case 'sgmv':
        return () => addLora(this.y, this.x, a, b, this.indptrT, 0, { scratch: this.v });
      case 'loop':
        return () => loraLoop(this.y, this.x, a, b, this.indptr, 0);
      case 'gather_bmm':
        return () => gatherBmm(this.y3, this.x3, this.pool.table, rowAdapter, 0, { stacks: this.stacks, scratch: this.v3 });
      case 'gather':
        return () => void gatherLoraWeights(this.pool.table, rowAdapter, 0, { out: this.stacks });
      case 'bmm':
        // Data-independent: the stacks stay as the last gather left them.
        return () => bmm(this.y3, this.x3, this.stacks, { scratch: this.v3 });
      case 'gemm': {
        if (this.segments !== 1) throw new Error('punica: the GEMM comparison needs one segment');
        const al = this.pool.a2[ids[0]!]!;
        const bl = this.pool.b2[ids[0]!]!;
        return () => {
          gemm(this.x, al, { transB: true, out: this.v });
          gemm(this.v, bl, { beta: 1, out: this.y });
        };
      }
    }
  }

  /** Runs sgmv, loop and gather_bmm on the same adapters from y = 0 and checks them against float64. */
  verify(label: string): Record<string, number> {
    const ids = this.pool.next(this.segments);
    const host = (t: TensorT) => ({ data: t.toArray() as Float32Array, layers: 1, rank: this.rank, features: this.h });
    const xHost = { data: this.x.toArray() as Float32Array, rows: this.rows, cols: this.h };
    const want = referenceAddLora(
      { data: new Float32Array(this.rows * this.h), rows: this.rows, cols: this.h },
      xHost,
      ids.map((j) => host(this.pool.a[j]!)),
      ids.map((j) => host(this.pool.b[j]!)),
      this.indptr,
      0,
    );
    const errors: Record<string, number> = {};
    const outputs: Record<string, Float32Array> = {};
    const checked: Method[] = ['sgmv', 'loop', 'gather_bmm'];
    if (this.segments === 1) checked.push('gemm');
    for (const method of checked) {
      this.y.write(new Float32Array(this.rows * this.h));
      this.call(method, ids)();
      outputs[method] = this.y.toArray() as Float32Array;
      errors[method] = maxRelErr(outputs[method], want);
    }
    const bad = Object.entries(errors).filter(([, e]) => !(e <= TOL));
    const vsSgmv = Math.max(...checked.filter((m) => m !== 'sgmv').map((m) => maxRelErr(outputs[m]!, outputs.sgmv!)));
    if (bad.length || !(vsSgmv <= TOL)) {
      throw new Error(`punica: ${label}: results disagree (normwise vs float64: ${JSON.stringify(errors)}, baselines vs SGMV ${vsSgmv.toExponential(2)}; tolerance ${TOL})`);
    }
    this.y.write(new Float32Array(this.rows * this.h));
    return { ...errors, baselines_vs_sgmv: vsSgmv };
  }

  /** Times the methods, interleaved sample by sample in a rotating order; a sample is `burst` calls, each on fresh adapters. */
  async time(methods: readonly Method[], reps: number, warmup: number, flush: () => void, settleMs: number, burst = 1): Promise<Record<Method, PointTiming>> {
    const samples = Object.fromEntries(methods.map((m) => [m, [] as number[]])) as Record<Method, number[]>;
    // BMM alone reads stacks someone gathered: fill them once.
    if (methods.includes('bmm')) this.call('gather', this.pool.next(this.segments))();
    for (let rep = -warmup; rep < reps; rep++) {
      for (let k = 0; k < methods.length; k++) {
        const method = methods[(k + Math.max(rep, 0)) % methods.length]!;
        const fns = Array.from({ length: burst }, () => this.call(method, this.pool.next(this.segments)));
        flush();
        if (settleMs > 0) await sleep(settleMs);
        const t0 = performance.now();
        for (const fn of fns) fn();
        const ms = (performance.now() - t0) / burst;
        if (rep >= 0) samples[method].push(ms);
      }
    }
    return Object.fromEntries(methods.map((m) => [m, summarise(samples[m])])) as Record<Method, PointTiming>;
  }

  dispose(): void {
    for (const t of [this.indptrT, this.x3, this.y3, this.x, this.y, this.v, this.v3, this.stacks.a, this.stacks.b]) t.dispose();
  }
}

export interface PunicaKernelFigures {
  params: Record<string, unknown>;
  /** Fig. 8 / 7 rows (figure 'fig8') and Fig. 9 rows (figure 'fig9'). */
  rows: Row[];
  ratios: Record<string, number>;
  /** Fig. 8 and Fig. 7 numbers, one row per (workload, batch). */
  table: TableSpec;
  /** Fig. 9 numbers, one row per (workload, rank, batch). */
  rankTable: TableSpec;
  svgs: { fig7: string; fig8: string; fig9: string };
}

const us = (ms: number) => ms * 1000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The kernel figures (Fig. 7, 8, 9) with the sizes of `config` (default: quick or full per ctx.quick). */
export async function punicaKernelFigures(ctx: BenchContext, config?: PunicaKernelConfig): Promise<PunicaKernelFigures> {
  const cfg = config ?? (ctx.quick ? PUNICA_KERNEL_QUICK : PUNICA_KERNEL_FULL);
  const roof = await ctx.roofline();
  const { h } = cfg;
  const rows: Row[] = [];
  const fig8: Row[] = [];
  const fig9: Row[] = [];
  const verification: Record<string, Record<string, number>> = {};
  const maxBatch = Math.max(...cfg.batches, ...cfg.rankBatches);
  const flushMiB = cfg.flushMiB ?? 2 * (lastLevelCacheMiB() ?? 32);
  const flushBuffer = Tensor.zeros([Math.max(1, Math.round((flushMiB * 2 ** 20) / 4))]);
  const flush = () => void readSumProbe(flushBuffer);
  const settleMs = cfg.settleMs ?? 0;
  const burst = cfg.burst ?? 8;
  try {
    // ---- Fig. 8 (and the points of Fig. 7)
    {
      const pool = new AdapterPool(cfg.rank, h, 4 * maxBatch, cfg.poolMiB, 1);
      ctx.log(`punica: fig 8: pool of ${pool.size} adapters (r ${cfg.rank}, ${(pool.bytes / 2 ** 20).toFixed(0)} MiB)`);
      try {
        let seed = 10;
        for (const workload of cfg.workloads) {
          for (const bs of cfg.batches) {
            const point = new Point(pool, workload, bs, cfg.rank, h, seed++);
            try {
              if (bs === Math.max(...cfg.batches) || bs === Math.min(...cfg.batches)) verification[`${workload} b${bs}`] = point.verify(`fig 8 ${workload} batch ${bs}`);
              ctx.log(`punica: fig 8: ${workload} batch ${bs} (${point.segments} segments)`);
              // On Identical our plain GEMM at the same shape runs beside the others (same flops, same bytes).
              const withGemm = workload === 'identical' && point.segments === 1;
              const t = await point.time(withGemm ? [...METHODS, 'gemm'] : METHODS, cfg.reps, cfg.warmup, flush, settleMs, burst);
              const cost = addLoraCost({ segments: point.sizes, hIn: h, hOut: h, rank: cfg.rank, elementBytes: 4 });
              const sgmvS = t.sgmv.medianMs / 1000;
              const tg = withGemm ? t.gemm : undefined;
              const row: Row = {
                figure: 'fig8',
                workload,
                batch: bs,
                rank: cfg.rank,
                segments: point.segments,
                sgmv_us: us(t.sgmv.medianMs),
                loop_us: us(t.loop.medianMs),
                gather_bmm_us: us(t.gather_bmm.medianMs),
                gather_us: us(t.gather.medianMs),
                bmm_us: us(t.bmm.medianMs),
                sgmv_vs_gather_bmm: t.gather_bmm.medianMs / t.sgmv.medianMs,
                sgmv_vs_loop: t.loop.medianMs / t.sgmv.medianMs,
                intensity_f32: cost.intensity,
                sgmv_gflops: cost.flops / sgmvS / 1e9,
                sgmv_gbs: cost.bytes / sgmvS / 1e9,
                sgmv_bandwidth_frac: cost.bytes / sgmvS / 1e9 / roof.triadGBs,
                sgmv_min_us: us(t.sgmv.minMs),
                loop_min_us: us(t.loop.minMs),
                gather_bmm_min_us: us(t.gather_bmm.minMs),
                sgmv_bandwidth_frac_best: cost.bytes / (t.sgmv.minMs / 1000) / 1e9 / roof.triadGBs,
                gemm_us: tg ? us(tg.medianMs) : null,
                gemm_min_us: tg ? us(tg.minMs) : null,
                gemm_gflops: tg ? cost.flops / (tg.medianMs / 1000) / 1e9 : null,
                sgmv_vs_gemm: tg ? tg.medianMs / t.sgmv.medianMs : null,
                max_spread: Math.max(...METHODS.map((m) => t[m].spread)),
              };
              rows.push(row);
              fig8.push(row);
            } finally {
              point.dispose();
            }
          }
        }
      } finally {
        pool.dispose();
      }
    }

    // ---- Fig. 9: SGMV over ranks
    for (const rank of cfg.ranks) {
      const pool = new AdapterPool(rank, h, 4 * maxBatch, cfg.poolMiB, 100 + rank);
      ctx.log(`punica: fig 9: rank ${rank}: pool of ${pool.size} adapters (${(pool.bytes / 2 ** 20).toFixed(0)} MiB)`);
      try {
        let seed = 1000 * rank;
        for (const workload of cfg.workloads) {
          for (const bs of cfg.rankBatches) {
            const point = new Point(pool, workload, bs, rank, h, seed++);
            try {
              if (bs === Math.max(...cfg.rankBatches)) verification[`${workload} b${bs} r${rank}`] = point.verify(`fig 9 ${workload} batch ${bs} rank ${rank}`);
              const t = await point.time(['sgmv'], cfg.reps, cfg.warmup, flush, settleMs, burst);
              const cost = addLoraCost({ segments: point.sizes, hIn: h, hOut: h, rank, elementBytes: 4 });
              const row: Row = {
                figure: 'fig9',
                workload,
                batch: bs,
                rank,
                segments: point.segments,
                sgmv_us: us(t.sgmv.medianMs),
                sgmv_gbs: cost.bytes / (t.sgmv.medianMs / 1000) / 1e9,
                sgmv_bandwidth_frac: cost.bytes / (t.sgmv.medianMs / 1000) / 1e9 / roof.triadGBs,
                sgmv_min_us: us(t.sgmv.minMs),
                spread: t.sgmv.spread,
              };
              rows.push(row);
              fig9.push(row);
            } finally {
              point.dispose();
            }
          }
        }
      } finally {
        pool.dispose();
      }
    }

  } finally {
    flushBuffer.dispose();
  }

  // ---- ratios (the targets at batch 64, Distinct)
  const ratios: Record<string, number> = {};
  const at = (workload: string, bs: number) => fig8.find((r) => r.workload === workload && r.batch === bs);
  const top = Math.max(...cfg.batches);
  const distinctTop = at('distinct', top);
  const suffix = top === 64 ? 'b64' : `b${top}`;
  if (distinctTop) {
    ratios[`sgmv_vs_gather_bmm_${suffix}_distinct`] = distinctTop.sgmv_vs_gather_bmm as number;
    ratios[`sgmv_vs_loop_${suffix}_distinct`] = distinctTop.sgmv_vs_loop as number;
    ratios[`sgmv_bandwidth_frac_${suffix}_distinct`] = distinctTop.sgmv_bandwidth_frac as number;
    // The same from each method's fastest call: the figures on a shared machine, where medians carry other jobs' noise.
    ratios[`sgmv_vs_gather_bmm_${suffix}_distinct_best`] = (distinctTop.gather_bmm_min_us as number) / (distinctTop.sgmv_min_us as number);
    ratios[`sgmv_vs_loop_${suffix}_distinct_best`] = (distinctTop.loop_min_us as number) / (distinctTop.sgmv_min_us as number);
    ratios[`sgmv_bandwidth_frac_${suffix}_distinct_best`] = distinctTop.sgmv_bandwidth_frac_best as number;
  }
  const identicalTop = at('identical', top);
  if (distinctTop && identicalTop) {
    // The paper's point is that popularity barely matters on a GPU; on a CPU Distinct streams `top` times the weights.
    ratios[`sgmv_distinct_vs_identical_${suffix}`] = (distinctTop.sgmv_us as number) / (identicalTop.sgmv_us as number);
  }
  if (identicalTop) ratios[`sgmv_vs_bmm_${suffix}_identical`] = (identicalTop.bmm_us as number) / (identicalTop.sgmv_us as number);
  // SGMV's efficiency over our GEMM's at the same shape (target >= 1): GEMM time / SGMV time, at the top batch and
  // the worst over every Identical batch; *_best from each method's fastest call.
  if (identicalTop && typeof identicalTop.gemm_us === 'number') {
    ratios[`sgmv_vs_gemm_${suffix}_identical`] = identicalTop.sgmv_vs_gemm as number;
    ratios[`sgmv_vs_gemm_${suffix}_identical_best`] = (identicalTop.gemm_min_us as number) / (identicalTop.sgmv_min_us as number);
  }
  const identicalRows = fig8.filter((r) => r.workload === 'identical' && typeof r.sgmv_vs_gemm === 'number');
  if (identicalRows.length > 0) ratios.sgmv_vs_gemm_identical_min = Math.min(...identicalRows.map((r) => r.sgmv_vs_gemm as number));

  const pct = (v: unknown) => `${((v as number) * 100).toFixed(0)}%`;
  const x = (v: unknown) => `${(v as number).toFixed(1)}x`;
  const table: TableSpec = {
    columns: [
      { key: 'workload', header: 'workload' },
      { key: 'batch', header: 'batch' },
      { key: 'segments', header: 'segs' },
      { key: 'sgmv_us', header: 'SGMV us' },
      { key: 'loop_us', header: 'Loop us' },
      { key: 'gather_bmm_us', header: 'Gather-BMM us' },
      { key: 'gather_us', header: 'Gather us' },
      { key: 'bmm_us', header: 'BMM us' },
      { key: 'gemm_us', header: 'GEMM us' },
      { key: 'sgmv_vs_gather_bmm', header: 'G-BMM/SGMV', format: x },
      { key: 'sgmv_vs_loop', header: 'Loop/SGMV', format: x },
      { key: 'sgmv_vs_gemm', header: 'GEMM/SGMV', format: (v) => (typeof v === 'number' ? x(v) : '-') },
      { key: 'intensity_f32', header: 'AI f/B' },
      { key: 'sgmv_gflops', header: 'SGMV GF/s' },
      { key: 'sgmv_gbs', header: 'SGMV GB/s' },
      { key: 'sgmv_bandwidth_frac', header: '% triad', format: pct },
      { key: 'sgmv_bandwidth_frac_best', header: 'best', format: pct },
    ],
    rows: fig8,
    notes: [
      `LoRA add-on y += (x A^T) B, h_in = h_out = ${h}, r = ${cfg.rank}, f32; median over ${cfg.reps} samples of ${burst} back-to-back calls per method, ` +
        `each on the next adapters of a ${cfg.poolMiB}+ MiB pool after a ${flushMiB} MiB read-only cache sweep (weights come from DRAM). Threads: ${ctx.threads}.`,
      `Machine (${roof.source}): triad ${roof.triadGBs.toFixed(1)} GB/s, peak ${roof.peakGflops.toFixed(0)} GFLOP/s. ` +
        'AI and GB/s count f32 bytes of x, y, v and each segment\'s A and B once (sgmv-kernel roofline.ts).',
      'Gather and BMM are the two halves of Gather-BMM; BMM is data-independent (its stacks are gathered beforehand).',
      'GEMM (Identical only): our plain GEMM at the same shape, gemm(x, A, transB) into v then gemm(v, B, beta 1) into y; ' +
        'GEMM/SGMV >= 1 means SGMV is at least as efficient as our GEMM (target of issue 18).',
      'best: % triad of the fastest SGMV call (rows also hold each method\'s fastest call, *_min_us; ratios *_best use them).',
    ],
  };
  const rankTable: TableSpec = {
    columns: [
      { key: 'workload', header: 'workload' },
      { key: 'rank', header: 'rank' },
      { key: 'batch', header: 'batch' },
      { key: 'segments', header: 'segs' },
      { key: 'sgmv_us', header: 'SGMV us' },
      { key: 'sgmv_gbs', header: 'GB/s' },
      { key: 'sgmv_bandwidth_frac', header: '% triad', format: pct },
    ],
    rows: fig9,
    notes: [`SGMV (shrink + expand) at h = ${h}, ranks ${cfg.ranks.join(', ')}; same protocol as Fig. 8.`],
  };

  return {
    params: {
      h,
      rank: cfg.rank,
      batches: cfg.batches,
      ranks: cfg.ranks,
      rankBatches: cfg.rankBatches,
      workloads: [...cfg.workloads],
      reps: cfg.reps,
      warmup: cfg.warmup,
      poolMiB: cfg.poolMiB,
      flushMiB,
      settleMs,
      burst,
      dtype: 'f32 activations and weights; A [L, r, h_in], B [L, r, h_out]',
      tolerance: TOL,
      verification,
    },
    rows,
    ratios,
    table,
    rankTable,
    svgs: { fig7: fig7Chart(fig8, cfg, roof), fig8: fig8Chart(fig8, cfg), fig9: fig9Chart(fig9, cfg) },
  };
}

// ─── charts ────────────────────────────────────────────────────────────────────────────────────────────────

/** Lays standalone SVG documents out on a grid inside one document (nested <svg> elements). */
export function svgGrid(charts: string[], columns: number): string {
  const parsed = charts.map((c) => {
    const m = /<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg" width="(\d+(?:\.\d+)?)" height="(\d+(?:\.\d+)?)"/.exec(c);
    if (!m) throw new Error('svgGrid: not a chart of svg.ts');
    return { body: c.replace(/^<\?xml[^>]*\?>\s*/, ''), width: Number(m[1]), height: Number(m[2]) };
  });
  const cellW = Math.max(...parsed.map((p) => p.width));
  const cellH = Math.max(...parsed.map((p) => p.height));
  const rowsN = Math.ceil(parsed.length / columns);
  const width = cellW * Math.min(columns, parsed.length);
  const height = cellH * rowsN;
  const out = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
  ];
  parsed.forEach((p, i) => {
    const x = (i % columns) * cellW;
    const y = Math.floor(i / columns) * cellH;
    out.push(p.body.replace('<svg xmlns="http://www.w3.org/2000/svg"', `<svg x="${x}" y="${y}"`));
  });
  out.push('</svg>');
  return out.join('\n');
}

function fig8Chart(fig8: Row[], cfg: PunicaKernelConfig): string {
  const charts = cfg.workloads.map((workload) => {
    const mine = fig8.filter((r) => r.workload === workload);
    const series: LineSeries[] = METHODS.map((m) => ({
      name: METHOD_LABEL[m],
      points: mine.map((r) => ({ x: r.batch as number, y: r[`${m}_us`] as number })),
      dashed: m === 'gather' || m === 'bmm',
    }));
    return lineChart({
      title: `Fig. 8 analogue: ${workload} (h ${cfg.h}, r ${cfg.rank})`,
      series,
      xLabel: 'batch size',
      yLabel: 'latency (us)',
      logX: true,
      logY: true,
      width: 560,
      height: 400,
    });
  });
  return svgGrid(charts, 2);
}

function fig9Chart(fig9: Row[], cfg: PunicaKernelConfig): string {
  const charts = cfg.workloads.map((workload) =>
    lineChart({
      title: `Fig. 9 analogue: SGMV, ${workload} (h ${cfg.h})`,
      series: cfg.ranks.map((rank) => ({
        name: `r ${rank}`,
        points: fig9.filter((r) => r.workload === workload && r.rank === rank).map((r) => ({ x: r.batch as number, y: r.sgmv_us as number })),
      })),
      xLabel: 'batch size',
      yLabel: 'latency (us)',
      logX: true,
      logY: true,
      width: 560,
      height: 400,
    }),
  );
  return svgGrid(charts, 2);
}

function fig7Chart(fig8: Row[], cfg: PunicaKernelConfig, roof: RooflineSummary): string {
  const series: LineSeries[] = cfg.workloads.map((workload) => ({
    name: workload,
    points: fig8.filter((r) => r.workload === workload).map((r) => ({ x: r.intensity_f32 as number, y: r.sgmv_gflops as number })),
  }));
  const ais = series.flatMap((s) => s.points.map((p) => p.x));
  const lo = Math.min(...ais) / 2;
  const hi = Math.max(...ais, roof.peakGflops / roof.triadGBs) * 2;
  const line: { x: number; y: number }[] = [];
  for (let e = Math.floor(Math.log2(lo)); e <= Math.ceil(Math.log2(hi)); e++) line.push({ x: 2 ** e, y: Math.min(roof.peakGflops, roof.triadGBs * 2 ** e) });
  series.push({ name: `triad ${roof.triadGBs.toFixed(1)} GB/s x AI`, points: line, dashed: true, markers: false });
  return lineChart({
    title: `Fig. 7 analogue: SGMV roofline (f32, h ${cfg.h}, r ${cfg.rank}, batch ${cfg.batches[0]}..${cfg.batches[cfg.batches.length - 1]})`,
    series,
    xLabel: 'arithmetic intensity (flop / byte, f32)',
    yLabel: 'achieved GFLOP/s',
    logX: true,
    logY: true,
    referenceLines: [{ value: roof.peakGflops, label: `FMA peak ${roof.peakGflops.toFixed(0)} GFLOP/s` }],
  });
}

/**
 * The kernel figures as a standalone bench (svg: Fig. 8; the Fig. 9 table is appended to the notes). The
 * `punica` bench of the registry may fold these figures into a larger output instead.
 */
export function makePunicaKernelBench(config?: PunicaKernelConfig): Bench {
  return {
    name: 'punica',
    async run(ctx: BenchContext): Promise<BenchOutput> {
      const f = await punicaKernelFigures(ctx, config);
      return { params: f.params, rows: f.rows, ratios: f.ratios, table: f.table, svg: f.svgs.fig8 };
    },
  };
}

/**
 * `pnpm bench punica`: the kernel figures (Fig. 8 operators, Fig. 9 ranks, Fig. 7 roofline) and then Fig. 11
 * (text-generation throughput of the three batching policies on the four workloads), one result with every ratio.
 */
export const punicaBench: Bench = {
  name: 'punica',
  async run(ctx: BenchContext): Promise<BenchOutput> {
    const kernels = await punicaKernelFigures(ctx);
    const { punicaTextgenFigure } = await import('./punica-textgen.js');
    const textgen = await punicaTextgenFigure(ctx);
    return {
      params: { kernels: kernels.params, textgen: textgen.params },
      rows: [...kernels.rows, ...textgen.rows.map((r) => ({ figure: 'fig11', ...r }))],
      ratios: { ...kernels.ratios, ...textgen.ratios },
      table: kernels.table,
      moreTables: [kernels.rankTable, textgen.table],
      svg: kernels.svgs.fig8,
      moreSvgs: { fig7: kernels.svgs.fig7, fig9: kernels.svgs.fig9, fig11: textgen.svg },
    };
  },
};
