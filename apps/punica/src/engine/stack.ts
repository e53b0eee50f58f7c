/**
 * The engine stack of one host, assembled once, used by the engine worker thread (single-machine server) and by
 * a cluster worker process (`--role worker`):
 *
 *   loadDecoder(modelDir)                         base weights on the device (native backend)
 *   TextTokenizer                                 detokenization for stop strings and streamed text
 *   PagedKvCache (kvBudgetBytes)                  the sequences' K/V pages
 *   AdapterCache(loraAdapterSource)               disk → host → device-resident LoRA weights (Punica §5.2)
 *   SgmvLoraDelta(name → cache.get(name))         one SGMV shrink + expand per projection per step (Punica §4)
 *   StepRunner(model, kv, delta, decode)          executes a step plan: layout, forward, sampling, stop checks
 *   EngineLoop(Scheduler policy 'punica')         token-level continuous batching of any adapter mix (§5): the
 *                                                 batcher's pure Scheduler plans, the runner executes
 *   batcherEngine(loop)                           the loop as the host protocol's HostEngine (`host`)
 *
 * Everything here loads the native addon: never import it on an HTTP thread.
 */
import { AdapterCache, AdapterExistsError } from '@tessera/adapter-swap';
import type { FairnessPolicy, KvExhaustionPolicy } from '@tessera/batcher';
import { batcherEngine, type BatcherHostEngine, EngineLoop } from '@tessera/cluster';
import { type DecoderModel, loadDecoder, PagedKvCache, StepRunner, TextTokenizer } from '@tessera/engine';
import { setThreads } from '@tessera/native';
import { loraAdapterSource, readLoraForSgmv, SgmvLoraDelta } from '@tessera/sgmv-kernel';

import type { AdapterStatus } from './protocol.js';

export interface EngineStackOptions {
  modelDir: string;
  maxBatch: number;
  kvBudgetBytes: number;
  adapterBudgetBytes: number;
  hostAdapterBudgetBytes: number;
  threads: number | null;
  /** 'int8': the decoder's linear weights as Q8_0, quantized at load (loadDecoder's `weights`; default 'f32'). */
  weights?: 'f32' | 'int8' | undefined;
  /** 'requeue' on one machine; 'evict' in a cluster worker, so the scheduler migrates the request (default 'requeue'). */
  kvExhaustion?: KvExhaustionPolicy;
  /** Reuse the K/V of shared prompt prefixes within one base + adapter (default false). */
  prefixCache?: boolean | undefined;
  /** Admission across tenants: 'fcfs' (default) or 'vtc' (S-LoRA's virtual token counter; a tenant = an adapter). */
  fairness?: FairnessPolicy | undefined;
}

export interface EngineStack {
  model: DecoderModel;
  tokenizer: TextTokenizer;
  kv: PagedKvCache;
  cache: AdapterCache<unknown, unknown>;
  /** The step loop (Scheduler + StepRunner): submit / cancel / step / run / stats. */
  batcher: EngineLoop;
  /** The loop as a host-protocol engine (placements in, host events out; load reports; held requests, retiring adapters). */
  host: BatcherHostEngine;
  /** Reads the adapter once (validating it against the model: modules, shapes, dtypes) and registers it. */
  register(name: string, path: string): Promise<AdapterStatus>;
  /** Unregisters an adapter (its weights are freed; callers make sure no request uses it). */
  unregister(name: string): Promise<void>;
  status(name: string): AdapterStatus;
  dispose(): void;
}

export function duplicateAdapter(name: string): AdapterExistsError {
  return new AdapterExistsError(name, '', `an adapter named ${JSON.stringify(name)} is already registered`);
}

export function buildEngineStack(options: EngineStackOptions): EngineStack {
  if (options.threads !== null) setThreads(options.threads);
  const model = loadDecoder(options.modelDir, { weights: options.weights ?? 'f32' });
  const tokenizer = TextTokenizer.fromDir(options.modelDir);
  const kv = PagedKvCache.create({ ...model.kvShape, budgetBytes: options.kvBudgetBytes }, model.backend);
  const cache = new AdapterCache({
    source: loraAdapterSource(model.config, model.backend),
    deviceBudgetBytes: options.adapterBudgetBytes,
    hostBudgetBytes: options.hostAdapterBudgetBytes,
  });
  const delta = new SgmvLoraDelta((name) => cache.get(name));
  const runner = new StepRunner({ model, cache: kv, deltas: [delta], decode: (ids) => tokenizer.decode(ids) });
  const batcher = new EngineLoop({
    runner,
    pages: kv.allocator,
    adapters: cache,
    policy: 'punica',
    maxBatch: options.maxBatch,
    kvExhaustion: options.kvExhaustion ?? 'requeue',
    prefixCache: options.prefixCache ?? false,
    fairness: options.fairness ?? 'fcfs',
  });
  const host = batcherEngine(batcher, { adapters: cache });
  const ranks = new Map<string, number>();

  function status(name: string): AdapterStatus {
    const info = cache.info(name);
    return { name, path: info.dir, residency: info.tier, rank: ranks.get(name) ?? 0, pins: info.pins };
  }

  return {
    model,
    tokenizer,
    kv,
    cache: cache as AdapterCache<unknown, unknown>,
    batcher,
    host,
    async register(name, path) {
      if (cache.has(name)) throw duplicateAdapter(name);
      const host = await readLoraForSgmv(path, model.config, { name });
      if (cache.has(name)) throw duplicateAdapter(name);
      cache.register(name, path);
      ranks.set(name, host.rank);
      return status(name);
    },
    async unregister(name) {
      await cache.unregister(name);
      ranks.delete(name);
    },
    status,
    dispose() {
      cache.dispose();
      kv.dispose();
      model.dispose();
    },
  };
}
