/**
 * `--role frontend`: PunicaHost over Redis. A request goes to the Punica scheduler as a BullMQ job; its tokens come
 * back on its Redis stream from whichever worker serves it (@tessera/cluster's ClientStream: every token once, in
 * order, across migrations and lost workers). server-kit's StreamEngineHost tracks the streams, as the worker
 * thread's client does, so the routes see the same interface.
 *
 * Adapters are registered on the workers at their start (`--adapters`); the frontend serves the same directory's
 * names and reads their ranks from adapter_config.json. Loading adapters at run time is a single-machine feature.
 */
import { ClusterArgumentError, connectClusterClient, type HostLoad, type RedisOptions } from '@tessera/cluster';
import { readHfConfig, readLoraAdapterConfig } from '@tessera/engine';
import { StreamEngineHost } from '@tessera/server-kit';

import type { AdapterStatus, EngineStats, PunicaHost, PunicaProtocol } from '../engine/protocol.js';

/** Connects to Redis (failing fast with RedisUnavailableError when it does not answer). */
export async function connectClusterFrontend(options: { redis: RedisOptions; modelDir: string; adapters: readonly { name: string; path: string }[] }): Promise<PunicaHost> {
  const config = readHfConfig(options.modelDir);
  const adapters: AdapterStatus[] = options.adapters.map(({ name, path }) => {
    const c = readLoraAdapterConfig(path);
    return { name, path, residency: 'disk', rank: Math.max(c.r, ...Object.values(c.rankPattern)), pins: 0 };
  });
  const client = await connectClusterClient(options.redis);
  const { architecture, maxPositions, vocabSize } = config;
  const unsupported = (what: string) => () => Promise.reject(new ClusterArgumentError(`${what} is not supported in cluster mode; register adapters on the workers with --adapters`));
  /** Σ steps over the workers at the previous stats call (reported as a delta, like the worker thread's). */
  let lastSteps: number | null = null;

  return new StreamEngineHost<PunicaProtocol>({
    ready: { model: { dir: options.modelDir, architecture, maxPositions, vocabSize, device: 'cluster', kvPages: 0 }, adapters },
    open: ({ request }) => client.submit(request),
    cancel: (id) => client.cancel(id),
    close: () => client.close(),
    admin: {
      'load-adapter': unsupported('loading adapters at run time'),
      'unload-adapter': unsupported('unloading adapters at run time'),
      /** The start-up adapters; 'device' when resident on any live worker. */
      adapters: async () => {
        const resident = new Set((await client.hosts()).flatMap((h) => h.residentAdapters));
        return adapters.map((a) => ({ ...a, residency: resident.has(a.name) ? 'device' : 'disk' }));
      },
      /** The live workers' load reports summed (KV pages over all workers; batch sizes are not sampled here). */
      stats: async (): Promise<EngineStats> => {
        const hosts = await client.hosts();
        const sum = (f: (h: HostLoad) => number) => hosts.reduce((s, h) => s + f(h), 0);
        const totalSteps = sum((h) => h.steps);
        // A worker that left takes its count with it: never report a negative delta.
        const steps = lastSteps === null ? totalSteps : Math.max(0, totalSteps - lastSteps);
        lastSteps = totalSteps;
        const residentCount = new Set(hosts.flatMap((h) => h.residentAdapters)).size;
        const zero = { residentBytes: 0, deviceBudgetBytes: 0, hostCount: 0, hits: 0, misses: 0, loads: 0, loadFailures: 0, deviceEvictions: 0, hostEvictions: 0 };
        return {
          running: sum((h) => h.requests.length),
          waiting: 0,
          runningAdapters: [],
          waitingAdapters: [],
          kv: { usedPages: sum((h) => Math.max(0, h.kvPages - h.freeKvPages)), numPages: sum((h) => h.kvPages) },
          prefix: { queries: 0, hits: 0 },
          adapters: { registered: adapters.length, residentCount, ...zero },
          steps,
          batchSizes: [],
          preemptions: 0,
        };
      },
    },
  });
}
