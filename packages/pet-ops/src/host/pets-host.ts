/**
 * PetsHost: PetS's engine side as one object, ready to serve behind any transport (a worker thread, a queue, a
 * test). It owns the stack pets.md §3 describes and gives it a task API and an executor:
 *
 *   TaskManager (device budget)     the shared model (loaded once) and the tasks' parameters (§3.2–3.3)
 *   PetEngine (layout, scheduling)  PIE: one forward per macro-batch, PET ops per segment (§3.7, Algorithm 2)
 *   executor                        what a batching loop calls: a task's PET type, is it loaded, load it, run a
 *                                   planned macro-batch (batcher's PipelineExecutor, structurally)
 *   task admin                      register (from a parameter file's bytes), load, unload, delete, list
 *
 * The batching loop is attached, not owned: pet-ops sits below the policies, so the caller builds batcher's
 * WindowPipeline over `host.executor` and hands it to `attach`. From then on classify calls go through its window,
 * and admin work on a task runs under the task's exclusive gate (after the classifies in flight that use it).
 * Without a pipeline, classify runs each call as its own macro-batch and admin work runs at once.
 *
 *   const host = new PetsHost({ modelDir, tag: 'bert-tiny', budgetBytes: 256 << 20 });
 *   host.attach(new WindowPipeline({ executor: host.executor, onPlan: (p, n) => host.recordPlan(…), … }));
 *   await host.registerTask({ petType: 'adapter', sharedModel: 'bert-tiny', params, source: 'upload', load: true });
 *   const [result] = await host.classify(task.id, [{ ids }]);
 */
import { readFileSync } from 'node:fs';

import { setThreads } from '@tessera/native';

import { PetEngine, petsCostProfilerTarget } from '../engine/pet-engine.js';
import { PetTypeMismatchError } from '../errors.js';
import { readPetParams } from '../formats/pet-file.js';
import { generatePetParams } from '../gen/generate.js';
import { type TaskInfo, TaskManager } from '../tasks/task-manager.js';
import { PET_TYPES, type PetType, type SharedModel } from '../types.js';
import type {
  ClassifyResult,
  EncodedInput,
  MacroBatchRecord,
  MemorySummary,
  ModelSummary,
  PetsHostOptions,
  PetsHostStats,
  PlanRecord,
  RegisterTask,
  StartupTask,
  TaskSummary,
} from './types.js';

/** A planned macro-batch, as the executor needs it (batcher's MacroBatch, structurally). */
export interface PetsMacroBatch {
  readonly miniBatches: readonly { readonly task: string }[];
  /** The batch's padded length. */
  readonly maxLength: number;
}

/** What a batching loop calls to run PetS's batches (batcher's PipelineExecutor<EncodedInput, ClassifyResult>). */
export interface PetsExecutor {
  petTypeOf(task: string): string;
  isReady(task: string): boolean;
  prepare(task: string): void;
  lengthOf(input: EncodedInput): number;
  /** `inputs[k][j]` is the j-th query of mini-batch k; returns the results in the same layout. */
  execute(batch: PetsMacroBatch, inputs: EncodedInput[][]): ClassifyResult[][];
}

/** The batching loop a host runs its classifies through (batcher's WindowPipeline, structurally). */
export interface TaskPipeline<Input, Output> {
  submit(task: string, inputs: readonly Input[]): Promise<Output[]>;
  /** Runs `fn` alone on `task`: after the submits in flight that hold it, before later ones. */
  exclusive<T>(task: string, fn: () => Promise<T> | T): Promise<T>;
  /** Queries waiting, and answered so far. */
  readonly pending: number;
  readonly completed: number;
  /** Answers every waiting query, then refuses new ones. */
  close(): Promise<void>;
}

/** The profiling target of PetS's cost model (batcher's CostProfilerTarget, structurally). */
export type PetsProfileTarget = ReturnType<typeof petsCostProfilerTarget>;

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

export class PetsHost {
  readonly manager: TaskManager;
  readonly engine: PetEngine;
  readonly shared: SharedModel;
  /** The shared model, as a serving API reports it. */
  readonly model: ModelSummary;
  readonly executor: PetsExecutor;
  private pipeline: TaskPipeline<EncodedInput, ClassifyResult> | null = null;
  private memoryListener: ((memory: MemorySummary) => void) | null = null;
  private batches: MacroBatchRecord[] = [];
  private plans: PlanRecord[] = [];
  private classified = 0;

