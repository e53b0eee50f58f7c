/**
 * Int8 weights in llama.cpp's Q8_0 layout (CPU backend): group-wise (32) symmetric quantization and a decode GEMM
 * that reads them.
 *
 * A Q8_0 weight [n, k] (the Hugging Face Linear layout [out, in], blocks of 32 along k) is a `u8` tensor
 * [n, k/32 · 34]: per block one f16 scale d (little-endian) then 32 int8 values q, value = q · d — byte for byte
 * llama.cpp's `block_q8_0`, so GGUF Q8_0 tensors can be written into one unchanged. k must be a multiple of 32:
 * other widths are refused with a ShapeMismatchError (pad k with zero columns first).
 *
 * {@link q8Gemm} / {@link q8Linear} quantize the activations per row in blocks of 32 too (f32 scales, round to
 * nearest even), take exact integer dot products per block and sum the block products in f32 (native/cpp/cpu/q8_simd.h
 * fixes the order), on AVX2, AVX-VNNI, AVX-512 or AVX512-VNNI as the CPU allows. Every path gives the same bits, for
 * any thread count.
 */
import { callNative, InvalidArgumentError, ShapeMismatchError, UnsupportedOpError } from '../errors.js';
import { type Backend, getBackend } from '../loader.js';
import { expectDtype, expectRank, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

/** Weights per Q8_0 block. */
export const Q8_BLOCK = 32;
/** Bytes per Q8_0 block: an f16 scale and 32 int8. */
export const Q8_BLOCK_BYTES = 34;

/** The GEMM bodies: `auto` picks the best the CPU has within the active ISA (setIsa). */
export type Q8Kernel = 'auto' | 'scalar' | 'avx2' | 'avx2-vnni' | 'avx512' | 'avx512-vnni';

export interface Q8GemmOptions {
  /** f32 [n], added to every row. */
  bias?: Tensor;
  /** Write here instead of allocating: f32 [m, n] (for q8Linear: x's shape with the last dimension n). */
  out?: Tensor;
  /** Run the reference: the same activation quantization, the block products summed in double. */
  reference?: boolean;
  /** Force one body (tests compare them; refused with UnsupportedOpError when the CPU lacks its ISA). */
  kernel?: Q8Kernel;
}

function binding(op: string, backend: Backend) {
  const b = backend.binding;
  if (!b.q8Gemm || !b.q8Quantize || !b.q8Dequantize || !b.q8Kernels) {
    throw new UnsupportedOpError(`${op}: the ${backend.device} backend has no Q8_0 kernels (CPU only)`);
  }
  return b as Required<Pick<typeof b, 'q8Gemm' | 'q8Quantize' | 'q8Dequantize' | 'q8Kernels'>>;
}

/** Whether `t` has the shape and dtype of a Q8_0 weight (u8, rank 2, rows of whole 34-byte blocks). */
export function isQ8Weight(t: Tensor): boolean {
  return t.dtype === 'u8' && t.rank === 2 && t.shape[1]! % Q8_BLOCK_BYTES === 0;
}

/** [n, k] of a Q8_0 weight (throws unless {@link isQ8Weight}). */
export function q8WeightShape(op: string, w: Tensor): [number, number] {
  expectDtype(op, 'w', w, 'u8');
  expectRank(op, 'w', w, 2);
  const [n, cols] = w.shape as [number, number];
  if (cols % Q8_BLOCK_BYTES !== 0) {
    throw new ShapeMismatchError(`${op}: w ${formatShape(w.shape)} is not rows of Q8_0 blocks (${cols} bytes is not a multiple of 34)`);
  }
  return [n, (cols / Q8_BLOCK_BYTES) * Q8_BLOCK];
}

/**
 * Quantizes w (f32, f16 or bf16 [n, k], k a multiple of 32) to Q8_0: per block d = the smallest f16 ≥ max|v| / 127
 * and q = round-to-nearest-even(v / d), so |v − q·d| ≤ d/2 for every weight. A block holding a NaN, an infinity or a
 * value beyond 65504·127 throws InvalidArgumentError.
 */
export function q8Quantize(w: Tensor, options: { out?: Tensor } = {}): Tensor {
  const op = 'q8Quantize';
  const backend = sameBackend(op, w, options.out);
  expectDtype(op, 'w', w, ['f32', 'f16', 'bf16']);
  expectRank(op, 'w', w, 2);
  const [n, k] = w.shape as [number, number];
  if (k % Q8_BLOCK !== 0) {
    throw new ShapeMismatchError(`${op}: w ${formatShape(w.shape)} has ${k} columns, not a multiple of the Q8_0 block (32); pad k to a multiple of 32`);
  }
  const b = binding(op, backend);
  const out = resolveOut(op, options.out, [n, (k / Q8_BLOCK) * Q8_BLOCK_BYTES], 'u8', backend);
  try {
    callNative(() => b.q8Quantize(w.native, out.native));
  } catch (err) {
    if (out !== options.out) out.dispose();
    throw err;
  }
  return out;
}

/** Expands a Q8_0 weight [n, k] back to f32 (q · d, exact). */
export function q8Dequantize(w: Tensor, options: { out?: Tensor } = {}): Tensor {
  const op = 'q8Dequantize';
  const backend = sameBackend(op, w, options.out);
  const [n, k] = q8WeightShape(op, w);
  const b = binding(op, backend);
  const out = resolveOut(op, options.out, [n, k], 'f32', backend);
  callNative(() => b.q8Dequantize(w.native, out.native));
  return out;
}

function nativeGemmOptions(op: string, options: Q8GemmOptions) {
  const kernel = options.kernel ?? 'auto';
  if (!['auto', 'scalar', 'avx2', 'avx2-vnni', 'avx512', 'avx512-vnni'].includes(kernel)) {
    throw new InvalidArgumentError(`${op}: option kernel must be auto, scalar, avx2, avx2-vnni, avx512 or avx512-vnni, got ${String(kernel)}`);
  }
  return { bias: options.bias?.native ?? null, reference: options.reference ?? false, kernel };
}

/** y f32 [m, n] = x f32 [m, k] · wᵀ (+ bias) with w a Q8_0 weight [n, k] (see the module notes for the arithmetic). */
export function q8Gemm(x: Tensor, w: Tensor, options: Q8GemmOptions = {}): Tensor {
  const op = 'q8Gemm';
  const backend = sameBackend(op, x, w, options.bias, options.out);
  expectDtype(op, 'x', x, 'f32');
  expectRank(op, 'x', x, 2);
  const [n, k] = q8WeightShape(op, w);
  const [m, xk] = x.shape as [number, number];
  if (xk !== k) throw new ShapeMismatchError(`${op}: x ${formatShape(x.shape)} and w ${formatShape(w.shape)} (Q8_0, k = ${k}) disagree on k`);
  if (options.bias) {
    expectDtype(op, 'bias', options.bias, 'f32');
    if (options.bias.rank !== 1 || options.bias.shape[0] !== n) {
      throw new ShapeMismatchError(`${op}: bias ${formatShape(options.bias.shape)} must be [${n}] for w ${formatShape(w.shape)}`);
    }
  }
  const b = binding(op, backend);
  const nativeOpts = nativeGemmOptions(op, options);
  const out = resolveOut(op, options.out, [m, n], 'f32', backend);
  callNative(() => b.q8Gemm(x.native, w.native, out.native, nativeOpts));
  return out;
}

/**
 * {@link linear} over a Q8_0 weight: x f32 [..., k] → [..., n] (leading dimensions flattened into rows), + bias.
 */
export function q8Linear(x: Tensor, w: Tensor, bias?: Tensor, options: Omit<Q8GemmOptions, 'bias'> = {}): Tensor {
  const op = 'q8Linear';
  const backend = sameBackend(op, x, w, bias, options.out);
  expectDtype(op, 'x', x, 'f32');
  if (x.rank < 1) throw new ShapeMismatchError(`${op}: x ${formatShape(x.shape)} must have at least one dimension`);
  const [n, k] = q8WeightShape(op, w);
  const rows = x.shape.slice(0, -1).reduce((p, d) => p * d, 1);
  const out = resolveOut(op, options.out, [...x.shape.slice(0, -1), n], 'f32', backend);
  if (x.shape[x.rank - 1] !== k) {
    throw new ShapeMismatchError(`${op}: x ${formatShape(x.shape)} and w ${formatShape(w.shape)} (Q8_0, k = ${k}) disagree on in_features`);
  }
  const x2 = x.rank === 2 ? x : x.reshape([rows, k]);
  const out2 = out.rank === 2 ? out : out.reshape([rows, n]);
  try {
    q8Gemm(x2, w, { ...options, ...(bias ? { bias } : {}), out: out2 });
  } finally {
    if (x2 !== x) x2.dispose();
    if (out2 !== out) out2.dispose();
  }
  return out;
}

/** The Q8_0 GEMM bodies this CPU can run, and the one `auto` picks now. */
export function q8Kernels(backend: Backend = getBackend('cpu')): { available: Q8Kernel[]; auto: Q8Kernel } {
  const b = binding('q8Kernels', backend);
  return callNative(() => b.q8Kernels()) as { available: Q8Kernel[]; auto: Q8Kernel };
}
