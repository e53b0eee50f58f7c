/**
 * PetS's PET operators (Zhou et al., ATC'22): after one shared dense GEMM per linear site over a whole batch of many
 * tasks, each task's rows get light task-specific ops — a CSR sparse matmul (MaskBert, Diff-Pruning), a bottleneck
 * adapter (Adapters), a task bias (BitFit, Diff) and a task LayerNorm epilogue. {@link petSiteRun} runs one site's op
 * list in one native call:
 *
 *   petSiteRun([
 *     { kind: 'csr', rows: { start: 0, seqs: 1, stride: 0, tokens: 12 }, x, y, indptr, indices, values, scale: -1 },
 *     { kind: 'bias', rows: { start: 0, seqs: 1, stride: 0, tokens: 12 }, y, bias },
 *     { kind: 'adapter', rows: { start: 12, seqs: 4, stride: 32, tokens: 20 }, y, down, downBias, up, upBias },
 *   ], { streams: [0, 0, 1], numStreams: 2 });
 *
 * Streams: PetS runs the PET ops of a site on several CUDA streams. Ops of one stream run in list order; streams run
 * concurrently; the call returns when all are done (one barrier per call). On the CPU a stream is a worker group of
 * the native pool: with G = min(numStreams, threads) groups, G = 1 runs the ops in list order, each split over the
 * whole pool; G > 1 runs group g's streams (s % G = g) on one thread each, ops in order. On CUDA each stream is a
 * cudaStream that waits for the default stream first (prolog) and that the default stream waits for at the end
 * (epilogue), so work queued before the call (the shared GEMM) and after it is ordered with the site.
 *
 * Numerics: f32 with f32 accumulation in a fixed order per output, so results are bitwise identical for any thread
 * count, any numStreams and any grouping of ops into one call (a row's result depends only on its own op). Against
 * float64, each output is within about 1e-6 relative of its terms' magnitude (CSR and adapter dot products are f32
 * FMA chains; GELU is the erf or tanh form at ~2e-7; LayerNorm sums in double, as `layerNorm`, whose bits it shares).
 * `reference: true` runs a plain scalar kernel that accumulates in double (the tests' oracle).
 *
 * Validation is split by cost. Here, before the native call: everything that is plain JS — the op list's structure,
 * kinds, rows fields (integers in [0, 2^31), stride >= tokens when seqs > 1), scale / eps / act, that every tensor is
 * a Tensor of one backend, that a CSR op's y is not its x, and the streams. The tensor-metadata checks (dtypes,
 * ranks, shapes, rows within the tensors, aliasing in memory, ops of different streams touching memory another stream
 * writes) run in the native binding before any kernel, with the same typed errors and messages: repeating them here
 * would cost two native getter calls per tensor (~0.4 µs, so ~0.4 ms for a 256-op site) on every call.
 *
 * CSR index contents (indptr[0] = 0, non-decreasing, indptr[out] = nnz; each row's columns strictly increasing and
 * below x's width) are checked natively on a matrix's first use — per (indptr, indices, out, nnz, in), while both
 * tensors live — and on every call with `reference: true`. A full check costs ~0.2–0.3 ns per nonzero (about 13% of the
 * fast kernel on a 256 x 256, 5 %-dense matrix over 32 rows; on CUDA it also reads the indices back, which waits for
 * queued work), the lookup afterwards nothing measurable. Index tensors written after their first use are not
 * re-checked: the fast kernels clamp every index they read, so such a matrix gives wrong numbers but never reads out
 * of bounds. Callers (pet-ops) validate matrices once at load time and never write them afterwards.
 */
import type { NativeBinding, NativeTensor } from '../binding.js';
import { callNative, DeviceMismatchError, InvalidArgumentError, UnsupportedOpError } from '../errors.js';
import { formatShape } from '../shape.js';
import { Tensor } from '../tensor.js';

/**
 * The rows an op touches: for s in [0, seqs): rows start + s*stride + t for t in [0, tokens). Packed (ragged)
 * batches use seqs = 1 (a contiguous row range [start, start + tokens)); padded batches [N·L rows] use stride = L and
 * tokens = the mini-batch's own max length (PetS's minibatch_lens). tokens may be 0 (an empty op: a no-op).
 */
