/**
 * punica-textgen: Fig. 11 of Punica in miniature. One request set (seeded prompts of 16–64 tokens, forced output
 * lengths, greedy) is served on the generated mini decoder under four adapter-popularity workloads (Distinct,
 * Uniform, Zipf-1.5, Identical: §9.8) by three batching policies (@tessera/batcher: Punica's, same-adapter
 * continuous batching as in vLLM, static same-adapter batches as in HF/DeepSpeed/FasterTransformer: §9.9), max
 * batch 32, every adapter LoRA rank 16 on all seven projections. Reported per run: tokens/s (prompt + generated
 * over wall time) and the batch-size histogram. The expected shape: Punica flat across workloads; the baselines
 * collapse to tiny batches unless most requests share an adapter.
 *
 * The LoRA add-ons run through @tessera/sgmv-kernel's SgmvLoraDelta by default (options.makeDelta swaps it).
 * Correctness first: greedy outputs must not depend on the batching, so every request's tokens are compared
 * across the three policies of a workload before the throughput is reported (mismatches are counted and shown).
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { allocatorStats } from '@tessera/native';
import {
  type DecoderConfig,
  type DecoderModel,
  decoderPreset,
  parameterCount,
  LoraDelta,
  type LoraAdapter,
  type ModelDelta,
  PagedKvCache,
  StepRunner,
  generateLoraAdapter,
  loadDecoder,
  loadLoraAdapter,
  pagesForLength,
} from '@tessera/engine';
import type { BatchPolicy, BatcherRequest, BatcherStats, FinishedRequest } from '@tessera/batcher';
import { EngineLoop, type EngineLoopOptions } from '@tessera/cluster';
import { LoraWeightSet, SgmvLoraDelta, readLoraForSgmv } from '@tessera/sgmv-kernel';
import { PAPER_POPULARITIES, type PopularityName, assignAdapters, popularity } from '@tessera/sgmv-kernel/bench';
import { rng } from '../data.js';
import { BENCH_MODELS_DIR, miniModelDir } from '../models.js';
import { barChart } from '../svg.js';
import type { Row } from '../table.js';
import type { BenchContext, BenchOutput } from '../types.js';

/** Adapter popularity of the request set (punica.md §9.8; zipf with α = 1.5). */
export type TextgenWorkload = PopularityName;
export const TEXTGEN_WORKLOADS: readonly TextgenWorkload[] = PAPER_POPULARITIES;
export const TEXTGEN_POLICIES: readonly BatchPolicy[] = ['punica', 'same-adapter', 'static'];

/** The delta that applies the adapters at the hook sites, built by a {@link PunicaTextgenOptions.makeDelta}. */
export interface TextgenDelta {
  delta: ModelDelta;
  /** Shown in the table notes and params (e.g. 'engine LoraDelta', 'SgmvLoraDelta'). */
  label: string;
  dispose(): void;
}

export interface PunicaTextgenOptions {
  /**
   * Builds the delta for the adapters (name → PEFT directory), all resident for the whole figure. Default:
   * {@link sgmvLoraDelta} (@tessera/sgmv-kernel's SGMV); {@link engineLoraDelta} is the plain two-GEMM form.
   */
  makeDelta?: (model: DecoderModel, adapters: ReadonlyMap<string, string>) => TextgenDelta | Promise<TextgenDelta>;
  /** Requests per run; default 64 quick, 192 full (the baselines run near batch 1, so a full run is minutes). */
  requests?: number;
  /** Forced output lengths, uniform in [min, max]; default [16, 32] quick, [16, 48] full. */
  outputTokens?: readonly [number, number];
  /** Prompt lengths, uniform in [min, max]; default [16, 64]. */
  promptTokens?: readonly [number, number];
  workloads?: readonly TextgenWorkload[];
  policies?: readonly BatchPolicy[];
  maxBatch?: number;
  /**
   * Adapter rank. Default: the rank whose adapter/base byte ratio on the mini decoder is closest to Llama-2-7B
   * with a rank-16 LoRA on all seven projections (the paper's setting, about 0.6%), see {@link paperMatchedRank}.
   */
  rank?: number;
  /** Runs per (workload, policy), the fastest kept; default 1 (the near-batch-1 baselines take minutes). */
  rounds?: number;
  /**
   * Runs of the batched ones, the fastest kept: Punica on every workload and every policy on Identical, which take
   * seconds each. Default 3 full, 1 quick. The spread and the Identical ratio compare these runs, and a single
   * run moved by up to 30 % on a shared 2-vCPU host (Zipf once came out below Distinct).
   */
  batchedRounds?: number;
}

