/**
 * GEMM: C = alpha * op(A) @ op(B) + beta * C + bias, with A f32 and B f32, f16 or bf16 (converted to f32 inside
 * the kernel; accumulation is f32). Hugging Face Linear weights are stored [out, in], so projections are
 * `gemm(x, w, { transB: true })`, or {@link linear}.
 *
 * `compute: 'bf16'` (CPU) rounds op(A) and op(B) to bf16 (round to nearest even) and sums their products in f32. With
 * bf16 weights and transB above 8 rows it runs on AMX-BF16 tiles where the CPU has them (and Linux grants the tile
 * state), else on VDPBF16PS with AVX512-BF16, two products per f32 lane and instruction; a row's result does not
 * depend on the rows beside it. Elsewhere the operands are rounded and the f32 kernels run. Models opt in at load
 * (`compute: 'bf16'` or `TESSERA_COMPUTE=bf16`); `bf16Kernel` names one path (tests, benches).
 */
import type { Bf16Kernel, ComputeMode, DType, NativeGemmOptions } from '../binding.js';
import { callNative, InvalidArgumentError, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

const weightDtypes: readonly DType[] = ['f32', 'f16', 'bf16'];

export interface GemmOptions {
  /** Use A^T: `a` is stored [k, m] (per batch entry for gemmBatched). */
  transA?: boolean;
  /** Use B^T: `b` is stored [n, k], the layout of a Hugging Face Linear weight. */
  transB?: boolean;
  /** Scales the product (default 1). */
  alpha?: number;
  /** Scales the existing C, which must then be given as `out` (default 0: C is not read). */
  beta?: number;
  /** f32 [n], added to every row. */
  bias?: Tensor;
  /** Write here instead of allocating; f32 [m, n] ([batch, m, n] for gemmBatched). Must not overlap an input. */
  out?: Tensor;
  /** Run the plain scalar reference kernel (double accumulation; CPU only; tests compare against it). */
  reference?: boolean;
  /** 'bf16': operands rounded to bf16, products summed in f32 (CPU only; see the module notes). Default 'f32'. */
  compute?: ComputeMode;
  /** CPU, with compute 'bf16': run this kernel (default 'auto'); one the CPU lacks throws UnsupportedError. */
  bf16Kernel?: Bf16Kernel;
}

interface Dims {
  m: number;
  k: number;
  n: number;
}

function describe(name: string, t: Tensor, trans: boolean, flag: string): string {
  return `${name} ${formatShape(t.shape)}${trans ? ` (${flag})` : ''}`;
}

/** Reads m, k, n from the matrix dimensions of a and b (their last two) and checks that k agrees. */
function matmulDims(op: string, a: Tensor, b: Tensor, transA: boolean, transB: boolean): Dims {
  const [a0, a1] = a.shape.slice(-2) as [number, number];
  const [b0, b1] = b.shape.slice(-2) as [number, number];
  const m = transA ? a1 : a0;
  const k = transA ? a0 : a1;
  const kb = transB ? b1 : b0;
  const n = transB ? b0 : b1;
  if (k !== kb) {
    throw new ShapeMismatchError(
      `${op}: ${describe('a', a, transA, 'transA')} and ${describe('b', b, transB, 'transB')} disagree on k: ${k} vs ${kb}`,
    );
  }
  return { m, k, n };
}

function checkCompute(op: string, compute: unknown): void {
  if (compute !== undefined && compute !== 'f32' && compute !== 'bf16') {
    throw new InvalidArgumentError(`${op}: option compute must be 'f32' or 'bf16', got ${String(compute)}`);
  }
}

function checkOperands(op: string, a: Tensor, b: Tensor, options: GemmOptions): void {
  checkCompute(op, options.compute);
  expectDtype(op, 'a', a, 'f32');
  expectDtype(op, 'b', b, weightDtypes);
  if (options.bias) expectDtype(op, 'bias', options.bias, 'f32');
  const beta = options.beta ?? 0;
  if (beta !== 0 && !options.out) {
    throw new InvalidArgumentError(`${op}: beta = ${beta} accumulates into C, so pass C as \`out\``);
  }
}

function checkBias(op: string, bias: Tensor | undefined, n: number, a: Tensor, b: Tensor): void {
  if (bias && (bias.rank !== 1 || bias.shape[0] !== n)) {
    throw new ShapeMismatchError(
      `${op}: bias ${formatShape(bias.shape)} must be [${n}], the n of a ${formatShape(a.shape)} and b ${formatShape(b.shape)}`,
    );
  }
}

function nativeOptions(options: GemmOptions): NativeGemmOptions & { reference: boolean } {
  return {
    transA: options.transA ?? false,
    transB: options.transB ?? false,
    alpha: options.alpha ?? 1,
    beta: options.beta ?? 0,
    bias: options.bias?.native ?? null,
    reference: options.reference ?? false,
    compute: options.compute ?? 'f32',
    ...(options.bf16Kernel !== undefined ? { kernel: options.bf16Kernel } : {}),
  };
}

/**
 * C [m, n] = alpha * op(a) @ op(b) + beta * C + bias. `a` is f32 [m, k] ([k, m] with transA); `b` is f32, f16 or
 * bf16 [k, n] ([n, k] with transB). Returns `out` when given, else a new tensor.
 */
export function gemm(a: Tensor, b: Tensor, options: GemmOptions = {}): Tensor {
  const op = 'gemm';
  const backend = sameBackend(op, a, b, options.bias, options.out);
  checkOperands(op, a, b, options);
  expectRank(op, 'a', a, 2);
  expectRank(op, 'b', b, 2);
  const { m, n } = matmulDims(op, a, b, options.transA ?? false, options.transB ?? false);
  checkBias(op, options.bias, n, a, b);
  const out = resolveOut(op, options.out, [m, n], 'f32', backend);
  callNative(() => backend.binding.gemm(a.native, b.native, out.native, nativeOptions(options)));
  return out;
}

/**
 * Batched GEMM: for every batch entry i, C[i] = alpha * op(a[i]) @ op(b[i]) + beta * C[i] + bias. `a` is
 * [batch, m, k] ([batch, k, m] with transA); `b` is [batch, k, n] ([batch, n, k] with transB), or rank 2 to share
 * one B across the batch. Returns [batch, m, n].
 */
export function gemmBatched(a: Tensor, b: Tensor, options: GemmOptions = {}): Tensor {
  const op = 'gemmBatched';
  const backend = sameBackend(op, a, b, options.bias, options.out);
  checkOperands(op, a, b, options);
  expectRank(op, 'a', a, 3);
  expectRank(op, 'b', b, [2, 3]);
  const batch = a.shape[0]!;
  if (b.rank === 3 && b.shape[0] !== batch) {
    throw new ShapeMismatchError(
      `${op}: a ${formatShape(a.shape)} and b ${formatShape(b.shape)} disagree on batch: ${batch} vs ${b.shape[0]}`,
    );
  }
  const { m, n } = matmulDims(op, a, b, options.transA ?? false, options.transB ?? false);
  checkBias(op, options.bias, n, a, b);
  const out = resolveOut(op, options.out, [batch, m, n], 'f32', backend);
  callNative(() => backend.binding.gemmBatched(a.native, b.native, out.native, nativeOptions(options)));
  return out;
}

export interface LinearOptions {
  /** Write here instead of allocating: f32 with x's shape, last dimension replaced by `out_features`. */
  out?: Tensor;
  reference?: boolean;
  /** As {@link GemmOptions.compute}. */
  compute?: ComputeMode;
}

/**
 * A Hugging Face Linear layer: x @ weight^T + bias, with x f32 [..., in] and weight [out, in] (f32, f16 or bf16).
 * Leading dimensions of x are flattened into rows; the result has shape [..., out].
 */
export function linear(x: Tensor, weight: Tensor, bias?: Tensor, options: LinearOptions = {}): Tensor {
  const op = 'linear';
  const backend = sameBackend(op, x, weight, bias, options.out);
  checkCompute(op, options.compute);
  expectDtype(op, 'x', x, 'f32');
  expectDtype(op, 'weight', weight, weightDtypes);
  if (bias) expectDtype(op, 'bias', bias, 'f32');
  if (x.rank < 1) throw new ShapeMismatchError(`${op}: x ${formatShape(x.shape)} must have at least one dimension`);
  expectRank(op, 'weight', weight, 2);
  const [outFeatures, inFeatures] = weight.shape as [number, number];
  const xIn = x.shape[x.rank - 1]!;
  if (xIn !== inFeatures) {
    throw new ShapeMismatchError(
      `${op}: x ${formatShape(x.shape)} and weight ${formatShape(weight.shape)} disagree on in_features: ${xIn} vs ${inFeatures}`,
    );
  }
  if (bias && (bias.rank !== 1 || bias.shape[0] !== outFeatures)) {
    throw new ShapeMismatchError(
      `${op}: bias ${formatShape(bias.shape)} must be [${outFeatures}] for weight ${formatShape(weight.shape)}`,
    );
  }
  const outShape = [...x.shape.slice(0, -1), outFeatures];
  const out = resolveOut(op, options.out, outShape, 'f32', backend);
  const rows = x.shape.slice(0, -1).reduce((p, d) => p * d, 1);
  // The kernel wants 2-D operands: view x and out as [rows, in] / [rows, out] (views share memory).
  const x2 = x.rank === 2 ? x : x.reshape([rows, inFeatures]);
  const out2 = out.rank === 2 ? out : out.reshape([rows, outFeatures]);
  try {
    const opts: GemmOptions = { transB: true, reference: options.reference ?? false, compute: options.compute ?? 'f32' };
    if (bias) opts.bias = bias;
    callNative(() => backend.binding.gemm(x2.native, weight.native, out2.native, nativeOptions(opts)));
  } finally {
    if (x2 !== x) x2.dispose();
    if (out2 !== out) out2.dispose();
  }
  return out;
}
