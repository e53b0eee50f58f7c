/** Calls every delta's hook for one site, in registration order. Shared by both families. */
import type { LinearSiteCall, ModelDelta, NormSiteCall } from '../hooks/sites.js';

export function runLinearHooks(deltas: readonly ModelDelta[], call: LinearSiteCall): void {
  for (const d of deltas) d.linear?.(call);
}

export function runNormHooks(deltas: readonly ModelDelta[], call: NormSiteCall): void {
  for (const d of deltas) d.norm?.(call);
}
