/**
 * Prometheus metrics (prom-client), one Registry per app instance (tests build several apps in one process).
 * Names follow vLLM's where the meaning matches, so existing dashboards, the llm-d router and the Gateway API
 * inference extension read them unchanged; `tessera_*` adds what no engine exposes today: the adapter cache's
 * hits, misses, evictions and load latency, the batch sizes of the step loop, KV pages.
 *
 * Sources: per-request counters and latencies come from the EngineClient's 'request-end' events (measured on
 * the HTTP thread, submit → first token → end); queue, KV, adapter-cache and batch figures are sampled from the
 * worker when /metrics is scraped (counters advance by the difference since the previous scrape).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

import { definePlugin } from '@tessera/server-kit';

import type { RequestEnd } from '../engine/client.js';
import type { GenerationEngine } from '../engine/generation-engine.js';
import type { EngineStats } from '../engine/protocol.js';

const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];

export class PunicaMetrics {
  readonly registry = new Registry();
  private readonly model: string;
  private last: EngineStats | null = null;

  readonly running: Gauge<'model_name'>;
  readonly waiting: Gauge<'model_name'>;
  readonly kvUsage: Gauge<'model_name'>;
  readonly loraInfo: Gauge<'max_lora' | 'running_lora_adapters' | 'waiting_lora_adapters'>;
  readonly promptTokens: Counter<'model_name'>;
  readonly generationTokens: Counter<'model_name'>;
  readonly success: Counter<'model_name' | 'finished_reason'>;
  readonly preemptions: Counter<'model_name'>;
  readonly ttft: Histogram<'model_name'>;
  readonly e2e: Histogram<'model_name'>;
  readonly tpot: Histogram<'model_name'>;
  readonly requestPromptTokens: Histogram<'model_name'>;
  readonly requestGenerationTokens: Histogram<'model_name'>;

  readonly cacheHits: Counter;
  readonly cacheMisses: Counter;
  readonly cacheEvictions: Counter<'tier'>;
  readonly adapterLoads: Counter;
  readonly adapterLoadFailures: Counter;
  readonly adapterLoadSeconds: Histogram;
  readonly adaptersRegistered: Gauge;
  readonly adaptersResident: Gauge<'tier'>;
  readonly adapterResidentBytes: Gauge;
  readonly adapterBudgetBytes: Gauge;
  readonly batchSize: Histogram;
  readonly steps: Counter;
  readonly kvUsedPages: Gauge;
  readonly kvTotalPages: Gauge;
  readonly requestsCancelled: Counter;
  readonly requestsFailed: Counter;
  readonly engineHealthy: Gauge;
  readonly httpDuration: Histogram<'method' | 'route' | 'status_code'>;

  constructor(modelName: string, private readonly maxLora: number) {
    this.model = modelName;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    const labelNames = ['model_name'] as const;

    this.running = new Gauge({ name: 'vllm:num_requests_running', help: 'Requests in the running batch (prefilled, decoding).', labelNames, registers });
    this.waiting = new Gauge({ name: 'vllm:num_requests_waiting', help: 'Requests queued (not yet prefilled, or waiting for their adapter).', labelNames, registers });
    this.kvUsage = new Gauge({ name: 'vllm:kv_cache_usage_perc', help: 'KV-cache usage: used pages / all pages (1 = full).', labelNames, registers });
    this.loraInfo = new Gauge({
      name: 'vllm:lora_requests_info',
      help: 'Running and waiting LoRA adapters (comma-separated label values); the value is the sample time in seconds.',
      labelNames: ['max_lora', 'running_lora_adapters', 'waiting_lora_adapters'],
      registers,
    });
    this.promptTokens = new Counter({ name: 'vllm:prompt_tokens_total', help: 'Prompt tokens of finished requests.', labelNames, registers });
    this.generationTokens = new Counter({ name: 'vllm:generation_tokens_total', help: 'Generated tokens of finished requests.', labelNames, registers });
    this.success = new Counter({
      name: 'vllm:request_success_total',
      help: 'Finished requests by finish reason (stop: EOS or a stop string; length: max_tokens; abort: cancelled by the client).',
      labelNames: ['model_name', 'finished_reason'],
      registers,
    });
    this.preemptions = new Counter({ name: 'vllm:num_preemptions_total', help: 'Requests preempted (KV cache full) and re-queued.', labelNames, registers });
    this.ttft = new Histogram({ name: 'vllm:time_to_first_token_seconds', help: 'Time from submission to the first generated token.', labelNames, buckets: LATENCY_BUCKETS, registers });
    this.e2e = new Histogram({ name: 'vllm:e2e_request_latency_seconds', help: 'Time from submission to the end of the request.', labelNames, buckets: LATENCY_BUCKETS, registers });
    this.tpot = new Histogram({ name: 'vllm:time_per_output_token_seconds', help: 'Mean time per generated token after the first.', labelNames, buckets: LATENCY_BUCKETS, registers });
    this.requestPromptTokens = new Histogram({ name: 'vllm:request_prompt_tokens', help: 'Prompt tokens per request.', labelNames, buckets: TOKEN_BUCKETS, registers });
    this.requestGenerationTokens = new Histogram({ name: 'vllm:request_generation_tokens', help: 'Generated tokens per request.', labelNames, buckets: TOKEN_BUCKETS, registers });

    this.cacheHits = new Counter({ name: 'tessera_adapter_cache_hits_total', help: 'Adapter lookups that found the adapter resident on the device.', registers });
    this.cacheMisses = new Counter({ name: 'tessera_adapter_cache_misses_total', help: 'Requests whose adapter was not resident and had to be loaded.', registers });
    this.cacheEvictions = new Counter({ name: 'tessera_adapter_cache_evictions_total', help: 'Adapters evicted to make room, by tier.', labelNames: ['tier'], registers });
    this.adapterLoads = new Counter({ name: 'tessera_adapter_loads_total', help: 'Adapters made resident on the device.', registers });
    this.adapterLoadFailures = new Counter({ name: 'tessera_adapter_load_failures_total', help: 'Adapter loads that failed.', registers });
    this.adapterLoadSeconds = new Histogram({ name: 'tessera_adapter_load_seconds', help: 'Adapter load time: host read (from disk) plus upload.', buckets: LATENCY_BUCKETS, registers });
    this.adaptersRegistered = new Gauge({ name: 'tessera_adapters_registered', help: 'Adapters registered (servable).', registers });
    this.adaptersResident = new Gauge({ name: 'tessera_adapters_resident', help: 'Adapters resident per tier (device, host cache).', labelNames: ['tier'], registers });
    this.adapterResidentBytes = new Gauge({ name: 'tessera_adapter_device_bytes', help: 'Device bytes held by resident adapters.', registers });
    this.adapterBudgetBytes = new Gauge({ name: 'tessera_adapter_device_budget_bytes', help: 'Device byte budget for resident adapters.', registers });
    this.batchSize = new Histogram({
      name: 'tessera_batch_size',
      help: 'Sequences per engine step (decodes plus the prefill).',
      buckets: [1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128],
      registers,
    });
    this.steps = new Counter({ name: 'tessera_engine_steps_total', help: 'Engine steps (model forwards) run.', registers });
    this.kvUsedPages = new Gauge({ name: 'tessera_kv_cache_used_pages', help: 'KV-cache pages held by sequences.', registers });
    this.kvTotalPages = new Gauge({ name: 'tessera_kv_cache_pages', help: 'KV-cache pages in the pool.', registers });
    this.requestsCancelled = new Counter({ name: 'tessera_requests_cancelled_total', help: 'Requests cancelled because the client went away.', registers });
    this.requestsFailed = new Counter({ name: 'tessera_requests_failed_total', help: 'Requests that ended with an error.', registers });
    this.engineHealthy = new Gauge({ name: 'tessera_engine_healthy', help: '1 while the engine worker runs, 0 after it crashed or stopped.', registers });
    this.httpDuration = new Histogram({
      name: 'tessera_http_request_duration_seconds',
      help: 'HTTP request duration (streams: until the last chunk), by route and status.',
      labelNames: ['method', 'route', 'status_code'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    // Series that should read 0 before the first event, rather than being absent.
    for (const m of [this.promptTokens, this.generationTokens, this.preemptions]) m.inc({ model_name: modelName }, 0);
    for (const reason of ['stop', 'length', 'abort']) this.success.inc({ model_name: modelName, finished_reason: reason }, 0);
  }

  /** Per-request figures, when a request ends. */
  onRequestEnd(end: RequestEnd): void {
    const labels = { model_name: this.model };
    if (end.error) {
      this.requestsFailed.inc();
      return;
    }
    const reason = end.finishReason === 'length' ? 'length' : end.finishReason === 'cancelled' ? 'abort' : 'stop';
    this.success.inc({ ...labels, finished_reason: reason });
    if (end.finishReason === 'cancelled') this.requestsCancelled.inc();
    this.promptTokens.inc(labels, end.promptTokens);
    this.generationTokens.inc(labels, end.completionTokens);
    this.requestPromptTokens.observe(labels, end.promptTokens);
    this.requestGenerationTokens.observe(labels, end.completionTokens);
    this.e2e.observe(labels, (end.endedAt - end.submittedAt) / 1000);
    if (end.firstTokenAt !== null) {
      this.ttft.observe(labels, (end.firstTokenAt - end.submittedAt) / 1000);
      if (end.completionTokens > 1) this.tpot.observe(labels, (end.endedAt - end.firstTokenAt) / 1000 / (end.completionTokens - 1));
    }
  }

  /** Engine-side figures, sampled at scrape time. */
  onEngineStats(s: EngineStats): void {
    const labels = { model_name: this.model };
    const prev = this.last;
    const delta = (now: number, before: number | undefined) => Math.max(0, now - (before ?? 0));
    this.running.set(labels, s.running);
    this.waiting.set(labels, s.waiting);
    this.kvUsage.set(labels, s.kv.numPages === 0 ? 0 : s.kv.usedPages / s.kv.numPages);
    this.kvUsedPages.set(s.kv.usedPages);
    this.kvTotalPages.set(s.kv.numPages);
    this.loraInfo.reset();
    this.loraInfo.set(
      { max_lora: String(this.maxLora), running_lora_adapters: s.runningAdapters.join(','), waiting_lora_adapters: s.waitingAdapters.join(',') },
      Date.now() / 1000,
    );
    const a = s.adapters;
    this.cacheHits.inc(delta(a.hits, prev?.adapters.hits));
    this.cacheMisses.inc(delta(a.misses, prev?.adapters.misses));
    this.cacheEvictions.inc({ tier: 'device' }, delta(a.deviceEvictions, prev?.adapters.deviceEvictions));
    this.cacheEvictions.inc({ tier: 'host' }, delta(a.hostEvictions, prev?.adapters.hostEvictions));
    this.adapterLoads.inc(delta(a.loads, prev?.adapters.loads));
    this.adapterLoadFailures.inc(delta(a.loadFailures, prev?.adapters.loadFailures));
    this.preemptions.inc(labels, delta(s.preemptions, prev?.preemptions));
    this.adaptersRegistered.set(a.registered);
    this.adaptersResident.set({ tier: 'device' }, a.residentCount);
    this.adaptersResident.set({ tier: 'host' }, a.hostCount);
    this.adapterResidentBytes.set(a.residentBytes);
    this.adapterBudgetBytes.set(a.deviceBudgetBytes);
    this.steps.inc(s.steps);
    for (const size of s.batchSizes) this.batchSize.observe(size);
    this.last = s;
  }
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: PunicaMetrics;
  }
}

