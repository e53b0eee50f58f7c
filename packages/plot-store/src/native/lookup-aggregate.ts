/**
 * The fused PLOT lookup (hmi.md A2 + A3) over {@link NativePlotIndex} tables: one native call looks every key of a
 * {@link TrigramKeyBatch} up along a chain of indexes (child first, with tri → bi → uni back-off by default), gathers
 * the fp16 rows and writes `LayerNorm(z + posEmb[i] + typeEmb[type])`, where for token i of a sequence
 * `z = V[k+i][1] + V[k+i+1][0] (i+1 < len) + V[k+i−1][2] (i > 0)`; the stored values are already gated (A4), and
 * positions past a sequence's length stay 0.
 */
import { type PlotAggregateParams, type PlotBackoff, plotLookupAggregate, plotLookupRows, type Tensor } from '@tessera/native';
import { PlotStoreArgumentError } from '../policy/errors.js';
import type { KeyMode, TrigramKeyBatch } from '../policy/keys.js';
import { NativePlotIndex } from './native-plot-index.js';

export type { PlotAggregateParams };

export interface LookupAggregateOptions {
  /** Back-off for keys the chain misses: the codec's key mode (the default 'encoder'), or 'none' (exact keys only). */
  backoff?: KeyMode | 'none';
  /** Token types, row-major [B, T]; default all 0. */
  types?: Int32Array;
  /** T of the output (default: the longest sequence). */
  seqLen?: number;
  /** f32 [B, T, d] to write into. */
  out?: Tensor;
  /** Run the double-precision reference instead of the fast path. */
  reference?: boolean;
}

function chainTables(chain: NativePlotIndex | readonly NativePlotIndex[]) {
  const list = Array.isArray(chain) ? chain : [chain];
  return list.map((index, i) => {
    if (!(index instanceof NativePlotIndex)) throw new PlotStoreArgumentError(`chain[${i}] is not a NativePlotIndex (the fused lookup reads native tables)`);
    return index.table;
  });
}

function backoffOf(backoff: KeyMode | 'none' | undefined): PlotBackoff {
  if (backoff === undefined) return 'encoder';
  if (backoff !== 'encoder' && backoff !== 'causal' && backoff !== 'none') {
    throw new PlotStoreArgumentError(`backoff must be 'encoder', 'causal' or 'none', got ${String(backoff)}`);
  }
  return backoff;
}

/** A2 lookup → gather → A3 aggregate in one native call; returns f32 [B, T, d]. */
export function lookupAggregate(
  chain: NativePlotIndex | readonly NativePlotIndex[],
  batch: Pick<TrigramKeyBatch, 'keys' | 'lengths'>,
  params: PlotAggregateParams,
  options: LookupAggregateOptions = {},
): Tensor {
  const { backoff, ...rest } = options;
  return plotLookupAggregate(chainTables(chain), batch, params, { ...rest, backoff: backoffOf(backoff) });
}

/** A2 alone in one native call: each key's row along the chain (child first), 0 where nothing matches. */
export function lookupRows(
  chain: NativePlotIndex | readonly NativePlotIndex[],
  keys: BigUint64Array,
  options: { backoff?: KeyMode | 'none'; out?: Int32Array } = {},
): Int32Array {
  return plotLookupRows(chainTables(chain), keys, { backoff: backoffOf(options.backoff), ...(options.out ? { out: options.out } : {}) });
}
