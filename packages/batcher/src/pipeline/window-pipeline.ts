/**
 * WindowPipeline: PetS's online serving loop as a policy (pets.md §3.1, Fig. 4), with the execution injected:
 *
 *   submit(task, inputs)  → each input is one query of a BatchWindow → planBatches(window) picks macro-batches
 *                          (coordinated batching with the configured strategy and cost model)
 *                          → executor.execute(batch) runs it and answers each query with its row's output
 *
 * Consistency: each task has a readers-writer gate (task-gate.ts). A submit holds it shared until its queries are
 * answered, so admin work under `exclusive` (load, unload, delete) never pulls a task out from under a batch that
 * uses it, and a submit never reaches the executor for a task that is not ready: the executor prepares it first
 * (PetS's loader runs before a task's first invocation, pets.md §3.3).
 *
 * No engine, tensors or threads here: PetS's executor (PetEngine over a TaskManager) lives in @tessera/pet-ops,
 * a simulated one in tests, and Arlo's request scheduler can drive the same loop with its own.
 */
import type { Clock } from '../clock.js';
import { TesseraError } from '@tessera/core';

import { planBatches } from '../coordinated/plan.js';
import type { CostModel } from '../coordinated/cost-model.js';
import type { BatchingStrategy, BatchPlan, CbQuery, MacroBatch } from '../coordinated/types.js';
import { BatchWindow } from '../coordinated/window.js';
import { TaskGates } from './task-gate.js';

/** What runs the planned batches: the engine side of the loop. */
export interface PipelineExecutor<Input, Output> {
  /** The task's PET type (the planner's β); throws the executor's typed error for an unknown task. */
  petTypeOf(task: string): string;
  /** Whether the task can run now (loaded); throws for an unknown task. */
  isReady(task: string): boolean;
  /** Makes a task ready (loads it); called under the task's exclusive gate, only when it is not ready. */
  prepare(task: string): void | Promise<void>;
  /** The length (tokens) an input occupies in a batch. */
  lengthOf(input: Input): number;
  /** Runs one macro-batch: `inputs[k][j]` is the j-th query of mini-batch k; returns outputs in the same layout. */
  execute(batch: MacroBatch, inputs: Input[][]): Output[][] | Promise<Output[][]>;
}

export interface WindowPipelineOptions<Input, Output> {
  executor: PipelineExecutor<Input, Output>;
  strategy: BatchingStrategy | 'auto';
  cost: CostModel;
  /** The window closes `windowMs` after its first query, or at `windowQueries` queries. */
  windowMs: number;
  windowQueries: number;
  clock: Clock;
  /** Mini- and macro-batch caps of the planner. */
  maxMini: number;
  maxMacro: number;
  /** Told of every window's plan (for metrics). */
  onPlan?: (plan: BatchPlan, queries: number) => void;
  /** Awaited before each macro-batch (e.g. a turn of the event loop, so messages are handled between batches). */
  beforeBatch?: () => Promise<void>;
}

/** A submit kept losing its task to concurrent unloads. */
export class TaskBusyError extends TesseraError {
  static override readonly kind = 'conflict' as const;
  readonly taskId: string;
  constructor(taskId: string) {
    super('TESSERA_PET_TASK_STATE', `task ${JSON.stringify(taskId)} was unloaded again while its classify waited to load it; retry`);
    this.taskId = taskId;
  }
}

interface WindowQuery<Input, Output> extends CbQuery {
  input: Input;
  resolve(output: Output): void;
  reject(error: unknown): void;
}

export class WindowPipeline<Input, Output> {
  private readonly executor: PipelineExecutor<Input, Output>;
  private readonly window: BatchWindow<WindowQuery<Input, Output>>;
  private readonly gates = new TaskGates();
  private nextQuery = 0;
  private waiting = 0;
  private answered = 0;

  constructor(options: WindowPipelineOptions<Input, Output>) {
    const { executor, strategy, cost } = options;
    this.executor = executor;
    this.window = new BatchWindow<WindowQuery<Input, Output>>({
      maxQueries: options.windowQueries,
      maxWaitMs: options.windowMs,
      clock: options.clock,
      plan: (queries) => {
        // Every task of the window is held by its submit's gate, so it is registered and ready.
        const plan = planBatches(queries, { strategy, cost, petTypeOf: (task) => executor.petTypeOf(task), maxMini: options.maxMini, maxMacro: options.maxMacro });
        options.onPlan?.(plan, queries.length);
        return plan;
      },
      execute: async (batch) => {
        await options.beforeBatch?.();
        const queries = batch.miniBatches.map((mb) => mb.queries as WindowQuery<Input, Output>[]);
        const outputs = await executor.execute(batch, queries.map((qs) => qs.map((q) => q.input)));
        queries.forEach((qs, k) => qs.forEach((q, j) => q.resolve(outputs[k]![j]!)));
      },
      onError: (error, context) => {
        for (const q of context.queries) q.reject(error);
      },
    });
  }

  /** Queries waiting in the open window or its planned batches. */
  get pending(): number {
    return this.waiting;
  }

  /** Queries answered so far. */
  get completed(): number {
    return this.answered;
  }

  /**
   * Runs `inputs` with `task`: each input is one query of the window. Resolves with one output per input, in
   * order. A task that is not ready is prepared first, under its exclusive gate.
   */
  async submit(task: string, inputs: readonly Input[]): Promise<Output[]> {
    for (let attempt = 0; attempt < 3; attempt++) {
      if (!this.executor.isReady(task)) {
        await this.gates.exclusive(task, async () => {
          if (!this.executor.isReady(task)) await this.executor.prepare(task);
        });
      }
      const outputs = await this.gates.shared(task, async () => {
        if (!this.executor.isReady(task)) return null;
        return Promise.all(inputs.map((input) => this.enqueue(task, input)));
      });
      if (outputs !== null) return outputs;
    }
    throw new TaskBusyError(task);
  }

  /** Runs `fn` alone on `task`: after the queries in flight that hold it, before those that come later. */
  exclusive<T>(task: string, fn: () => Promise<T> | T): Promise<T> {
    return this.gates.exclusive(task, fn);
  }

  /** Answers every waiting query (their windows run now), then refuses new ones. */
  close(): Promise<void> {
    return this.window.close();
  }

  private enqueue(task: string, input: Input): Promise<Output> {
    return new Promise<Output>((resolve, reject) => {
      this.waiting++;
      this.window.add({
        id: this.nextQuery++,
        task,
        length: this.executor.lengthOf(input),
        input,
        resolve: (output) => {
          this.waiting--;
          this.answered++;
          resolve(output);
        },
        reject: (error) => {
          this.waiting--;
          reject(error);
        },
      });
    });
  }
}
