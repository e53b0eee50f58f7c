/**
 * The engine worker thread: everything that touches the model runs here, off the HTTP event loop. It composes
 * PetS's engine side once and serves it over the host protocol (cluster's serveWorkerHost):
 *
 *   PetsHost (@tessera/pet-ops)          the shared model, the tasks under the device budget, PetEngine, task admin
 *   cost model (@tessera/batcher)        analytic, profiled tables from a file, or profiled here at start (§4)
 *   WindowPipeline (@tessera/batcher)    the batch window + coordinated-batching planner + the task gates, over
 *                                        the host's executor
 */
import { writeFileSync } from 'node:fs';

import {
  type BatchingStrategy,
  type CostModel,
  costTablesJson,
  PETS_MAX_MACRO,
  PETS_MAX_MINI,
  petsAnalyticModel,
  petsTablesModel,
  profilePetsCostTables,
  systemClock,
  tableCostModel,
  WindowPipeline,
} from '@tessera/batcher';
import { type ProtocolEvent, serveWorkerHost } from '@tessera/cluster';
import { serializeError } from '@tessera/core';
import { type ClassifyResult, type EncodedInput, PET_TYPES, PetsHost } from '@tessera/pet-ops';

import type { CostSummary, PetsProtocol, WorkerInit } from './protocol.js';

type P = PetsProtocol;

/** The planner's cost model: tables read by the HTTP thread, profiled here (with temporary tasks), or analytic. */
async function costModel(init: WorkerInit, host: PetsHost, progress: (line: string) => void): Promise<{ cost: CostModel; summary: CostSummary }> {
  const spec = init.cost;
  if (spec.kind === 'tables') return { cost: petsTablesModel(spec.json, PET_TYPES, spec.file), summary: { source: 'tables', file: spec.file } };
  if (spec.kind === 'analytic') return { cost: petsAnalyticModel(host.shared.config), summary: { source: 'analytic', file: null } };
  const tables = await host.withProfilingTasks((target) => profilePetsCostTables(target, host.model.maxPositions, progress));
  if (spec.out !== null) {
    writeFileSync(spec.out, `${JSON.stringify(costTablesJson(tables))}\n`);
    progress(`profiled tables written to ${spec.out} (use them with --cost-tables)`);
  }
  return { cost: tableCostModel(tables.alpha, tables.beta), summary: { source: 'profiled', file: spec.out } };
}

serveWorkerHost<P['placement'], ProtocolEvent<P['item'], null>, P['notice'], P['admin'], P['ready']>(async ({ workerData, progress, notify }) => {
  const init = workerData as WorkerInit;
  const host = new PetsHost({ modelDir: init.modelDir, tag: init.tag, budgetBytes: init.budgetBytes, layout: init.layout, scheduling: init.scheduling, threads: init.threads });
  const { cost, summary } = await costModel(init, host, progress);
  host.attach(
    new WindowPipeline<EncodedInput, ClassifyResult>({
      strategy: init.strategy as BatchingStrategy | 'auto',
      cost,
      windowMs: init.windowMs,
      windowQueries: init.windowQueries,
      clock: systemClock,
      maxMini: PETS_MAX_MINI,
      maxMacro: PETS_MAX_MACRO,
      executor: host.executor,
      onPlan: (plan, queries) => host.recordPlan({ strategy: plan.strategy, queries, batches: plan.batches.length }),
      // Back to the event loop between two macro-batches: admin calls and new requests are handled there.
      beforeBatch: () => new Promise<void>((resolve) => setImmediate(resolve)),
    }),
  );
  // Start-up tasks (the demo's): a file that cannot be registered fails start-up, naming it.
  await host.registerStartupTasks(init.startupTasks);
  host.onMemoryChange((memory) => notify({ kind: 'memory', memory }));

  return {
    engine: {
      submit({ request, attempt }, sink) {
        const { id, taskId, inputs } = request;
        host.classify(taskId, inputs).then(
          (results) => {
            results.forEach((result, index) => sink({ kind: 'result', id, attempt, index, result }));
            sink({ kind: 'finish', id, attempt, result: null });
          },
          (err: unknown) => sink({ kind: 'error', id, attempt, error: serializeError(err) }),
        );
      },
      cancel: () => false,
    },
    admin: {
      'register-task': (t) => host.registerTask(t),
      'load-task': (id) => host.loadTask(id),
      'unload-task': (id) => host.unloadTask(id),
      'delete-task': (id) => host.deleteTask(id),
      tasks: () => ({ tasks: host.tasks(), memory: host.memory() }),
      task: (id) => ({ task: host.task(id), memory: host.memory() }),
      stats: () => host.stats(),
    },
    ready: { model: host.model, cost: summary, tasks: host.tasks(), memory: host.memory() },
    shutdown: () => host.close(),
  };
});
