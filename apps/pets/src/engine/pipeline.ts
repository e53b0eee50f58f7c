/**
 * PetS's inference pipeline inside the engine worker (pets.md §3.1, Fig. 4): the Task Manager (register, load,
 * unload, unregister), the Batch Scheduler (an online window of arrivals, planned by coordinated batching with the
 * configured strategy and cost model) and the PET Inference Engine (one forward per macro-batch). No threads or
 * messages here: worker.ts feeds it, and tests can drive it directly.
 *
 *   classify(task, inputs)  → each input becomes one query of the BatchWindow → plan(window) picks macro-batches
 *                           → execute(batch) runs PetEngine.run and resolves each query with its row's result
 *
 * Consistency: each task has a readers-writer gate (task-gate.ts). Classify holds it shared until its queries are
 * answered, so load / unload / delete (exclusive) never pull a task out from under a batch that uses it, and a
 * classify never reaches the engine for a task that is not loaded: a registered task is loaded first (the paper's
 * loader runs before a task's first invocation, pets.md §3.3).
 */
import { type BatchingStrategy, BatchWindow, type CbQuery, type Clock, type CostModel, type MacroBatch, planBatches } from '@tessera/batcher';
import { PetEngine, type PetMacroBatchInput, readPetParams, type TaskInfo, type TaskManager } from '@tessera/pet-ops';

import { MAX_MACRO, MAX_MINI } from './cost.js';
import type { ClassifyResult, EncodedInput, EngineStats, MacroBatchRecord, MemorySummary, PlanRecord, RegisterTask, TaskSummary } from './protocol.js';
import { TaskGates } from './task-gate.js';

/** The parameter file says it holds another PET type than the registration's `pet_type`. */
export class PetTypeMismatchError extends Error {
  readonly code = 'TESSERA_PET_TYPE_MISMATCH';
  readonly petType: string;
  constructor(source: string, declared: string, inFile: string) {
    super(`${source}: the registration says pet_type ${JSON.stringify(declared)} but the parameter file holds a ${JSON.stringify(inFile)} task`);
    this.name = 'PetTypeMismatchError';
    this.petType = declared;
  }
}

/** A classify kept losing its task to concurrent unloads. */
export class TaskBusyError extends Error {
  readonly code = 'TESSERA_PET_TASK_STATE';
  readonly taskId: string;
  constructor(taskId: string) {
    super(`task ${JSON.stringify(taskId)} was unloaded again while its classify waited to load it; retry`);
    this.name = 'TaskBusyError';
    this.taskId = taskId;
  }
}

/** One query in the window: a CbQuery plus its input and where its result goes. */
interface WindowQuery extends CbQuery {
  id: number;
  task: string;
  length: number;
  input: EncodedInput;
  resolve(result: ClassifyResult): void;
  reject(error: unknown): void;
}

export interface PipelineOptions {
  manager: TaskManager;
  engine: PetEngine;
  sharedModelTag: string;
  strategy: BatchingStrategy | 'auto';
  cost: CostModel;
  windowMs: number;
  windowQueries: number;
  clock: Clock;
  /** Told whenever the task set or what is loaded changes (the worker forwards it, for /health). */
  onMemoryChange?: (memory: MemorySummary) => void;
}

export function taskSummary(info: TaskInfo): TaskSummary {
  return {
    id: info.id,
    name: info.name ?? null,
    petType: info.type,
    sharedModel: info.sharedModelTag,
    labels: [...info.labels],
    state: info.state,
    storedBytes: info.storedBytes,
    deviceBytes: info.deviceBytes,
  };
}

export class PetsPipeline {
  private readonly manager: TaskManager;
  private readonly engine: PetEngine;
  private readonly tag: string;
  private readonly window: BatchWindow<WindowQuery>;
  private readonly gates = new TaskGates();
  private readonly onMemoryChange: ((memory: MemorySummary) => void) | undefined;
  private nextQuery = 0;
  private waiting = 0;
  private classified = 0;
  private batchRecords: MacroBatchRecord[] = [];
  private planRecords: PlanRecord[] = [];

  constructor(options: PipelineOptions) {
    this.manager = options.manager;
    this.engine = options.engine;
    this.tag = options.sharedModelTag;
    this.onMemoryChange = options.onMemoryChange;
    const { strategy, cost } = options;
    this.window = new BatchWindow<WindowQuery>({
      maxQueries: options.windowQueries,
      maxWaitMs: options.windowMs,
      clock: options.clock,
      plan: (queries) => {
        const plan = planBatches(queries, {
          strategy,
          cost,
          // Every task of the window is held by its classify's gate, so it is registered and loaded.
          petTypeOf: (task) => this.manager.task(task).type,
          maxMini: MAX_MINI,
          maxMacro: MAX_MACRO,
        });
        this.planRecords.push({ strategy: plan.strategy, queries: queries.length, batches: plan.batches.length });
        return plan;
      },
      execute: (batch, queries) => this.execute(batch, queries),
      onError: (error, context) => {
        for (const q of context.queries) q.reject(error);
      },
    });
  }

  /**
   * Classifies `inputs` with task `taskId`: each input is one query of the window. Resolves with one result per
   * input, in order. A registered task is loaded first.
   */
  async classify(taskId: string, inputs: readonly EncodedInput[]): Promise<ClassifyResult[]> {
    for (let attempt = 0; attempt < 3; attempt++) {
      // Throws UnknownTaskError for a task that is not (or no longer) registered.
      if (this.manager.task(taskId).state !== 'loaded') {
        await this.gates.exclusive(taskId, () => {
          if (this.manager.task(taskId).state === 'registered') {
            this.manager.loadTasks([taskId]);
            this.memoryChanged();
          }
        });
      }
      const results = await this.gates.shared(taskId, async () => {
        if (this.manager.task(taskId).state !== 'loaded') return null;
        return Promise.all(inputs.map((input) => this.enqueue(taskId, input)));
      });
      if (results !== null) return results;
    }
    throw new TaskBusyError(taskId);
  }

