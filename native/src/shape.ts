/** Shape and dtype checks the ops run before any native call, with messages that name every shape. */
import type { DType } from './binding.js';
import { DTypeMismatchError, ShapeMismatchError } from './errors.js';
import type { Tensor } from './tensor.js';

export function formatShape(shape: readonly number[]): string {
  return `[${shape.join(', ')}]`;
}

export function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

/** Throws ShapeMismatchError unless `cond`; `message` should name the shapes involved. */
export function checkShapes(cond: boolean, message: () => string): void {
  if (!cond) throw new ShapeMismatchError(message());
}

export function expectRank(op: string, name: string, t: Tensor, ranks: number | readonly number[]): void {
  const ok = typeof ranks === 'number' ? t.rank === ranks : ranks.includes(t.rank);
  if (!ok) {
    const want = typeof ranks === 'number' ? `${ranks}` : ranks.join(' or ');
    throw new ShapeMismatchError(`${op}: ${name} must have rank ${want}, got ${formatShape(t.shape)}`);
  }
}

export function expectSameShape(op: string, aName: string, a: Tensor, bName: string, b: Tensor): void {
  if (!sameShape(a.shape, b.shape)) {
    throw new ShapeMismatchError(`${op}: ${aName} ${formatShape(a.shape)} and ${bName} ${formatShape(b.shape)} must have the same shape`);
  }
}

export function expectDtype(op: string, name: string, t: Tensor, dtypes: DType | readonly DType[]): void {
  const ok = typeof dtypes === 'string' ? t.dtype === dtypes : dtypes.includes(t.dtype);
  if (!ok) {
    const want = typeof dtypes === 'string' ? dtypes : dtypes.join(', ');
    throw new DTypeMismatchError(`${op}: ${name} ${formatShape(t.shape)} must be ${want}, got ${t.dtype}`);
  }
}
