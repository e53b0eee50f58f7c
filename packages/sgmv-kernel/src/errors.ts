/**
 * Typed errors of @tessera/sgmv-kernel. Shape and argument problems surface as @tessera/native's
 * ShapeMismatchError / InvalidArgumentError; adapter-file problems as @tessera/engine's ConfigError /
 * TensorShapeError (they name the file and the tensor). Both below are the engine's, one class across packages:
 * UnknownAdapterError (`adapter` names the unknown key) and UnsupportedAdapterError (an adapter SGMV cannot apply
 * at the hook sites: trained biases, `modules_to_save`, LoRA on the LM head or the pooler; merge it instead).
 */
export { UnknownAdapterError, UnsupportedAdapterError } from '@tessera/engine';
