/**
 * `--role worker`: one engine host of the cluster. The engine runs in this process (no HTTP here), its batcher
 * evicts on KV exhaustion so the scheduler can migrate the request, and @tessera/cluster's host worker feeds it
 * from this host's BullMQ queue, streams its tokens to Redis and publishes its load every half second.
 *
 *   BullMQ queue host.<id> ─add/cancel─▶ batcherEngine(EngineLoop) ─events─▶ request streams + scheduler inbox
 */
import { connectRedis, type HostWorkerHandle, type RedisOptions, startHostWorker } from '@tessera/cluster';

import { buildEngineStack, type EngineStackOptions } from '../engine/stack.js';

export interface ClusterWorkerOptions extends Omit<EngineStackOptions, 'kvExhaustion'> {
  redis: RedisOptions;
  hostId: string;
  adapters: readonly { name: string; path: string }[];
  log?: (line: string) => void;
}

export interface ClusterWorker {
  readonly hostId: string;
  /** Stops taking placements, lets the engine loop finish its step, frees the model. */
  close(): Promise<void>;
}

export async function startClusterWorker(options: ClusterWorkerOptions): Promise<ClusterWorker> {
  const log = options.log ?? (() => {});
  // Fail fast before loading a model: a worker without Redis can do nothing.
  const probe = await connectRedis(options.redis, `worker ${options.hostId}`);
  await probe.quit();

  const stack = buildEngineStack({ ...options, kvExhaustion: 'evict' });
  let handle: HostWorkerHandle | null = null;
  const abort = new AbortController();
  let loop: Promise<void> = Promise.resolve();
  try {
    for (const { name, path } of options.adapters) await stack.register(name, path);
    log(`engine ready: ${options.modelDir} on ${stack.model.backend.device}, ${stack.kv.numPages} KV pages, ${options.adapters.length} adapter(s)`);
    loop = stack.batcher.run(abort.signal);
    handle = await startHostWorker({ ...options.redis, hostId: options.hostId, engine: stack.host });
  } catch (err) {
    abort.abort();
    await loop;
    stack.dispose();
    throw err;
  }
  log(`host ${options.hostId} is taking placements`);
  let closing: Promise<void> | null = null;
  return {
    hostId: options.hostId,
    close() {
      closing ??= (async () => {
        await handle!.close();
        abort.abort();
        await loop;
        stack.dispose();
      })();
      return closing;
    },
  };
}
