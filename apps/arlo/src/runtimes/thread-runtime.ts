/**
 * The HTTP side of a runtime worker thread (worker.ts). One request at a time crosses to the worker (the pool
 * never sends a second before the first answered); results come back with the worker's own execution time.
 */
import type { Worker } from 'node:worker_threads';

import { deserializeError } from '@tessera/core';
import { startWorker, workerEntry } from '@tessera/server-kit';

import { checkBatch, type InferOutput, type Runtime, type RuntimeKind, RuntimeUnavailableError } from './runtime.js';
import type { RuntimeReply, RuntimeRequest, RuntimeWorkerInit } from './worker.js';

type Done = Extract<RuntimeReply, { type: 'done' }>;
type Ready = Extract<RuntimeReply, { type: 'ready' }>;

export interface ThreadRuntimeOptions extends RuntimeWorkerInit {
  id: string;
}

export class ThreadRuntime implements Runtime {
  readonly id: string;
  readonly kind: RuntimeKind;
  readonly maxBatch: number;
  #length: number;
  #nextId = 1;
  readonly #pending = new Map<number, { resolve: (r: Done) => void; reject: (e: Error) => void }>();
  #failure: Error | null = null;

  private constructor(
    options: ThreadRuntimeOptions,
    private readonly worker: Worker,
    /** What the worker read from the model: numLabels, vocabSize, maxPositions. */
    readonly model: Omit<Ready, 'type'>,
  ) {
    ({ id: this.id, kind: this.kind, maxBatch: this.maxBatch, length: this.#length } = options);
    worker.on('message', (msg: RuntimeReply) => {
      if (msg.type !== 'done' && msg.type !== 'failed') return;
      const p = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.type === 'done') p?.resolve(msg);
      else p?.reject(deserializeError(msg.error));
    });
    const lost = (reason: string) => {
      this.#failure ??= new RuntimeUnavailableError(`runtime ${this.id}: ${reason}`);
      for (const p of this.#pending.values()) p.reject(this.#failure);
      this.#pending.clear();
    };
    worker.on('error', (err) => lost(`the worker failed: ${err.message}`));
    worker.on('exit', (code) => lost(`the worker exited (code ${code})`));
  }

  /** Starts the worker and resolves once it has loaded the model and run one warm-up batch. */
  static async start(options: ThreadRuntimeOptions): Promise<ThreadRuntime> {
    const entry = workerEntry(import.meta.url, { source: './worker.ts', built: './runtime-worker.js' });
    const { kind, modelDir, length, maxBatch } = options;
    const { worker, ready } = await startWorker<RuntimeReply>(entry, {
      workerData: { kind, modelDir, length, maxBatch } satisfies RuntimeWorkerInit,
      name: `arlo-runtime-${options.id}`,
      failed: (m) => new RuntimeUnavailableError(`runtime ${options.id} failed to start: ${'error' in m ? m.error.message : 'unknown'}`),
      unavailable: (message, o) => new RuntimeUnavailableError(`runtime ${options.id}: ${message}`, o),
    });
    return new ThreadRuntime(options, worker, ready);
  }

  get length(): number {
    return this.#length;
  }

  get failure(): Error | null {
    return this.#failure;
  }

  async infer(batch: readonly (readonly number[])[]): Promise<InferOutput> {
    checkBatch(batch, this.#length, this.maxBatch, this.model.vocabSize);
    const done = await this.call({ type: 'infer', ids: batch.map((s) => [...s]) });
    const flat = done.logits!;
    const n = done.numLabels;
    return { logits: batch.map((_, b) => flat.subarray(b * n, (b + 1) * n)), execMs: done.execMs };
  }

  async retarget(length: number): Promise<void> {
    await this.call({ type: 'retarget', length });
    this.#length = length;
  }

  /** Times one batch of `batch` full sequences at `length` (the profiler's measure); the worker's clock. */
  async measure(length: number, batch: number): Promise<number> {
    return (await this.call({ type: 'measure', length, batch })).execMs;
  }

  async close(): Promise<void> {
    this.#failure ??= new RuntimeUnavailableError(`runtime ${this.id} is closed`);
    await this.worker.terminate();
  }

  private call(request: RuntimeRequest extends infer R ? (R extends RuntimeRequest ? Omit<R, 'id'> : never) : never): Promise<Done> {
    if (this.#failure) return Promise.reject(this.#failure);
    const id = this.#nextId++;
    return new Promise<Done>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.worker.postMessage({ ...request, id } as RuntimeRequest);
    });
  }
}
