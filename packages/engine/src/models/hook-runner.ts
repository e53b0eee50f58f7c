/** Calls every delta's hook for one site, in registration order. Shared by both families. */
import { InvalidArgumentError } from '@tessera/native';
import type { LayerBoundaryCall, LinearSiteCall, ModelDelta, NormSiteCall } from '../hooks/sites.js';

export function runLinearHooks(deltas: readonly ModelDelta[], call: LinearSiteCall): void {
  for (const d of deltas) d.linear?.(call);
}

export function runNormHooks(deltas: readonly ModelDelta[], call: NormSiteCall): void {
  for (const d of deltas) d.norm?.(call);
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return (typeof v === 'object' || typeof v === 'function') && v !== null && typeof (v as { then?: unknown }).then === 'function';
}

/** The synchronous path's layer boundary: a delta that returns a Promise cannot be waited for here. */
export function runBeforeLayerHooks(deltas: readonly ModelDelta[], call: LayerBoundaryCall, owner: string): void {
  for (const d of deltas) {
    const r = d.beforeLayer?.(call);
    if (isThenable(r)) {
      // We throw instead; a rejection of the abandoned Promise must not also crash the process as unhandled.
      r.then(undefined, () => {});
      throw new InvalidArgumentError(
        `${owner}: a delta's beforeLayer(${call.layer}) returned a Promise, which the synchronous forward cannot wait for; use forwardAsync or layersAsync`);
    }
  }
}

/** The async path's layer boundary: each delta in registration order, awaited before the next is asked. */
export async function runBeforeLayerHooksAsync(deltas: readonly ModelDelta[], call: LayerBoundaryCall): Promise<void> {
  for (const d of deltas) {
    const r = d.beforeLayer?.(call);
    if (isThenable(r)) await r;
  }
}
