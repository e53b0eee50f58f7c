/**
 * The engine tests' setup: the engine generator's tiny BERT (hidden 64, 2 layers, 4 heads, 128 positions) on disk
 * as the shared model, seeded synthetic tasks of the requested types registered and loaded, and seeded queries.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateModel } from '@tessera/engine';
import { type GeneratePetOptions, generatePetParams } from '../src/gen/generate.js';
import { PetRng } from '../src/gen/rng.js';
import { TaskManager } from '../src/tasks/task-manager.js';
import type { PetParams, PetType, SharedModel } from '../src/types.js';
import type { PetQuery } from '../src/engine/pet-engine.js';

export const TAG = 'bert-tiny';

export interface EngineFixture {
  /** The shared model's directory. */
  readonly dir: string;
  readonly tasks: TaskManager;
  readonly shared: SharedModel;
  /** Task ids in the order of `specs`. */
  readonly ids: string[];
  readonly params: Map<string, PetParams>;
  readonly types: Map<string, PetType>;
  dispose(): void;
}

export interface TaskSpec {
  readonly type: PetType;
  readonly seed: number;
  readonly labels?: readonly string[];
  readonly options?: Omit<GeneratePetOptions, 'seed' | 'labels' | 'shared'>;
}

/** One task of each type in `types` (seeds 1, 2, …), or the given specs. */
export function engineFixture(specs: readonly (PetType | TaskSpec)[], modelSeed = 3): EngineFixture {
  const root = mkdtempSync(join(tmpdir(), 'pets-engine-'));
  const dir = join(root, 'shared');
  generateModel(dir, { family: 'encoder', size: 'tiny', seed: modelSeed });
  const tasks = new TaskManager();
  tasks.addSharedModel(TAG, { dir });
  const shared = tasks.loadSharedModel(TAG);
  const ids: string[] = [];
  const params = new Map<string, PetParams>();
  const types = new Map<string, PetType>();
  specs.forEach((s, i) => {
    const spec: TaskSpec = typeof s === 'string' ? { type: s, seed: i + 1 } : s;
    const labels = spec.labels ?? Array.from({ length: 2 + (i % 3) }, (_, k) => `${spec.type}-${k}`);
    const p = generatePetParams(spec.type, shared.config, { ...spec.options, seed: spec.seed, labels, shared: (name) => shared.hostWeight(name) });
    const id = tasks.registerTask(spec.type, TAG, p, { id: `${spec.type}-${i}` });
    ids.push(id);
    params.set(id, p);
    types.set(id, spec.type);
  });
  tasks.loadTasks(ids);
  return {
    dir,
    tasks,
    shared,
    ids,
    params,
    types,
    dispose() {
      tasks.dispose();
      rmSync(root, { recursive: true, force: true });
    },
  };
}

/** Seeded queries for a task: token ids in [1, vocab) (0 is [PAD]), of the given lengths. */
export function queriesFor(taskId: string, lengths: readonly number[], vocab: number, seed: number, withTypes = false): PetQuery[] {
  const rng = new PetRng(seed, `queries/${taskId}`);
  return lengths.map((len) => {
    const ids = Array.from({ length: len }, () => 1 + rng.nextInt(vocab - 1));
    if (!withTypes) return { taskId, ids };
    const split = Math.floor(len / 2);
    return { taskId, ids, tokenTypes: ids.map((_, t) => (t < split ? 0 : 1)) };
  });
}

/** max|a − b| / max|b|: the normwise relative error the tests state their tolerances in. */
export function normwiseError(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new RangeError(`normwiseError: lengths differ (${got.length} vs ${want.length})`);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return diff / Math.max(scale, 1e-30);
}
