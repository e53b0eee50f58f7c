/**
 * PetsEngineClient: the HTTP thread's handle on the engine worker thread, over the host protocol (server-kit's
 * WorkerEngineClient). The shared model, the task manager, the PET engine and the batch window live in the worker.
 *
 *   const engine = await PetsEngineClient.start({ modelDir, tag: 'bert-tiny', … });
 *   const task = await engine.registerTask({ petType: 'adapter', sharedModel: 'bert-tiny', params, source: 'upload', load: true });
 *   const [result] = await engine.classify(task.id, [{ ids: tokenizer.encode('great movie') }]);
 *
 * If the worker dies, every pending classify and admin call rejects with EngineUnavailableError (503), `healthy`
 * turns false and a 'crash' event fires. There is no silent restart: /health reports unhealthy until restarted.
 */
import { randomUUID } from 'node:crypto';

import { WorkerEngineClient, type WorkerEngineOptions, workerEntry } from '@tessera/server-kit';

import type { ClassifyResult, EncodedInput, MemorySummary, PetsProtocol, RegisterTask, WorkerInit } from './protocol.js';

export const MIB = 1024 * 1024;

/** The worker's init, with the worker client's start-up progress lines and shutdown timeout (default 10 s). */
export type EngineOptions = Omit<WorkerInit, 'entry'> & Pick<WorkerEngineOptions, 'onProgress' | 'shutdownTimeoutMs'>;

export class PetsEngineClient {
  readonly client: WorkerEngineClient<PetsProtocol>;
  private memorySummary: MemorySummary;

  private constructor(client: WorkerEngineClient<PetsProtocol>) {
    this.client = client;
    this.memorySummary = client.ready.memory;
    client.on('notice', (n) => (this.memorySummary = n.memory));
  }

  static async start(options: EngineOptions): Promise<PetsEngineClient> {
    const { shutdownTimeoutMs, onProgress, ...init } = options;
    const client = await WorkerEngineClient.start<PetsProtocol>({
      entry: workerEntry(import.meta.url, { source: './worker.ts', built: './engine-worker.js' }),
      workerData: init satisfies WorkerInit,
      name: 'tessera-pets-engine',
      ...(onProgress ? { onProgress } : {}),
      ...(shutdownTimeoutMs !== undefined ? { shutdownTimeoutMs } : {}),
    });
    return new PetsEngineClient(client);
  }

  /** The shared model, how batches are priced, and the tasks registered at start-up, as the worker reported them. */
  get model() { return this.client.ready.model; }
  get cost() { return this.client.ready.cost; }
  get startupTasks() { return this.client.ready.tasks; }
  get healthy(): boolean { return this.client.healthy; }
  get failure(): Error | null { return this.client.failure; }
  /** Classify requests submitted and not yet answered. */
  get inFlight(): number { return this.client.inFlight; }
  /** The device memory figures and task counts, as the worker last reported them (it reports every change). */
  get memory(): MemorySummary { return this.memorySummary; }

  /** Classifies `inputs` with task `taskId`: each input is one query of the worker's batch window. */
  async classify(taskId: string, inputs: EncodedInput[]): Promise<ClassifyResult[]> {
    const stream = this.client.submit({ request: { id: randomUUID(), taskId, inputs }, attempt: 0 });
    await stream.result();
    return stream.items.map((item) => item.result);
  }

  /** Registers a task from its parameter file's bytes (validated in the worker); the bytes are transferred. */
  registerTask(task: RegisterTask): Promise<PetsProtocol['admin']['register-task']['result']> {
    const owns = task.params.byteOffset === 0 && task.params.byteLength === task.params.buffer.byteLength && task.params.buffer instanceof ArrayBuffer;
    const params = owns ? task.params : task.params.slice();
    return this.client.call('register-task', { ...task, params }, [params.buffer as ArrayBuffer]);
  }

  loadTask(id: string) { return this.client.call('load-task', id); }
  /** Frees a loaded task's device memory; it stays registered (and is loaded again on its next classify). */
  unloadTask(id: string) { return this.client.call('unload-task', id); }
  /** Unloads and unregisters a task; its queries already waiting are answered first. */
  deleteTask(id: string) { return this.client.call('delete-task', id); }
  tasks() { return this.client.call('tasks', null); }
  task(id: string) { return this.client.call('task', id); }
  /** Memory, pending queries, and the macro-batches and plans since the previous call. */
  stats() { return this.client.call('stats', null); }
  /** Flushes the open window, frees the tasks and the model, stops the worker (after the HTTP layer drained). */
  close(): Promise<void> { return this.client.close(); }
  /** Kills the engine as a crash would (tests, watchdogs). */
  terminate(graceMs?: number): Promise<void> { return this.client.terminate(graceMs); }
}
