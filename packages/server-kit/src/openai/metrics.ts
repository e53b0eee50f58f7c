/**
 * The request metrics of a token-generating server under vLLM's names, so existing dashboards, the llm-d router and
 * the Gateway API inference extension read them unchanged: finished requests by reason, prompt and generated
 * tokens, time to first token, end-to-end latency, time per output token, the running and waiting queues and the
 * KV-cache usage; plus cancelled and failed request counts.
 *
 *   const vllm = generationMetrics(app.metricsRegistry, { model: 'tiny-llama' });
 *   engine.on('request-end', (end) => vllm.onRequestEnd(end));     // measured on the HTTP thread
 *   vllm.sample({ running, waiting, kvUsedPages, kvPages, preemptions });   // engine figures, at scrape time
 */
import type { FinishedResult } from '@tessera/cluster';
import type { Registry } from 'prom-client';

import { CumulativeTotals, defineMetrics } from '../http/metrics.js';

export const LATENCY_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
const TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
const labels = ['model_name'] as const;
const latency = { type: 'histogram', labels, buckets: LATENCY_BUCKETS } as const;
const tokens = { type: 'histogram', labels, buckets: TOKEN_BUCKETS } as const;

/** What the engine reports at scrape time (cumulative preemptions). */
export interface GenerationSample {
  running: number;
  waiting: number;
  kvUsedPages: number;
  kvPages: number;
  preemptions: number;
}

export function generationMetrics(registry: Registry, options: { model: string }) {
  const m = defineMetrics(registry, {
    running: { type: 'gauge', name: 'vllm:num_requests_running', help: 'Requests in the running batch (prefilled, decoding).', labels },
    waiting: { type: 'gauge', name: 'vllm:num_requests_waiting', help: 'Requests queued (not yet prefilled, or waiting for their adapter).', labels },
    kvUsage: { type: 'gauge', name: 'vllm:kv_cache_usage_perc', help: 'KV-cache usage: used pages / all pages (1 = full).', labels },
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
    requestsCancelled: { type: 'counter', name: 'tessera_requests_cancelled_total', help: 'Requests cancelled because the client went away.' },
    requestsFailed: { type: 'counter', name: 'tessera_requests_failed_total', help: 'Requests that ended with an error.' },
  });
  const model = { model_name: options.model };
  const totals = new CumulativeTotals();
  // Series that should read 0 before the first event, rather than being absent.
  for (const c of [m.promptTokens, m.generationTokens, m.preemptions]) c.inc(model, 0);
  for (const reason of ['stop', 'length', 'abort']) m.success.inc({ ...model, finished_reason: reason }, 0);

  return {
    metrics: m,
    /** A request ended (times from performance.now(), ms; `result` null when it failed). */
    onRequestEnd(end: { result: FinishedResult | null; submittedAt: number; firstItemAt: number | null; endedAt: number }): void {
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
    },
    /** The engine's queues and KV cache, sampled at scrape time. */
    sample(s: GenerationSample): void {
      m.running.set(model, s.running);
      m.waiting.set(model, s.waiting);
      m.kvUsage.set(model, s.kvPages === 0 ? 0 : s.kvUsedPages / s.kvPages);
      totals.advance(m.preemptions, s.preemptions, model);
    },
  };
}
