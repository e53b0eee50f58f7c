/**
 * The engine loop the way a server builds it: the engine's StepRunner (model, KV tensor pool, deltas, decode)
 * executing the batcher's Scheduler's plans, composed by EngineLoop. Tests build it with the options the old
 * one-class batcher took.
 */
import type { AdapterResidency, BatchPolicy, KvExhaustionPolicy } from '@tessera/batcher';
import type { Clock } from '@tessera/core';
import { type ModelDelta, type PagedKvCache, StepRunner, type StepRunnerModel } from '@tessera/engine';
import { EngineLoop } from '../../../src/index.js';

export interface LoopOptions {
  model: StepRunnerModel;
  cache: PagedKvCache;
  deltas?: readonly ModelDelta[];
  adapters?: AdapterResidency;
  policy?: BatchPolicy;
  maxBatch?: number;
  clock?: Clock;
  decode?: (ids: number[]) => string;
  kvExhaustion?: KvExhaustionPolicy;
  prefixCache?: boolean;
}

export function makeLoop(options: LoopOptions): EngineLoop {
  const { model, cache, deltas, decode, ...rest } = options;
  const runner = new StepRunner({ model, cache, ...(deltas ? { deltas } : {}), ...(decode ? { decode } : {}) });
  return new EngineLoop({ runner, pages: cache.allocator, ...rest });
}
