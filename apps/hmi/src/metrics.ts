/**
 * /metrics (Prometheus text, on the app's registry beside server-kit's HTTP metrics): each pipeline stage's time,
 * the dispatcher's queue, the jobs, the tenants and their bytes, the PLOT tables.
 */
import { CumulativeTotals, defineMetrics } from '@tessera/server-kit';
import type { Registry } from 'prom-client';

import type { HmiEngine } from './engine/hmi-engine.js';

export function hmiMetrics(registry: Registry, engine: HmiEngine): { collect: () => Promise<void> } {
  const m = defineMetrics(registry, {
    stage: { type: 'counter', name: 'hmi_pipeline_stage_seconds_total', help: 'Time in each pipeline stage: retrieve (PLOT lookup + aggregation), gather (adapters into host staging), copy (staging → per-layer device buffer), compute (upper layers), head.', labels: ['stage'] },
    batches: { type: 'counter', name: 'hmi_batches_total', help: 'Batches run through the pipeline.' },
    requests: { type: 'counter', name: 'hmi_classify_requests_total', help: 'Classify inputs answered.' },
    failed: { type: 'counter', name: 'hmi_classify_failures_total', help: 'Classify inputs that failed in the engine.' },
    copies: { type: 'counter', name: 'hmi_adapter_layer_copies_total', help: 'Adapter-layer copies into device buffers (|batch| × upper layers per batch).' },
    queue: { type: 'gauge', name: 'hmi_dispatch_queue_depth', help: 'Classify inputs waiting in the dispatcher.' },
    inFlight: { type: 'gauge', name: 'hmi_batches_in_flight', help: 'Batches in the pipeline (at most --slots).' },
    jobs: { type: 'gauge', name: 'hmi_jobs', help: 'Manager jobs by state.', labels: ['state'] },
    tenants: { type: 'gauge', name: 'hmi_tenants', help: 'Registered tenants.' },
    tenantBytes: { type: 'gauge', name: 'hmi_tenant_bytes', help: 'Host bytes of all tenants, by part (adapters, head); exact: the sum of their arrays. Device bytes per tenant at rest: 0.', labels: ['part'] },
    storeBytes: { type: 'gauge', name: 'hmi_tenant_store_bytes', help: 'Tenant adapter store: disk (Σ file lengths) and host (Σ cached arrays, under --host-mb).', labels: ['tier'] },
    storeOps: { type: 'counter', name: 'hmi_tenant_store_ops_total', help: 'Tenant adapter store: host hits, misses, disk reads (prefetch included), prefetch reads, evictions.', labels: ['op'] },
    domains: { type: 'gauge', name: 'hmi_domains', help: 'Domains, the root included.' },
    plotBytes: { type: 'gauge', name: 'hmi_plot_bytes', help: 'PLOT bytes: the version tree (values, indexes, zero row) and the serving snapshots.', labels: ['part'] },
    plotEntries: { type: 'gauge', name: 'hmi_plot_entries', help: 'Entries over every PLOT table.' },
  });
  const totals = new CumulativeTotals();
  return {
    async collect() {
      const t = engine.runner.times;
      totals.advance(m.stage, t.retrieveMs / 1000, { stage: 'retrieve' });
      totals.advance(m.stage, t.gatherMs / 1000, { stage: 'gather' });
      totals.advance(m.stage, t.copyMs / 1000, { stage: 'copy' });
      totals.advance(m.stage, t.computeMs / 1000, { stage: 'compute' });
      totals.advance(m.stage, t.headMs / 1000, { stage: 'head' });
      totals.advance(m.batches, t.batches);
      totals.advance(m.requests, engine.counts.requests);
      totals.advance(m.failed, engine.counts.failed);
      totals.advance(m.copies, t.adapterCopies);
      m.queue.set(engine.dispatcher.depth);
      m.inFlight.set(engine.runner.inFlight);
      const jobs = await engine.queue.counts();
      m.jobs.set({ state: 'queued' }, jobs.queued);
      m.jobs.set({ state: 'running' }, jobs.running);
      m.tenants.set(engine.tenants.size);
      m.tenantBytes.set({ part: 'adapters' }, engine.tenants.adapterBytes);
      m.tenantBytes.set({ part: 'head' }, engine.tenants.headBytes);
      const store = engine.tenants.tiers();
      m.storeBytes.set({ tier: 'disk' }, store.diskBytes);
      m.storeBytes.set({ tier: 'host' }, store.hostBytes);
      for (const op of ['hits', 'misses', 'reads', 'prefetchReads', 'evictions'] as const) totals.advance(m.storeOps, store[op], { op });
      m.domains.set(engine.manager.domains.size);
      const plot = engine.plot.storage();
      m.plotBytes.set({ part: 'tree' }, plot.treeBytes);
      m.plotBytes.set({ part: 'snapshots' }, plot.snapshotBytes);
      m.plotEntries.set(plot.entries);
    },
  };
}
