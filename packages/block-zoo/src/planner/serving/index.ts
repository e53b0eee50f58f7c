/**
 * The BlockLLM serving core (design note §4, algorithms 5.4–5.9): pure policies on @tessera/core — per-block
 * agents, adaptive serving with the byte cost model, KV coordination, speculation bookkeeping, placement — that
 * run the same in an app (real clock, ChainExecutor underneath) and in the cluster simulator (virtual clock).
 */
export { ServingCapacityError, ServingInvalidError, ServingNotFoundError, ServingStateError } from './errors.js';
export * from './cost-model.js';
export * from './agent.js';
export * from './kv.js';
export * from './routes.js';
export * from './speculation.js';
export * from './placement.js';
