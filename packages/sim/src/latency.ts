/**
 * Step-latency models: how long one batcher step (one model forward over a mixed prefill + decode batch) takes
 * on a simulated GPU. A model maps a step's shape to milliseconds:
 *
 *   stepMs = intercept + perDecodeRow · decodeRows + perPrefillToken · prefillTokens + perKvToken · kvTokens
 *
 * where kvTokens = Σ over the batch's sequences of the context each attends to after the step (prompt length for a
 * prefill, cached length + 1 for a decode). Three ways to get the coefficients:
 *   (a) {@link fitLatencyModel}: least squares over measured samples;
 *   (b) {@link paperLatencyModel}: Punica's Fig. 1 curves for Llama-2 7B on an A100 (see its doc for the mapping);
 *   (c) {@link profileDecoderSteps}: measures real ContinuousBatcher steps of a generated decoder on this machine
 *       and returns samples for (a).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ContinuousBatcher, type BatcherModel } from '@tessera/batcher';
import {
  type DecoderModel,
  type ModelDelta,
  type ModelSize,
  PagedKvCache,
  generateLoraAdapter,
  generateModel,
  loadDecoder,
  pagesForLength,
  systemClock,
} from '@tessera/engine';
import { LoraWeightSet, SgmvLoraDelta, readLoraForSgmv } from '@tessera/sgmv-kernel';
import { LatencyFitError, SimArgumentError } from './errors.js';
import { mulberry32 } from './random.js';

/** What a step's latency depends on. */
export interface StepShape {
  /** Sequences in the forward (prefills + decodes). */
  batchSize: number;
  /** Tokens of the sequences prefilled this step (prompt, plus generated tokens when recomputing a migrated request). */
  prefillTokens: number;
  /** Sequences that decoded one token. */
  decodeRows: number;
  /** Σ context per sequence after the step (what attention reads). */
  kvTokens: number;
}

export interface LatencyModel {
  /** Milliseconds of one step; always > 0. */
  stepMs(step: StepShape): number;
}

/** A measured step. */
export interface LatencySample extends StepShape {
  ms: number;
}

export interface LinearLatencyCoefficients {
  interceptMs: number;
  perDecodeRowMs: number;
  perPrefillTokenMs: number;
  perKvTokenMs: number;
}

/** No step is shorter than this (a fitted model may extrapolate below zero on shapes it never saw). */
export const MIN_STEP_MS = 1e-3;

export class LinearLatencyModel implements LatencyModel {
  readonly coefficients: Readonly<LinearLatencyCoefficients>;

  constructor(coefficients: LinearLatencyCoefficients) {
    for (const [k, v] of Object.entries(coefficients)) {
      if (!Number.isFinite(v)) throw new SimArgumentError(`LinearLatencyModel: ${k} must be a finite number, got ${v}`);
    }
    this.coefficients = { ...coefficients };
  }

  stepMs(step: StepShape): number {
    const c = this.coefficients;
    const ms = c.interceptMs + c.perDecodeRowMs * step.decodeRows + c.perPrefillTokenMs * step.prefillTokens + c.perKvTokenMs * step.kvTokens;
    return ms > MIN_STEP_MS ? ms : MIN_STEP_MS;
  }
}

/**
 * Llama-2 7B on one A100 from Punica's Fig. 1 (punica.md §5.6, §14 item 8): a decode step takes 11 → 13 ms from
 * batch 1 to 32 at short sequences and 17 → 34 ms at long ones. "Short" is read as 128 tokens per sequence and
 * "long" as 2048 (the ends of the repo's sweep {128 … 2048}), so the four corners are (batch, kvTokens, ms) =
 * (1, 128, 11), (32, 4096, 13), (1, 2048, 17), (32, 65536, 34). A model linear in decode rows and KV tokens cannot
 * pass through all four (attention at batch 1 does not saturate the GPU), so it is pinned to the three corners a
 * busy GPU lives near:
 *   perKvTokenMs    = (34 − 13) / (65536 − 4096)                     = 3.418e-4  (batch 32, short → long)
 *   perDecodeRowMs  = (13 − 11 − (4096 − 128) · perKvTokenMs) / 31   = 0.02077   (short, batch 1 → 32)
 *   interceptMs     = 11 − perDecodeRowMs − 128 · perKvTokenMs       = 10.935
 * and predicts 11.7 ms (not 17) for one 2048-token sequence alone. Prefill is compute-bound ("latency ∝ batch
 * size"); the paper prints no number, so perPrefillTokenMs = 0.08 comes from FLOPs: 2 × 6.7e9 per token at about
 * 55 % of the A100's 312 fp16 TFLOP/s.
 */