// ─── model and adapters, generated once per machine ────────────────────────────────────────────────────────────

const ALL_PROJECTIONS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];


/** `count` seeded rank-`rank` LoRA adapters on all seven projections of the mini decoder, generated once under `root`. */
export function adapterDirs(
  model: Pick<DecoderModel, 'config'>,
  count: number,
  rank: number,
  ctx: Pick<BenchContext, 'log'>,
  root = join(BENCH_MODELS_DIR, `decoder-mini-seed0-lora-r${rank}-all`),
): Map<string, string> {
  const dirs = new Map<string, string>();
  let made = 0;
  for (let k = 0; k < count; k++) {
    const name = `lora-${String(k).padStart(4, '0')}`;
    const dir = join(root, name);
    if (!existsSync(join(dir, 'adapter_model.safetensors')) || !existsSync(join(dir, 'adapter_config.json'))) {
      if (made === 0) ctx.log(`punica-textgen: generating rank-${rank} LoRA adapters in ${root} (once)`);
      generateLoraAdapter(dir, { base: model.config, rank, alpha: 2 * rank, targets: ALL_PROJECTIONS, seed: 1000 + k });
      made++;
    }
    dirs.set(name, dir);
  }
  return dirs;
}

/** The engine's LoraDelta over loadLoraAdapter: two GEMMs per (segment, projection). */
export function engineLoraDelta(model: DecoderModel, adapters: ReadonlyMap<string, string>): TextgenDelta {
  const loaded = new Map<string, LoraAdapter>();
  for (const [name, dir] of adapters) loaded.set(name, loadLoraAdapter(dir, { base: model.config, name }));
  const delta = new LoraDelta(loaded);
  return {
    delta,
    label: 'engine LoraDelta (two GEMMs per segment and projection)',
    dispose() {
      delta.dispose();
      for (const a of loaded.values()) a.dispose();
    },
  };
}

/** @tessera/sgmv-kernel's SgmvLoraDelta: one SGMV shrink + expand per site output for the whole batch. */
export async function sgmvLoraDelta(model: DecoderModel, adapters: ReadonlyMap<string, string>): Promise<TextgenDelta> {
  const sets = new Map<string, LoraWeightSet>();
  try {
    for (const [name, dir] of adapters) sets.set(name, LoraWeightSet.upload(await readLoraForSgmv(dir, model.config, { name }), model.backend));
  } catch (err) {
    for (const set of sets.values()) set.dispose();
    throw err;
  }
  const delta = new SgmvLoraDelta((key) => sets.get(key));
  return {
    delta,
    label: 'SgmvLoraDelta (one SGMV shrink + expand per projection)',
    dispose() {
      delta.dispose();
      for (const set of sets.values()) set.dispose();
    },
  };
}

// ─── one run ───────────────────────────────────────────────────────────────────────────────────────────────────

export interface RunResult {
  ms: number;
  stats: BatcherStats;
  tokens: Map<string, number[]>;
}

/** Serves `requests` (all submitted at once) with a fresh EngineLoop on `cache`; `scheduling`: its other options. */
export async function serve(
  model: DecoderModel,
  cache: PagedKvCache,
  deltas: readonly ModelDelta[],
  policy: BatchPolicy,
  maxBatch: number,
  requests: readonly BatcherRequest[],
  scheduling: Pick<EngineLoopOptions, 'prefixCache' | 'fairness'> = {},
): Promise<RunResult> {
  const batcher = new EngineLoop({ runner: new StepRunner({ model, cache, deltas }), pages: cache.allocator, policy, maxBatch, ...scheduling });
  const tokens = new Map<string, number[]>();
  const controller = new AbortController();
  let left = requests.length;
  let failure: Error | null = null;
  const t0 = performance.now();
  const allDone = new Promise<void>((resolve) => {
    const onFinish = (r: FinishedRequest) => {
      tokens.set(r.id, r.tokens);
      if (--left === 0) resolve();
    };
    const onError = (err: Error) => {
      failure = err;
      resolve();
    };
    for (const r of requests) batcher.submit(r, { onFinish, onError });
  });
  const loop = batcher.run(controller.signal);
  await allDone;
  const ms = performance.now() - t0;
  controller.abort();
  await loop;
  if (failure) throw failure;
  if (cache.usedPages !== 0) throw new Error(`punica-textgen: ${policy} left ${cache.usedPages} KV pages in use`);
  return { ms, stats: batcher.stats(), tokens };
}

