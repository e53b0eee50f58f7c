/**
 * gemm: our GEMM against onnxruntime-node's MatMul on the same data, for the projection shapes of BERT-base and
 * Llama-7B (y = x W^T with W the [out, in] Hugging Face weight), at several batch sizes m.
 *   - ours f32 vs ORT f32: GFLOP/s and their ratio (same thread count, ORT at graph optimisation level 'all').
 *   - ours with bf16 weights: GFLOP/s, and the weight bandwidth (weight bytes / time) as a fraction of the
 *     measured triad bandwidth: at decode sizes (small m) a GEMM is a weight stream, so that fraction is the
 *     figure of merit.
 *   - ours in bf16 compute (`compute: 'bf16'`, bf16 weights, activations rounded to bf16, f32 sums; AMX-BF16 tiles or
 *     VDPBF16PS where the CPU has them): GFLOP/s and its speed-up over our f32 GEMM on the same shape (bf16_compute_vs_f32).
 * Every shape is checked numerically before it is timed (ours vs ORT on the whole output, and all three
 * against a float64 reference on sampled outputs): timing a wrong result would be worthless.
 */
import type { InferenceSession, Tensor as OrtTensor } from 'onnxruntime-node';
import { deviceInfo, fromHalfBits, gemm, getCpuBackend, q8Dequantize, q8Gemm, q8Kernels, q8Quantize, Tensor, toHalfBits } from '@tessera/native';

import { maxRelErr, randomFloats, transpose } from '../data.js';
import { lastLevelCacheMiB } from '../machine.js';
import { matmulModel } from '../onnx.js';
import { measure, measureAsync, type MeasureOptions, type Timing } from '../stats.js';
import { barChart } from '../svg.js';
import type { Row } from '../table.js';
import type { Bench, BenchContext, BenchOutput } from '../types.js';

export interface GemmShape {
  model: string;
  layer: string;
  /** in features (reduction) */
  k: number;
  /** out features */
  n: number;
}

export const GEMM_SHAPES: GemmShape[] = [
  { model: 'bert-base', layer: 'attn q/k/v/o', k: 768, n: 768 },
  { model: 'bert-base', layer: 'ffn up', k: 768, n: 3072 },
  { model: 'bert-base', layer: 'ffn down', k: 3072, n: 768 },
  { model: 'llama-7b', layer: 'attn q/k/v/o', k: 4096, n: 4096 },
  { model: 'llama-7b', layer: 'mlp gate/up', k: 4096, n: 11008 },
  { model: 'llama-7b', layer: 'mlp down', k: 11008, n: 4096 },
];
export const GEMM_M_FULL = [1, 8, 32, 128, 512];
/** --quick: one BERT and one Llama shape, m up to 128: well under a minute on 2 cores. */
export const GEMM_SHAPES_QUICK = GEMM_SHAPES.filter((s) => (s.model === 'bert-base' && s.n === 3072) || (s.model === 'llama-7b' && s.n === 4096 && s.k === 4096));
export const GEMM_M_QUICK = [1, 8, 32, 128];

/**
 * Normwise tolerances (max |err| / max |ref|):
 *   f32 vs f32 (ours vs ORT, either vs float64): both accumulate in f32 in different orders; the typical error
 *     is ~sqrt(k) * 2^-24 relative (1e-5 at k = 11008), so 1e-4 catches any real bug with margin.
 *   bf16 weights vs float64 on the same bf16-rounded weights: a kernel may also round activations to bf16
 *     (AVX512-BF16 dot products), 2^-9 relative per product, so 2e-2.
 */
const TIMING_ROUNDS = 2;

/** The timing with the lower median (null-safe). */
function better(a: Timing | null, b: Timing): Timing {
  return a && a.medianMs <= b.medianMs ? a : b;
}

const TOL_F32 = 1e-4;
const TOL_BF16 = 2e-2;

