/**
 * A runtime instance (arlo.md §3): the model compiled for one static input shape [maxBatch, length]. Every
 * sequence it runs is right-padded to `length` (attention mask 0 on the pad rows), so its cost is the padded
 * length's whatever the request's own length; the outputs of the real tokens do not depend on the padding.
 *
 * Implementations: `ThreadRuntime` (a worker thread with one intra-op thread running our native encoder with
 * `padTo`, or an onnxruntime-node session whose graph has the shape baked in), and `EmulatedRuntime` (sleeps for
 * the profiled service time: more instances than cores, as the paper's dispatch-overhead experiment does).
 */
import { TesseraError } from '@tessera/core';

export type RuntimeKind = 'native' | 'ort';

/** Per sequence, the classifier's logits [numLabels] (from the [CLS] row; null from an emulated instance), and the ms the runtime spent (its own clock). */
export type InferOutput = { logits: Float32Array[] | null; execMs: number };

export interface Runtime {
  readonly id: string;
  readonly kind: RuntimeKind | 'emulated' | 'remote';
  /** ℓ: the static sequence length; every sequence is padded to it. */
  readonly length: number;
  /** The static batch: at most this many sequences per `infer`. */
  readonly maxBatch: number;
  /** Why the instance cannot serve (its worker crashed or was closed); null or absent while it can. */
  readonly failure?: Error | null;
  /** Runs up to `maxBatch` token-id sequences, each at most `length` long. */
  infer(batch: readonly (readonly number[])[]): Promise<InferOutput>;
  /** Re-shapes the instance to another length (replacement; an ORT instance loads that length's graph). */
  retarget(length: number): Promise<void>;
  close(): Promise<void>;
}

/** A batch a runtime cannot take (too long for its shape, too many sequences, an id outside the vocabulary). */
export class RuntimeInputError extends TesseraError {
  static override readonly kind = 'invalid' as const;
  constructor(message: string) {
    super('TESSERA_ARLO_RUNTIME_INPUT', message);
  }
}

/** A runtime worker that failed to start, crashed or was closed. */
export class RuntimeUnavailableError extends TesseraError {
  static override readonly kind = 'unavailable' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super('TESSERA_ARLO_RUNTIME_UNAVAILABLE', message, options);
  }
}

/** Checks a batch against a runtime's static shape (and a vocabulary when given). */
export function checkBatch(batch: readonly (readonly number[])[], length: number, maxBatch: number, vocabSize?: number): void {
  if (batch.length === 0 || batch.length > maxBatch) throw new RuntimeInputError(`a batch of ${batch.length} sequences; this runtime takes 1 to ${maxBatch}`);
  batch.forEach((ids, b) => {
    if (ids.length === 0) throw new RuntimeInputError(`sequence ${b} is empty`);
    if (ids.length > length) throw new RuntimeInputError(`sequence ${b} has ${ids.length} tokens; this runtime's length is ${length}`);
    for (const id of ids) {
      if (!Number.isSafeInteger(id) || id < 0 || (vocabSize !== undefined && id >= vocabSize)) {
        throw new RuntimeInputError(`sequence ${b} has token id ${id}, not in [0, ${vocabSize ?? 'inf'})`);
      }
    }
  });
}

/** An executor that sleeps for the profiled service time of its length (per sequence: batch 1 is Arlo's setting). */
export class EmulatedRuntime implements Runtime {
  readonly kind = 'emulated' as const;
  #closed = false;
  constructor(
    readonly id: string,
    public length: number,
    readonly maxBatch: number,
    private readonly serviceMs: (length: number) => number,
  ) {}

  async infer(batch: readonly (readonly number[])[]): Promise<InferOutput> {
    if (this.#closed) throw new RuntimeUnavailableError(`runtime ${this.id} is closed`);
    checkBatch(batch, this.length, this.maxBatch);
    const ms = this.serviceMs(this.length) * batch.length;
    const start = performance.now();
    await new Promise((resolve) => setTimeout(resolve, ms));
    return { logits: null, execMs: performance.now() - start };
  }

  async retarget(length: number): Promise<void> {
    this.length = length;
  }

  async close(): Promise<void> {
    this.#closed = true;
  }
}