export function paperLatencyModel(): LinearLatencyModel {
  const perKvTokenMs = (34 - 13) / (65536 - 4096);
  const perDecodeRowMs = (13 - 11 - (4096 - 128) * perKvTokenMs) / 31;
  const interceptMs = 11 - perDecodeRowMs - 128 * perKvTokenMs;
  return new LinearLatencyModel({ interceptMs, perDecodeRowMs, perPrefillTokenMs: 0.08, perKvTokenMs });
}

export interface LatencyFit {
  model: LinearLatencyModel;
  coefficients: LinearLatencyCoefficients;
  /** Root-mean-square residual (ms). */
  rmseMs: number;
  /** Coefficient of determination (1 = perfect; NaN when every sample has the same latency). */
  r2: number;
  samples: number;
}

const FEATURES = ['interceptMs', 'perDecodeRowMs', 'perPrefillTokenMs', 'perKvTokenMs'] as const;

function featuresOf(s: StepShape): [number, number, number, number] {
  return [1, s.decodeRows, s.prefillTokens, s.kvTokens];
}

/**
 * Ordinary least squares of ms on (1, decodeRows, prefillTokens, kvTokens). A feature that is zero in every sample
 * (e.g. no prefill step was measured) gets coefficient 0; the others must be determined by the samples (at least
 * as many samples as features, not collinear), else LatencyFitError.
 */
export function fitLatencyModel(samples: readonly LatencySample[]): LatencyFit {
  for (const [i, s] of samples.entries()) {
    for (const v of [s.ms, ...featuresOf(s)]) {
      if (!Number.isFinite(v)) throw new SimArgumentError(`fitLatencyModel: sample ${i} has a non-finite field (${JSON.stringify(s)})`);
    }
  }
  const rows = samples.map(featuresOf);
  const active = FEATURES.map((_, j) => j).filter((j) => j === 0 || rows.some((r) => r[j] !== 0));
  const k = active.length;
  if (samples.length < k) {
    throw new LatencyFitError(`fitLatencyModel: ${samples.length} samples cannot determine ${k} coefficients (${active.map((j) => FEATURES[j]).join(', ')})`);
  }
  // Scale each column to max |x| = 1 so kvTokens (thousands) and the intercept (1) condition alike.
  const scale = active.map((j) => Math.max(...rows.map((r) => Math.abs(r[j]!))) || 1);
  const ata = Array.from({ length: k }, () => new Float64Array(k + 1));
  for (const [n, r] of rows.entries()) {
    const x = active.map((j, a) => r[j]! / scale[a]!);
    for (let a = 0; a < k; a++) {
      for (let b = 0; b < k; b++) ata[a]![b]! += x[a]! * x[b]!;
      ata[a]![k]! += x[a]! * samples[n]!.ms;
    }
  }
  const solution = solve(ata, k);
  if (!solution) {
    throw new LatencyFitError(
      `fitLatencyModel: the samples do not determine ${active.map((j) => FEATURES[j]).join(', ')} (collinear features: vary batch size and context length)`,
    );
  }
  const coefficients: LinearLatencyCoefficients = { interceptMs: 0, perDecodeRowMs: 0, perPrefillTokenMs: 0, perKvTokenMs: 0 };
  active.forEach((j, a) => (coefficients[FEATURES[j]!] = solution[a]! / scale[a]!));
  const model = new LinearLatencyModel(coefficients);
  const raw = (s: StepShape) =>
    coefficients.interceptMs + coefficients.perDecodeRowMs * s.decodeRows + coefficients.perPrefillTokenMs * s.prefillTokens + coefficients.perKvTokenMs * s.kvTokens;
  const mean = samples.reduce((a, s) => a + s.ms, 0) / samples.length;
  let ssRes = 0;
  let ssTot = 0;
  for (const s of samples) {
    ssRes += (s.ms - raw(s)) ** 2;
    ssTot += (s.ms - mean) ** 2;
  }
  return { model, coefficients, rmseMs: Math.sqrt(ssRes / samples.length), r2: ssTot > 0 ? 1 - ssRes / ssTot : Number.NaN, samples: samples.length };
}