const histogramText = (h: ReadonlyMap<number, number>) => [...h].map(([size, steps]) => `${size}:${steps}`).join(' ');

function meanBatch(h: ReadonlyMap<number, number>): number {
  let steps = 0;
  let seqs = 0;
  for (const [size, n] of h) {
    steps += n;
    seqs += size * n;
  }
  return steps === 0 ? 0 : seqs / steps;
}

// ─── the figure ────────────────────────────────────────────────────────────────────────────────────────────────

/** LoRA parameters per unit of rank on all seven projections of a Llama-style decoder: Σ (in + out). */
function loraParamsPerRank(c: DecoderConfig): number {
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const H = c.hiddenSize;
  const F = c.intermediateSize;
  return c.numLayers * ((H + q) + 2 * (H + kv) + (q + H) + 2 * (H + F) + (F + H));
}

/** Llama-2-7B (32 layers, hidden 4096, FFN 11008, vocab 32000, untied head), the model of the paper's Fig. 11. */
const LLAMA2_7B: DecoderConfig = {
  ...decoderPreset('mini'),
  hiddenSize: 4096,
  numLayers: 32,
  numHeads: 32,
  numKvHeads: 32,
  headDim: 128,
  intermediateSize: 11008,
  vocabSize: 32000,
  tieWordEmbeddings: false,
};

/**
 * The rank that gives the mini decoder's adapters the paper's adapter/base size ratio. A LoRA grows with h·r and
 * the base with h², so rank 16 at hidden 512 is 8× heavier relative to its base than rank 16 at hidden 4096: a
 * Distinct step would stream that much more adapter weight than Punica's did, which is not the paper's regime.
 */
export function paperMatchedRank(): number {
  const target = (16 * loraParamsPerRank(LLAMA2_7B)) / parameterCount(LLAMA2_7B);
  const mini = decoderPreset('mini');
  const perRank = loraParamsPerRank(mini) / parameterCount(mini);
  return Math.max(1, Math.round(target / perRank));
}

