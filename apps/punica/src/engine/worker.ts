/**
 * The engine worker thread: everything that touches the model runs here, off the HTTP event loop. The engine
 * (model, KV cache, adapter cache, SGMV delta, EngineLoop, and the loop as a HostEngine) is assembled by stack.ts,
 * which a cluster worker process uses too; this file serves it over the worker-thread transport of the host
 * protocol (@tessera/cluster's serveWorkerHost) with Punica's admin calls, and reports the adapter cache's events
 * as notices. The loop's run() yields between steps, so submits, cancels and admin calls land between two steps.
 */
import { type HostEvent, serializeError, serveWorkerHost } from '@tessera/cluster';
import { UnknownAdapterError } from '@tessera/adapter-swap';

import type { AdapterNotice, AdapterStatus, EngineStats, PunicaProtocol, WorkerInit } from './protocol.js';
import { buildEngineStack, duplicateAdapter } from './stack.js';

type P = PunicaProtocol;

serveWorkerHost<P['placement'], HostEvent, AdapterNotice, P['admin'], P['ready']>(async ({ workerData, notify, fatal }) => {
  const init = workerData as WorkerInit;
  const stack = buildEngineStack(init);
  const { model, kv, cache, batcher, host } = stack;

  cache.on('load-start', ({ name, from }) => notify({ kind: 'adapter-load-start', name, from }));
  cache.on('loaded', ({ name, ms, bytes }) => notify({ kind: 'adapter-loaded', name, seconds: ms / 1000, bytes }));
  cache.on('load-failed', ({ name, error }) => notify({ kind: 'adapter-load-failed', name, message: serializeError(error).message }));
  cache.on('evicted', ({ name, tier, reason }) => notify({ kind: 'adapter-evicted', name, tier, reason }));

  /** Reads the adapter once (validating it against the model) and registers it; refused while it is unloading. */
  const register = (name: string, path: string): Promise<AdapterStatus> => (host.retiring(name) ? Promise.reject(duplicateAdapter(name)) : stack.register(name, path));

  const stats = (): EngineStats => {
    const { usedPages, numPages } = kv.stats();
    const { prefixLookupTokens: queries, prefixHitTokens: hits } = stack.batcher.stats();
    return { ...host.sample(), kv: { usedPages, numPages }, prefix: { queries, hits }, adapters: cache.stats() };
  };

  // Every start-up adapter is read once and checked against the model, concurrently (the reads are async I/O).
  // All reads settle before an unusable one fails start-up, naming it, so no read is left in flight.
  const outcomes = await Promise.allSettled(init.adapters.map(({ name, path }) => register(name, path)));
  outcomes.forEach((outcome, i) => {
    if (outcome.status === 'fulfilled') return;
    const { name, path } = init.adapters[i]!;
    const e = serializeError(outcome.reason);
    throw Object.assign(new Error(`start-up adapter ${JSON.stringify(name)} (${path}) is not usable: ${e.message}`), { code: e.code, adapter: name });
  });

  const abort = new AbortController();
  let stopping = false;
  const running = batcher.run(abort.signal).catch((err: unknown) => {
    if (!stopping) fatal(err);
  });

  return {
    engine: host,
    admin: {
      'load-adapter': ({ name, path }) => register(name, path),
      'unload-adapter': async (name) => {
        if (!cache.has(name)) throw new UnknownAdapterError(name);
        await host.retire(name, () => stack.unregister(name));
        return null;
      },
      adapters: () => cache.names().map(stack.status),
      stats,
    },
    ready: {
      model: {
        dir: init.modelDir,
        architecture: model.config.architecture,
        maxPositions: model.config.maxPositions,
        vocabSize: model.config.vocabSize,
        device: model.backend.device,
        kvPages: kv.numPages,
      },
      adapters: cache.names().map(stack.status),
    },
    async shutdown() {
      // The HTTP layer drained its requests first; whatever is still held is cancelled (each gets its finish).
      stopping = true;
      abort.abort();
      await running;
      for (const { id } of host.requests()) host.cancel(id);
      stack.dispose();
    },
  };
});
