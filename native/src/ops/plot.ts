/**
 * HMI's PLOT lookup on the CPU (shared/design/hmi.md §1.3–1.4, A2–A3): a packed-key → row hash index held in native
 * memory, and one fused call that looks a batch of tri-gram keys up, gathers their fp16 values and merges them into
 * the `[B, T, d]` input of the first upper layer.
 *
 * {@link NativePlotTable}: open addressing with linear probing (u64 key → i32 row, row 0 = absent), the hash and
 * growth policy of @tessera/plot-store's `OpenAddressingPlotIndex`. {@link plotLookupRows}: A2 over a chain of tables
 * (child first) with optional tri → bi → uni back-off. {@link plotLookupAggregate}: A2, then per token i of a
 * sequence `z = V[k+i][1] + V[k+i+1][0] (i+1 < len) + V[k+i−1][2] (i > 0)` (values are stored already gated, A4) and
 * `out = LayerNorm(z + posEmb[i] + typeEmb[type])`; positions past a sequence's length are 0. Keys follow keys.ts's
 * layout: each sequence's keys, then one separator key 0.
 */
import type { PlotIndexHandle } from '../binding.js';
import { callNative, DisposedTensorError, DTypeMismatchError, InvalidArgumentError, ShapeMismatchError, UnsupportedOpError } from '../errors.js';
import { type Backend, getCpuBackend } from '../loader.js';
import { expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

/** Back-off for keys a chain misses (A2): none, or tri → bi (left dropped) → uni, the uni-gram kept slot per key mode. */
export type PlotBackoff = 'none' | 'encoder' | 'causal';

type PlotBinding = Required<
  Pick<
    Backend['binding'],
    | 'plotIndexCreate'
    | 'plotIndexClone'
    | 'plotIndexDispose'
    | 'plotIndexSet'
    | 'plotIndexGet'
    | 'plotIndexDelete'
    | 'plotIndexGetBatch'
    | 'plotIndexSize'
    | 'plotIndexCapacity'
    | 'plotIndexByteLength'
    | 'plotIndexClear'
    | 'plotIndexEntries'
    | 'plotLookupRows'
    | 'plotLookupAggregate'
  >
>;

function plotBinding(op: string, backend: Backend): PlotBinding {
  const b = backend.binding;
  if (!b.plotIndexCreate || !b.plotLookupAggregate || !b.plotLookupRows) {
    throw new UnsupportedOpError(`${op}: the ${backend.device} backend has no PLOT kernels (CPU only; rebuild the addon if this is the CPU backend)`);
  }
  return b as PlotBinding;
}

function checkKeys(op: string, keys: unknown): asserts keys is BigUint64Array {
  if (!(keys instanceof BigUint64Array)) throw new DTypeMismatchError(`${op}: keys must be a BigUint64Array`);
}

function checkRowsOut(op: string, out: unknown, n: number): asserts out is Int32Array {
  if (!(out instanceof Int32Array)) throw new DTypeMismatchError(`${op}: out must be an Int32Array`);
  if (out.length < n) throw new ShapeMismatchError(`${op}: out holds ${out.length} rows for ${n} keys`);
}

function checkBackoff(op: string, backoff: unknown): PlotBackoff {
  if (backoff !== 'none' && backoff !== 'encoder' && backoff !== 'causal') {
    throw new InvalidArgumentError(`${op}: option backoff must be 'none', 'encoder' or 'causal', got ${String(backoff)}`);
  }
  return backoff;
}

/**
 * One key → row table in native memory. Rows are ≥ 1; 0 answers "absent". Not safe to share across worker threads.
 * {@link dispose} frees the memory at once (garbage collection does otherwise).
 */
export class NativePlotTable {
  readonly backend: Backend;
  private handle: PlotIndexHandle | null;
  private readonly b: PlotBinding;

  private constructor(backend: Backend, b: PlotBinding, handle: PlotIndexHandle) {
    this.backend = backend;
    this.b = b;
    this.handle = handle;
  }

  /** An empty table sized for `expectedKeys` keys without growing. */
  static create(expectedKeys = 0, backend: Backend = getCpuBackend()): NativePlotTable {
    const op = 'NativePlotTable.create';
    if (!Number.isInteger(expectedKeys) || expectedKeys < 0 || expectedKeys > 1e9) {
      throw new InvalidArgumentError(`${op}: expectedKeys must be an integer in [0, 1e9], got ${expectedKeys}`);
    }
    const b = plotBinding(op, backend);
    return new NativePlotTable(backend, b, callNative(() => b.plotIndexCreate(expectedKeys)));
  }

  get disposed(): boolean {
    return this.handle === null;
  }

  /** The native handle (for the fused calls); throws once disposed. */
  live(op: string): PlotIndexHandle {
    if (!this.handle) throw new DisposedTensorError(`${op}: the plot index was disposed`);
    return this.handle;
  }

  get size(): number {
    return this.b.plotIndexSize(this.live('NativePlotTable.size'));
  }

  /** Slots allocated (a power of two, at least twice the keys). */
  get capacity(): number {
    return this.b.plotIndexCapacity(this.live('NativePlotTable.capacity'));
  }

  /** Bytes of the slot arrays: 12 per slot (u64 key, i32 row). */
  get byteLength(): number {
    return this.b.plotIndexByteLength(this.live('NativePlotTable.byteLength'));
  }

  /** The key's row, or 0. Any u64 key may be asked for. */
  get(key: bigint): number {
    const h = this.live('NativePlotTable.get');
    return callNative(() => this.b.plotIndexGet(h, key));
  }

  /** Maps key (a bigint in [0, 2^64)) to row (an integer in [1, 2^31)); returns the previous row or 0. */
  set(key: bigint, row: number): number {
    const h = this.live('NativePlotTable.set');
    return callNative(() => this.b.plotIndexSet(h, key, row));
  }

  /** Removes key; returns its row or 0. */
  delete(key: bigint): number {
    const h = this.live('NativePlotTable.delete');
    return callNative(() => this.b.plotIndexDelete(h, key));
  }

  /** `out[i] = get(keys[i])` in one native call. */
  getBatch(keys: BigUint64Array, out: Int32Array = new Int32Array(keys.length)): Int32Array {
    const op = 'NativePlotTable.getBatch';
    checkKeys(op, keys);
    checkRowsOut(op, out, keys.length);
    const h = this.live(op);
    callNative(() => this.b.plotIndexGetBatch(h, keys, out));
    return out;
  }

  /** Drops every key and shrinks back to the capacity the table was created with. */
  clear(): void {
    this.b.plotIndexClear(this.live('NativePlotTable.clear'));
  }

  /** Every (key, row) in slot order, as two arrays. */
  entries(): { keys: BigUint64Array; rows: Int32Array } {
    const h = this.live('NativePlotTable.entries');
    return callNative(() => this.b.plotIndexEntries(h));
  }

  /** An independent copy. */
  clone(): NativePlotTable {
    const h = this.live('NativePlotTable.clone');
    return new NativePlotTable(this.backend, this.b, callNative(() => this.b.plotIndexClone(h)));
  }

  /** Frees the native table now; later calls throw DisposedTensorError. Idempotent. */
  dispose(): void {
    if (!this.handle) return;
    this.b.plotIndexDispose(this.handle);
    this.handle = null;
  }
}

function chainHandles(op: string, chain: readonly NativePlotTable[]): { handles: PlotIndexHandle[]; backend: Backend } {
  if (!Array.isArray(chain)) throw new InvalidArgumentError(`${op}: chain must be an array of NativePlotTable (child first)`);
  const handles = chain.map((t, i) => {
    if (!(t instanceof NativePlotTable)) throw new InvalidArgumentError(`${op}: chain[${i}] is not a NativePlotTable`);
    return t.live(`${op}: chain[${i}]`);
  });
  return { handles, backend: chain[0]?.backend ?? getCpuBackend() };
}

/** A2 in one native call: `out[i]` = the row of keys[i] (or of its first back-off) in the first table of `chain` holding it; 0 if none. */
export function plotLookupRows(
  chain: readonly NativePlotTable[],
  keys: BigUint64Array,
  options: { backoff?: PlotBackoff; out?: Int32Array } = {},
): Int32Array {
  const op = 'plotLookupRows';
  checkKeys(op, keys);
  const out = options.out ?? new Int32Array(keys.length);
  checkRowsOut(op, out, keys.length);
  const backoff = checkBackoff(op, options.backoff ?? 'none');
  const { handles, backend } = chainHandles(op, chain);
  const b = plotBinding(op, backend);
  callNative(() => b.plotLookupRows(handles, keys, out, { backoff }));
  return out;
}

export interface PlotAggregateParams {
  /** fp16 values [rows, 3, d] (left, centre, right slots), already gated (A4); row 0 is the zero row. */
  values: Tensor;
  /** f32 [positions ≥ the longest sequence, d]: the post-merge position embedding. */
  posEmb: Tensor;
  /** f32 [types ≥ 1, d]: the post-merge token-type embedding. */
  typeEmb: Tensor;
  /** f32 [d] LayerNorm scale (default 1) and shift (default 0). */
  gamma?: Tensor;
  beta?: Tensor;
  /** LayerNorm epsilon (default 1e-12, BERT's). */
  eps?: number;
}

export interface PlotAggregateOptions {
  /** Token types [B·T] (row-major [B, T]); default all 0. Only positions below each length are read. */
  types?: Int32Array;
  /** T of the output (default: the longest sequence). */
  seqLen?: number;
  backoff?: PlotBackoff;
  /** Write here: f32 [B, T, d]. */
  out?: Tensor;
  /** Run the double-precision reference. */
  reference?: boolean;
}

/**
 * Lookup → gather → aggregate in one native call. `keys` / `lengths` as TrigramKeyCodec.keys lays them out
 * (each sequence's keys then one separator 0). Returns f32 [B, T, d] (see the module notes). A row beyond `values`
 * throws InvalidArgumentError before anything is written.
 */
export function plotLookupAggregate(
  chain: readonly NativePlotTable[],
  batch: { keys: BigUint64Array; lengths: Int32Array },
  params: PlotAggregateParams,
  options: PlotAggregateOptions = {},
): Tensor {
  const op = 'plotLookupAggregate';
  const { keys, lengths } = batch;
  checkKeys(op, keys);
  if (!(lengths instanceof Int32Array)) throw new DTypeMismatchError(`${op}: lengths must be an Int32Array`);
  const { values, posEmb, typeEmb, gamma, beta } = params;
  const backend = sameBackend(op, values, posEmb, typeEmb, gamma, beta, options.out);
  const { handles } = chainHandles(op, chain);
  for (const t of chain) {
    if (t.backend.binding !== backend.binding) throw new InvalidArgumentError(`${op}: the chain's tables and the tensors belong to different addons`);
  }
  const b = plotBinding(op, backend);
  expectDtype(op, 'values', values, 'f16');
  expectRank(op, 'values', values, 3);
  if (values.shape[1] !== 3) throw new ShapeMismatchError(`${op}: values ${formatShape(values.shape)} must be [rows, 3, hidden]`);
  const d = values.shape[2]!;
  for (const [name, t] of [['posEmb', posEmb], ['typeEmb', typeEmb]] as const) {
    expectDtype(op, name, t, 'f32');
    expectRank(op, name, t, 2);
    if (t.shape[1] !== d) throw new ShapeMismatchError(`${op}: ${name} ${formatShape(t.shape)} must have rows of the hidden size ${d}`);
  }
  for (const [name, t] of [['gamma', gamma], ['beta', beta]] as const) {
    if (!t) continue;
    expectDtype(op, name, t, 'f32');
    if (t.rank !== 1 || t.shape[0] !== d) throw new ShapeMismatchError(`${op}: ${name} ${formatShape(t.shape)} must be [${d}]`);
  }
  let maxLen = 0;
  let total = 0;
  for (let i = 0; i < lengths.length; i++) {
    const n = lengths[i]!;
    if (n < 0) throw new ShapeMismatchError(`${op}: lengths[${i}] = ${n} is negative`);
    maxLen = Math.max(maxLen, n);
    total += n + 1;
  }
  if (total !== keys.length) {
    throw new ShapeMismatchError(`${op}: keys holds ${keys.length} keys, the lengths need ${total} (each sequence's keys and one separator)`);
  }
  const seqLen = options.seqLen ?? maxLen;
  if (!Number.isInteger(seqLen) || seqLen < maxLen) {
    throw new ShapeMismatchError(`${op}: seqLen ${seqLen} must be an integer ≥ the longest sequence (${maxLen})`);
  }
  if (posEmb.shape[0]! < maxLen) {
    throw new ShapeMismatchError(`${op}: posEmb ${formatShape(posEmb.shape)} has fewer rows than the longest sequence (${maxLen})`);
  }
  const types = options.types ?? null;
  if (types !== null) {
    if (!(types instanceof Int32Array)) throw new DTypeMismatchError(`${op}: types must be an Int32Array`);
    if (types.length !== lengths.length * seqLen) {
      throw new ShapeMismatchError(`${op}: types holds ${types.length} ids, [${lengths.length}, ${seqLen}] needs ${lengths.length * seqLen}`);
    }
  }
  const eps = params.eps ?? 1e-12;
  if (!Number.isFinite(eps) || eps < 0) throw new InvalidArgumentError(`${op}: eps must be a finite number >= 0, got ${eps}`);
  const backoff = checkBackoff(op, options.backoff ?? 'none');
  const out = resolveOut(op, options.out, [lengths.length, seqLen, d], 'f32', backend);
  try {
    callNative(() =>
      b.plotLookupAggregate(handles, keys, lengths, types, values.native, posEmb.native, typeEmb.native, gamma?.native ?? null, beta?.native ?? null, out.native, {
        eps,
        backoff,
        reference: options.reference ?? false,
      }),
    );
  } catch (err) {
    if (out !== options.out) out.dispose();
    throw err;
  }
  return out;
}
