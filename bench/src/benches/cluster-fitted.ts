/**
 * cluster-fitted: the simulator's other latency source. Real engine steps (Scheduler + StepRunner) of the generated mini
 * decoder are profiled on this machine, a linear step-latency model is fitted to them (least squares), and the
 * quick Fig. 13 simulation runs again with this CPU's latencies instead of the paper's A100 curve. The arrival
 * rate is scaled by how much slower a full decode step is here, so the simulated GPUs carry the same relative load.
 */
import {
  type StepShape,
  clusterSimulationPreset,
  fitLatencyModel,
  paperLatencyModel,
  rampProfile,
  runClusterSimulation,
} from '@tessera/sim';

import { profileDecoderSteps } from '../latency-profile.js';
import { miniModelDir } from '../models.js';
import type { Row, TableSpec } from '../table.js';

export async function clusterFittedFigure(options: { quick: boolean; log: (line: string) => void }) {
  const modelDir = miniModelDir('decoder', options.log);
  options.log('cluster-fitted: profiling engine steps of the mini decoder on this machine');
  const samples = await profileDecoderSteps({
    modelDir,
    batchSizes: options.quick ? [1, 4, 16] : [1, 2, 4, 8, 16, 32],
    contextLengths: options.quick ? [16, 64] : [16, 64, 128],
    decodeSteps: 3,
  });
  const fit = fitLatencyModel(samples);
  // A full decode step at the cap with a typical context, here and in the paper's model.
  const full: StepShape = { batchSize: 32, prefillTokens: 0, decodeRows: 32, kvTokens: 32 * 256 };
  const slowdown = fit.model.stepMs(full) / paperLatencyModel().stepMs(full);
  const preset = clusterSimulationPreset('quick');
  const durationMs = preset.durationMs!;
  const peak = (5 * 6) / slowdown;
  options.log(`cluster-fitted: fitted ${fit.samples} steps (R² ${fit.r2.toFixed(3)}); simulating with a ${peak.toFixed(2)} req/s peak`);
  const result = runClusterSimulation({ ...preset, latency: fit.model, arrivals: rampProfile({ peakPerSec: peak, durationMs }), sampleEveryMs: durationMs / 20 });
  const t = result.totals;
  const c = fit.coefficients;
  const rows: Row[] = [
    {
      latency: 'fitted on this CPU (mini decoder)',
      intercept_ms: c.interceptMs,
      per_decode_row_ms: c.perDecodeRowMs,
      per_prefill_token_ms: c.perPrefillTokenMs,
      per_kv_token_ms: c.perKvTokenMs,
      r2: fit.r2,
      step_b32_ms: fit.model.stepMs(full),
      requests: t.requests,
      migrations: t.migrations,
      mean_busy_batch: t.meanBusyBatch,
    },
  ];
  const p = paperLatencyModel().coefficients;
  rows.push({
    latency: "paper (Llama-2 7B, A100, Fig. 1)",
    intercept_ms: p.interceptMs,
    per_decode_row_ms: p.perDecodeRowMs,
    per_prefill_token_ms: p.perPrefillTokenMs,
    per_kv_token_ms: p.perKvTokenMs,
    r2: null,
    step_b32_ms: paperLatencyModel().stepMs(full),
    requests: null,
    migrations: null,
    mean_busy_batch: null,
  });
  const table: TableSpec = {
    columns: Object.keys(rows[0]!).map((key) => ({ key, header: key.replaceAll('_', ' ') })),
    rows,
    notes: [
      `step-latency model ms ≈ a + b·decodeRows + c·prefillTokens + d·kvTokens, fitted to ${fit.samples} measured steps (RMSE ${fit.rmseMs.toFixed(2)} ms)`,
      `the quick simulation (6 GPUs, 10 minutes) under the fitted model, arrivals scaled by 1/${slowdown.toFixed(1)}: ` +
        `${t.requests} requests, ${t.migrations} migrations, exact token streams ${t.tokenCheck.exact}/${t.tokenCheck.checked}`,
    ],
  };
  return {
    rows,
    table,
    ratios: { fitted_latency_r2: fit.r2, fitted_sim_exact_token_streams_frac: t.tokenCheck.checked > 0 ? t.tokenCheck.exact / t.tokenCheck.checked : 0 },
    params: { samples: fit.samples, coefficients: c, slowdownVsPaper: slowdown },
  };
}
