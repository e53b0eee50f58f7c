/**
 * Weights handed to the ONNX exporters (and to the tests' float64 reference) as host f32 arrays, looked up by
 * Hugging Face tensor name (see `models/names.ts`; Linear weights are [out, in], as HF stores them).
 */
import { MissingTensorError, TensorShapeError, UnknownDtypeError } from '../errors.js';

/** Returns the tensor named `name` as host f32, row-major in its HF shape. May throw (e.g. MissingTensorError). */
export type HostWeights = (name: string) => Float32Array;

/** What the errors name as the "file" when weights come from memory rather than from a checkpoint on disk. */
export const HOST_WEIGHTS_SOURCE = '<host weights>';

/**
 * Reads tensors through a {@link HostWeights} and checks each against the shape the config implies, so an
 * exporter never bakes a mis-sized tensor into a graph (ORT would only fail later, far from the cause).
 */
export class CheckedWeights {
  readonly #weights: HostWeights;
  readonly #shapes: ReadonlyMap<string, readonly number[]>;
  readonly #source: string;

  constructor(weights: HostWeights, shapes: ReadonlyMap<string, readonly number[]>, source = HOST_WEIGHTS_SOURCE) {
    this.#weights = weights;
    this.#shapes = shapes;
    this.#source = source;
  }

  /** The HF shape the config implies for `name`. */
  shape(name: string): readonly number[] {
    const shape = this.#shapes.get(name);
    if (shape === undefined) {
      throw new MissingTensorError(this.#source, `tensor ${name} is not part of this model (the config implies no such tensor)`);
    }
    return shape;
  }

  /** The tensor's data, checked to be a Float32Array with exactly as many elements as its HF shape. */
  get(name: string): Float32Array {
    const shape = this.shape(name);
    const data: unknown = this.#weights(name);
    if (!(data instanceof Float32Array)) {
      const got = data === null || data === undefined ? String(data) : (data.constructor?.name ?? typeof data);
      throw new UnknownDtypeError(this.#source, `tensor ${name}: expected a Float32Array (host f32), got ${got}`);
    }
    const want = shape.reduce((a, b) => a * b, 1);
    if (data.length !== want) {
      throw new TensorShapeError(
        this.#source,
        `tensor ${name}: has ${data.length} elements, but the config implies shape [${shape.join(', ')}] (${want} elements)`,
      );
    }
    return data;
  }
}

/** w [rows, cols] row-major → its transpose [cols, rows] (HF Linear [out, in] → MatMul's [in, out]). */
export function transposeMatrix(w: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) t[c * rows + r] = w[r * cols + c]!;
  }
  return t;
}