export interface MetricsPluginOptions {
  /** Distinct adapters one step may mix (vLLM's max_lora label): the batch size, since Punica mixes any adapters. */
  maxLora: number;
}

export const metricsPlugin = definePlugin<MetricsPluginOptions>(
  async (app, options) => {
    const metrics = new PunicaMetrics(app.modelInfo.name, options.maxLora);
    app.decorate('metrics', metrics);
    app.engine.on('request-end', (end) => metrics.onRequestEnd(end));
    app.engine.on('adapter-loaded', ({ seconds }) => metrics.adapterLoadSeconds.observe(seconds));
    app.addHook('onResponse', async (request, reply) => {
      const route = request.routeOptions.url;
      if (route === undefined) return;
      metrics.httpDuration.observe({ method: request.method, route, status_code: String(reply.statusCode) }, reply.elapsedTime / 1000);
    });
  },
  { name: 'tessera-punica-metrics', dependencies: ['tessera-punica-engine'] },
);

/** Refreshes the engine-sampled metrics (call before rendering /metrics). */
export async function refreshEngineMetrics(app: { engine: GenerationEngine; metrics: PunicaMetrics }): Promise<void> {
  app.metrics.engineHealthy.set(app.engine.healthy ? 1 : 0);
  if (!app.engine.healthy) return;
  try {
    app.metrics.onEngineStats(await app.engine.stats());
  } catch {
    // The engine went down between the check and the call: the health gauge says so on the next scrape.
    app.metrics.engineHealthy.set(app.engine.healthy ? 1 : 0);
  }
}
