/**
 * The native half of @tessera/plot-store: the index in native memory and the fused lookup → gather → aggregate.
 * Kept apart from ./policy/ (which must never reach the addon).
 */
export { NativePlotIndex } from './native-plot-index.js';
export { type LookupAggregateOptions, type PlotAggregateParams, lookupAggregate, lookupRows } from './lookup-aggregate.js';
export { nativeChain } from './tree-chain.js';
