/**
 * Typed errors of @tessera/sgmv-kernel. Shape and argument problems surface as @tessera/native's
 * ShapeMismatchError / InvalidArgumentError; adapter-file problems as @tessera/engine's ConfigError /
 * TensorShapeError (they name the file and the tensor). The two below are specific to serving LoRA with SGMV.
 */
import { ConfigError } from '@tessera/engine';
import { TesseraError } from '@tessera/native';

/**
 * A SegmentLayout key names an adapter the resolver does not know. Never silently the base model: a request
 * for a tenant's fine-tune must not get the untuned model's answer. Servers map it to "adapter not found".
 */
export class UnknownAdapterError extends TesseraError {
  /** The unknown SegmentLayout key. */
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_UNKNOWN_ADAPTER', message, options);
    this.key = key;
  }
}

/**
 * A PEFT adapter carries something SGMV cannot apply at the hook sites: trained biases, `modules_to_save`
 * (full replacement tensors, e.g. a classifier head), or LoRA on a Linear that is not a per-layer hook site
 * (the LM head, the pooler). Such an adapter is served by merging it (`mergeLoraIntoWeights`) or, for biases,
 * by the engine's `LoraDelta` with the base weights. `path` is the adapter directory.
 */
export class UnsupportedAdapterError extends ConfigError {}
