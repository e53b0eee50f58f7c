/**
 * cluster-sim: Punica's Fig. 13 in simulation (paper §7; punica.md §10.3, §14 item 8). @tessera/sim runs the real
 * PunicaScheduler, ClientStreams and batcher Schedulers over simulated GPUs (step latency from the paper's Fig. 1
 * model for Llama-2 7B on an A100; real paged-KV budgets) under a virtual clock: 16 GPUs for one simulated hour,
 * Poisson arrivals whose rate ramps up and back down, zipf-1.5 adapter popularity. Quick mode: 6 GPUs for 10
 * simulated minutes with sequences a quarter as long.
 *
 * Three charts, as the paper's three panels: request rate, cluster throughput, and per-GPU batch size over time
 * (a heatmap: one row per GPU). What the paper observes, and the ratios that measure it here: busy GPUs run at the
 * batch cap (sim_busy_gpu_time_at_cap_frac, and within 90 % of it), a GPU dips below the cap when it runs out of
 * KV and migrates requests away (sim_migrations), and an idle GPU stays idle and could be released
 * (sim_idle_gpus_stay_idle: of the GPUs idle for the release delay after the load peaked, the fraction never
 * needed again). sim_wall_seconds is this machine's wall time for the whole simulated run.
 */
import { type ClusterSimulationResult, clusterSimulationPreset, paperLatencyModel, runClusterSimulation } from '@tessera/sim';
import { escapeXml, formatTick, lineChart, niceTicks } from '../svg.js';

export interface ClusterSimFigure {
  rows: Record<string, string | number>[];
  ratios: Record<string, number>;
  svgs: { rate: string; throughput: string; batch: string };
  json: { options: Record<string, unknown> } & Record<string, unknown>;
}

const minutes = (ms: number) => ms / 60_000;

/** Rows of the printed table: one per `everyMs` of simulated time (means over the samples in it). */
function tableRows(result: ClusterSimulationResult, everyMs: number): Record<string, string | number>[] {
  const rows: Record<string, string | number>[] = [];
  let bucket: ClusterSimulationResult['timeline'] = [];
  let end = everyMs;
  const flush = () => {
    if (bucket.length === 0) return;
    const mean = (f: (s: (typeof bucket)[number]) => number) => bucket.reduce((a, s) => a + f(s), 0) / bucket.length;
    const active = bucket.flatMap((s) => s.batch.filter((b) => b > 0));
    rows.push({
      // The bucket's end (the last one may run past the arrival window while the last requests finish).
      until_minute: minutes(Math.min(end, bucket.at(-1)!.tMs)),
      target_req_per_s: mean((s) => s.targetRatePerSec),
      arrivals_per_s: mean((s) => s.arrivalsPerSec),
      tokens_per_s: mean((s) => s.tokensPerSec),
      active_gpus: mean((s) => s.activeGpus),
      mean_batch_active: active.length > 0 ? active.reduce((a, b) => a + b, 0) / active.length : 0,
      queued: mean((s) => s.queued),
      need_host: bucket.filter((s) => s.needHost).length / bucket.length,
      releasable: mean((s) => s.releasable),
    });
    bucket = [];
  };
  for (const s of result.timeline) {
    if (s.tMs > end) {
      flush();
      while (s.tMs > end) end += everyMs;
    }
    bucket.push(s);
  }
  flush();
  return rows;
}

/** Sequential blue scale: 0 → white, 1 → dark blue. */
function blue(f: number): string {
  const lo = [247, 251, 255];
  const hi = [8, 48, 107];
  const c = lo.map((l, i) => Math.round(l + (hi[i]! - l) * Math.min(1, Math.max(0, f))));
  return `rgb(${c.join(',')})`;
}

/**
 * A heatmap of per-GPU batch size over time: one row per GPU (the last id on top, as placement prefers it), one
 * column per timeline sample, colour = time-mean batch size (white = idle, dark = at the cap). Runs of equal
 * rounded values are merged into one rect.
 */
