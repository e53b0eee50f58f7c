/**
 * PetS's Prometheus metrics, on the server's registry (server-kit adds the HTTP figures and tessera_engine_healthy):
 * @tessera/pet-ops' PetsHostMetrics (the tessera_pets_* series, listed there), fed with the classify latency from
 * the engine client's request ends and with the worker's PetsHost stats, sampled when /metrics is scraped.
 */
import type { Registry } from 'prom-client';

import { PetsHostMetrics } from '@tessera/pet-ops';

import type { PetsEngineClient } from '../engine/client.js';

/** The server's metrics hook: classify latency from the client's request ends, the rest sampled at scrape time. */
export function petsMetrics(registry: Registry, engine: PetsEngineClient): { collect: () => Promise<void> } {
  const metrics = new PetsHostMetrics(registry);
  engine.client.on('request-end', (end) => {
    if (end.error === null) metrics.observeClassify((end.endedAt - end.submittedAt) / 1000);
  });
  // Sampled only while the engine is healthy (server-kit); a call that fails as it goes down skips the sample.
  return { collect: async () => metrics.onStats(await engine.stats()) };
}
