/**
 * The engine worker thread: everything that touches the model runs here, off the HTTP event loop. It assembles
 * PetS's stack once and serves it over the host protocol (cluster's serveWorkerHost):
 *
 *   TaskManager (device budget)          the shared model (loaded once) and the tasks' parameters (pets.md §3.2–3.3)
 *   PetEngine (layout, scheduling)       PIE: one forward per macro-batch, PET ops per segment (§3.7, Algorithm 2)
 *   cost model                           analytic, profiled tables from a file, or profiled here at start (§4)
 *   WindowPipeline (@tessera/batcher)    the batch window + coordinated-batching planner + the task gates
 */
import { readFileSync, writeFileSync } from 'node:fs';

import {
  type BatchingStrategy,
  type CostModel,
  costTablesJson,
  PETS_MAX_MACRO,
  PETS_MAX_MINI,
  petsAnalyticModel,
  petsProfileGrid,
  petsTablesModel,
  profileCostTables,
  systemClock,
  tableCostModel,
  WindowPipeline,
} from '@tessera/batcher';
import { type ProtocolEvent, serveWorkerHost } from '@tessera/cluster';
import { serializeError } from '@tessera/core';
import { setThreads } from '@tessera/native';
import { generatePetParams, PET_TYPES, PetEngine, petsCostProfilerTarget, readPetParams, type TaskInfo, TaskManager } from '@tessera/pet-ops';

import { type ClassifyResult, type CostSummary, type EncodedInput, type EngineStats, type MacroBatchRecord, type MemorySummary, type PetsProtocol, type PlanRecord, type RegisterTask, type TaskSummary, type WorkerInit, PetTypeMismatchError } from './protocol.js';

type P = PetsProtocol;

const summary = (info: TaskInfo): TaskSummary => ({
  id: info.id,
  name: info.name ?? null,
  petType: info.type,
  sharedModel: info.sharedModelTag,
  labels: [...info.labels],
  state: info.state,
  storedBytes: info.storedBytes,
  deviceBytes: info.deviceBytes,
});

/** Profiles α and β on this machine: one temporary task of every PET type (generated, loaded, profiled, removed). */
async function profile(init: WorkerInit, manager: TaskManager, engine: PetEngine, progress: (line: string) => void): Promise<CostModel> {
  const config = engine.shared.config;
  const ids: string[] = [];
  try {
    for (const [i, type] of PET_TYPES.entries()) ids.push(manager.registerTask(type, init.tag, generatePetParams(type, config, { seed: 7_000 + i }), { id: `__profile-${type}` }));
    manager.loadTasks(ids);
    const grid = petsProfileGrid(config.maxPositions);
    let reported = 0;
    const tables = await profileCostTables(petsCostProfilerTarget(engine, PET_TYPES), {
      ...grid,
      repeats: 3,
      warmup: 1,
      maxMini: grid.petBatches.at(-1)!,
      maxMacro: grid.batches.at(-1)!,
      onProgress: (done, total) => {
        const tenth = Math.floor((10 * done) / total);
        if (tenth > reported || done === total) {
          reported = tenth;
          progress(`profiling α/β tables: ${done}/${total} cells (${Math.round((100 * done) / total)}%)`);
        }
      },
    });
    if (init.cost.kind === 'profile' && init.cost.out !== null) {
      writeFileSync(init.cost.out, `${JSON.stringify(costTablesJson(tables))}\n`);
      progress(`profiled tables written to ${init.cost.out} (use them with --cost-tables)`);
    }
    return tableCostModel(tables.alpha, tables.beta);
  } finally {
    for (const id of ids) {
      if (manager.task(id).state === 'loaded') manager.unloadTask(id);
      manager.unregisterTask(id);
    }
  }
}

