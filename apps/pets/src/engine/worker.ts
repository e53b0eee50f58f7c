/**
 * The engine worker thread: everything that touches the model runs here, off the HTTP event loop. It assembles
 * PetS's stack once:
 *
 *   TaskManager (device budget)          the shared model (loaded once) and the tasks' parameters (pets.md §3.2–3.3)
 *   PetEngine (layout, scheduling)       PIE: one forward per macro-batch, PET ops per segment (§3.7, Algorithm 2)
 *   cost model                           analytic, profiled tables from a file, or profiled here at start (§4)
 *   PetsPipeline                         the batch window + coordinated-batching planner + the task gates
 *
 * and serves the HTTP thread's messages (protocol.ts). A macro-batch runs synchronously (native kernels); between
 * two macro-batches the pipeline yields to this thread's event loop, so messages are handled there.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

import { type BatchingStrategy, type CostModel, profileCostTables, systemClock, tableCostModel } from '@tessera/batcher';
import { setThreads } from '@tessera/native';
import { generatePetParams, PET_TYPES, PetEngine, petsCostProfilerTarget, TaskManager } from '@tessera/pet-ops';

import { analyticModel, costTablesJson, profileGrid, tablesModel } from './cost.js';
import { PetsPipeline } from './pipeline.js';
import { type AdminCall, type CostSummary, type FromWorker, serializeError, type ToWorker, type WorkerInit } from './protocol.js';

const port = parentPort;
if (!port) throw new Error('worker.ts runs as the engine worker thread (started by PetsEngineClient), not as a script');
const init = workerData as WorkerInit;

function post(msg: FromWorker): void {
  port!.postMessage(msg);
}

const progress = (line: string) => post({ type: 'progress', line });

/**
 * Profiles α and β on this machine: one temporary task of every PET type (generated, loaded, profiled, removed),
 * so the tables cover every type whatever is registered. Reports progress every tenth of the grid.
 */
async function profile(manager: TaskManager, engine: PetEngine, out: string | null): Promise<CostModel> {
  const config = engine.shared.config;
  const ids: string[] = [];
  try {
    for (const [i, type] of PET_TYPES.entries()) {
      ids.push(manager.registerTask(type, init.tag, generatePetParams(type, config, { seed: 7_000 + i }), { id: `__profile-${type}` }));
    }
    manager.loadTasks(ids);
    const grid = profileGrid(config.maxPositions);
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
    if (out !== null) {
      writeFileSync(out, `${JSON.stringify(costTablesJson(tables))}\n`);
      progress(`profiled tables written to ${out} (use them with --cost-tables)`);
    }
    return tableCostModel(tables.alpha, tables.beta);
  } finally {
    for (const id of ids) {
      if (manager.task(id).state === 'loaded') manager.unloadTask(id);
      manager.unregisterTask(id);
    }
  }
}

async function start(): Promise<void> {
  if (init.threads !== null) setThreads(init.threads);
  const manager = new TaskManager({ deviceBudgetBytes: init.budgetBytes });
  manager.addSharedModel(init.tag, { dir: init.modelDir });
  const shared = manager.loadSharedModel(init.tag);
  const engine = new PetEngine(manager, init.tag, { layout: init.layout, scheduling: init.scheduling });

  let cost: CostModel;
  let costSummary: CostSummary;
  if (init.cost.kind === 'tables') {
    cost = tablesModel(init.cost.json, PET_TYPES, init.cost.file);
    costSummary = { source: 'tables', file: init.cost.file };
  } else if (init.cost.kind === 'profile') {
    cost = await profile(manager, engine, init.cost.out);
    costSummary = { source: 'profiled', file: init.cost.out };
  } else {
    cost = analyticModel(shared.config);
    costSummary = { source: 'analytic', file: null };
  }

  let ready = false;
  const pipeline = new PetsPipeline({
    manager,
    engine,
    sharedModelTag: init.tag,
    strategy: init.strategy as BatchingStrategy | 'auto',
    cost,
    windowMs: init.windowMs,
    windowQueries: init.windowQueries,
    clock: systemClock,
    onMemoryChange: (memory) => {
      if (ready) post({ type: 'memory', memory });
    },
  });

  async function admin(call: AdminCall): Promise<unknown> {
    switch (call.op) {
      case 'register-task': {
        const { op: _op, ...task } = call;
        return pipeline.register(task);
      }
      case 'load-task':
        return pipeline.load(call.id);
      case 'unload-task':
        return pipeline.unload(call.id);
      case 'delete-task':
        return pipeline.delete(call.id);
      case 'tasks':
        return { tasks: pipeline.tasks(), memory: pipeline.memory() };
      case 'task':
        return { task: pipeline.task(call.id), memory: pipeline.memory() };
      case 'stats':
        return pipeline.stats();
      case 'shutdown':
        await pipeline.close();
        manager.dispose();
        return null;
    }
  }

  port!.on('message', (msg: ToWorker) => {
    switch (msg.type) {
      case 'classify':
        pipeline.classify(msg.taskId, msg.inputs).then(
          (results) => post({ type: 'classified', id: msg.id, results }),
          (err: unknown) => post({ type: 'classify-failed', id: msg.id, error: serializeError(err) }),
        );
        break;
      case 'admin':
        admin(msg.call).then(
          (value) => post({ type: 'reply', callId: msg.callId, ok: true, value }),
          (err: unknown) => post({ type: 'reply', callId: msg.callId, ok: false, error: serializeError(err) }),
        );
        break;
      case 'exit':
        // From this thread's event loop, so no native call is in flight (terminating inside one aborts the process).
        process.exit(msg.code);
    }
  });

  // Start-up tasks (the demo's): a file that cannot be registered fails start-up, naming it.
  for (const t of init.startupTasks) {
    try {
      const bytes = readFileSync(t.path);
      await pipeline.register({
        petType: t.petType,
        sharedModel: init.tag,
        params: bytes,
        source: t.path,
        load: t.load,
        ...(t.id !== undefined ? { id: t.id } : {}),
        ...(t.name !== undefined ? { name: t.name } : {}),
      });
    } catch (err) {
      const e = serializeError(err);
      throw Object.assign(new Error(`start-up task ${t.id ?? t.path} (${t.path}): ${e.message}`), { code: e.code });
    }
  }

  ready = true;
  post({
    type: 'ready',
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
    tasks: pipeline.tasks(),
    memory: pipeline.memory(),
  });
}

start().catch((err: unknown) => {
  post({ type: 'init-failed', error: serializeError(err) });
  // From JS, with nothing in flight: ending the thread here is safe for the native addon.
  process.exit(1);
});