  constructor(options: PetsHostOptions) {
    if (options.threads !== undefined && options.threads !== null) setThreads(options.threads);
    this.manager = new TaskManager({ deviceBudgetBytes: options.budgetBytes });
    this.manager.addSharedModel(options.tag, { dir: options.modelDir });
    this.shared = this.manager.loadSharedModel(options.tag);
    this.engine = new PetEngine(this.manager, options.tag, {
      ...(options.layout !== undefined ? { layout: options.layout } : {}),
      ...(options.scheduling !== undefined ? { scheduling: options.scheduling } : {}),
    });
    const c = this.shared.config;
    this.model = {
      tag: options.tag,
      dir: options.modelDir,
      architecture: c.architecture,
      hiddenSize: c.hiddenSize,
      numLayers: c.numLayers,
      maxPositions: c.maxPositions,
      vocabSize: c.vocabSize,
      typeVocabSize: c.typeVocabSize,
      device: this.shared.model.backend.device,
      petTypes: [...PET_TYPES],
    };
    const manager = this.manager;
    this.executor = {
      petTypeOf: (task) => manager.task(task).type,
      isReady: (task) => manager.task(task).state === 'loaded',
      prepare: (task) => {
        manager.loadTasks([task]);
        this.memoryChanged();
      },
      lengthOf: (input) => input.ids.length,
      execute: (batch, inputs) => this.execute(batch, inputs),
    };
  }

  /** Runs classifies through `pipeline` (built over `this.executor`) from now on; `close` closes it. */
  attach(pipeline: TaskPipeline<EncodedInput, ClassifyResult>): void {
    this.pipeline = pipeline;
  }

  /** Called with the memory figures after every change of the task set or of what is loaded. */
  onMemoryChange(listener: ((memory: MemorySummary) => void) | null): void {
    this.memoryListener = listener;
  }

  /** A window's plan, for the stats (the pipeline's onPlan). */
  recordPlan(plan: PlanRecord): void {
    this.plans.push(plan);
  }

  memory(): MemorySummary {
    const m = this.manager.memory();
    // The manager's own cap when one is set (a host always sets one), else the native allocator's.
    return { budgetBytes: m.budgetBytes ?? m.deviceBudgetBytes, sharedBytes: m.sharedBytes, petBytes: m.petBytes, loadedTasks: m.loadedTasks, registeredTasks: m.registeredTasks };
  }

  task(id: string): TaskSummary {
    return taskSummary(this.manager.task(id));
  }

  tasks(): TaskSummary[] {
    return this.manager.tasks().map(taskSummary);
  }

  /** Classifies `inputs` with task `taskId` (loading it first when it is not loaded): one result per input, in order. */
  classify(taskId: string, inputs: readonly EncodedInput[]): Promise<ClassifyResult[]> {
    if (this.pipeline !== null) return this.pipeline.submit(taskId, inputs);
    return this.gate(taskId, () => {
      if (!this.executor.isReady(taskId)) this.executor.prepare(taskId);
      const [results] = this.execute({ miniBatches: [{ task: taskId }], maxLength: Math.max(0, ...inputs.map((i) => i.ids.length)) }, [[...inputs]]);
      return results!;
    });
  }

  /** Registers a task from its parameter file's bytes; with `load`, loads it too. Atomic: a failed load unregisters it again. */
  async registerTask(t: RegisterTask): Promise<TaskSummary> {
    const params = readPetParams(t.params, t.source);
    if (params.type !== t.petType) throw new PetTypeMismatchError(t.source, t.petType, params.type);
    const id = this.manager.registerTask(t.petType as PetType, t.sharedModel, params, { ...(t.id !== undefined ? { id: t.id } : {}), ...(t.name !== undefined ? { name: t.name } : {}) });
    try {
      if (t.load) await this.gate(id, () => this.manager.loadTasks([id]));
    } catch (err) {
      this.manager.unregisterTask(id);
      throw err;
    } finally {
      this.memoryChanged();
    }
    return this.task(id);
  }

  /** Registers parameter files from disk for this host's shared model; a file that fails is named in the error. */
  async registerStartupTasks(tasks: readonly StartupTask[]): Promise<TaskSummary[]> {
    const registered: TaskSummary[] = [];
    for (const t of tasks) {
      try {
        const { id, name } = t;
        const task = { petType: t.petType, sharedModel: this.model.tag, params: readFileSync(t.path), source: t.path, load: t.load };
        registered.push(await this.registerTask({ ...task, ...(id !== undefined ? { id } : {}), ...(name !== undefined ? { name } : {}) }));
      } catch (err) {
        throw Object.assign(new Error(`start-up task ${t.id ?? t.path} (${t.path}): ${(err as Error).message}`), { code: (err as { code?: unknown }).code });
      }
    }
    return registered;
  }

