/**
 * The in-process reference: the same shared model and parameter files in a TaskManager and PetEngine on the test's
 * own thread (the native addon keeps its JS state per environment, so the server's worker and this thread each
 * load it), and the plan the server's window makes for a request's queries, replayed here.
 */
import { type BatchingStrategy, type CbQuery, planBatches } from '@tessera/batcher';
import { PetEngine, type PetQuery, type PetQueryResult, readPetParams, TaskManager } from '@tessera/pet-ops';

import { PETS_MAX_MACRO as MAX_MACRO, PETS_MAX_MINI as MAX_MINI, petsAnalyticModel as analyticModel } from '@tessera/batcher';
import type { EncodedInput } from '../../src/engine/protocol.js';
import { type Fixture, TAG, TASKS } from './fixture.js';

export interface Reference {
  manager: TaskManager;
  engine: PetEngine;
  /** PetEngine.classify of the inputs, one macro-batch with one mini-batch per task. */
  classify(taskId: string, inputs: readonly EncodedInput[]): PetQueryResult[];
  /**
   * What the server computes for one request alone in its window: the window's plan (same strategy, same cost
   * model, same caps) replayed through PetEngine.run; results in input order.
   */
  replay(taskId: string, inputs: readonly EncodedInput[], strategy?: BatchingStrategy | 'auto'): { results: PetQueryResult[]; batches: number; segments: number };
  dispose(): void;
}

function query(taskId: string, input: EncodedInput): PetQuery {
  return { taskId, ids: input.ids, ...(input.tokenTypes ? { tokenTypes: input.tokenTypes } : {}) };
}

export function makeReference(fixture: Fixture): Reference {
  const manager = new TaskManager();
  manager.addSharedModel(TAG, { dir: fixture.modelDir });
  manager.loadSharedModel(TAG);
  for (const t of TASKS) manager.registerTask(t.type, TAG, readPetParams(fixture.bytes.get(t.id)!), { id: t.id });
  manager.loadTasks(TASKS.map((t) => t.id));
  const engine = new PetEngine(manager, TAG, { layout: 'padded' });
  const cost = analyticModel(fixture.config);
  return {
    manager,
    engine,
    classify: (taskId, inputs) => engine.classify(inputs.map((input) => query(taskId, input))),
    replay(taskId, inputs, strategy = 'auto') {
      const queries: CbQuery[] = inputs.map((input, index) => ({ id: index, task: taskId, length: input.ids.length }));
      const plan = planBatches(queries, { strategy, cost, petTypeOf: (task) => manager.task(task).type, maxMini: MAX_MINI, maxMacro: MAX_MACRO });
      const results = new Array<PetQueryResult>(inputs.length);
      let segments = 0;
      for (const batch of plan.batches) {
        segments += batch.miniBatches.length;
        const run = engine.run({
          miniBatches: batch.miniBatches.map((mb) => ({ taskId: mb.task, queries: mb.queries.map((q) => query(mb.task, inputs[Number(q.id)]!)) })),
        });
        batch.miniBatches.forEach((mb, k) => mb.queries.forEach((q, j) => (results[Number(q.id)] = run.results[k]![j]!)));
      }
      return { results, batches: plan.batches.length, segments };
    },
    dispose: () => manager.dispose(),
  };
}

/** ‖a − b‖ / ‖b‖. */
export function normwiseError(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i]! - b[i]!) ** 2;
    den += b[i]! ** 2;
  }
  return Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
}
