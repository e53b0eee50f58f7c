/**
 * Tensor: a native-owned, contiguous, row-major buffer on one backend. Memory is charged to the backend's
 * byte budget; `dispose()` frees it now, and garbage collection frees it eventually (finalizer).
 */
import type { DType, DeviceKind, NativeTensor } from './binding.js';
import { callNative, DeviceMismatchError, fromNative, DisposedTensorError, InvalidArgumentError, ShapeMismatchError } from './errors.js';
import { type Backend, getBackend } from './loader.js';
import { formatShape } from './shape.js';

export type TypedArrayFor<D extends DType> = D extends 'f32'
  ? Float32Array
  : D extends 'f16' | 'bf16'
    ? Uint16Array
    : D extends 'i32'
      ? Int32Array
      : D extends 'i64'
        ? BigInt64Array
        : Uint8Array;

export type AnyTypedArray = Float32Array | Uint16Array | Int32Array | BigInt64Array | Uint8Array;

const bytesPer: Record<DType, number> = { f32: 4, f16: 2, bf16: 2, i32: 4, i64: 8, u8: 1 };

export function dtypeSize(dtype: DType): number {
  return bytesPer[dtype];
}

function arrayFor(dtype: DType, n: number): AnyTypedArray {
  switch (dtype) {
    case 'f32': return new Float32Array(n);
    case 'f16':
    case 'bf16': return new Uint16Array(n);
    case 'i32': return new Int32Array(n);
    case 'i64': return new BigInt64Array(n);
    case 'u8': return new Uint8Array(n);
  }
}

function checkShape(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    if (!Number.isInteger(d) || d < 0) throw new InvalidArgumentError(`shape ${formatShape(shape)} has a dimension that is not a non-negative integer`);
    n *= d;
  }
  return n;
}

/** The element type a TypedArray carries when no dtype is given. */
function inferDtype(data: ArrayBufferView): DType {
  if (data instanceof Float32Array) return 'f32';
  if (data instanceof Int32Array) return 'i32';
  if (data instanceof BigInt64Array) return 'i64';
  if (data instanceof Uint8Array) return 'u8';
  if (data instanceof Uint16Array) {
    throw new InvalidArgumentError('a Uint16Array is ambiguous: pass { dtype: "f16" } or { dtype: "bf16" }');
  }
  throw new InvalidArgumentError(`cannot make a tensor from ${data.constructor.name}`);
}

export interface TensorOptions {
  dtype?: DType;
  backend?: Backend;
}

export class Tensor {
  readonly native: NativeTensor;
  readonly backend: Backend;
  // A handle's dtype and shape never change (a reshape or row view is a new handle), so they are read across
  // N-API once, on first use: ops read them several times per call, and a decode step makes hundreds of calls.
  private cachedDtype: DType | undefined;
  private cachedShape: readonly number[] | undefined;

  /** Wraps an existing native handle. */
  constructor(native: NativeTensor, backend: Backend) {
    this.native = native;
    this.backend = backend;
  }

  /** Uninitialised memory of the given shape. */
  static empty(shape: readonly number[], dtype: DType = 'f32', backend: Backend = getBackend()): Tensor {
    checkShape(shape);
    return new Tensor(callNative(() => backend.binding.empty(dtype, shape)), backend);
  }

  static zeros(shape: readonly number[], dtype: DType = 'f32', backend: Backend = getBackend()): Tensor {
    const t = Tensor.empty(shape, dtype, backend);
    t.write(arrayFor(dtype, checkShape(shape)));
    return t;
  }

