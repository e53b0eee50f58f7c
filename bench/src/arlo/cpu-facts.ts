/**
 * The CPU facts of `pnpm bench arlo` (arlo.md §3, §13.1): where a CPU differs from the paper's GPU, measured.
 *
 *   1. No staircase. On a GPU with TensorRT, latency is flat within each 64-token step and jumps between steps, so
 *      padding inside a step is free and the runtime lengths sit at the ends of the steps. On a CPU, latency grows
 *      about linearly with the padded length: the encoder's latency curve is measured at every `step` tokens (our
 *      native encoder, batch 1, `padTo` = the length) and handed to length-scheduler's `chooseRuntimeLengths`, which
 *      reports a staircase when it finds a few wide plateaus (< 5 % within each), else falls back to uniform steps.
 *   2. No dynamic-shape penalty. On a GPU, a dynamic-shape engine is 1.2–3.6× slower than a static one at the same
 *      length (§10.6). With onnxruntime on a CPU, one encoder exported with a symbolic sequence length runs each
 *      length against the same encoder exported with that length baked in (one intra-op thread each, alternating,
 *      median of `reps`): the ratio is the penalty a static runtime would avoid.
 * Both use the mini encoder the testbed serves (or the tiny one at toy sizes).
 */
import { ensureDemo } from '@tessera/arlo';
import { exportEncoderOnnx, loadEncoder, ModelTensors, OrtModel, readHfConfig, runEncoderOrt, type EncoderConfig } from '@tessera/engine';
import { chooseRuntimeLengths } from '@tessera/length-scheduler';

import { miniModelDir } from '../models.js';
import { median } from '../stats.js';
import { lineChart } from '../svg.js';
import type { Row, TableSpec } from '../table.js';
import type { BenchContext } from '../types.js';

export interface CpuFactsSizes {
  model: 'tiny' | 'mini';
  /** Lengths step, step·2, …, maxLength are measured. */
  step: number;
  maxLength: number;
  /** Timed runs per length and runtime (after two warm-ups). */
  reps: number;
}

export interface CpuFactsResult {
  rows: Row[];
  ratios: Record<string, number>;
  tables: TableSpec[];
  svgs: Record<string, string>;
  params: Record<string, unknown>;
}

/** Token ids of a sequence of `length` (content does not matter to the timing; never the pad id 0). */
function ids(length: number, vocabSize: number): number[] {
  return Array.from({ length }, (_, t) => 1 + ((t * 7) % (vocabSize - 1)));
}

async function timeMs(fn: () => Promise<void> | void): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

