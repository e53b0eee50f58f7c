/**
 * The LoRA-operator baselines Punica compares SGMV with (punica.md §4, repo `bench_lora_op_impls.py`), on our
 * GEMM kernels. They compute the same y += scale · (x · Aᵀ) · B per segment as {@link addLora}, so a benchmark
 * times equal work (tests check the numbers agree):
 *   - Loop: per segment, two GEMMs on row views: cost grows with the number of segments.
 *   - Gather-BMM: gather per-row copies of each row's A and B into [rows, r, h] stacks, then two batched
 *     matmuls with m = 1: the stacks move 2 · s_n · h · r extra elements per matrix (roofline.ts).
 *   - Gather and BMM alone, "for reference"; BMM is data-independent (the same cost for every workload).
 * Gather-BMM reads the adapters from one stacked table [N·L, r, h] (what `torch.stack` of the adapters or an
 * index_select over a weight table gathers from); {@link stackLoraWeights} builds it and {@link tableViews}
 * gives the per-adapter [L, r, h] views SGMV and Loop take, so every method reads the same memory.
 */
import { InvalidArgumentError, ShapeMismatchError, Tensor, formatShape, gatherRows, gemm, gemmBatched, sameBackend } from '@tessera/native';
import { type Segments, hostIndptr } from './ops.js';

export interface LoopOptions {
  /** One factor per segment, or one for all (default 1: the scale is folded into B). */
  scale?: number | ArrayLike<number>;
}

/** The layer-ℓ slice of a [L, r, h] stack as an [r, h] view (two views; the caller disposes the result). */
function layerSlice(w: Tensor, layer: number): Tensor {
  if (w.rank !== 3) throw new ShapeMismatchError(`layer slice: weight ${formatShape(w.shape)} must be [L, r, h]`);
  if (!Number.isInteger(layer) || layer < 0 || layer >= w.shape[0]!) throw new InvalidArgumentError(`layer ${layer} outside a weight of ${w.shape[0]} layers`);
  const one = w.rows(layer, 1);
  try {
    return one.reshape([w.shape[1]!, w.shape[2]!]);
  } finally {
    one.dispose();
  }
}

/**
 * Loop: for each segment with weights, t = x[rows_i] · A_i[layer]ᵀ (GEMM) and y[rows_i] += scale_i · t · B_i[layer]
 * (GEMM with beta = 1). Same operands as {@link addLora}.
 */
export function loraLoop(
  y: Tensor,
  x: Tensor,
  a: readonly (Tensor | null)[],
  b: readonly (Tensor | null)[],
  segments: Segments,
  layer: number,
  options: LoopOptions = {},
): void {
  sameBackend('loraLoop', y, x);
  const indptr = hostIndptr(segments);
  const n = indptr.length - 1;
  if (a.length !== n || b.length !== n) throw new InvalidArgumentError(`loraLoop: ${a.length} A and ${b.length} B weights for ${n} segments`);
  const { scale } = options;
  if (typeof scale === 'object' && scale.length !== n) throw new InvalidArgumentError(`loraLoop: ${scale.length} scales for ${n} segments`);
  for (let i = 0; i < n; i++) {
    const ai = a[i];
    const bi = b[i];
    const start = indptr[i]!;
    const count = indptr[i + 1]! - start;
    if (!ai || !bi || count === 0) continue;
    const views: Tensor[] = [];
    try {
      const al = layerSlice(ai, layer);
      views.push(al);
      const bl = layerSlice(bi, layer);
      views.push(bl);
      const xs = x.rows(start, count);
      views.push(xs);
      const ys = y.rows(start, count);
      views.push(ys);
      const t = gemm(xs, al, { transB: true });
      views.push(t);
      gemm(t, bl, { alpha: scale === undefined ? 1 : typeof scale === 'number' ? scale : scale[i]!, beta: 1, out: ys });
    } finally {
      for (const v of views) v.dispose();
    }
  }
}

/**
 * All adapters of a benchmark in one table per matrix, adapter-major and flat over (adapter, layer):
 * A [N·L, r, h_in] and B [N·L, r, h_out], so row j·L + ℓ is adapter j's layer ℓ (what a gather indexes).
 */
export interface LoraWeightTable {
  a: Tensor;
  b: Tensor;
  /** L: layers per adapter. */
  layers: number;
}

/** Copies N adapters (each A [L, r, h_in] and B [L, r, h_out], all the same shape) into one table. */
export function stackLoraWeights(a: readonly Tensor[], b: readonly Tensor[]): LoraWeightTable {
  if (a.length === 0 || a.length !== b.length) throw new InvalidArgumentError(`stackLoraWeights: needs the same positive number of A and B weights, got ${a.length} and ${b.length}`);
  const stack = (ws: readonly Tensor[], what: string): Tensor => {
    const shape = ws[0]!.shape;
    const backend = sameBackend('stackLoraWeights', ...ws);
    if (shape.length !== 3) throw new ShapeMismatchError(`stackLoraWeights: ${what}[0] ${formatShape(shape)} must be [L, r, h]`);
    const per = ws[0]!.numel;
    const host = new Float32Array(ws.length * per);
    ws.forEach((w, i) => {
      if (w.dtype !== 'f32' || w.shape.join() !== shape.join()) {
        throw new ShapeMismatchError(`stackLoraWeights: ${what}[${i}] is ${w.dtype} ${formatShape(w.shape)}, ${what}[0] f32 ${formatShape(shape)}`);
      }
      host.set(w.toArray() as Float32Array, i * per);
    });
    return Tensor.from(host, [ws.length * shape[0]!, shape[1]!, shape[2]!], { backend });
  };
  const layers = a[0]!.shape[0]!;
  if (b[0]!.shape[0] !== layers || b[0]!.shape[1] !== a[0]!.shape[1]) {
    throw new ShapeMismatchError(`stackLoraWeights: a[0] ${formatShape(a[0]!.shape)} and b[0] ${formatShape(b[0]!.shape)} must share L and r`);
  }
  const ta = stack(a, 'a');
  try {
    return { a: ta, b: stack(b, 'b'), layers };
  } catch (err) {
    ta.dispose();
    throw err;
  }
}

