/**
 * Punica's Prometheus metrics, on the server's registry (server-kit adds the process metrics, the HTTP request
 * counts and durations, and tessera_engine_healthy). Names follow vLLM's where the meaning matches, so existing
 * dashboards, the llm-d router and the Gateway API inference extension read them unchanged; `tessera_*` adds what
 * no engine exposes today: the adapter cache's hits, misses, evictions and load latency, the step loop's batch
 * sizes, KV pages.
 *
 * Sources: per-request counters and latencies come from the host's 'request-end' events (measured on the HTTP
 * thread, submit → first token → end); adapter load times from its notices; queue, KV, adapter-cache and batch
 * figures are sampled from the engine when /metrics is scraped (counters advance by the difference since the
 * previous scrape).
 */
import { CumulativeTotals, defineMetrics, type RequestEnd } from '@tessera/server-kit';
import type { Registry } from 'prom-client';

import type { EngineStats, PunicaHost, PunicaProtocol } from './engine/protocol.js';

const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
const labels = ['model_name'] as const;
const latency = { type: 'histogram', labels, buckets: LATENCY_BUCKETS } as const;
const tokens = { type: 'histogram', labels, buckets: TOKEN_BUCKETS } as const;

function punicaMetricSet(registry: Registry) {
  return defineMetrics(registry, {
    running: { type: 'gauge', name: 'vllm:num_requests_running', help: 'Requests in the running batch (prefilled, decoding).', labels },
    waiting: { type: 'gauge', name: 'vllm:num_requests_waiting', help: 'Requests queued (not yet prefilled, or waiting for their adapter).', labels },
    kvUsage: { type: 'gauge', name: 'vllm:kv_cache_usage_perc', help: 'KV-cache usage: used pages / all pages (1 = full).', labels },
    loraInfo: {
      type: 'gauge',
      name: 'vllm:lora_requests_info',
      help: 'Running and waiting LoRA adapters (comma-separated label values); the value is the sample time in seconds.',
      labels: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
    },
    promptTokens: { type: 'counter', name: 'vllm:prompt_tokens_total', help: 'Prompt tokens of finished requests.', labels },
    generationTokens: { type: 'counter', name: 'vllm:generation_tokens_total', help: 'Generated tokens of finished requests.', labels },
    success: {
      type: 'counter',
      name: 'vllm:request_success_total',
      help: 'Finished requests by finish reason (stop: EOS or a stop string; length: max_tokens; abort: cancelled by the client).',
      labels: ['model_name', 'finished_reason'],
    },
    preemptions: { type: 'counter', name: 'vllm:num_preemptions_total', help: 'Requests preempted (KV cache full) and re-queued.', labels },
    ttft: { ...latency, name: 'vllm:time_to_first_token_seconds', help: 'Time from submission to the first generated token.' },
    e2e: { ...latency, name: 'vllm:e2e_request_latency_seconds', help: 'Time from submission to the end of the request.' },
    tpot: { ...latency, name: 'vllm:time_per_output_token_seconds', help: 'Mean time per generated token after the first.' },
    requestPromptTokens: { ...tokens, name: 'vllm:request_prompt_tokens', help: 'Prompt tokens per request.' },
    requestGenerationTokens: { ...tokens, name: 'vllm:request_generation_tokens', help: 'Generated tokens per request.' },
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
    requestsCancelled: { type: 'counter', name: 'tessera_requests_cancelled_total', help: 'Requests cancelled because the client went away.' },
    requestsFailed: { type: 'counter', name: 'tessera_requests_failed_total', help: 'Requests that ended with an error.' },
  });
}

/**
 * The server's metrics hook: registers Punica's metrics on `registry`, follows the host's request ends and adapter
 * loads, and samples the engine's statistics before each scrape. `maxLora` is vLLM's max_lora label: the batch
 * size, since Punica mixes any adapters in one batch.
 */
export function punicaMetrics(registry: Registry, engine: PunicaHost, options: { model: string; maxLora: number }) {
  const m = punicaMetricSet(registry);
  const model = { model_name: options.model };
  const totals = new CumulativeTotals();
  // Series that should read 0 before the first event, rather than being absent.
  for (const c of [m.promptTokens, m.generationTokens, m.preemptions]) c.inc(model, 0);
  for (const reason of ['stop', 'length', 'abort']) m.success.inc({ ...model, finished_reason: reason }, 0);

  engine.on('notice', (n) => {
    if (n.kind === 'adapter-loaded') m.adapterLoadSeconds.observe(n.seconds);
  });
  engine.on('request-end', (end: RequestEnd<PunicaProtocol>) => {
    const { result } = end;
    if (!result) return void m.requestsFailed.inc();
    const { finishReason, promptTokens, completionTokens } = result;
    m.success.inc({ ...model, finished_reason: finishReason === 'length' ? 'length' : finishReason === 'cancelled' ? 'abort' : 'stop' });
    if (finishReason === 'cancelled') m.requestsCancelled.inc();
    m.promptTokens.inc(model, promptTokens);
    m.generationTokens.inc(model, completionTokens);
    m.requestPromptTokens.observe(model, promptTokens);
    m.requestGenerationTokens.observe(model, completionTokens);
    m.e2e.observe(model, (end.endedAt - end.submittedAt) / 1000);
    if (end.firstItemAt === null) return;
    m.ttft.observe(model, (end.firstItemAt - end.submittedAt) / 1000);
    if (completionTokens > 1) m.tpot.observe(model, (end.endedAt - end.firstItemAt) / 1000 / (completionTokens - 1));
  });

  function sample(s: EngineStats): void {
    m.running.set(model, s.running);
    m.waiting.set(model, s.waiting);
    m.kvUsage.set(model, s.kv.numPages === 0 ? 0 : s.kv.usedPages / s.kv.numPages);
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
    totals.advance(m.preemptions, s.preemptions, model);
    m.adaptersRegistered.set(a.registered);
    m.adaptersResident.set({ tier: 'device' }, a.residentCount);
    m.adaptersResident.set({ tier: 'host' }, a.hostCount);
    m.adapterResidentBytes.set(a.residentBytes);
    m.adapterBudgetBytes.set(a.deviceBudgetBytes);
    m.steps.inc(s.steps);
    for (const size of s.batchSizes) m.batchSize.observe(size);
  }

  return {
    async collect() {
      if (!engine.healthy) return;
      // The engine may go down between the check and the call: the health gauge says so.
      await engine.call('stats', null).then(sample, () => undefined);
    },
  };
}