  /** Uploads a task's parameters to the device (no-op when loaded). */
  loadTask(id: string): Promise<TaskSummary> {
    return this.alone(id, () => this.manager.task(id).state !== 'loaded' && this.manager.loadTasks([id]));
  }

  /** Frees a loaded task's device memory; it stays registered (and is loaded again on its next classify). */
  unloadTask(id: string): Promise<TaskSummary> {
    return this.alone(id, () => this.manager.task(id).state === 'loaded' && this.manager.unloadTask(id));
  }

  /** Unloads and unregisters a task, after the classifies in flight that use it; resolves with its last summary. */
  deleteTask(id: string): Promise<TaskSummary> {
    return this.gate(id, () => {
      const s = this.task(id);
      if (s.state === 'loaded') this.manager.unloadTask(id);
      this.manager.unregisterTask(id);
      this.memoryChanged();
      return s;
    });
  }

  /** Memory, pending queries, and the macro-batches and plans since the previous call. */
  stats(): PetsHostStats {
    const stats = {
      memory: this.memory(),
      pendingQueries: this.pipeline?.pending ?? 0,
      queriesClassified: this.pipeline?.completed ?? this.classified,
      batches: this.batches,
      plans: this.plans,
    };
    this.batches = [];
    this.plans = [];
    return stats;
  }

  /**
   * Runs `fn` with PetS's cost-profiling target while one temporary task of every PET type is registered and
   * loaded (generated with fixed seeds); the tasks are removed afterwards, whatever `fn` does.
   */
  async withProfilingTasks<T>(fn: (target: PetsProfileTarget) => Promise<T>): Promise<T> {
    const ids: string[] = [];
    try {
      for (const [i, type] of PET_TYPES.entries()) ids.push(this.manager.registerTask(type, this.model.tag, generatePetParams(type, this.shared.config, { seed: 7_000 + i }), { id: `__profile-${type}` }));
      this.manager.loadTasks(ids);
      return await fn(petsCostProfilerTarget(this.engine, PET_TYPES));
    } finally {
      for (const id of ids) {
        if (this.manager.task(id).state === 'loaded') this.manager.unloadTask(id);
        this.manager.unregisterTask(id);
      }
    }
  }

  /** Answers the queries waiting in the pipeline, then frees the tasks and the shared model. */
  async close(): Promise<void> {
    await this.pipeline?.close();
    this.manager.dispose();
  }

  private execute(batch: PetsMacroBatch, inputs: EncodedInput[][]): ClassifyResult[][] {
    const miniBatches = batch.miniBatches.map((mb, k) => ({
      taskId: mb.task,
      queries: inputs[k]!.map((input) => ({ taskId: mb.task, ids: input.ids, ...(input.tokenTypes ? { tokenTypes: input.tokenTypes } : {}) })),
    }));
    const { results, timing } = this.engine.run({ miniBatches });
    const queries = inputs.reduce((n, qs) => n + qs.length, 0);
    const tasks = new Set(batch.miniBatches.map((mb) => mb.task)).size;
    const { segments, totalMs, petMs, sharedMs } = timing;
    this.batches.push({ queries, segments, tasks, maxLength: batch.maxLength, totalMs, petMs, sharedMs, rows: timing.paddedRows, paddingRows: timing.paddedRows - timing.rows });
    this.classified += queries;
    return results.map((mb) => mb.map((r) => ({ label: r.label, labelIndex: r.labelIndex, logits: Array.from(r.logits) })));
  }

  /** Runs `fn` alone on task `id` (the pipeline's exclusive gate; at once without a pipeline). */
  private gate<T>(id: string, fn: () => T): Promise<T> {
    return this.pipeline !== null ? this.pipeline.exclusive(id, fn) : Promise.resolve().then(fn);
  }

  /** Admin work on one task, alone on it; reports memory when its state changed. */
  private alone(id: string, fn: () => unknown): Promise<TaskSummary> {
    return this.gate(id, () => {
      const before = this.manager.task(id).state;
      fn();
      if (this.manager.task(id).state !== before) this.memoryChanged();
      return this.task(id);
    });
  }

  private memoryChanged(): void {
    this.memoryListener?.(this.memory());
  }
}