export async function runCpuFacts(sizes: CpuFactsSizes, ctx: BenchContext): Promise<CpuFactsResult> {
  const modelDir = sizes.model === 'tiny' ? ensureDemo().modelDir : miniModelDir('encoder', ctx.log);
  const config = readHfConfig(modelDir) as EncoderConfig;
  const lengths: number[] = [];
  for (let l = sizes.step; l <= Math.min(sizes.maxLength, config.maxPositions); l += sizes.step) lengths.push(l);
  ctx.log(`arlo: CPU facts on the ${sizes.model} encoder, lengths ${lengths[0]}..${lengths.at(-1)} step ${sizes.step}, ${sizes.reps} runs each`);

  const native = loadEncoder(modelDir);
  const tensors = ModelTensors.open(modelDir);
  const weights = (name: string): Float32Array => {
    const data = tensors.readHost(name);
    return data instanceof Float32Array ? data : Float32Array.from(data as ArrayLike<number>);
  };
  const dynamic = await OrtModel.create(exportEncoderOnnx(config, weights, { batch: 1 }), { threads: 1 });
  const rows: Row[] = [];
  try {
    for (const length of lengths) {
      const seq = [ids(length, config.vocabSize)];
      const staticModel = await OrtModel.create(exportEncoderOnnx(config, weights, { batch: 1, seq: length }), { threads: 1 });
      try {
        const runNative = () => {
          const out = native.forward([{ ids: seq[0]! }], { padTo: length, outputs: { hidden: false, pooled: false, logits: true } });
          out.logits?.dispose();
        };
        const runStatic = async () => void (await runEncoderOrt(staticModel, seq, undefined, { padTokenId: config.padTokenId }));
        const runDynamic = async () => void (await runEncoderOrt(dynamic, seq, undefined, { padTokenId: config.padTokenId }));
        for (let w = 0; w < 2; w++) {
          runNative();
          await runStatic();
          await runDynamic();
        }
        const t = { native: [] as number[], static: [] as number[], dynamic: [] as number[] };
        for (let r = 0; r < sizes.reps; r++) {
          t.native.push(await timeMs(runNative));
          t.static.push(await timeMs(runStatic));
          t.dynamic.push(await timeMs(runDynamic));
        }
        const [n, s, d] = [median(t.native), median(t.static), median(t.dynamic)];
        rows.push({ figure: 'cpu-facts', length, native_ms: n, ort_static_ms: s, ort_dynamic_ms: d, dynamic_over_static: d / s });
      } finally {
        await staticModel.release();
      }
    }
  } finally {
    await dynamic.release();
    native.weights.dispose();
    tensors.close();
  }

  const curve = (key: 'native_ms' | 'ort_static_ms') => rows.map((r) => ({ length: r.length as number, ms: r[key] as number }));
  const nativeChoice = chooseRuntimeLengths(curve('native_ms'));
  const ortChoice = chooseRuntimeLengths(curve('ort_static_ms'));
  const penalty = median(rows.map((r) => r.dynamic_over_static as number));
  const first = rows[0]!;
  const last = rows.at(-1)!;
  // Latency per token of padding at the longest length against the shortest: ≈ 1 when latency is linear in length.
  const linearity = (r: Row, key: string) => (r[key] as number) / (r.length as number);
  // Mean plateau width in tokens: what a runtime length saves by padding inside a plateau. TensorRT on a GPU: 64.
  // chooseRuntimeLengths calls a curve a staircase whenever it finds at most 2 x fallbackCount plateaus, which a
  // curve measured at 16 points always satisfies, so its verdict alone says little here; the width does.
  const plateauTokens = (choice: { lengths: number[] }) => (last.length as number) / choice.lengths.length;
  const ratios = {
    cpu_plateau_tokens_native: plateauTokens(nativeChoice),
    cpu_plateau_tokens_ort: plateauTokens(ortChoice),
    cpu_ort_dynamic_over_static: penalty,
    cpu_native_ms_per_token_last_over_first: linearity(last, 'native_ms') / linearity(first, 'native_ms'),
  };
  const tables: TableSpec[] = [
    {
      columns: [
        { key: 'length', header: 'length' },
        { key: 'native_ms', header: 'native ms' },
        { key: 'ort_static_ms', header: 'ORT static ms' },
        { key: 'ort_dynamic_ms', header: 'ORT dynamic ms' },
        { key: 'dynamic_over_static', header: 'dyn / static' },
      ],
      rows,
      notes: [
        `CPU facts (${sizes.model} encoder, batch 1, one intra-op thread for ORT; medians of ${sizes.reps}). Plateaus (< 5 % within each, chooseRuntimeLengths): native [${nativeChoice.lengths.join(', ')}], mean width ${Number(ratios.cpu_plateau_tokens_native.toPrecision(3))} tokens; ORT static [${ortChoice.lengths.join(', ')}], ${Number(ratios.cpu_plateau_tokens_ort.toPrecision(3))} tokens. The paper's TensorRT on a GPU: flat within 64-token steps.`,
        `ORT dynamic-shape over static-shape latency, median over lengths: ${Number(penalty.toPrecision(3))} (the paper's GPU: 1.22–3.56×, §10.6). ms per padded token at ${last.length as number} over at ${first.length as number}: ${Number(ratios.cpu_native_ms_per_token_last_over_first.toPrecision(3))} (1 = linear).`,
      ],
    },
  ];
  const svgs = {
    'cpu-facts': lineChart({
      title: `CPU facts: latency against padded length (${sizes.model} encoder, batch 1)`,
      xLabel: 'padded length (tokens)',
      yLabel: 'ms',
      series: [
        { name: 'native', points: rows.map((r) => ({ x: r.length as number, y: r.native_ms as number })) },
        { name: 'ORT static', points: rows.map((r) => ({ x: r.length as number, y: r.ort_static_ms as number })) },
        { name: 'ORT dynamic', points: rows.map((r) => ({ x: r.length as number, y: r.ort_dynamic_ms as number })) },
      ],
    }),
  };
  return { rows, ratios, tables, svgs, params: { cpuFacts: sizes } };
}
