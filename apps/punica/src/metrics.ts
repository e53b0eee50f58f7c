/**
 * Punica's Prometheus metrics, on the server's registry. server-kit adds the process metrics, the HTTP request
 * counts and durations, tessera_engine_healthy, and the request metrics under vLLM's names (generationMetrics:
 * tokens, TTFT, latency, queues, KV usage). Punica adds what no engine exposes today: the adapter cache's hits,
 * misses, evictions and load latency, the running and waiting LoRA adapters, the step loop's batch sizes, KV pages.
 *
 * Sources: per-request figures from the host's 'request-end' events (measured on the HTTP thread, submit → first
 * token → end); adapter load times from its notices; queue, KV, adapter-cache and batch figures are sampled from
 * the engine when /metrics is scraped (counters advance by the difference since the previous scrape).
 */
import { CumulativeTotals, defineMetrics, generationMetrics, LATENCY_BUCKETS } from '@tessera/server-kit';
import type { Registry } from 'prom-client';

import type { EngineStats, PunicaHost } from './engine/protocol.js';

/** `maxLora` is vLLM's max_lora label: the batch size, since Punica mixes any adapters in one batch. */
export function punicaMetrics(registry: Registry, engine: PunicaHost, options: { model: string; maxLora: number }) {
  const vllm = generationMetrics(registry, { model: options.model });
  const m = defineMetrics(registry, {
    loraInfo: {
      type: 'gauge',
      name: 'vllm:lora_requests_info',
      help: 'Running and waiting LoRA adapters (comma-separated label values); the value is the sample time in seconds.',
      labels: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
    },
    cacheHits: { type: 'counter', name: 'tessera_adapter_cache_hits_total', help: 'Adapter lookups that found the adapter resident on the device.' },
    cacheMisses: { type: 'counter', name: 'tessera_adapter_cache_misses_total', help: 'Requests whose adapter was not resident and had to be loaded.' },
    cacheEvictions: { type: 'counter', name: 'tessera_adapter_cache_evictions_total', help: 'Adapters evicted to make room, by tier.', labels: ['tier'] },
    adapterLoads: { type: 'counter', name: 'tessera_adapter_loads_total', help: 'Adapters made resident on the device.' },
    adapterLoadFailures: { type: 'counter', name: 'tessera_adapter_load_failures_total', help: 'Adapter loads that failed.' },
    adapterLoadSeconds: { type: 'histogram', name: 'tessera_adapter_load_seconds', help: 'Adapter load time: host read (from disk) plus upload.', buckets: LATENCY_BUCKETS },
    adaptersRegistered: { type: 'gauge', name: 'tessera_adapters_registered', help: 'Adapters registered (servable).' },
    adaptersResident: { type: 'gauge', name: 'tessera_adapters_resident', help: 'Adapters resident per tier (device, host cache).', labels: ['tier'] },
    adapterResidentBytes: { type: 'gauge', name: 'tessera_adapter_device_bytes', help: 'Device bytes held by resident adapters.' },
    adapterBudgetBytes: { type: 'gauge', name: 'tessera_adapter_device_budget_bytes', help: 'Device byte budget for resident adapters.' },
    batchSize: { type: 'histogram', name: 'tessera_batch_size', help: 'Sequences per engine step (decodes plus the prefill).', buckets: [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128] },
    steps: { type: 'counter', name: 'tessera_engine_steps_total', help: 'Engine steps (model forwards) run.' },
    kvUsedPages: { type: 'gauge', name: 'tessera_kv_cache_used_pages', help: 'KV-cache pages held by sequences.' },
    kvTotalPages: { type: 'gauge', name: 'tessera_kv_cache_pages', help: 'KV-cache pages in the pool.' },
    prefixQueries: { type: 'counter', name: 'vllm:prefix_cache_queries_total', help: 'Prefix cache: prefill tokens looked up (hit rate = hits / queries).', labels: ['model_name'] },
    prefixHits: { type: 'counter', name: 'vllm:prefix_cache_hits_total', help: 'Prefix cache: prefill tokens whose K/V came from cached pages.', labels: ['model_name'] },
  });
  const totals = new CumulativeTotals();
  engine.on('request-end', (end) => vllm.onRequestEnd(end));
  engine.on('notice', (n) => {
    if (n.kind === 'adapter-loaded') m.adapterLoadSeconds.observe(n.seconds);
  });

  function sample(s: EngineStats): void {
    vllm.sample({ running: s.running, waiting: s.waiting, kvUsedPages: s.kv.usedPages, kvPages: s.kv.numPages, preemptions: s.preemptions });
    m.kvUsedPages.set(s.kv.usedPages);
    m.kvTotalPages.set(s.kv.numPages);
    m.loraInfo.reset();
    m.loraInfo.set({ max_lora: String(options.maxLora), running_lora_adapters: s.runningAdapters.join(','), waiting_lora_adapters: s.waitingAdapters.join(',') }, Date.now() / 1000);
    const a = s.adapters;
    totals.advance(m.cacheHits, a.hits);
    totals.advance(m.cacheMisses, a.misses);
    totals.advance(m.cacheEvictions, a.deviceEvictions, { tier: 'device' });
    totals.advance(m.cacheEvictions, a.hostEvictions, { tier: 'host' });
    totals.advance(m.adapterLoads, a.loads);
    totals.advance(m.adapterLoadFailures, a.loadFailures);
    m.adaptersRegistered.set(a.registered);
    m.adaptersResident.set({ tier: 'device' }, a.residentCount);
    m.adaptersResident.set({ tier: 'host' }, a.hostCount);
    m.adapterResidentBytes.set(a.residentBytes);
    m.adapterBudgetBytes.set(a.deviceBudgetBytes);
    totals.advance(m.prefixQueries, s.prefix.queries, { model_name: options.model });
    totals.advance(m.prefixHits, s.prefix.hits, { model_name: options.model });
    m.steps.inc(s.steps);
    for (const size of s.batchSizes) m.batchSize.observe(size);
  }

  // Sampled only while the engine is healthy (server-kit); a call that fails as it goes down skips the sample.
  return { collect: async () => sample(await engine.call('stats', null)) };
}
