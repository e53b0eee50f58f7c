/**
 * Typed errors of @tessera/sgmv-kernel. Shape and argument problems surface as @tessera/native's
 * ShapeMismatchError / InvalidArgumentError; adapter-file problems as @tessera/engine's ConfigError /
 * TensorShapeError (they name the file and the tensor). The two below are specific to serving LoRA with SGMV.
 */
import { registerErrors } from '@tessera/core';
import { ConfigError } from '@tessera/engine';


/** Re-exported from @tessera/engine: one class across packages (`adapter` names the unknown key). */
export { UnknownAdapterError } from '@tessera/engine';

/**
 * A PEFT adapter carries something SGMV cannot apply at the hook sites: trained biases, `modules_to_save`
 * (full replacement tensors, e.g. a classifier head), or LoRA on a Linear that is not a per-layer hook site
 * (the LM head, the pooler). Such an adapter is served by merging it (`mergeLoraIntoWeights`) or, for biases,
 * by the engine's `LoraDelta` with the base weights. `path` is the adapter directory.
 */
export class UnsupportedAdapterError extends ConfigError {}

registerErrors(UnsupportedAdapterError);
