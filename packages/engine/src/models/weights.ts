/**
 * Model weights: native tensors by Hugging Face name, loaded from any {@link TensorSource} (a safetensors file, a
 * sharded directory, or an in-memory map) and checked against the shapes the config implies.
 */
import { type Backend, type ComputeMode, type DType, Tensor, cast, getBackend, isQ8Weight, q8Dequantize, q8Quantize } from '@tessera/native';
import { MissingTensorError, TensorShapeError } from '../errors.js';

/** What the loader needs from a tensor container (SafetensorsFile and ModelTensors implement it). */
export interface TensorSource {
  /** Where the tensors come from, for error messages. */
  readonly path: string;
  has(name: string): boolean;
  info(name: string): { dtype: DType; shape: readonly number[] };
  read(name: string, options?: { backend?: Backend; dtype?: DType }): Tensor;
}

/** Model weights by HF tensor name. Linear weights keep their stored dtype (the GEMM reads f32/f16/bf16). */
export class ModelWeights {
  readonly tensors: Map<string, Tensor>;
  readonly backend: Backend;
  /** Stacked weights built by fusedRows, by their parts' names joined with newlines; each part is a row view. */
  private readonly fused = new Map<string, { weight: Tensor; views: Tensor[] }>();
  private readonly exclusive: boolean;
  /**
   * How the models multiply by these weights: 'bf16' (set by `load` with `compute: 'bf16'`, after `toBf16`) makes
   * every linear layer round its activations to bf16 and sum in f32 (`@tessera/native` gemm's `compute`).
   */
  compute: ComputeMode = 'f32';

  /**
   * `exclusive`: nothing but this object holds the map's tensors, so fusedRows may replace them by views of a
   * stacked copy and free them. `load` and `fromHost` make exclusive weights; a map built from tensors that others
   * share (e.g. a pool of blocks) must not be (the default), and its models then apply each projection alone.
   */
  constructor(tensors: Map<string, Tensor>, backend: Backend, options: { exclusive?: boolean } = {}) {
    this.tensors = tensors;
    this.backend = backend;
    this.exclusive = options.exclusive ?? false;
  }

  /**
   * Reads every tensor of `shapes` from `source`. Weights of 2-D Linear/embedding tensors keep their dtype;
   * 1-D tensors (biases, norm weights) become f32, which the row ops require. All-or-nothing: a missing or
   * misshapen tensor throws before anything is read, and a failure while reading frees what was read.
   */
  static load(source: TensorSource, shapes: Map<string, number[]>, backend: Backend = getBackend()): ModelWeights {
    const missing = [...shapes.keys()].filter((n) => !source.has(n));
    if (missing.length > 0) {
      const list = missing.slice(0, 5).join(', ');
      throw new MissingTensorError(source.path, `${source.path} lacks ${missing.length} tensor(s) the config requires: ${list}${missing.length > 5 ? ', …' : ''}`);
    }
    for (const [name, shape] of shapes) {
      const found = source.info(name).shape;
      if (found.length !== shape.length || found.some((d, i) => d !== shape[i])) {
        throw new TensorShapeError(source.path, `${source.path}: tensor ${name} is [${found.join(', ')}], the config implies [${shape.join(', ')}]`);
      }
    }
    const tensors = new Map<string, Tensor>();
    try {
      for (const [name, shape] of shapes) {
        const stored = source.info(name).dtype;
        const dtype: DType = shape.length === 1 ? 'f32' : stored;
        tensors.set(name, source.read(name, { backend, dtype }));
      }
    } catch (err) {
      for (const t of tensors.values()) t.dispose();
      throw err;
    }
    return new ModelWeights(tensors, backend, { exclusive: true });
  }

  /** Wraps host arrays (f32) as weights; used by tests and by `fromHost` users. */
  static fromHost(arrays: Map<string, { data: Float32Array; shape: readonly number[] }>, backend: Backend = getBackend()): ModelWeights {
    const tensors = new Map<string, Tensor>();
    for (const [name, { data, shape }] of arrays) tensors.set(name, Tensor.from(data, shape, { backend }));
    return new ModelWeights(tensors, backend, { exclusive: true });
  }

  get(name: string): Tensor {
    const t = this.tensors.get(name);
    if (!t) throw new MissingTensorError('(weights)', `no weight named ${name}`);
    return t;
  }