  /**
   * Copies `data` into a new tensor. dtype defaults from the array type (Float32Array → f32, ...);
   * f16/bf16 data is passed as raw bits in a Uint16Array. A plain number[] becomes f32 (or i32 for dtype i32).
   */
  static from(data: ArrayBufferView | readonly number[], shape: readonly number[], options: TensorOptions = {}): Tensor {
    const { view, dtype } = Tensor.normalise(data, shape, options.dtype);
    const t = Tensor.empty(shape, dtype, options.backend ?? getBackend());
    try {
      t.write(view);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  /**
   * Like {@link Tensor.from} but the copy into backend memory runs on a background thread. The memory is
   * reserved (and the budget checked) before this returns, so a budget error rejects at once.
   * Do not modify `data` until the promise settles.
   */
  static async fromAsync(data: ArrayBufferView, shape: readonly number[], options: TensorOptions = {}): Promise<Tensor> {
    const { view, dtype } = Tensor.normalise(data, shape, options.dtype);
    const t = Tensor.empty(shape, dtype, options.backend ?? getBackend());
    try {
      await t.writeAsync(view);
    } catch (e) {
      t.dispose();
      throw e;
    }
    return t;
  }

  private static normalise(data: ArrayBufferView | readonly number[], shape: readonly number[], dtype?: DType): { view: ArrayBufferView; dtype: DType } {
    const n = checkShape(shape);
    let view: ArrayBufferView;
    if (Array.isArray(data)) {
      const dt = dtype ?? 'f32';
      if (dt === 'f32') view = Float32Array.from(data as number[]);
      else if (dt === 'i32') view = Int32Array.from(data as number[]);
      else if (dt === 'u8') view = Uint8Array.from(data as number[]);
      else throw new InvalidArgumentError(`from(number[]) supports f32, i32 and u8; convert to ${dt} with Tensor.cast()`);
      dtype = dt;
    } else {
      view = data as ArrayBufferView;
      dtype ??= inferDtype(view);
    }
    const want = n * bytesPer[dtype];
    if (view.byteLength !== want) {
      throw new ShapeMismatchError(`data holds ${view.byteLength} bytes but shape ${formatShape(shape)} ${dtype} needs ${want}`);
    }
    return { view, dtype };
  }

  get dtype(): DType {
    return (this.cachedDtype ??= this.native.dtype);
  }
  /** A fresh array each time (callers may modify it). */
  get shape(): number[] {
    return this.dims().slice();
  }
  get rank(): number {
    return this.dims().length;
  }
  get numel(): number {
    return this.dims().reduce((a, b) => a * b, 1);
  }
  private dims(): readonly number[] {
    return (this.cachedShape ??= this.native.shape);
  }
  get nbytes(): number {
    return this.native.nbytes;
  }
  get device(): DeviceKind {
    return this.backend.device;
  }
  get disposed(): boolean {
    return this.native.disposed;
  }

  /** Throws if disposed; returns this for chaining. */
  live(what = 'tensor'): this {
    if (this.native.disposed) throw new DisposedTensorError(`${what} ${formatShape(this.shape)} was disposed`);
    return this;
  }

  write(data: ArrayBufferView): void {
    callNative(() => this.native.write(data));
  }

  /** Background copy from host memory (on CPU: into budgeted memory on another thread). */
  async writeAsync(data: ArrayBufferView): Promise<void> {
    try {
      await callNative(() => this.native.writeAsync(data));
    } catch (e) {
      throw fromNative(e);
    }
  }

  /** The raw elements (f16/bf16 as Uint16Array bits). */
  toArray(): AnyTypedArray {
    const out = arrayFor(this.dtype, this.numel);
    callNative(() => this.native.read(out));
    return out;
  }

  /** Reads into a caller-provided array of exactly `nbytes`. */
  readInto(dst: ArrayBufferView): void {
    callNative(() => this.native.read(dst));
  }

  /** Rows [start, start + count) of dimension 0, sharing memory. */
  rows(start: number, count: number): Tensor {
    return new Tensor(callNative(() => this.native.rowsView(start, count)), this.backend);
  }

  /** A view with another shape of the same element count, sharing memory. */
  reshape(shape: readonly number[]): Tensor {
    return new Tensor(callNative(() => this.native.reshape(shape)), this.backend);
  }

  /** Frees the memory now (views keep shared storage alive until they are disposed too). Idempotent. */
  dispose(): void {
    this.native.dispose();
  }

  toString(): string {
    return `Tensor(${formatShape(this.shape)}, ${this.dtype}, ${this.device}${this.disposed ? ', disposed' : ''})`;
  }
}

/** All tensors must share one backend; returns it. */
export function sameBackend(op: string, ...tensors: (Tensor | null | undefined)[]): Backend {
  let backend: Backend | undefined;
  for (const t of tensors) {
    if (!t) continue;
    t.live(`${op}: operand`);
    if (!backend) backend = t.backend;
    else if (t.backend.binding !== backend.binding) {
      throw new DeviceMismatchError(`${op}: operands live on ${backend.device} and ${t.backend.device}`);
    }
  }
  if (!backend) throw new InvalidArgumentError(`${op}: no tensor operands`);
  return backend;
}
