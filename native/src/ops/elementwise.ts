/** Elementwise f32 ops: add/mul (with row broadcast), scale, GELU (erf, tanh), SiLU, fused SwiGLU. */
import type { ActivationName, BinaryOpName } from '../binding.js';
import { callNative, ShapeMismatchError } from '../errors.js';
import { expectDtype, expectSameShape, formatShape } from '../shape.js';
import { sameBackend, type Tensor } from '../tensor.js';
import { resolveOut } from './output.js';

export interface ElementwiseOptions {
  /** Write here instead of allocating (may alias an input). */
  out?: Tensor;
  /** Run the plain scalar reference kernel (CPU only; tests compare against it). */
  reference?: boolean;
}

function binaryOp(op: BinaryOpName, a: Tensor, b: Tensor, options: ElementwiseOptions): Tensor {
  const backend = sameBackend(op, a, b, options.out);
  expectDtype(op, 'a', a, 'f32');
  expectDtype(op, 'b', b, 'f32');
  const sameSize = b.numel === a.numel;
  const rowBroadcast = b.numel > 0 && a.rank >= 1 && b.numel === a.shape[a.rank - 1];
  if (!sameSize && !rowBroadcast) {
    throw new ShapeMismatchError(`${op}: b ${formatShape(b.shape)} neither matches a ${formatShape(a.shape)} nor is one row of it`);
  }
  if (sameSize && b.rank > 1 && a.rank > 1) expectSameShape(op, 'a', a, 'b', b);
  const out = resolveOut(op, options.out, a.shape, 'f32', backend);
  callNative(() => backend.binding.binary(op, a.native, b.native, out.native, { reference: options.reference ?? false }));
  return out;
}

/** a + b, where b has a's shape or is one row (length = a's last dimension) broadcast over a's rows. */
export function add(a: Tensor, b: Tensor, options: ElementwiseOptions = {}): Tensor {
  return binaryOp('add', a, b, options);
}

/** a * b elementwise, with the same broadcasting as {@link add}. */
export function mul(a: Tensor, b: Tensor, options: ElementwiseOptions = {}): Tensor {
  return binaryOp('mul', a, b, options);
}

/** x * s. */
export function scale(x: Tensor, s: number, options: ElementwiseOptions = {}): Tensor {
  const backend = sameBackend('scale', x, options.out);
  expectDtype('scale', 'x', x, 'f32');
  const out = resolveOut('scale', options.out, x.shape, 'f32', backend);
  callNative(() => backend.binding.scale(x.native, s, out.native, { reference: options.reference ?? false }));
  return out;
}

function activationOp(act: ActivationName, x: Tensor, options: ElementwiseOptions): Tensor {
  const backend = sameBackend(act, x, options.out);
  expectDtype(act, 'x', x, 'f32');
  const out = resolveOut(act, options.out, x.shape, 'f32', backend);
  callNative(() => backend.binding.activation(act, x.native, out.native, { reference: options.reference ?? false }));
  return out;
}

/** GELU with the exact erf form (BERT). */
export function geluErf(x: Tensor, options: ElementwiseOptions = {}): Tensor {
  return activationOp('gelu_erf', x, options);
}

/** GELU with the tanh approximation (GPT-2 style, "gelu_new"). */
export function geluTanh(x: Tensor, options: ElementwiseOptions = {}): Tensor {
  return activationOp('gelu_tanh', x, options);
}

/** SiLU (swish): x * sigmoid(x). */
export function silu(x: Tensor, options: ElementwiseOptions = {}): Tensor {
  return activationOp('silu', x, options);
}

/** SwiGLU's gate: silu(gate) * up, fused. */
export function siluMul(gate: Tensor, up: Tensor, options: ElementwiseOptions = {}): Tensor {
  const backend = sameBackend('siluMul', gate, up, options.out);
  expectDtype('siluMul', 'gate', gate, 'f32');
  expectDtype('siluMul', 'up', up, 'f32');
  expectSameShape('siluMul', 'gate', gate, 'up', up);
  const out = resolveOut('siluMul', options.out, gate.shape, 'f32', backend);
  callNative(() => backend.binding.siluMul(gate.native, up.native, out.native, { reference: options.reference ?? false }));
  return out;
}