export async function punicaTextgenFigure(ctx: BenchContext, options: PunicaTextgenOptions = {}): Promise<BenchOutput> {
  const n = options.requests ?? (ctx.quick ? 64 : 192);
  const [outMin, outMax] = options.outputTokens ?? (ctx.quick ? [16, 32] : [16, 48]);
  const [promptMin, promptMax] = options.promptTokens ?? [16, 64];
  const workloads = options.workloads ?? TEXTGEN_WORKLOADS;
  const policies = options.policies ?? TEXTGEN_POLICIES;
  const maxBatch = options.maxBatch ?? 32;
  const rank = options.rank ?? paperMatchedRank();
  const rounds = options.rounds ?? 1;
  const batchedRounds = options.batchedRounds ?? (ctx.quick ? 1 : 3);
  const okRounds = (r: number) => Number.isInteger(r) && r >= 1;
  if (!(Number.isInteger(n) && n >= 1 && okRounds(rounds) && okRounds(batchedRounds) && outMin >= 1 && outMax >= outMin && promptMin >= 1 && promptMax >= promptMin)) {
    throw new RangeError(`punica-textgen: bad sizes (requests ${n}, rounds ${rounds}, batched rounds ${batchedRounds}, outputs [${outMin}, ${outMax}], prompts [${promptMin}, ${promptMax}])`);
  }
  const maxRounds = Math.max(rounds, batchedRounds);
  const roundsOf = (workload: TextgenWorkload, policy: BatchPolicy) => (policy === 'punica' || workload === 'identical' ? maxRounds : rounds);

  const model = loadDecoder(miniModelDir('decoder', ctx.log));
  const c = model.config;
  const modelBytes = model.weights.nbytes;
  const adapterCount = Math.max(...workloads.map((w) => popularity(w, n).length));
  const dirs = adapterDirs(model, adapterCount, rank, ctx);
  ctx.log(`punica-textgen: loading ${dirs.size} adapters`);
  let applied: TextgenDelta;
  try {
    applied = await (options.makeDelta ?? sgmvLoraDelta)(model, dirs);
  } catch (err) {
    model.dispose();
    throw err;
  }
  const names = [...dirs.keys()];
  // f32 PEFT file ≈ the adapter's weight bytes: what a step streams per distinct adapter in its batch.
  const adapterBytes = statSync(join(dirs.get(names[0]!)!, 'adapter_model.safetensors')).size;

  // One request set for every run: only the adapter assignment changes with the workload.
  const next = rng(2024);
  const between = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  const shapes = Array.from({ length: n }, () => {
    const promptLength = between(promptMin, promptMax);
    return { prompt: Array.from({ length: promptLength }, () => 5 + Math.floor(next() * (c.vocabSize - 10))), maxTokens: between(outMin, outMax) };
  });
  const promptTotal = shapes.reduce((s, r) => s + r.prompt.length, 0);
  const generatedTotal = shapes.reduce((s, r) => s + r.maxTokens, 0);
  // Room for a full batch of the longest requests: no preemption, so the policies alone differ.
  const numPages = maxBatch * pagesForLength(promptMax + outMax) + 8;
  const rows: Row[] = [];
  const histograms: Record<string, Record<string, string>> = {};
  let mismatches = 0;
  let cache: PagedKvCache | null = null;
  try {
    cache = PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
    // Warm-up: page in the weights and the adapters once (not measured).
    ctx.log('punica-textgen: warm-up');
    await serve(model, cache, [applied.delta], 'punica', maxBatch, names.slice(0, Math.min(maxBatch, names.length)).map((adapter, i) => ({
      id: `warm-${i}`,
      adapter,
      prompt: shapes[i % n]!.prompt,
      maxTokens: 2,
      ignoreEos: true,
    })));

    // Every (workload, policy) runs `rounds` times (`batchedRounds` for the batched runs), interleaved, and keeps
    // its fastest: a disturbance from another process then costs a round, not the row. Scheduling and outputs are
    // the same every round.
    const best = new Map<string, { ms: number; stats: BatcherStats; differ: number }>();
    for (let round = 1; round <= maxRounds; round++) {
      for (const workload of workloads) {
        const assignment = assignAdapters(popularity(workload, n), 7);
        const requests: BatcherRequest[] = shapes.map((s, i) => ({
          id: `${workload}-${i}`,
          adapter: names[assignment[i]!]!,
          prompt: s.prompt,
          maxTokens: s.maxTokens,
          ignoreEos: true,
        }));
        let reference: Map<string, number[]> | null = null;
        for (const policy of policies) {
          if (round > roundsOf(workload, policy)) continue;
          ctx.log(`punica-textgen: ${workload} (${popularity(workload, n).length} adapters), ${policy}, round ${round} of ${roundsOf(workload, policy)}`);
          const run = await serve(model, cache, [applied.delta], policy, maxBatch, requests);
          let differ = 0;
          if (reference) {
            for (const [id, tokens] of run.tokens) if (reference.get(id)!.join() !== tokens.join()) differ++;
          } else {
            reference = run.tokens;
          }
          const key = `${workload}/${policy}`;
          const prev = best.get(key);
          if (!prev || run.ms < prev.ms) best.set(key, { ms: run.ms, stats: run.stats, differ: Math.max(differ, prev?.differ ?? 0) });
        }
      }
    }
    for (const workload of workloads) {
      histograms[workload] = {};
      for (const policy of policies) {
        const { ms, stats: s, differ } = best.get(`${workload}/${policy}`)!;
        histograms[workload]![policy] = histogramText(s.batchSizeHistogram);
        rows.push({
          workload,
          adapters: popularity(workload, n).length,
          policy,
          tokens_per_s: (promptTotal + generatedTotal) / (ms / 1000),
          generated_per_s: generatedTotal / (ms / 1000),
          wall_s: ms / 1000,
          steps: s.steps,
          mean_batch: meanBatch(s.batchSizeHistogram),
          max_batch: Math.max(...s.batchSizeHistogram.keys()),
          wasted_rows: s.wastedRows,
          preemptions: s.preemptions,
          differing_outputs: differ,
        });
        mismatches += differ;
      }
    }
  } finally {
    cache?.dispose();
    applied.dispose();
    model.dispose();
  }

  const tps = (w: TextgenWorkload, p: BatchPolicy) => rows.find((r) => r.workload === w && r.policy === p)?.tokens_per_s as number | undefined;
  const ratios: Record<string, number> = {};
  const punica = workloads.map((w) => tps(w, 'punica')).filter((v): v is number => v !== undefined);
  if (punica.length > 1) ratios.punica_throughput_spread = Math.max(...punica) / Math.min(...punica) - 1;
  for (const w of workloads) {
    const p = tps(w, 'punica');
    const baselines = policies.filter((q) => q !== 'punica').map((q) => tps(w, q)).filter((v): v is number => v !== undefined);
    if (p !== undefined && baselines.length > 0) ratios[`punica_vs_best_baseline_${w}`] = p / Math.max(...baselines);
  }
  ratios.differing_outputs = mismatches;

  return {
    params: {
      model: { dir: 'decoder-mini-seed0', layers: c.numLayers, hidden: c.hiddenSize, bytes: modelBytes },
      adapters: { count: dirs.size, rank, targets: ALL_PROJECTIONS, delta: applied.label, bytesEach: adapterBytes, fractionOfBase: adapterBytes / modelBytes },
      requests: n,
      promptTokens: [promptMin, promptMax],
      outputTokens: [outMin, outMax],
      totalPromptTokens: promptTotal,
      totalGeneratedTokens: generatedTotal,
      maxBatch,
      kvPages: numPages,
      workloads: Object.fromEntries(workloads.map((w) => [w, popularity(w, n)])),
      batchSizeHistograms: histograms,
      rounds,
      batchedRounds,
      threads: ctx.threads,
      bytesInUseAfter: allocatorStats().inUse,
    },
    rows,
    ratios,
    table: {
      columns: [
        { key: 'workload', header: 'workload' },
        { key: 'adapters', header: 'adapters' },
        { key: 'policy', header: 'policy' },
        { key: 'tokens_per_s', header: 'tok/s (prompt+gen)' },
        { key: 'generated_per_s', header: 'gen tok/s' },
        { key: 'mean_batch', header: 'mean batch' },
        { key: 'max_batch', header: 'max batch' },
        { key: 'steps', header: 'steps' },
        { key: 'wasted_rows', header: 'wasted rows' },
        { key: 'differing_outputs', header: 'outputs ≠ punica' },
      ],
      rows,
      notes: [
        `${n} requests, prompts ${promptMin}–${promptMax} tokens, forced outputs ${outMin}–${outMax} tokens (greedy, EOS ignored), all submitted at once; max batch ${maxBatch}.`,
        `Mini decoder (${c.numLayers} layers, hidden ${c.hiddenSize}, ${(modelBytes / 2 ** 20).toFixed(0)} MiB f32), LoRA rank ${rank} on all 7 projections, ${dirs.size} adapters, all resident; delta: ${applied.label}.`,
        `One adapter is ${(adapterBytes / 2 ** 20).toFixed(1)} MiB, ${((100 * adapterBytes) / modelBytes).toFixed(1)}% of the base weights (Llama-2-7B with a rank-16 LoRA on all projections: about 0.6%): ` +
          'a step over k distinct adapters streams k of them besides the base, so Distinct costs more here than on the paper\'s 7B.',
        'tok/s = (prompt + generated tokens) / wall time of the whole run. Static batches prefill ragged prompts (no padding: in the baseline\'s favour).',
        `Outputs compared across policies (greedy): ${mismatches} request(s) differ. Each row: the fastest of ${rounds} interleaved run(s), ${maxRounds} for Punica and for every policy on Identical.`,
      ],
    },
    svg: barChart({
      title: 'Text generation throughput by adapter popularity (Punica Fig. 11, miniature)',
      categories: workloads.map((w) => `${w} (${popularity(w, n).length})`),
      series: policies.map((p) => ({ name: p, values: workloads.map((w) => tps(w, p) ?? null) })),
      yLabel: 'tokens/s (prompt + generated)',
      xLabel: 'workload (number of adapters)',
    }),
  };
}