/** Per-adapter [L, r, h] views of a table (sharing its memory, one row view each); the caller disposes them. */
export function tableViews(table: LoraWeightTable): { a: Tensor[]; b: Tensor[] } {
  const L = table.layers;
  const views = (t: Tensor) => Array.from({ length: t.shape[0]! / L }, (_, i) => t.rows(i * L, L));
  return { a: views(table.a), b: views(table.b) };
}

/** Per-row weight stacks: A [rows, r, h_in] and B [rows, r, h_out]. */
export interface GatheredLoraWeights {
  a: Tensor;
  b: Tensor;
}

/**
 * Gather: row r gets copies of A_j[layer] and B_j[layer] for j = rowAdapter[r] (an index into the table; every
 * row needs one: give base-model rows a zero adapter, as Punica's demo does). Writes into `out` when given.
 */
export function gatherLoraWeights(table: LoraWeightTable, rowAdapter: Int32Array, layer: number, options: { out?: GatheredLoraWeights } = {}): GatheredLoraWeights {
  const { a, b, layers: L } = table;
  if (a.rank !== 3 || b.rank !== 3 || a.shape[0] !== b.shape[0] || a.shape[1] !== b.shape[1] || !(L > 0) || a.shape[0]! % L !== 0) {
    throw new ShapeMismatchError(`gatherLoraWeights: tables A ${formatShape(a.shape)} and B ${formatShape(b.shape)} must be [N·L, r, h_in] and [N·L, r, h_out] with L = ${L}`);
  }
  const N = a.shape[0]! / L;
  if (!Number.isInteger(layer) || layer < 0 || layer >= L) throw new InvalidArgumentError(`gatherLoraWeights: layer ${layer} outside [0, ${L})`);
  const idx = new Int32Array(rowAdapter.length);
  for (let row = 0; row < rowAdapter.length; row++) {
    const j = rowAdapter[row]!;
    if (!(j >= 0 && j < N)) throw new InvalidArgumentError(`gatherLoraWeights: rowAdapter[${row}] = ${j} is outside the table's ${N} adapters`);
    idx[row] = j * L + layer;
  }
  const backend = sameBackend('gatherLoraWeights', a, b, options.out?.a, options.out?.b);
  const idxT = Tensor.from(idx, [idx.length], { backend });
  try {
    const ga = gatherRows(a, idxT, options.out ? { out: options.out.a } : {});
    try {
      return { a: ga, b: gatherRows(b, idxT, options.out ? { out: options.out.b } : {}) };
    } catch (err) {
      if (!options.out) ga.dispose();
      throw err;
    }
  } finally {
    idxT.dispose();
  }
}

export interface BmmOptions {
  /** Multiplies the product (default 1). */
  scale?: number;
  /** f32 [rows, 1, r] for the intermediate; default a fresh tensor. */
  scratch?: Tensor;
}

/**
 * BMM: y[row] += scale · (x[row] · A_rowᵀ) · B_row over pre-gathered stacks, as two batched GEMMs with m = 1.
 * x and y are [rows, h], or already viewed as [rows, 1, h] (which spares two views per call). Independent of how
 * rows map to adapters.
 */
export function bmm(y: Tensor, x: Tensor, stacks: GatheredLoraWeights, options: BmmOptions = {}): void {
  sameBackend('bmm', y, x, stacks.a, stacks.b, options.scratch);
  const as3 = (t: Tensor, name: string): Tensor => {
    if (t.rank === 3 && t.shape[1] === 1) return t;
    if (t.rank !== 2) throw new ShapeMismatchError(`bmm: ${name} ${formatShape(t.shape)} must be [rows, h] or [rows, 1, h]`);
    return t.reshape([t.shape[0]!, 1, t.shape[1]!]);
  };
  const x3 = as3(x, 'x');
  let y3: Tensor | null = null;
  try {
    y3 = as3(y, 'y');
    const v = gemmBatched(x3, stacks.a, { transB: true, ...(options.scratch ? { out: options.scratch } : {}) });
    try {
      gemmBatched(v, stacks.b, { alpha: options.scale ?? 1, beta: 1, out: y3 });
    } finally {
      if (!options.scratch) v.dispose();
    }
  } finally {
    if (x3 !== x) x3.dispose();
    if (y3 && y3 !== y) y3.dispose();
  }
}

/** Gather-BMM: {@link gatherLoraWeights} then {@link bmm}; the stacks are temporaries unless `stacks` is given. */
export function gatherBmm(
  y: Tensor,
  x: Tensor,
  table: LoraWeightTable,
  rowAdapter: Int32Array,
  layer: number,
  options: BmmOptions & { stacks?: GatheredLoraWeights } = {},
): void {
  const g = gatherLoraWeights(table, rowAdapter, layer, options.stacks ? { out: options.stacks } : {});
  try {
    bmm(y, x, g, options);
  } finally {
    if (!options.stacks) {
      g.a.dispose();
      g.b.dispose();
    }
  }
}
