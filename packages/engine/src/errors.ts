/**
 * The engine's typed errors. Every bad model file, config or adapter ends in one of these (never a crash and
 * never a half-loaded model): callers can `instanceof`-check, servers map them to 4xx bodies.
 */
import { type ErrorKind, registerErrors, TesseraError } from '@tessera/core';

/** A model, adapter or tokenizer file is unreadable or malformed. `path` names the file. */
export class ModelFormatError extends TesseraError {
  static override readonly kind: ErrorKind = 'invalid';
  readonly path: string;
  constructor(code: string, path: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.path = path;
  }
}

/** The file ends before the header or a tensor's bytes do. */
export class TruncatedFileError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_TRUNCATED_FILE', path, message, options);
  }
}

/** The safetensors header (length prefix or JSON) is not valid: bad JSON, overlapping or out-of-range offsets. */
export class BadHeaderError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_BAD_HEADER', path, message, options);
  }
}

/** A tensor has a dtype this engine does not read (the message names the tensor and the dtype). */
export class UnknownDtypeError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_UNKNOWN_DTYPE', path, message, options);
  }
}

/** A tensor's shape differs from the one the config implies (the message names the tensor and both shapes). */
export class TensorShapeError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_TENSOR_SHAPE', path, message, options);
  }
}

/** A tensor the config requires is absent from the file(s). */
export class MissingTensorError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_MISSING_TENSOR', path, message, options);
  }
}

/** A path (from a config, an index file or a caller) resolves outside the model directory. */
export class PathOutsideModelError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_PATH_OUTSIDE_MODEL', path, message, options);
  }
}

/** config.json / adapter_config.json / tokenizer.json is missing a field, has a wrong type, or an unsupported value. */
export class ConfigError extends ModelFormatError {
  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super('TESSERA_CONFIG', path, message, options);
  }
}

/**
 * An adapter carries something a hook-site delta cannot apply: LoRA or a trained bias on a module that is not a
 * per-layer hook site (the LM head, the pooler, the embeddings), `modules_to_save` (full replacement tensors), or
 * (for SGMV) trained biases at all. Serve such an adapter by merging it (`mergeLoraIntoWeights`). Never skipped
 * silently. `path` is the adapter directory, or its name when it was not loaded from one.
 */
export class UnsupportedAdapterError extends ConfigError {}

/**
 * KvCacheExhaustedError (the page allocator has no free page) and UnknownAdapterError (a name nobody registered)
 * live in @tessera/core, beside the page allocator and the adapter cache's other errors: one class across packages.
 */
export { KvCacheExhaustedError, UnknownAdapterError } from '@tessera/core';

registerErrors(ModelFormatError, TruncatedFileError, BadHeaderError, UnknownDtypeError, TensorShapeError, MissingTensorError, PathOutsideModelError, ConfigError, UnsupportedAdapterError);