/** Output positions checked against float64: a few rows (first, middle, last) x 64 columns across n. */
function samplePositions(m: number, n: number): { rows: number[]; cols: number[] } {
  const rows = [...new Set([0, m >> 1, m - 1])];
  const cols = [...new Set(Array.from({ length: Math.min(64, n) }, (_, i) => Math.round((i * (n - 1)) / Math.max(1, Math.min(64, n) - 1))))];
  return { rows, cols };
}

/** y[r, c] = sum_j x[r, j] * w[c, j] in float64 at the sampled positions; returns the normwise error of `got`. */
function sampledError(got: Float32Array, x: Float32Array, w: Float32Array, m: number, n: number, k: number): number {
  const { rows, cols } = samplePositions(m, n);
  const gotS: number[] = [];
  const refS: number[] = [];
  for (const r of rows) {
    for (const c of cols) {
      let acc = 0;
      const xo = r * k;
      const wo = c * k;
      for (let j = 0; j < k; j++) acc += x[xo + j]! * w[wo + j]!;
      refS.push(acc);
      gotS.push(got[r * n + c]!);
    }
  }
  return maxRelErr(gotS, refS);
}

function gflops(m: number, n: number, k: number, ms: number): number {
  return (2 * m * n * k) / (ms * 1e6);
}