serveWorkerHost<P['placement'], ProtocolEvent<P['item'], null>, P['notice'], P['admin'], P['ready']>(async ({ workerData, progress, notify }) => {
  const init = workerData as WorkerInit;
  if (init.threads !== null) setThreads(init.threads);
  const manager = new TaskManager({ deviceBudgetBytes: init.budgetBytes });
  manager.addSharedModel(init.tag, { dir: init.modelDir });
  const shared = manager.loadSharedModel(init.tag);
  const engine = new PetEngine(manager, init.tag, { layout: init.layout, scheduling: init.scheduling });

  let cost: CostModel;
  let costSummary: CostSummary = { source: 'analytic', file: null };
  if (init.cost.kind === 'tables') {
    cost = petsTablesModel(init.cost.json, PET_TYPES, init.cost.file);
    costSummary = { source: 'tables', file: init.cost.file };
  } else if (init.cost.kind === 'profile') {
    cost = await profile(init, manager, engine, progress);
    costSummary = { source: 'profiled', file: init.cost.out };
  } else cost = petsAnalyticModel(shared.config);

  let batches: MacroBatchRecord[] = [];
  let plans: PlanRecord[] = [];
  const pipeline = new WindowPipeline<EncodedInput, ClassifyResult>({
    strategy: init.strategy as BatchingStrategy | 'auto',
    cost,
    windowMs: init.windowMs,
    windowQueries: init.windowQueries,
    clock: systemClock,
    maxMini: PETS_MAX_MINI,
    maxMacro: PETS_MAX_MACRO,
    onPlan: (plan, queries) => plans.push({ strategy: plan.strategy, queries, batches: plan.batches.length }),
    // Back to the event loop between two macro-batches: admin calls and new requests are handled there.
    beforeBatch: () => new Promise<void>((resolve) => setImmediate(resolve)),
    executor: {
      petTypeOf: (task) => manager.task(task).type,
      isReady: (task) => manager.task(task).state === 'loaded',
      prepare: (task) => {
        manager.loadTasks([task]);
        memoryChanged();
      },
      lengthOf: (input) => input.ids.length,
      execute: (batch, inputs) => {
        const miniBatches = batch.miniBatches.map((mb, k) => ({
          taskId: mb.task,
          queries: inputs[k]!.map((input) => ({ taskId: mb.task, ids: input.ids, ...(input.tokenTypes ? { tokenTypes: input.tokenTypes } : {}) })),
        }));
        const { results, timing } = engine.run({ miniBatches });
        const queries = inputs.reduce((n, qs) => n + qs.length, 0);
        const tasks = new Set(batch.miniBatches.map((mb) => mb.task)).size;
        const { segments, totalMs, petMs, sharedMs } = timing;
        batches.push({ queries, segments, tasks, maxLength: batch.maxLength, totalMs, petMs, sharedMs, rows: timing.paddedRows, paddingRows: timing.paddedRows - timing.rows });
        return results.map((mb) => mb.map((r) => ({ label: r.label, labelIndex: r.labelIndex, logits: Array.from(r.logits) })));
      },
    },
  });

  const memory = (): MemorySummary => {
    const m = manager.memory();
    // The manager's own cap when one is set (the worker always sets --budget-mb), else the native allocator's.
    return { budgetBytes: m.budgetBytes ?? m.deviceBudgetBytes, sharedBytes: m.sharedBytes, petBytes: m.petBytes, loadedTasks: m.loadedTasks, registeredTasks: m.registeredTasks };
  };
  let ready = false;
  const memoryChanged = () => {
    if (ready) notify({ kind: 'memory', memory: memory() });
  };
  const task = (id: string) => summary(manager.task(id));

  /** Registers a task from its file's bytes; with `load`, loads it too. Atomic: a failed load unregisters it again. */
  async function register(t: RegisterTask): Promise<TaskSummary> {
    const params = readPetParams(t.params, t.source);
    if (params.type !== t.petType) throw new PetTypeMismatchError(t.source, t.petType, params.type);
    const id = manager.registerTask(t.petType as never, t.sharedModel, params, { ...(t.id !== undefined ? { id: t.id } : {}), ...(t.name !== undefined ? { name: t.name } : {}) });
    try {
      if (t.load) await pipeline.exclusive(id, () => manager.loadTasks([id]));
    } catch (err) {
      manager.unregisterTask(id);
      throw err;
    } finally {
      memoryChanged();
    }
    return task(id);
  }

  /** Admin work on one task, alone on it (after the classifies in flight that use it). */
  const exclusive = (id: string, fn: () => void) =>
    pipeline.exclusive(id, () => {
      const before = manager.task(id).state;
      fn();
      if (manager.task(id).state !== before) memoryChanged();
      return task(id);
    });

  // Start-up tasks (the demo's): a file that cannot be registered fails start-up, naming it.
  for (const t of init.startupTasks) {
    try {
      const { id, name } = t;
      await register({ petType: t.petType, sharedModel: init.tag, params: readFileSync(t.path), source: t.path, load: t.load, ...(id !== undefined ? { id } : {}), ...(name !== undefined ? { name } : {}) });
    } catch (err) {
      throw Object.assign(new Error(`start-up task ${t.id ?? t.path} (${t.path}): ${(err as Error).message}`), { code: (err as { code?: unknown }).code });
    }
  }
  ready = true;

  return {
    engine: {
      submit({ request, attempt }, sink) {
        const { id, taskId, inputs } = request;
        pipeline.submit(taskId, inputs).then(
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
      'register-task': register,
      'load-task': (id) => exclusive(id, () => manager.task(id).state !== 'loaded' && manager.loadTasks([id])),
      'unload-task': (id) => exclusive(id, () => manager.task(id).state === 'loaded' && manager.unloadTask(id)),
      'delete-task': (id) =>
        pipeline.exclusive(id, () => {
          const s = task(id);
          if (s.state === 'loaded') manager.unloadTask(id);
          manager.unregisterTask(id);
          memoryChanged();
          return s;
        }),
      tasks: () => ({ tasks: manager.tasks().map(summary), memory: memory() }),
      task: (id) => ({ task: task(id), memory: memory() }),
      stats: (): EngineStats => {
        const stats = { memory: memory(), pendingQueries: pipeline.pending, queriesClassified: pipeline.completed, batches, plans };
        batches = [];
        plans = [];
        return stats;
      },
    },
    ready: {
      model: {
        tag: init.tag,
        dir: init.modelDir,
        architecture: shared.config.architecture,
        hiddenSize: shared.config.hiddenSize,
        numLayers: shared.config.numLayers,
        maxPositions: shared.config.maxPositions,
        vocabSize: shared.config.vocabSize,
        typeVocabSize: shared.config.typeVocabSize,
        device: shared.model.backend.device,
        petTypes: [...PET_TYPES],
      },
      cost: costSummary,
      tasks: manager.tasks().map(summary),
      memory: memory(),
    },
    async shutdown() {
      await pipeline.close();
      manager.dispose();
    },
  };
});