  /**
   * Replaces each named 2-D weight by its Q8_0 int8 blocks (q8Quantize; u8 [n, k/32 · 34]), one at a time so the
   * peak is one weight's f32 and int8 copies. Weights already Q8_0, and those whose k is not a multiple of 32, are
   * left as they are. Returns the names quantized.
   */
  quantizeInt8(names: readonly string[]): string[] {
    const done: string[] = [];
    for (const name of names) {
      const t = this.get(name);
      if (isQ8Weight(t) || t.rank !== 2 || t.shape[1]! % 32 !== 0) continue;
      const q = q8Quantize(t);
      this.tensors.set(name, q);
      t.dispose();
      done.push(name);
    }
    return done;
  }

  /**
   * Holds the named 2-D float weights as bf16 (rounded to nearest even), one at a time, for `compute: 'bf16'`:
   * the bf16-compute GEMM reads bf16 weights in place. Weights already bf16 or Q8_0 are left as they are. Returns
   * the names converted.
   */
  toBf16(names: readonly string[]): string[] {
    const done: string[] = [];
    for (const name of names) {
      const t = this.get(name);
      if (t.dtype === 'bf16' || isQ8Weight(t) || t.rank !== 2) continue;
      this.tensors.set(name, cast(t, 'bf16'));
      t.dispose();
      done.push(name);
    }
    return done;
  }

  /** The weight as f32 host data (a copy), e.g. for ONNX export or merging; a Q8_0 weight is dequantized. */
  hostF32(name: string): Float32Array {
    const t = this.get(name);
    if (t.dtype === 'f32') return t.toArray() as Float32Array;
    const f = isQ8Weight(t) ? q8Dequantize(t) : cast(t, 'f32');
    try {
      return f.toArray() as Float32Array;
    } finally {
      f.dispose();
    }
  }

  /**
   * Several 2-D weights with the same columns (a layer's q, k and v projections; its gate and up projections) as
   * one tensor of their rows stacked in order, so one GEMM computes all their outputs side by side (each input
   * row is read once, and a decode step streams the weights in one pass). Built on the first call by copying the
   * parts into one tensor; the map then holds row views of it under the parts' names (the originals are freed),
   * so in-place updates of a part (a LoRA merge, an optimizer step) write through and the part reads as before.
   * Returns null, and leaves the map as it is, when the weights are not exclusive (see the constructor), when the
   * parts do not share a dtype and a column count, or when a part was replaced in the map after the fusion (e.g.
   * by an f32 master copy for training): the caller then applies the parts one by one, reading what the map holds
   * now.
   */
  fusedRows(names: readonly string[]): Tensor | null {
    if (!this.exclusive) return null;
    const key = names.join('\n');
    const entry = this.fused.get(key);
    if (entry) {
      const current = !entry.weight.disposed && entry.views.every((v, i) => this.tensors.get(names[i]!) === v && !v.disposed);
      return current ? entry.weight : null;
    }
    const parts = names.map((n) => this.get(n));
    const cols = parts[0]!.shape[1];
    if (parts.some((t) => t.rank !== 2 || t.shape[1] !== cols || t.dtype !== parts[0]!.dtype)) return null;
    const rows = parts.reduce((n, t) => n + t.shape[0]!, 0);
    const weight = Tensor.empty([rows, cols!], parts[0]!.dtype, this.backend);
    const views: Tensor[] = [];
    try {
      let r = 0;
      for (const t of parts) {
        const view = weight.rows(r, t.shape[0]!);
        views.push(view);
        cast(t, t.dtype, { out: view });
        r += t.shape[0]!;
      }
    } catch (err) {
      for (const v of views) v.dispose();
      weight.dispose();
      throw err;
    }
    names.forEach((n, i) => {
      this.tensors.set(n, views[i]!);
      parts[i]!.dispose();
    });
    this.fused.set(key, { weight, views });
    return weight;
  }

  /** Bytes held by all weights. */
  get nbytes(): number {
    let n = 0;
    for (const t of this.tensors.values()) n += t.nbytes;
    return n;
  }

  dispose(): void {
    for (const t of this.tensors.values()) t.dispose();
    for (const { weight } of this.fused.values()) weight.dispose();
    this.fused.clear();
  }
}