  private enqueue(task: string, input: EncodedInput): Promise<ClassifyResult> {
    return new Promise<ClassifyResult>((resolve, reject) => {
      this.waiting++;
      const settle = () => this.waiting--;
      this.window.add({
        id: this.nextQuery++,
        task,
        length: input.ids.length,
        input,
        resolve: (r) => {
          settle();
          resolve(r);
        },
        reject: (e) => {
          settle();
          reject(e);
        },
      });
    });
  }

  private async execute(batch: MacroBatch, queries: WindowQuery[]): Promise<void> {
    // Back to the event loop between two macro-batches: admin calls and new classify messages are handled here,
    // not only between windows.
    await new Promise<void>((resolve) => setImmediate(resolve));
    const input: PetMacroBatchInput = {
      miniBatches: batch.miniBatches.map((mb) => ({
        taskId: mb.task,
        queries: (mb.queries as WindowQuery[]).map((q) => ({ taskId: q.task, ids: q.input.ids, ...(q.input.tokenTypes ? { tokenTypes: q.input.tokenTypes } : {}) })),
      })),
    };
    const { results, timing } = this.engine.run(input);
    this.batchRecords.push({
      queries: queries.length,
      segments: timing.segments,
      tasks: new Set(batch.miniBatches.map((mb) => mb.task)).size,
      maxLength: batch.maxLength,
      totalMs: timing.totalMs,
      petMs: timing.petMs,
      sharedMs: timing.sharedMs,
      rows: timing.paddedRows,
      paddingRows: timing.paddedRows - timing.rows,
    });
    batch.miniBatches.forEach((mb, k) => {
      (mb.queries as WindowQuery[]).forEach((q, j) => {
        const r = results[k]![j]!;
        this.classified++;
        q.resolve({ label: r.label, labelIndex: r.labelIndex, logits: Array.from(r.logits) });
      });
    });
  }

  /**
   * Registers a task from its parameter file's bytes; with `load`, loads it too. Atomic: when the load fails (the
   * budget), the new task is unregistered again and nothing changed.
   */
  async register(task: RegisterTask): Promise<TaskSummary> {
    const params = readPetParams(task.params, task.source);
    if (params.type !== task.petType) throw new PetTypeMismatchError(task.source, task.petType, params.type);
    const id = this.manager.registerTask(task.petType as never, task.sharedModel, params, {
      ...(task.id !== undefined ? { id: task.id } : {}),
      ...(task.name !== undefined ? { name: task.name } : {}),
    });
    try {
      if (task.load) await this.gates.exclusive(id, () => this.manager.loadTasks([id]));
    } catch (err) {
      this.manager.unregisterTask(id);
      throw err;
    } finally {
      this.memoryChanged();
    }
    return taskSummary(this.manager.task(id));
  }

  load(id: string): Promise<TaskSummary> {
    return this.gates.exclusive(id, () => {
      if (this.manager.task(id).state !== 'loaded') {
        this.manager.loadTasks([id]);
        this.memoryChanged();
      }
      return taskSummary(this.manager.task(id));
    });
  }

  /** Waits for the task's queries in flight, then frees its device memory; it stays registered. */
  unload(id: string): Promise<TaskSummary> {
    return this.gates.exclusive(id, () => {
      if (this.manager.task(id).state === 'loaded') {
        this.manager.unloadTask(id);
        this.memoryChanged();
      }
      return taskSummary(this.manager.task(id));
    });
  }

  /** Waits for the task's queries in flight, then unloads and unregisters it. */
  delete(id: string): Promise<TaskSummary> {
    return this.gates.exclusive(id, () => {
      const summary = taskSummary(this.manager.task(id));
      if (summary.state === 'loaded') this.manager.unloadTask(id);
      this.manager.unregisterTask(id);
      this.memoryChanged();
      return summary;
    });
  }

  tasks(): TaskSummary[] {
    return this.manager.tasks().map(taskSummary);
  }

  task(id: string): TaskSummary {
    return taskSummary(this.manager.task(id));
  }

  memory(): MemorySummary {
    const m = this.manager.memory();
    // The manager's own cap when one is set (the worker always sets --budget-mb), else the native allocator's.
    return { budgetBytes: m.budgetBytes ?? m.deviceBudgetBytes, sharedBytes: m.sharedBytes, petBytes: m.petBytes, loadedTasks: m.loadedTasks, registeredTasks: m.registeredTasks };
  }

  /** Memory, pending queries, and the batch and plan records since the previous call. */
  stats(): EngineStats {
    const stats: EngineStats = {
      memory: this.memory(),
      pendingQueries: this.waiting,
      queriesClassified: this.classified,
      batches: this.batchRecords,
      plans: this.planRecords,
    };
    this.batchRecords = [];
    this.planRecords = [];
    return stats;
  }

  /** Answers every waiting query (their windows run now), then refuses new ones. */
  close(): Promise<void> {
    return this.window.close();
  }

  private memoryChanged(): void {
    this.onMemoryChange?.(this.memory());
  }

  get sharedModelTag(): string {
    return this.tag;
  }
}
