/**
 * Declaring a server's Prometheus metrics (prom-client) as one table on its registry, and counters that follow a
 * cumulative figure sampled from the engine (advance by the difference since the previous sample).
 *
 *   const m = defineMetrics(app.metricsRegistry, {
 *     running: { type: 'gauge', name: 'vllm:num_requests_running', help: '…', labels: ['model_name'] },
 *     hits: { type: 'counter', name: 'tessera_adapter_cache_hits_total', help: '…' },
 *   });
 *   m.running.set({ model_name: 'x' }, 3);
 *   totals.advance(m.hits, stats.hits);          // + (stats.hits − the previous stats.hits)
 */
import { Counter, Gauge, Histogram, type LabelValues, type Registry } from 'prom-client';

export type MetricSpec =
  | { type: 'counter' | 'gauge'; name: string; help: string; labels?: readonly string[] }
  | { type: 'histogram'; name: string; help: string; labels?: readonly string[]; buckets?: readonly number[] };

type LabelsOf<S> = S extends { labels: readonly (infer L extends string)[] } ? L : string;

export type MetricOf<S extends MetricSpec> = S['type'] extends 'counter'
  ? Counter<LabelsOf<S>>
  : S['type'] extends 'gauge'
    ? Gauge<LabelsOf<S>>
    : Histogram<LabelsOf<S>>;

/** Creates the metrics of `spec` on `registry`, keyed as in the spec. */
export function defineMetrics<const S extends Record<string, MetricSpec>>(registry: Registry, spec: S): { [K in keyof S]: MetricOf<S[K]> } {
  const out: Record<string, unknown> = {};
  for (const [key, s] of Object.entries(spec)) {
    const common = { name: s.name, help: s.help, labelNames: [...(s.labels ?? [])], registers: [registry] };
    if (s.type === 'counter') out[key] = new Counter(common);
    else if (s.type === 'gauge') out[key] = new Gauge(common);
    else out[key] = new Histogram({ ...common, ...('buckets' in s && s.buckets ? { buckets: [...s.buckets] } : {}) });
  }
  return out as { [K in keyof S]: MetricOf<S[K]> };
}

/** Counters that follow cumulative totals sampled from an engine: each sample advances by its increase (never back). */
export class CumulativeTotals {
  private readonly last = new Map<string, number>();

  advance<L extends string>(counter: Counter<L>, total: number, labels: LabelValues<L> = {}): void {
    const key = `${(counter as unknown as { name: string }).name}${JSON.stringify(labels)}`;
    counter.inc(labels, Math.max(0, total - (this.last.get(key) ?? 0)));
    this.last.set(key, total);
  }
}
