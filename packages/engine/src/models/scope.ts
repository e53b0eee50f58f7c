/**
 * Scope: tensors made during one forward, disposed together at its end. Intermediates and row views are
 * freed at once instead of waiting for the garbage collector, so the device budget reflects live state.
 */
import type { Tensor } from '@tessera/native';

export class Scope {
  private readonly owned: Tensor[] = [];

  /** Registers `t` for disposal at the end of the scope; returns it. */
  keep<T extends Tensor>(t: T): T {
    this.owned.push(t);
    return t;
  }

  /** Rows [start, start + count) of `t` as a view owned by the scope. */
  rows(t: Tensor, start: number, count: number): Tensor {
    return this.keep(t.rows(start, count));
  }

  /** `t` reshaped, as a view owned by the scope. */
  reshape(t: Tensor, shape: readonly number[]): Tensor {
    return this.keep(t.reshape(shape));
  }

  /** Stops tracking `t` (the caller takes ownership, e.g. a forward's result). */
  release<T extends Tensor>(t: T): T {
    const i = this.owned.lastIndexOf(t);
    if (i >= 0) this.owned.splice(i, 1);
    return t;
  }

  dispose(): void {
    // Views first, then their storage: order does not matter for correctness (storage is refcounted), only tidiness.
    for (let i = this.owned.length - 1; i >= 0; i--) this.owned[i]!.dispose();
    this.owned.length = 0;
  }
}

/** Runs `fn` with a fresh scope and disposes it afterwards, also when `fn` throws. */
export function withScope<R>(fn: (scope: Scope) => R): R {
  const scope = new Scope();
  try {
    return fn(scope);
  } finally {
    scope.dispose();
  }
}
