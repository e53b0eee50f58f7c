/**
 * PetsEngineClient: the HTTP thread's handle on the engine worker thread. The shared model, the task manager, the
 * PET inference engine and the batch window live in the worker, so a forward pass never blocks the fastify event
 * loop; this class turns the worker's messages back into promises.
 *
 *   const engine = await PetsEngineClient.start({ modelDir, tag: 'bert-tiny', … });
 *   const task = await engine.registerTask({ petType: 'adapter', sharedModel: 'bert-tiny', params, source: 'upload', load: true });
 *   const [result] = await engine.classify(task.id, [{ ids: tokenizer.encode('great movie') }]);
 *
 * Failure model (as Punica's client): if the worker dies, every pending classify and admin call rejects with an
 * {@link EngineUnavailableError}, `healthy` turns false and a 'crash' event fires; later calls fail at once. There
 * is no silent restart: /health reports unhealthy until an operator (or an orchestrator) restarts the process.
 */
import { EventEmitter } from 'node:events';
import { performance } from 'node:perf_hooks';
import type { Worker } from 'node:worker_threads';

import { startWorker, watchWorker, workerEntry } from '@tessera/server-kit';

import { EngineError, EngineUnavailableError } from './errors.js';
import type {
  AdminCall,
  AdminResults,
  ClassifyResult,
  CostSummary,
  EncodedInput,
  EngineStats,
  FromWorker,
  MemorySummary,
  ModelSummary,
  RegisterTask,
  TaskSummary,
  ToWorker,
  WorkerInit,
} from './protocol.js';

export const MIB = 1024 * 1024;

export interface EngineOptions extends Omit<WorkerInit, 'entry'> {
  /** How long close() waits for the worker to finish before terminating it (default 10 s). */
  shutdownTimeoutMs?: number;
  /** Start-up progress lines from the worker (profiling, start-up tasks). */
  onProgress?: (line: string) => void;
}

/** What the client reports when a classify request ends, for metrics (times from performance.now(), ms). */
export interface ClassifyEnd {
  taskId: string;
  inputs: number;
  tokens: number;
  error: Error | null;
  submittedAt: number;
  endedAt: number;
}

export interface EngineClientEvents {
  'classify-end': [ClassifyEnd];
  crash: [Error];
}

interface Pending {
  resolve: (value: never) => void;
  reject: (err: Error) => void;
}

interface PendingClassify extends Pending {
  taskId: string;
  inputs: number;
  tokens: number;
  submittedAt: number;
}

interface Ready {
  model: ModelSummary;
  cost: CostSummary;
  tasks: TaskSummary[];
  memory: MemorySummary;
}

export class PetsEngineClient extends EventEmitter<EngineClientEvents> {
  /** The shared model, as the worker reported it. */
  readonly model: ModelSummary;
  /** How the worker prices batches. */
  readonly cost: CostSummary;
  /** The tasks registered at start-up. */
  readonly startupTasks: readonly TaskSummary[];
  private readonly worker: Worker;
  private readonly classifies = new Map<number, PendingClassify>();
  private readonly calls = new Map<number, Pending>();
  private nextId = 1;
  private failureReason: Error | null = null;
  private closing: Promise<void> | null = null;
  private readonly exited: Promise<number>;
  private readonly shutdownTimeoutMs: number;
  private memorySummary: MemorySummary;

  private constructor(worker: Worker, ready: Ready, exited: Promise<number>, shutdownTimeoutMs: number) {
    super();
    this.worker = worker;
    this.model = ready.model;
    this.cost = ready.cost;
    this.startupTasks = ready.tasks;
    this.memorySummary = ready.memory;
    this.exited = exited;
    this.shutdownTimeoutMs = shutdownTimeoutMs;
    worker.on('message', (msg: FromWorker) => this.onMessage(msg));
    watchWorker(worker, exited, {
      closing: () => this.closing !== null,
      lost: (message, cause) => this.fail(new EngineUnavailableError(message, cause ? { cause } : undefined)),
    });
  }

  /** Starts the worker; resolves once the shared model is loaded, the cost model ready and the start-up tasks registered. */
  static async start(options: EngineOptions): Promise<PetsEngineClient> {
    const { shutdownTimeoutMs, onProgress, ...init } = options;
    const { worker, ready, exited } = await startWorker<FromWorker>(workerEntry(import.meta.url, { source: './worker.ts', built: './engine-worker.js' }), {
      workerData: init satisfies WorkerInit,
      name: 'tessera-pets-engine',
      onMessage: (msg) => {
        if (msg.type === 'progress') onProgress?.(msg.line);
      },
      failed: (msg) => new EngineError(msg.error),
      unavailable: (message, opts) => new EngineUnavailableError(message, opts),
    });
    return new PetsEngineClient(worker, { model: ready.model, cost: ready.cost, tasks: ready.tasks, memory: ready.memory }, exited, shutdownTimeoutMs ?? 10_000);
  }

  /** False once the worker crashed or was shut down. */
  get healthy(): boolean {
    return this.failureReason === null;
  }

  /** Why the engine is unavailable, or null while healthy. */
  get failure(): Error | null {
    return this.failureReason;
  }

  /** The device memory figures and task counts, as the worker last reported them (it reports every change). */
  get memory(): MemorySummary {
    return this.memorySummary;
  }

  /** Classify requests submitted and not yet answered. */
  get inFlight(): number {
    return this.classifies.size;
  }