/** Gauss–Jordan elimination with partial pivoting on an augmented k × (k + 1) system; null when singular. */
function solve(m: Float64Array[], k: number): number[] | null {
  const largest = Math.max(...m.map((row) => Math.max(...Array.from(row.subarray(0, k), Math.abs))));
  for (let col = 0; col < k; col++) {
    let pivot = col;
    for (let r = col + 1; r < k; r++) if (Math.abs(m[r]![col]!) > Math.abs(m[pivot]![col]!)) pivot = r;
    if (!(Math.abs(m[pivot]![col]!) > 1e-10 * largest)) return null;
    [m[col], m[pivot]] = [m[pivot]!, m[col]!];
    const p = m[col]!;
    for (let r = 0; r < k; r++) {
      if (r === col) continue;
      const row = m[r]!;
      const f = row[col]! / p[col]!;
      if (f === 0) continue;
      for (let c = col; c <= k; c++) row[c]! -= f * p[c]!;
    }
  }
  return m.map((row, i) => row[k]! / row[i]!);
}

// ─── profiling a real decoder ────────────────────────────────────────────────────────────────────────────────

export interface ProfileDecoderOptions {
  /** Generated model size (default 'tiny'); ignored when `modelDir` is given. */
  size?: ModelSize;
  /** A decoder directory to load instead of generating one. */
  modelDir?: string;
  /** Batch sizes to measure (default [1, 2, 4, 8]). */
  batchSizes?: readonly number[];
  /** Prompt lengths, i.e. the context each sequence starts its decodes from (default [16, 64]). */
  contextLengths?: readonly number[];
  /** Decode-only steps measured per point once the whole batch is admitted (default 3). */
  decodeSteps?: number;
  /** LoRA adapters (rank 8, all seven projections) spread round-robin over the batch through SgmvLoraDelta; 0 = none (default). */
  adapters?: number;
  /** Seed of the generated model, adapters and prompts (default 0). */
  seed?: number;
}

/**
 * Measures real ContinuousBatcher steps ('punica' policy, so one prefill per step while a batch fills, then decodes)
 * of a generated decoder on this machine: for every (batch size, context length) point, a fresh batch of requests
 * with that prompt length is submitted and stepped until every request is admitted and `decodeSteps` pure decode
 * steps ran. Every step is a sample: wall time of batcher.step() and the step's shape (read off the forward).
 * One unrecorded point runs first to warm up. The model (and the temporary directory it was generated in) is
 * disposed before this resolves.
 */
