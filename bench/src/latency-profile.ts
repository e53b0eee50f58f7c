/**
 * profileDecoderSteps: the measured source of the simulator's step-latency models. It runs real engine steps (the
 * batcher's Scheduler planning, the engine's StepRunner executing, composed by @tessera/cluster's EngineLoop) of a
 * generated decoder on this machine and returns one {@link LatencySample} per step, for `@tessera/sim`'s
 * fitLatencyModel. It lives in the bench package, not in sim: it needs the engine, the native addon and the SGMV
 * kernel, and sim's policies never load those.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EngineLoop } from '@tessera/cluster';
import { mulberry32, type StepExecutor, type StepOutcome, type StepPlan, systemClock } from '@tessera/core';
import {
  type ModelDelta,
  type ModelSize,
  PagedKvCache,
  StepRunner,
  generateLoraAdapter,
  generateModel,
  loadDecoder,
  pagesForLength,
} from '@tessera/engine';
import { LoraWeightSet, SgmvLoraDelta, readLoraForSgmv } from '@tessera/sgmv-kernel';
import { type LatencySample, SimArgumentError, type StepShape } from '@tessera/sim';

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

/** A pass-through runner that records the shape of the last plan it ran (the engine's StepRunner does the work). */
class ShapeProbe implements StepExecutor {
  last: StepShape = { batchSize: 0, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
  readonly limits;
  constructor(private readonly runner: StepRunner) {
    this.limits = runner.limits;
  }
  open(...args: Parameters<StepRunner['open']>): void {
    this.runner.open(...args);
  }
  text(id: string): string {
    return this.runner.text(id);
  }
  close(id: string): void {
    this.runner.close(id);
  }
  run(plan: StepPlan): StepOutcome {
    const shape: StepShape = { batchSize: plan.sequences.length, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
    for (const s of plan.sequences) {
      if (s.position === 0) shape.prefillTokens += s.tokens.length;
      else shape.decodeRows += s.tokens.length;
      shape.kvTokens += s.position + s.tokens.length;
    }
    this.last = shape;
    return this.runner.run(plan);
  }
}

/**
 * Measures real engine steps ('punica' policy, so one prefill per step while a batch fills, then decodes) of a
 * generated decoder on this machine: for every (batch size, context length) point, a fresh batch of requests with
 * that prompt length is submitted and stepped until every request is admitted and `decodeSteps` pure decode steps
 * ran. Every step is a sample: wall time of loop.step() and the step's shape (read off the plan). One unrecorded
 * point runs first to warm up. The model (and the temporary directory it was generated in) is disposed before this
 * resolves.
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
    const probe = new ShapeProbe(new StepRunner({ model, cache, deltas }));
    const loop = new EngineLoop({ runner: probe, pages: cache.allocator, maxBatch });
    const random = mulberry32(seed);
    const ordinary = c.vocabSize - 2;
    let nextId = 0;

    const runPoint = (batch: number, context: number, record: LatencySample[] | null) => {
      const ids: string[] = [];
      for (let i = 0; i < batch; i++) {
        const id = `p${nextId++}`;
        ids.push(id);
        loop.submit({
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
        const report = loop.step();
        const ms = systemClock.now() - t0;
        if (!report) throw new Error('profileDecoderSteps: internal error: the loop went idle mid-point');
        if (report.prefills === 0) decodeOnly++;
        record?.push({ ...probe.last, ms });
      }
      for (const id of ids) loop.cancel(id);
    };

    runPoint(Math.min(2, maxBatch), Math.min(...contexts), null);
    const samples: LatencySample[] = [];
    for (const context of contexts) for (const batch of batchSizes) runPoint(batch, context, samples);
    return samples;
  } finally {
    for (const dispose of disposers.reverse()) dispose();
  }
}