export interface PetRows {
  start: number;
  seqs: number;
  stride: number;
  tokens: number;
}

/** The adapter's activation: GELU (erf; PetS, vBERT), its tanh form, or ReLU (the HMI paper's). */
export type AdapterActivation = 'gelu' | 'gelu_tanh' | 'relu';
const ADAPTER_ACT_CODES: Record<AdapterActivation, number> = { gelu: 0, gelu_tanh: 1, relu: 2 };

export type PetOp =
  /**
   * y[r, o] += scale · Σ_{e ∈ [indptr[o], indptr[o+1])} values[e] · x[r, indices[e]]. The sparse matrix is [out, in]
   * (Hugging Face Linear orientation) in CSR by output row: indptr i32 [out + 1], indices i32 [nnz] (column = input
   * feature, each row's columns strictly increasing), values f32 [nnz]. x f32 [rows, in], y f32 [rows, out]. scale
   * default 1 (MaskBert uses −1).
   */
  | { kind: 'csr'; rows: PetRows; x: Tensor; y: Tensor; indptr: Tensor; indices: Tensor; values: Tensor; scale?: number }
  /** y[r, :] += bias (f32 [out]). */
  | { kind: 'bias'; rows: PetRows; y: Tensor; bias: Tensor }
  /**
   * Houlsby bottleneck adapter on the site output, in place: h = act(y[r] · downᵀ + downBias); y[r] += h · upᵀ + upBias.
   * down f32 [m, d], downBias f32 [m], up f32 [d, m], upBias f32 [d]; act 'gelu' (erf, default), 'gelu_tanh' or 'relu'. The
   * intermediate h is per-thread scratch inside the kernel (fused GELU, never materialized as a tensor). m <= 4096.
   */
  | { kind: 'adapter'; rows: PetRows; y: Tensor; down: Tensor; downBias: Tensor; up: Tensor; upBias: Tensor; act?: AdapterActivation }
  /** Task LayerNorm epilogue: y[r] = (x[r] − mean) / sqrt(var + eps) · gamma + beta over the last dim (x, y f32 [rows, d]; x may be y). */
  | { kind: 'layernorm'; rows: PetRows; x: Tensor; y: Tensor; gamma: Tensor; beta: Tensor; eps: number };

export interface PetSiteRunOptions {
  /** Stream (worker group) of each op, in [0, numStreams). Default: all 0. */
  streams?: ArrayLike<number>;
  /** Number of streams; default 1. On CPU the pool's threads are split into min(numStreams, threads) groups. */
  numStreams?: number;
  /** Run the plain double-precision-accumulating scalar reference for every op (tests compare against it). */
  reference?: boolean;
}

/** The largest numStreams accepted (the CUDA backend maps streams onto a pool of 16 cudaStreams). */
export const PET_MAX_STREAMS = 1024;
/** The largest adapter bottleneck m (the CUDA kernels keep h in shared memory). */
export const PET_MAX_BOTTLENECK = 4096;

// ---------------------------------------------------------------- packing (must match binding/ops/bind_pet.cc)

const META_FIELDS = 9; // kind, stream, start, seqs, stride, tokens, scale, eps, act
const TENSOR_SLOTS = 6; // y, x, then the kind's parameters
const KIND_CODE = { csr: 0, bias: 1, adapter: 2, layernorm: 3 } as const;

/** meta: per op kind, stream, rows (4), scale, eps, act; slots: per op 6 indices into the distinct tensors (-1: none). */
interface PetNativeBinding {
  petSiteRun(meta: Float64Array, slots: Int32Array, tensors: NativeTensor[], opts: { numStreams: number; reference: boolean }): void;
}

const MAX_ROW_FIELD = 2 ** 31;

function rowField(label: string, rows: PetRows, name: keyof PetRows): number {
  const v = rows[name];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= MAX_ROW_FIELD) {
    throw new InvalidArgumentError(`${label} rows.${name} must be an integer in [0, 2^31), got ${String(v)}`);
  }
  return v;
}

