/**
 * BlockLLM's Prometheus metrics, on the server's registry. server-kit adds the process and HTTP metrics and the
 * request metrics under vLLM's names (generationMetrics: tokens, TTFT, latency histograms, queues). BlockLLM adds:
 * end-to-end latency quantiles p50 / p95 over the last requests, generated tokens per second between scrapes, the
 * step loop's per-block batching (block runs, rows, batches that mixed applications, rows copied between blocks),
 * and the memory split of the zoo: unique bytes stored once against the logical bytes per-model provisioning
 * would hold, unique and shared blocks, bytes resident in the device pool. With several devices: the cross-device
 * hand-offs, each device's state, the placement's deploys and evictions, and the route hops the cost model chose
 * (by reason, those crossing devices, and those adaptively served by an equivalent segment), and speculation's
 * outcomes (accepted, rolled back, the tentative runs dropped and the rows re-run).
 */
import { CumulativeTotals, defineMetrics, generationMetrics } from '@tessera/server-kit';
import type { Registry } from 'prom-client';

import type { BlockllmHost, EngineStats } from './engine/protocol.js';

/** How many of the latest requests the quantiles are over. */
export const LATENCY_WINDOW = 1000;

/** The q-quantile (nearest rank) of `values`; NaN when empty. */
export function quantile(values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

export function blockllmMetrics(registry: Registry, engine: BlockllmHost, options: { model: string; now?: () => number }) {
  const now = options.now ?? (() => performance.now());
  const vllm = generationMetrics(registry, { model: options.model });
  const m = defineMetrics(registry, {
    latency: { type: 'gauge', name: 'tessera_blockllm_request_latency_seconds', help: `End-to-end latency quantiles over the last ${LATENCY_WINDOW} requests.`, labels: ['quantile'] },
    tokensPerSecond: { type: 'gauge', name: 'tessera_blockllm_tokens_per_second', help: 'Tokens generated per second since the previous scrape.' },
    steps: { type: 'counter', name: 'tessera_blockllm_steps_total', help: 'Chain steps run (one per iteration of the step loop, all running sequences).' },
    tokens: { type: 'counter', name: 'tessera_blockllm_generated_tokens_total', help: 'Tokens generated.' },
    blockRuns: { type: 'counter', name: 'tessera_blockllm_block_runs_total', help: 'Block runs (one per block per step, over every application using it).' },
    blockRows: { type: 'counter', name: 'tessera_blockllm_block_rows_total', help: 'Rows carried by block runs (rows / runs = mean per-block batch).' },
    sharedBatches: { type: 'counter', name: 'tessera_blockllm_shared_block_batches_total', help: 'Block runs whose batch held rows of two or more applications.' },
    copiedRows: { type: 'counter', name: 'tessera_blockllm_copied_rows_total', help: 'Rows gathered into a new tensor between blocks (the others ran on views).' },
    kvExhausted: { type: 'counter', name: 'tessera_blockllm_kv_exhausted_total', help: "Steps retried because a block's KV cache was full." },
    rebuilds: { type: 'counter', name: 'tessera_blockllm_executor_rebuilds_total', help: 'Chain executors replaced after an ingest re-partitioned a served chain.' },
    bytes: { type: 'gauge', name: 'tessera_blockllm_zoo_bytes', help: 'Zoo bytes: unique (stored once), logical (per-model provisioning), resident (device pool).', labels: ['kind'] },
    blocks: { type: 'gauge', name: 'tessera_blockllm_zoo_blocks', help: 'Zoo blocks: unique, and shared by two or more applications.', labels: ['kind'] },
    crossBytes: { type: 'counter', name: 'tessera_blockllm_cross_device_bytes_total', help: 'Hidden-state bytes handed from one device to another between blocks (several devices).' },
    overlappedSteps: {
      type: 'counter',
      name: 'tessera_blockllm_overlapped_steps_total',
      help: "Device steps that started while another cohort's step was in flight (cohorts pipelined across devices).",
    },
    variantBatches: {
      type: 'counter',
      name: 'tessera_blockllm_variant_batches_total',
      help: 'Block runs that batched several variants of one base block (the foundation component and fused PE blocks modifying it) over one pass of its weights.',
    },
    crossRows: { type: 'counter', name: 'tessera_blockllm_cross_device_rows_total', help: 'Hidden-state rows handed from one device to another between blocks.' },
    commShare: {
      type: 'gauge',
      name: 'tessera_blockllm_communication_share',
      help: 'Share of the device steps\' wall time not spent running blocks on a device: hand-offs between devices and their messages (several devices; 0 on one).',
    },
    utilisation: { type: 'gauge', name: 'tessera_blockllm_device_utilisation', help: 'Busy fraction of each device since it started (time running blocks / time up).', labels: ['device'] },
    deviceBytes: { type: 'gauge', name: 'tessera_blockllm_device_bytes', help: 'Per device: its byte budget and the bytes of the distinct tensors resident on it.', labels: ['device', 'kind'] },
    instances: { type: 'gauge', name: 'tessera_blockllm_device_instances', help: 'Block instances deployed on each device.', labels: ['device'] },
    deploys: { type: 'counter', name: 'tessera_blockllm_deploys_total', help: 'Block instances deployed on devices (placement, jobs, on-demand, per-model swaps).' },
    scaleOuts: { type: 'counter', name: 'tessera_blockllm_scale_outs_total', help: 'Replicas of hot instances deployed on another device by scale-out.' },
    evictions: { type: 'counter', name: 'tessera_blockllm_evictions_total', help: 'Block instances evicted from devices.' },
    loadedBytes: { type: 'counter', name: 'tessera_blockllm_loaded_bytes_total', help: 'Parameter bytes loaded onto devices by deployments.' },
    routeHops: {
      type: 'counter',
      name: 'tessera_blockllm_route_hops_total',
      help: "Route hops chosen by the instance-selection cost model, by its reason: the lowest latency estimate (min-latency) or the instance holding the sequence's KV (kv-owner).",
      labels: ['reason'],
    },
    crossHops: { type: 'counter', name: 'tessera_blockllm_route_cross_device_hops_total', help: 'Chosen route hops whose previous block runs on another device.' },
    adaptiveHops: {
      type: 'counter',
      name: 'tessera_blockllm_route_hops_adaptive_total',
      help: "Chosen route hops that run a block of an equivalent segment (another weight set's) instead of the chain's own: adaptive serving.",
    },
    speculations: {
      type: 'counter',
      name: 'tessera_blockllm_speculations_total',
      help: "Speculations on a surrogate's prediction (a sequence's successor block ran on it while the real block ran), by outcome: accepted (cosine at or above the threshold), rolled-back (re-run on the real output) or superseded (opened downstream of a rolled-back one, re-run with it).",
      labels: ['outcome'],
    },
    migrationPages: {
      type: 'counter',
      name: 'tessera_blockllm_migration_kv_pages_total',
      help: "K/V pages moved by migrate jobs, by how: recomputed on the target from the inputs the source logged, or copied from the source.",
      labels: ['how'],
    },
    specDropped: { type: 'counter', name: 'tessera_blockllm_speculation_dropped_runs_total', help: 'Tentative block runs dropped by rolled-back speculations.' },
    specRepaired: { type: 'counter', name: 'tessera_blockllm_speculation_repaired_rows_total', help: "Rows re-run from a speculated block's successor on its real output." },
  });
  const latencies: number[] = [];
  engine.on('request-end', (end) => {
    vllm.onRequestEnd(end);
    if (end.result === null) return;
    latencies.push((end.endedAt - end.submittedAt) / 1000);
    if (latencies.length > LATENCY_WINDOW) latencies.shift();
  });
  const totals = new CumulativeTotals();
  let last = { at: now(), tokens: 0 };

  function sample(s: EngineStats): void {
    vllm.sample({ running: s.running, waiting: s.waiting, kvUsedPages: 0, kvPages: 1, preemptions: 0 });
    m.latency.set({ quantile: '0.5' }, quantile(latencies, 0.5));
    m.latency.set({ quantile: '0.95' }, quantile(latencies, 0.95));
    const at = now();
    m.tokensPerSecond.set(at > last.at ? ((s.tokens - last.tokens) * 1000) / (at - last.at) : 0);
    last = { at, tokens: s.tokens };
    totals.advance(m.steps, s.steps);
    totals.advance(m.tokens, s.tokens);
    totals.advance(m.blockRuns, s.blockRuns);
    totals.advance(m.blockRows, s.blockRows);
    totals.advance(m.sharedBatches, s.sharedBatches);
    totals.advance(m.copiedRows, s.copiedRows);
    totals.advance(m.kvExhausted, s.kvExhausted);
    totals.advance(m.rebuilds, s.rebuilds);
    m.bytes.set({ kind: 'unique' }, s.memory.uniqueBytes);
    m.bytes.set({ kind: 'logical' }, s.memory.logicalBytes);
    m.bytes.set({ kind: 'resident' }, s.memory.residentBytes);
    m.blocks.set({ kind: 'unique' }, s.memory.uniqueBlocks);
    m.blocks.set({ kind: 'shared' }, s.memory.sharedBlocks);
    const d = s.devices;
    m.commShare.set(d && d.stepMs > 0 ? d.overheadMs / d.stepMs : 0);
    if (!d) return;
    totals.advance(m.crossBytes, d.crossBytes);
    totals.advance(m.crossRows, d.crossRows);
    totals.advance(m.overlappedSteps, d.overlappedSteps);
    totals.advance(m.variantBatches, d.variantBatches);
    totals.advance(m.deploys, d.deploys);
    totals.advance(m.evictions, d.evictions);
    totals.advance(m.scaleOuts, d.scaleOuts);
    totals.advance(m.loadedBytes, d.loadedBytes);
    totals.advance(m.routeHops, d.hopsMinLatency, { reason: 'min-latency' });
    totals.advance(m.routeHops, d.hopsKvOwner, { reason: 'kv-owner' });
    totals.advance(m.crossHops, d.hopsCrossDevice);
    totals.advance(m.adaptiveHops, d.hopsAdaptive);
    totals.advance(m.speculations, d.specAccepted, { outcome: 'accepted' });
    totals.advance(m.speculations, d.specRolledBack, { outcome: 'rolled-back' });
    totals.advance(m.speculations, d.speculations - d.specAccepted - d.specRolledBack, { outcome: 'superseded' });
    totals.advance(m.specDropped, d.specDroppedSteps);
    totals.advance(m.migrationPages, d.migrationPagesRecomputed, { how: 'recomputed' });
    totals.advance(m.migrationPages, d.migrationPagesCopied, { how: 'copied' });
    totals.advance(m.specRepaired, d.specRepairedRows);
    for (const dev of d.perDevice) {
      m.utilisation.set({ device: dev.id }, dev.upMs > 0 ? dev.busyMs / dev.upMs : 0);
      m.deviceBytes.set({ device: dev.id, kind: 'budget' }, dev.budgetBytes);
      m.deviceBytes.set({ device: dev.id, kind: 'resident' }, dev.residentBytes);
      m.instances.set({ device: dev.id }, dev.instances);
    }
  }

  return { collect: async () => sample(await engine.call('stats', null)) };
}