export async function profileDecoderSteps(options: ProfileDecoderOptions = {}): Promise<LatencySample[]> {
  const batchSizes = options.batchSizes ?? [1, 2, 4, 8];
  const contexts = options.contextLengths ?? [16, 64];
  const decodeSteps = options.decodeSteps ?? 3;
  const adapterCount = options.adapters ?? 0;
  const seed = options.seed ?? 0;
  for (const b of batchSizes) if (!Number.isSafeInteger(b) || b < 1) throw new SimArgumentError(`profileDecoderSteps: batch sizes must be positive integers, got ${b}`);
  for (const c of contexts) if (!Number.isSafeInteger(c) || c < 1) throw new SimArgumentError(`profileDecoderSteps: context lengths must be positive integers, got ${c}`);
  if (!Number.isSafeInteger(decodeSteps) || decodeSteps < 1) throw new SimArgumentError(`profileDecoderSteps: decodeSteps must be a positive integer, got ${decodeSteps}`);
  if (!Number.isSafeInteger(adapterCount) || adapterCount < 0) throw new SimArgumentError(`profileDecoderSteps: adapters must be a non-negative integer, got ${adapterCount}`);
  if (batchSizes.length === 0 || contexts.length === 0) throw new SimArgumentError('profileDecoderSteps: needs at least one batch size and one context length');

  const root = mkdtempSync(join(tmpdir(), 'tessera-sim-profile-'));
  const disposers: (() => void)[] = [() => rmSync(root, { recursive: true, force: true })];
  try {
    let modelDir = options.modelDir;
    if (modelDir === undefined) {
      modelDir = join(root, 'decoder');
      generateModel(modelDir, { family: 'decoder', size: options.size ?? 'tiny', seed });
    }
    const model = loadDecoder(modelDir);
    disposers.push(() => model.dispose());
    const c = model.config;
    const maxBatch = Math.max(...batchSizes);
    const longest = Math.max(...contexts) + maxBatch + decodeSteps + 1;
    if (longest > c.maxPositions) {
      throw new SimArgumentError(`profileDecoderSteps: context ${Math.max(...contexts)} + ${maxBatch + decodeSteps + 1} steps exceeds the model's ${c.maxPositions} positions`);
    }

    const deltas: ModelDelta[] = [];
    const adapterNames: string[] = [];
    if (adapterCount > 0) {
      const sets = new Map<string, LoraWeightSet>();
      disposers.push(() => sets.forEach((s) => s.dispose()));
      for (let i = 0; i < adapterCount; i++) {
        const name = `profile-lora-${i}`;
        const dir = join(root, name);
        generateLoraAdapter(dir, { base: c, rank: 8, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], seed: seed + 1 + i });
        sets.set(name, LoraWeightSet.upload(await readLoraForSgmv(dir, c, { name }), model.backend));
        adapterNames.push(name);
      }
      const delta = new SgmvLoraDelta((key) => sets.get(key));
      disposers.push(() => delta.dispose());
      deltas.push(delta);
    }

    const cache = PagedKvCache.create({ ...model.kvShape, numPages: maxBatch * pagesForLength(longest) }, model.backend);
    disposers.push(() => cache.dispose());
    const probe = new ShapeProbe(model);
    const batcher = new ContinuousBatcher({ model: probe, cache, deltas, maxBatch });
    const random = mulberry32(seed);
    const ordinary = c.vocabSize - 2;
    let nextId = 0;

    const runPoint = (batch: number, context: number, record: LatencySample[] | null) => {
      const ids: string[] = [];
      for (let i = 0; i < batch; i++) {
        const id = `p${nextId++}`;
        ids.push(id);
        batcher.submit({
          id,
          adapter: adapterNames.length > 0 ? adapterNames[i % adapterNames.length]! : null,
          prompt: Array.from({ length: context }, () => Math.floor(random() * ordinary)),
          maxTokens: batch + decodeSteps + 1,
          ignoreEos: true,
        });
      }
      let decodeOnly = 0;
      while (decodeOnly < decodeSteps) {
        const t0 = systemClock.now();
        const report = batcher.step();
        const ms = systemClock.now() - t0;
        if (!report) throw new Error('profileDecoderSteps: internal error: the batcher went idle mid-point');
        if (report.prefills === 0) decodeOnly++;
        record?.push({ ...probe.last, ms });
      }
      for (const id of ids) batcher.cancel(id);
    };

    runPoint(Math.min(2, maxBatch), Math.min(...contexts), null);
    const samples: LatencySample[] = [];
    for (const context of contexts) for (const batch of batchSizes) runPoint(batch, context, samples);
    return samples;
  } finally {
    for (const dispose of disposers.reverse()) dispose();
  }
}

/** A pass-through model that records the shape of the last forward (the real decoder does the work). */
class ShapeProbe implements BatcherModel {
  readonly config: DecoderModel['config'];
  last: StepShape = { batchSize: 0, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
  private readonly model: DecoderModel;

  constructor(model: DecoderModel) {
    this.model = model;
    this.config = model.config;
  }

  forward(...args: Parameters<DecoderModel['forward']>): ReturnType<DecoderModel['forward']> {
    const [sequences, { cache }] = args;
    const shape: StepShape = { batchSize: sequences.length, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
    for (const s of sequences) {
      const start = cache.hasSequence(s.id) ? cache.length(s.id) : 0;
      if (start === 0) shape.prefillTokens += s.tokens.length;
      else shape.decodeRows += s.tokens.length;
      shape.kvTokens += start + s.tokens.length;
    }
    this.last = shape;
    return this.model.forward(...args);
  }
}