function finiteNumber(v: unknown): v is number {
  return typeof v === 'number' && Number.isFinite(v) && Math.abs(v) <= 3.4e38;
}

/**
 * Runs one linear/norm site's PET ops. Ops on the same stream run in list order; streams run concurrently; returns
 * when all are done (one barrier per call). Ops on different streams must not write overlapping rows of the same
 * tensor (checked: throws InvalidArgumentError naming both ops).
 */
export function petSiteRun(ops: readonly PetOp[], options: PetSiteRunOptions = {}): void {
  if (!Array.isArray(ops)) throw new InvalidArgumentError('petSiteRun: ops must be an array of PET ops');
  const n = ops.length;
  const numStreams = options.numStreams ?? 1;
  if (!Number.isInteger(numStreams) || numStreams < 1 || numStreams > PET_MAX_STREAMS) {
    throw new InvalidArgumentError(`petSiteRun: numStreams must be an integer in [1, ${PET_MAX_STREAMS}], got ${String(numStreams)}`);
  }
  const streams = options.streams;
  if (streams !== undefined && streams.length !== n) {
    throw new InvalidArgumentError(`petSiteRun: streams has ${streams.length} entries, want one per op (${n})`);
  }
  const meta = new Float64Array(n * META_FIELDS);
  const slots = new Int32Array(n * TENSOR_SLOTS).fill(-1);
  // The distinct tensors: the site's y and x recur in every op, and the binding unwraps each tensor once.
  const tensors: NativeTensor[] = [];
  const tensorIndex = new Map<NativeTensor, number>();
  let binding: NativeBinding | undefined;
  let device = '';
  let firstLabel = '';

  for (let i = 0; i < n; i++) {
    const op = ops[i] as PetOp | undefined;
    const kind = op?.kind;
    if (op === null || typeof op !== 'object' || !(typeof kind === 'string' && Object.hasOwn(KIND_CODE, kind))) {
      throw new InvalidArgumentError(`petSiteRun: ops[${i}].kind must be 'csr', 'bias', 'adapter' or 'layernorm', got ${String(kind)}`);
    }
    const label = `petSiteRun: ops[${i}] (${kind})`;
    const stream = streams === undefined ? 0 : streams[i]!;
    if (!Number.isInteger(stream) || stream < 0 || stream >= numStreams) {
      throw new InvalidArgumentError(`petSiteRun: streams[${i}] = ${String(stream)} is outside [0, ${numStreams}) (numStreams = ${numStreams})`);
    }
    const rows = op.rows as PetRows | undefined;
    if (rows === null || typeof rows !== 'object') throw new InvalidArgumentError(`${label} rows must be { start, seqs, stride, tokens }`);
    const start = rowField(label, rows, 'start');
    const seqs = rowField(label, rows, 'seqs');
    const stride = rowField(label, rows, 'stride');
    const tokens = rowField(label, rows, 'tokens');
    if (seqs > 1 && tokens > 0 && stride < tokens) {
      throw new InvalidArgumentError(`${label} rows.stride = ${stride} must be >= rows.tokens = ${tokens} when rows.seqs > 1 (sequences would overlap)`);
    }
    const base = i * META_FIELDS;
    meta[base] = KIND_CODE[kind];
    meta[base + 1] = stream;
    meta[base + 2] = start;
    meta[base + 3] = seqs;
    meta[base + 4] = stride;
    meta[base + 5] = tokens;
    meta[base + 6] = 1;
    meta[base + 7] = 0;
    meta[base + 8] = 0;

    const put = (s: number, name: string, t: unknown): Tensor => {
      if (!(t instanceof Tensor)) throw new InvalidArgumentError(`${label} ${name} must be a Tensor`);
      if (binding === undefined) {
        binding = t.backend.binding;
        device = t.backend.device;
        firstLabel = `ops[${i}] ${name}`;
      } else if (t.backend.binding !== binding) {
        throw new DeviceMismatchError(`${label} ${name} lives on ${t.backend.device}, ${firstLabel} on ${device}`);
      }
      let k = tensorIndex.get(t.native);
      if (k === undefined) {
        k = tensors.length;
        tensors.push(t.native);
        tensorIndex.set(t.native, k);
      }
      slots[i * TENSOR_SLOTS + s] = k;
      return t;
    };
    const y = put(0, 'y', op.y);
    switch (op.kind) {
      case 'csr': {
        const x = put(1, 'x', op.x);
        put(2, 'indptr', op.indptr);
        put(3, 'indices', op.indices);
        put(4, 'values', op.values);
        const scale = op.scale ?? 1;
        if (!finiteNumber(scale)) throw new InvalidArgumentError(`${label} scale must be a finite number, got ${String(scale)}`);
        if (x === y) throw new InvalidArgumentError(`${label} y ${formatShape(y.shape)} overlaps x ${formatShape(x.shape)} in memory`);
        meta[base + 6] = scale;
        break;
      }
      case 'bias':
        put(2, 'bias', op.bias);
        break;
      case 'adapter': {
        put(2, 'down', op.down);
        put(3, 'downBias', op.downBias);
        put(4, 'up', op.up);
        put(5, 'upBias', op.upBias);
        const act = op.act ?? 'gelu';
        const code = Object.hasOwn(ADAPTER_ACT_CODES, act) ? ADAPTER_ACT_CODES[act as AdapterActivation] : undefined;
        if (code === undefined) throw new InvalidArgumentError(`${label} act must be 'gelu', 'gelu_tanh' or 'relu', got ${String(act)}`);
        meta[base + 8] = code;
        break;
      }
      case 'layernorm': {
        put(1, 'x', op.x);
        put(2, 'gamma', op.gamma);
        put(3, 'beta', op.beta);
        const eps = op.eps;
        if (!finiteNumber(eps) || eps < 0) throw new InvalidArgumentError(`${label} eps must be a finite number >= 0, got ${String(eps)}`);
        meta[base + 7] = eps;
        break;
      }
    }
  }
  if (binding === undefined) return; // no ops
  const native = binding as NativeBinding & Partial<PetNativeBinding>;
  if (typeof native.petSiteRun !== 'function') {
    throw new UnsupportedOpError(`petSiteRun: the ${device} addon has no PET kernels (rebuild it: pnpm build:native)`);
  }
  const run = native.petSiteRun.bind(native);
  callNative(() => run(meta, slots, tensors, { numStreams, reference: options.reference ?? false }));
}