export function batchHeatmap(result: ClusterSimulationResult, title: string): string {
  const { timeline, config } = result;
  const gpus = config.gpus;
  const width = 900;
  const left = 70;
  const right = 90;
  const top = 50;
  const rowH = Math.max(8, Math.min(22, Math.floor(420 / gpus.length)));
  const plotH = rowH * gpus.length;
  const height = top + plotH + 56;
  const plotW = width - left - right;
  const t0 = 0;
  const t1 = timeline.at(-1)?.tMs ?? 1;
  const x = (t: number) => left + ((t - t0) / (t1 - t0)) * plotW;
  const out: string[] = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="${width / 2}" y="22" text-anchor="middle" font-size="16" font-weight="bold">${escapeXml(title)}</text>`,
  ];
  if (timeline.length > 0) gpus.forEach((id, g) => {
    const row = gpus.length - 1 - g;
    const y = top + row * rowH;
    out.push(`<text x="${left - 6}" y="${y + rowH / 2 + 4}" text-anchor="end" font-size="${Math.min(11, rowH - 1)}">${escapeXml(id)}</text>`);
    let start = 0;
    for (let i = 0; i <= timeline.length; i++) {
      const value = i < timeline.length ? Math.round(timeline[i]!.batch[g]!) : -1;
      const runValue = Math.round(timeline[start]?.batch[g] ?? -1);
      if (i < timeline.length && value === runValue) continue;
      const from = start === 0 ? t0 : timeline[start - 1]!.tMs;
      const to = timeline[i - 1]!.tMs;
      if (runValue > 0) {
        out.push(
          `<rect x="${x(from).toFixed(1)}" y="${y}" width="${Math.max(0.5, x(to) - x(from)).toFixed(1)}" height="${rowH - 1}" fill="${blue(runValue / config.maxBatch)}">` +
            `<title>${escapeXml(`${id}, minutes ${formatTick(minutes(from))}–${formatTick(minutes(to))}: batch ≈ ${runValue}`)}</title></rect>`,
        );
      }
      start = i;
    }
  });
  out.push(`<rect x="${left}" y="${top}" width="${plotW}" height="${plotH - 1}" fill="none" stroke="#333333"/>`);
  const xb = top + plotH;
  for (const t of niceTicks(minutes(t0), minutes(t1), 8)) {
    if (t * 60_000 > t1 + 1e-6) continue;
    const px = x(t * 60_000).toFixed(1);
    out.push(`<line x1="${px}" y1="${xb}" x2="${px}" y2="${xb + 5}" stroke="#333333"/>`);
    out.push(`<text x="${px}" y="${xb + 18}" text-anchor="middle">${escapeXml(formatTick(t))}</text>`);
  }
  out.push(`<text x="${left + plotW / 2}" y="${height - 10}" text-anchor="middle">simulated minutes</text>`);
  // Colour key.
  const kx = width - right + 24;
  const steps = 8;
  for (let i = 0; i < steps; i++) {
    const f = (steps - 1 - i) / (steps - 1);
    out.push(`<rect x="${kx}" y="${top + (i * plotH) / steps}" width="14" height="${(plotH / steps).toFixed(1)}" fill="${blue(f)}" stroke="#cccccc" stroke-width="0.5"/>`);
  }
  out.push(`<text x="${kx + 18}" y="${top + 10}">${config.maxBatch}</text>`);
  out.push(`<text x="${kx + 18}" y="${top + plotH}">0</text>`);
  out.push(`<text x="${kx + 7}" y="${top - 8}" text-anchor="middle">batch</text>`);
  out.push('</svg>', '');
  return out.join('\n');
}

export async function clusterSimFigure(options: { quick: boolean; log: (line: string) => void }): Promise<ClusterSimFigure> {
  const preset = clusterSimulationPreset(options.quick ? 'quick' : 'full');
  const size = options.quick ? 'quick: 6 GPUs, 10 simulated minutes' : 'full: 16 GPUs, one simulated hour';
  options.log(`cluster-sim: running the Fig. 13 simulation (${size})`);
  const started = performance.now();
  const result = runClusterSimulation(preset);
  const wallSeconds = (performance.now() - started) / 1000;
  const t = result.totals;
  options.log(
    `cluster-sim: ${t.requests} requests, ${t.tokens} tokens, ${t.steps} GPU steps, ${t.migrations} migrations in ${wallSeconds.toFixed(1)} s wall`,
  );

  const xs = result.timeline.map((s) => minutes(s.tMs));
  const rate = lineChart({
    title: `Request rate (${result.config.gpus.length} GPUs)`,
    xLabel: 'simulated minutes',
    yLabel: 'requests / s',
    series: [
      { name: 'arrivals (Poisson)', points: result.timeline.map((s, i) => ({ x: xs[i]!, y: s.arrivalsPerSec })), markers: false },
      { name: 'target rate', points: result.timeline.map((s, i) => ({ x: xs[i]!, y: s.targetRatePerSec })), markers: false, dashed: true },
    ],
  });
  const throughput = lineChart({
    title: 'Cluster throughput',
    xLabel: 'simulated minutes',
    yLabel: 'tokens / s',
    series: [{ name: 'tokens delivered / s', points: result.timeline.map((s, i) => ({ x: xs[i]!, y: s.tokensPerSec })), markers: false }],
  });
  const batch = batchHeatmap(result, `Batch size per GPU (cap ${result.config.maxBatch})`);

  const exactFrac = t.tokenCheck.checked > 0 ? t.tokenCheck.exact / t.tokenCheck.checked : 0;
  const ratios: Record<string, number> = {
    sim_busy_gpu_time_at_cap_frac: t.busyGpuTimeAtCapFraction,
    sim_busy_gpu_time_near_cap_frac: t.busyGpuTimeNearCapFraction,
    sim_mean_busy_batch: t.meanBusyBatch,
    sim_gpu_time_idle_frac: t.gpuTimeIdleFraction,
    sim_idle_gpus_stay_idle: t.idleAfterPeak.fraction,
    sim_migrations: t.migrations,
    sim_requests: t.requests,
    sim_tokens: t.tokens,
    sim_exact_token_streams_frac: exactFrac,
    sim_wall_seconds: wallSeconds,
    sim_simulated_seconds_per_wall_second: t.endMs / 1000 / wallSeconds,
  };
  return {
    rows: tableRows(result, options.quick ? 60_000 : 300_000),
    ratios,
    svgs: { rate, throughput, batch },
    json: {
      options: { quick: options.quick, ...result.config },
      latencyModel: paperLatencyModel().coefficients,
      wallSeconds,
      totals: t,
      gpus: result.gpus,
      timeline: result.timeline,
    },
  };
}