function minOf(rows: Row[], key: string, keep: (r: Row) => boolean): number | null {
  const vals = rows.filter(keep).map((r) => r[key]).filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  return vals.length ? Math.min(...vals) : null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export const gemmBench: Bench = {
  name: 'gemm',
  async run(ctx: BenchContext): Promise<BenchOutput> {
    const ort = await import('onnxruntime-node');
    const roof = await ctx.roofline();
    const shapes = ctx.quick ? GEMM_SHAPES_QUICK : GEMM_SHAPES;
    const ms = ctx.quick ? GEMM_M_QUICK : GEMM_M_FULL;
    const timing: MeasureOptions = ctx.quick ? { budgetMs: 250, warmup: 2, minSamples: 3 } : { budgetMs: 1000, warmup: 3, minSamples: 5 };
    const rows: Row[] = [];
    const llcMiB = lastLevelCacheMiB();

    let seed = 1;
    for (const shape of shapes) {
      const { k, n } = shape;
      const label = `${shape.model} ${shape.layer} ${k}->${n}`;
      ctx.log(`gemm: ${label}: preparing weights and the ORT session`);
      const w = randomFloats(n * k, seed++);
      const wBits = toHalfBits(w, 'bf16');
      const wBf16Values = fromHalfBits(wBits, 'bf16');
      const wT = Tensor.from(w, [n, k]);
      const wB = Tensor.from(wBits, [n, k], { dtype: 'bf16' });
      let session: InferenceSession | null = null;
      try {
        session = await ort.InferenceSession.create(matmulModel(transpose(w, n, k), k, n), {
          executionProviders: ['cpu'],
          graphOptimizationLevel: 'all',
          intraOpNumThreads: ctx.threads,
          interOpNumThreads: 1,
          executionMode: 'sequential',
        });
        const sess = session;
        for (const m of ms) {
          const xData = randomFloats(m * k, seed++);
          const x = Tensor.from(xData, [m, k]);
          const outF32 = Tensor.empty([m, n]);
          const outBf16 = Tensor.empty([m, n]);
          const outBf16c = Tensor.empty([m, n]);
          const feeds: Record<string, OrtTensor> = { X: new ort.Tensor('float32', xData, [m, k]) };
          try {
            // ---- correctness first
            gemm(x, wT, { transB: true, out: outF32 });
            gemm(x, wB, { transB: true, out: outBf16 });
            gemm(x, wB, { transB: true, out: outBf16c, compute: 'bf16' });
            const ortOut = (await sess.run(feeds)).Y;
            if (!ortOut) throw new Error(`gemm: ${label} m=${m}: ORT returned no output Y`);
            const ortY = ortOut.data as Float32Array;
            const oursY = outF32.toArray() as Float32Array;
            const oursB = outBf16.toArray() as Float32Array;
            const errVsOrt = maxRelErr(oursY, ortY);
            const errOurs = sampledError(oursY, xData, w, m, n, k);
            const errOrt = sampledError(ortY, xData, w, m, n, k);
            const errBf16 = sampledError(oursB, xData, wBf16Values, m, n, k);
            const errBf16c = sampledError(outBf16c.toArray() as Float32Array, xData, wBf16Values, m, n, k);
            const bad: string[] = [];
            if (!(errVsOrt <= TOL_F32)) bad.push(`ours f32 vs ORT ${errVsOrt.toExponential(2)} > ${TOL_F32}`);
            if (!(errOurs <= TOL_F32)) bad.push(`ours f32 vs float64 ${errOurs.toExponential(2)} > ${TOL_F32}`);
            if (!(errOrt <= TOL_F32)) bad.push(`ORT vs float64 ${errOrt.toExponential(2)} > ${TOL_F32}`);
            if (!(errBf16 <= TOL_BF16)) bad.push(`ours bf16 vs float64 ${errBf16.toExponential(2)} > ${TOL_BF16}`);
            if (!(errBf16c <= TOL_BF16)) bad.push(`ours bf16 compute vs float64 ${errBf16c.toExponential(2)} > ${TOL_BF16}`);
            if (bad.length) throw new Error(`gemm: ${label} m=${m}: results disagree (normwise max error): ${bad.join('; ')}`);

            // ---- timing, side by side, in alternating rounds (ours, ours bf16, ORT, pause; twice), keeping each
            // side's better median: a transient disturbance (ORT's pool threads spinning after a run, another
            // process) then costs one round, not the row.
            ctx.log(`gemm: ${label} m=${m}: timing`);
            let tOurs: Timing | null = null;
            let tBf16: Timing | null = null;
            let tBf16c: Timing | null = null;
            let tOrt: Timing | null = null;
            for (let round = 0; round < TIMING_ROUNDS; round++) {
              tOurs = better(tOurs, measure(() => gemm(x, wT, { transB: true, out: outF32 }), timing));
              tBf16 = better(tBf16, measure(() => gemm(x, wB, { transB: true, out: outBf16 }), timing));
              tBf16c = better(tBf16c, measure(() => gemm(x, wB, { transB: true, out: outBf16c, compute: 'bf16' }), timing));
              tOrt = better(tOrt, await measureAsync(() => sess.run(feeds), timing));
              await sleep(50);
            }
            if (!tOurs || !tBf16 || !tBf16c || !tOrt) throw new Error('gemm: no timing rounds ran');

            const ours = gflops(m, n, k, tOurs.medianMs);
            const ortG = gflops(m, n, k, tOrt.medianMs);
            const bf16 = gflops(m, n, k, tBf16.medianMs);
            const wGBs = (n * k * 2) / (tBf16.medianMs * 1e6);
            rows.push({
              model: shape.model,
              layer: shape.layer,
              k,
              n,
              m,
              ours_f32_gflops: ours,
              ort_f32_gflops: ortG,
              f32_vs_ort: ours / ortG,
              ours_f32_peak_frac: ours / roof.peakGflops,
              ours_bf16_gflops: bf16,
              bf16_weight_gbs: wGBs,
              bf16_bandwidth_frac: wGBs / roof.triadGBs,
              bf16_peak_frac: bf16 / roof.peakGflops,
              ours_bf16c_gflops: gflops(m, n, k, tBf16c.medianMs),
              bf16_compute_vs_f32: tOurs.medianMs / tBf16c.medianMs,
              // Weights that fit in the last-level cache are re-read from it, not from DRAM: above 100% is possible.
              bf16_weights_fit_llc: llcMiB === null ? null : (n * k * 2) / 2 ** 20 <= llcMiB,
              ours_f32_ms: tOurs.medianMs,
              ort_f32_ms: tOrt.medianMs,
              ours_bf16_ms: tBf16.medianMs,
              ours_bf16c_ms: tBf16c.medianMs,
              max_spread: Math.max(tOurs.spread, tOrt.spread, tBf16.spread, tBf16c.spread),
              err_ours_vs_ort: errVsOrt,
              err_ours_vs_f64: errOurs,
              err_ort_vs_f64: errOrt,
              err_bf16_vs_f64: errBf16,
              err_bf16c_vs_f64: errBf16c,
            });
          } finally {
            x.dispose();
            outF32.dispose();
            outBf16.dispose();
            outBf16c.dispose();
          }
        }
      } finally {
        await session?.release();
        wT.dispose();
        wB.dispose();
      }
    }

    const ratios: Record<string, number> = {};
    const f32VsOrt = minOf(rows, 'f32_vs_ort', (r) => (r.m as number) >= 32);
    if (f32VsOrt !== null) ratios.f32_vs_ort_m_ge_32 = f32VsOrt;
    const geomean = (xs: number[]) => Math.exp(xs.reduce((s, v) => s + Math.log(v), 0) / xs.length);
    const largeM = rows.filter((r) => (r.m as number) >= 32).map((r) => r.f32_vs_ort as number);
    if (largeM.length) ratios.f32_vs_ort_m_ge_32_geomean = geomean(largeM);
    const decodeFrac = minOf(rows, 'bf16_bandwidth_frac', (r) => (r.m as number) <= 8);
    if (decodeFrac !== null) ratios.bf16_decode_bandwidth_frac = decodeFrac;
    // The target above mixes two regimes: m = 1 is bound by memory bandwidth, while at m = 8 each bf16 weight
    // (2 bytes) feeds 8 f32 FMAs (16 flops), 8 flop/byte, above the machine's ridge point. Report both apart.
    const decodeM1 = minOf(rows, 'bf16_bandwidth_frac', (r) => (r.m as number) === 1);
    if (decodeM1 !== null) ratios.bf16_decode_bandwidth_frac_m1 = decodeM1;
    const decodeM8Peak = minOf(rows, 'bf16_peak_frac', (r) => (r.m as number) === 8);
    if (decodeM8Peak !== null) ratios.bf16_decode_peak_frac_m8 = decodeM8Peak;
    // bf16 compute against our f32 GEMM where it is meant to pay (m >= 32: compute-bound): the minimum and the geomean.
    const bf16c = minOf(rows, 'bf16_compute_vs_f32', (r) => (r.m as number) >= 32);
    if (bf16c !== null) ratios.bf16_compute_vs_f32 = bf16c;
    const bf16cAll = rows.filter((r) => (r.m as number) >= 32).map((r) => r.bf16_compute_vs_f32 as number);
    if (bf16cAll.length) ratios.bf16_compute_vs_f32_geomean = geomean(bf16cAll);
    const allRatios = rows.map((r) => r.f32_vs_ort as number);
    if (allRatios.length) ratios.f32_vs_ort_geomean = geomean(allRatios);
    // int8 (Q8_0) weights: its own section below (int8DecodeSection).
    const int8 = int8DecodeSection(ctx, shapes, roof.triadGBs, llcMiB, timing);
    Object.assign(ratios, int8.ratios);

    const pct = (v: unknown) => `${((v as number) * 100).toFixed(0)}%`;
    const categories = rows.map((r) => `${r.model === 'bert-base' ? 'BERT' : 'Llama'} ${r.k}->${r.n} m=${r.m}`);
    return {
      params: {
        shapes: shapes.map((s) => ({ ...s })),
        m: ms,
        dtype: 'f32 activations; f32 or bf16 (round-to-nearest-even) weights [n, k], transB',
        ort: { version: ort.env.versions.node ?? null, intraOpNumThreads: ctx.threads, graphOptimizationLevel: 'all', opset: 17, irVersion: 8 },
        timing: { ...timing, rounds: TIMING_ROUNDS },
        tolerances: { f32: TOL_F32, bf16: TOL_BF16 },
        bf16_compute_kernel: bf16KernelNote(deviceInfo(getCpuBackend()).bf16Kernel),
        int8_decode: int8.params,
      },
      rows,
      ratios,
      table: {
        columns: [
          { key: 'model', header: 'model' },
          { key: 'layer', header: 'layer' },
          { key: 'k', header: 'k' },
          { key: 'n', header: 'n' },
          { key: 'm', header: 'm' },
          { key: 'ours_f32_gflops', header: 'ours f32 GF/s' },
          { key: 'ort_f32_gflops', header: 'ORT f32 GF/s' },
          { key: 'f32_vs_ort', header: 'ours/ORT' },
          { key: 'ours_f32_peak_frac', header: '% peak', format: pct },
          { key: 'ours_bf16_gflops', header: 'bf16w GF/s' },
          { key: 'bf16_weight_gbs', header: 'bf16w GB/s' },
          { key: 'bf16_bandwidth_frac', header: '% triad', format: pct },
          { key: 'ours_bf16c_gflops', header: 'bf16c GF/s' },
          { key: 'bf16_compute_vs_f32', header: 'bf16c/f32' },
          { key: 'err_ours_vs_ort', header: 'err vs ORT', format: (v) => (v as number).toExponential(1) },
        ],
        rows,
        notes: [
          `GF/s = 2mnk / median time. Threads: ${ctx.threads} (ours and ORT). Machine limits (${roof.source}): ` +
            `peak ${roof.peakGflops.toFixed(0)} GFLOP/s, triad ${roof.triadGBs.toFixed(1)} GB/s.`,
          'bf16w: our GEMM with bf16 weights; GB/s = weight bytes (2nk) / time, % triad = that / triad bandwidth' +
            (llcMiB === null ? '.' : ` (weights under the ${llcMiB} MiB last-level cache are served from it and can exceed 100%).`),
          'bf16c: our GEMM in bf16 compute (bf16 weights, activations rounded to bf16, f32 sums); bf16c/f32 = our f32 time / bf16c time.',
          'err vs ORT: max |ours - ORT| / max |ORT| over the whole output (checked before timing).',
          int8.note,
        ],
      },
      svg: barChart({
        title: `GEMM y = x W^T: ours vs onnxruntime ${ort.env.versions.node ?? ''} (${ctx.threads} threads)`,
        categories,
        series: [
          { name: 'ours f32', values: rows.map((r) => r.ours_f32_gflops as number) },
          { name: 'ORT f32', values: rows.map((r) => r.ort_f32_gflops as number) },
          { name: 'ours bf16 weights', values: rows.map((r) => r.ours_bf16_gflops as number) },
          { name: 'ours bf16 compute', values: rows.map((r) => r.ours_bf16c_gflops as number) },
        ],
        yLabel: 'GFLOP/s',
        logY: true,
        referenceLines: [{ value: roof.peakGflops, label: `FMA peak ${roof.peakGflops.toFixed(0)} GFLOP/s` }],
      }),
    };
  },
};

/** What bf16 compute runs on this CPU, for the bench's params. */
function bf16KernelNote(kernel: string | undefined): string {
  const decode = 'rounded activations on the bf16-weight decode path for m <= 8';
  if (kernel === 'amx') return `AMX-BF16 tiles for m > 8; ${decode}`;
  if (kernel === 'avx512bf16') return `VDPBF16PS (AVX512-BF16) for m > 8; ${decode}`;
  return 'operands rounded to bf16, then the f32 kernels (no AMX or AVX512-BF16 on this CPU)';
}

// ---------------------------------------------------------------- int8 (Q8_0) weights: decode GEMV bandwidth

/**
 * Q8_0 tolerance (normwise, against float64 on the dequantized weights and the unquantized activations): the
 * activations are quantized to int8 per block of 32 (relative step 1/127 of the block's max), so ~1e-2.
 */
const TOL_INT8 = 3e-2;

/**
 * The int8 decode GEMV (m = 1) over Q8_0 weights of every shape: bytes/s counting the int8 bytes and the f16 scales
 * (34 bytes per 32 weights) over the triad bandwidth. Each shape rotates over enough weight copies that their bytes
 * exceed twice the last-level cache (at most 8 copies), so every call streams its weights from memory as in a decode
 * step; the result is checked against float64 first. Ratio int8_decode_bandwidth_frac: the minimum over shapes.
 */
function int8DecodeSection(
  ctx: BenchContext,
  shapes: readonly GemmShape[],
  triadGBs: number,
  llcMiB: number | null,
  timing: MeasureOptions,
): { ratios: Record<string, number>; params: Record<string, unknown>; note: string } {
  const out: Record<string, unknown>[] = [];
  let seed = 1000;
  for (const shape of shapes) {
    const { k, n } = shape;
    const bytes = (n * k * 34) / 32;
    const copies = Math.max(1, Math.min(8, Math.ceil((2 * (llcMiB ?? 32) * 2 ** 20) / bytes)));
    ctx.log(`gemm: int8 ${shape.model} ${shape.layer} ${k}->${n}: quantizing ${copies} cop${copies === 1 ? 'y' : 'ies'}`);
    const ws: Tensor[] = [];
    const x = Tensor.from(randomFloats(k, seed++), [1, k]);
    const y = Tensor.empty([1, n]);
    try {
      for (let c = 0; c < copies; c++) {
        const wf = Tensor.from(randomFloats(n * k, seed++), [n, k]);
        try {
          ws.push(q8Quantize(wf));
        } finally {
          wf.dispose();
        }
      }
      // ---- correctness first: against float64 on the dequantized weights
      q8Gemm(x, ws[0]!, { out: y });
      const deq = q8Dequantize(ws[0]!);
      const err = sampledError(y.toArray() as Float32Array, x.toArray() as Float32Array, deq.toArray() as Float32Array, 1, n, k);
      deq.dispose();
      if (!(err <= TOL_INT8)) throw new Error(`gemm: int8 ${k}->${n}: q8Gemm vs float64 normwise error ${err.toExponential(2)} > ${TOL_INT8}`);
      let i = 0;
      const t = measure(() => q8Gemm(x, ws[i++ % copies]!, { out: y }), { ...timing, minSampleMs: 0 });
      const gbs = bytes / (t.medianMs * 1e6);
      out.push({ model: shape.model, layer: shape.layer, k, n, m: 1, copies, int8_ms: t.medianMs, int8_weight_gbs: gbs, int8_bandwidth_frac: gbs / triadGBs, err_vs_f64: err });
    } finally {
      for (const w of ws) w.dispose();
      x.dispose();
      y.dispose();
    }
  }
  const fracs = out.map((r) => r.int8_bandwidth_frac as number);
  const ratios: Record<string, number> = fracs.length ? { int8_decode_bandwidth_frac: Math.min(...fracs) } : {};
  const kernel = q8Kernels().auto;
  const note =
    `int8: Q8_0 weights (llama.cpp's layout), decode GEMV (m = 1, kernel ${kernel}); GB/s = (int8 bytes + f16 scales) / time, ` +
    `rotating over copies larger than 2x the last-level cache; min over shapes ${fracs.length ? `${(Math.min(...fracs) * 100).toFixed(0)}%` : '-'} of triad ` +
    `(per shape: ${out.map((r) => `${r.k}->${r.n} ${((r.int8_bandwidth_frac as number) * 100).toFixed(0)}%`).join(', ')}).`;
  return { ratios, params: { kernel, tolerance: TOL_INT8, rows: out }, note };
}