/**
 * Analytic cost of one op (for PetS's operator scheduling, Algorithm 2): flops and bytes moved, fp32,
 * nnz = values.length, R = seqs · tokens (pets.md §6.2):
 *   csr        flops 2·R·nnz                 bytes nnz·8 + (out + 1)·4 + R·(in + out)·4
 *   adapter    flops 2·R·2·d·m + R·m (act)   bytes (2·d·m + m + d)·4 + R·2d·4
 *   bias       flops R·d                     bytes R·d·8 + d·4
 *   layernorm  flops 8·R·d                   bytes R·d·8 + 2·d·4
 */
export function petOpCost(op: PetOp): { flops: number; bytes: number } {
  const r = op.rows.seqs * op.rows.tokens;
  const d = op.y.shape[1] ?? 0;
  switch (op.kind) {
    case 'csr': {
      const nnz = op.values.shape[0] ?? 0;
      const inWidth = op.x.shape[1] ?? 0;
      return { flops: 2 * r * nnz, bytes: nnz * 8 + (d + 1) * 4 + r * (inWidth + d) * 4 };
    }
    case 'adapter': {
      const m = op.down.shape[0] ?? 0;
      return { flops: 2 * r * 2 * d * m + r * m, bytes: (2 * d * m + m + d) * 4 + r * 2 * d * 4 };
    }
    case 'bias':
      return { flops: r * d, bytes: r * d * 8 + d * 4 };
    case 'layernorm':
      return { flops: 8 * r * d, bytes: r * d * 8 + 2 * d * 4 };
    default:
      throw new InvalidArgumentError(`petOpCost: kind must be 'csr', 'bias', 'adapter' or 'layernorm', got ${String((op as { kind?: unknown }).kind)}`);
  }
}