  /**
   * Classifies `inputs` (token ids) with task `taskId`. Each input is one query of the worker's batch window, so
   * it may share a macro-batch with other requests' queries, of other tasks. A registered task that is not loaded
   * is loaded first (pets.md §3.3: the loader runs before a task's first invocation).
   */
  classify(taskId: string, inputs: EncodedInput[]): Promise<ClassifyResult[]> {
    if (this.failureReason) return Promise.reject(this.failureReason);
    const id = this.nextId++;
    const tokens = inputs.reduce((n, input) => n + input.ids.length, 0);
    return new Promise<ClassifyResult[]>((resolve, reject) => {
      this.classifies.set(id, { resolve: resolve as (v: never) => void, reject, taskId, inputs: inputs.length, tokens, submittedAt: performance.now() });
      this.post({ type: 'classify', id, taskId, inputs });
    });
  }

  /**
   * Registers a task from its parameter file's bytes (validated against the shared model in the worker: format,
   * PET type, every tensor's shape). The bytes are transferred to the worker when they own their buffer.
   */
  registerTask(task: RegisterTask): Promise<TaskSummary> {
    const owns = task.params.byteOffset === 0 && task.params.byteLength === task.params.buffer.byteLength && task.params.buffer instanceof ArrayBuffer;
    const params = owns ? task.params : task.params.slice();
    return this.call({ op: 'register-task', ...task, params }, [params.buffer as ArrayBuffer]);
  }

  /** Uploads a registered task's parameters to the device (counted against the budget). */
  loadTask(id: string): Promise<TaskSummary> {
    return this.call({ op: 'load-task', id });
  }

  /** Frees a loaded task's device memory; it stays registered (and is loaded again on its next classify). */
  unloadTask(id: string): Promise<TaskSummary> {
    return this.call({ op: 'unload-task', id });
  }

  /** Unloads (when loaded) and unregisters a task; its queries already waiting are answered first. */
  deleteTask(id: string): Promise<TaskSummary> {
    return this.call({ op: 'delete-task', id });
  }

  tasks(): Promise<{ tasks: TaskSummary[]; memory: MemorySummary }> {
    return this.call({ op: 'tasks' });
  }

  task(id: string): Promise<{ task: TaskSummary; memory: MemorySummary }> {
    return this.call({ op: 'task', id });
  }

  /** Memory, pending queries, and the macro-batches and plans since the previous call. */
  stats(): Promise<EngineStats> {
    return this.call({ op: 'stats' });
  }

  /**
   * Stops the worker: its open window is flushed and answered, the tasks and the shared model freed, then it exits.
   * The HTTP layer drains requests before calling this. Terminates the worker after the timeout.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (!this.failureReason) {
        await within(
          this.call({ op: 'shutdown' }).catch(() => undefined),
          this.shutdownTimeoutMs,
        );
        // Exit from the worker's own event loop (no native call in flight), then make sure it is gone.
        this.worker.postMessage({ type: 'exit', code: 0 } satisfies ToWorker);
        await within(this.exited, 1_000);
      }
      await this.worker.terminate();
      await this.exited;
    })();
    return this.closing;
  }

  /**
   * Kills the engine as a crash would: pending requests fail with 503, /health turns unhealthy. The worker exits at
   * its next safe point (between two macro-batches); one that does not within `graceMs` is terminated.
   */
  async terminate(graceMs = 2_000): Promise<void> {
    if (!this.failureReason) this.worker.postMessage({ type: 'exit', code: 1 } satisfies ToWorker);
    await within(this.exited, graceMs);
    await this.worker.terminate();
    await this.exited;
  }

  private call<K extends AdminCall['op']>(call: Extract<AdminCall, { op: K }>, transfer: ArrayBuffer[] = []): Promise<AdminResults[K]> {
    if (this.failureReason) return Promise.reject(this.failureReason);
    const callId = this.nextId++;
    return new Promise<AdminResults[K]>((resolve, reject) => {
      this.calls.set(callId, { resolve: resolve as (v: never) => void, reject });
      this.post({ type: 'admin', callId, call }, transfer);
    });
  }

  private post(msg: ToWorker, transfer: ArrayBuffer[] = []): void {
    if (this.failureReason) return;
    this.worker.postMessage(msg, transfer);
  }

  private onMessage(msg: FromWorker): void {
    switch (msg.type) {
      case 'memory':
        this.memorySummary = msg.memory;
        break;
      case 'classified':
        this.endClassify(msg.id, msg.results, null);
        break;
      case 'classify-failed':
        this.endClassify(msg.id, null, new EngineError(msg.error));
        break;
      case 'reply': {
        const pending = this.calls.get(msg.callId);
        if (!pending) return;
        this.calls.delete(msg.callId);
        if (msg.ok) pending.resolve(msg.value as never);
        else pending.reject(new EngineError(msg.error));
        break;
      }
      case 'fatal':
        this.fail(new EngineUnavailableError(`the engine failed: ${msg.error.message}`, { cause: new EngineError(msg.error) }));
        break;
      default:
        break;
    }
  }

  private endClassify(id: number, results: ClassifyResult[] | null, error: Error | null): void {
    const pending = this.classifies.get(id);
    if (!pending) return;
    this.classifies.delete(id);
    if (error) pending.reject(error);
    else pending.resolve(results as never);
    this.emit('classify-end', {
      taskId: pending.taskId,
      inputs: pending.inputs,
      tokens: pending.tokens,
      error,
      submittedAt: pending.submittedAt,
      endedAt: performance.now(),
    });
  }

  private fail(err: Error): void {
    if (this.failureReason) return;
    this.failureReason = err;
    for (const id of [...this.classifies.keys()]) this.endClassify(id, null, err);
    for (const pending of this.calls.values()) pending.reject(err);
    this.calls.clear();
    if (!this.closing) this.emit('crash', err);
  }
}

/** Waits for `promise`, at most `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([promise, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
