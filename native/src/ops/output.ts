/** Output handling shared by every op: use the caller's `out` (checked) or allocate one on the operands' backend. */
import type { DType } from '../binding.js';
import { ShapeMismatchError } from '../errors.js';
import type { Backend } from '../loader.js';
import { formatShape, sameShape, expectDtype } from '../shape.js';
import { Tensor } from '../tensor.js';

export function resolveOut(op: string, out: Tensor | undefined, shape: readonly number[], dtype: DType, backend: Backend): Tensor {
  if (!out) return Tensor.empty(shape, dtype, backend);
  out.live(`${op}: out`);
  if (!sameShape(out.shape, shape)) {
    throw new ShapeMismatchError(`${op}: out has shape ${formatShape(out.shape)}, expected ${formatShape(shape)}`);
  }
  expectDtype(op, 'out', out, dtype);
  return out;
}
