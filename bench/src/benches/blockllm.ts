/**
 * `pnpm bench blockllm`: BlockLLM (issue 17, design note blockllm.md §2, §6, §8.3) as sections.
 *   - Table 1: the shared-parameter fraction of each PE technique on LLaMA-7B and GPT-NeoX-20B shapes, from
 *     @tessera/block-zoo's analytic `sharedParamFraction`, against the paper's values.
 *   - Fig. 5 analogue: device bytes for N applications under per-model provisioning (every application's whole
 *     model) against the zoo (each tensor once), from a real BlockZoo's accounting of the simulated app mix
 *     (real LLaMA / ChatGLM shapes as tensor descriptors; analytic, no bytes materialised).
 *   - Simulation (@tessera/sim's BlockLLM cluster): PM vs PS vs BlockLLM on 12 GPUs (Figs. 18–21), every
 *     ablation (Figs. 24–26, §7.3), 10 → 30 applications (Fig. 22) and Table 2-style 4-GPU runs.
 *
 *   - The real miniature (blockllm-real.ts): the BlockLLM server on two worker-thread devices against per-model
 *     provisioning at equal memory, one seeded trace over HTTP (`real_throughput_vs_pm`, `real_p95_vs_pm`).
 * Targets are reported against measured values in the notes, never assumed.
 */
import { LLAMA_7B, NEOX_20B, type PeConfig, type TransformerShape, namedSize, sharedParamFraction, uniqueSize } from '@tessera/block-zoo';
import { BLOCKLLM_ABLATIONS, type BlockllmSimOptions, type BlockllmSimResult, appMix, buildSimZoo, runBlockllmSimulation } from '@tessera/sim';

import { barChart, lineChart } from '../svg.js';
import { type BlockllmRealOptions, runBlockllmRealMiniature } from './blockllm-real.js';
import type { Row, TableSpec } from '../table.js';
import type { Bench, BenchContext, BenchOutput } from '../types.js';

export interface BlockllmSizes {
  /** Application counts of the memory curve. */
  memoryApps: number[];
  /** The main comparison and the ablations: requests, arrival window, output range, apps. */
  sim: { apps: number; requests: number; durationMs: number; output: [number, number]; seed: number };
  /** Fig. 22: application counts (same workload size). */
  scaling: number[];
  /** Table 2: application counts on 4 GPUs, 40 requests. */
  table2: number[];
  table2Sim: { requests: number; durationMs: number; output: [number, number] };
  /**
   * The real miniatures, in order (null: skip them, e.g. in the toy-size test; blockllm-real.test.ts runs one): the
   * first gives the `real_*` ratios, each later one the same ratios under `real_<demo size>_*`.
   */
  real: readonly Omit<BlockllmRealOptions, 'quick'>[] | null;
}

/**
 * The medium demo first (104 MB a model: the weights stream from memory, as a real model's do), then the small one
 * (a few MB a model, in the caches: per-call overheads weigh most) with the speculation server beside it.
 */
const REAL_MINIATURES: readonly Omit<BlockllmRealOptions, 'quick'>[] = [{ demoSize: 'medium' }, { demoSize: 'small', speculation: true }];

export const BLOCKLLM_SIZES: { quick: BlockllmSizes; full: BlockllmSizes } = {
  quick: {
    memoryApps: [1, 5, 10, 20],
    sim: { apps: 20, requests: 80, durationMs: 60_000, output: [8, 96], seed: 1 },
    scaling: [10, 20],
    table2: [3, 12],
    table2Sim: { requests: 40, durationMs: 30_000, output: [8, 64] },
    real: REAL_MINIATURES,
  },
  // The full size is a loaded regime (Figs. 18–19 run deeply queued: PM's median is 3.39 min of a 20-min trace,
  // 17 %): the paper's 400 requests with prompts and outputs U[8, 512] (design note §8.3) arrive in 45 s, where the
  // simulated PM's median is the same 17 % of the window and the offered tokens exceed what PM serves.
  full: {
    memoryApps: [1, 3, 5, 8, 10, 12, 15, 18, 20, 25, 30],
    sim: { apps: 20, requests: 400, durationMs: 45_000, output: [8, 512], seed: 1 },
    scaling: [10, 15, 20, 25, 30],
    table2: [3, 6, 9, 12],
    table2Sim: { requests: 40, durationMs: 60_000, output: [8, 512] },
    real: REAL_MINIATURES,
  },
};

export interface BlockllmSection {
  rows: Row[];
  ratios: Record<string, number>;
  tables: TableSpec[];
  svgs: Record<string, string>;
  params: Record<string, unknown>;
}

export type SectionRunner = (sizes: BlockllmSizes, ctx: BenchContext) => Promise<BlockllmSection>;

const fmt = (v: number, digits = 3) => Number(v.toPrecision(digits)).toString();
const met = (ok: boolean) => (ok ? 'met' : 'NOT met');

// ─── Table 1 ──────────────────────────────────────────────────────────────────────────────────────────────────

/** The PE configurations back-solved in design note §2.1 (NeoX LoRA: no clean configuration matches; rank 8 on q, k, v shown). */
export const TABLE1: { foundation: string; shape: TransformerShape; pe: PeConfig; label: string; paper: number }[] = [
  { foundation: 'LLaMA-7B', shape: LLAMA_7B, label: 'LoRA r8 q,v', pe: { method: 'lora', rank: 8, targets: ['q', 'v'] }, paper: 99.94 },
  { foundation: 'LLaMA-7B', shape: LLAMA_7B, label: 'Adapter 2×1024', pe: { method: 'adapter', bottleneck: 1024, perLayer: 2 }, paper: 92.62 },
  { foundation: 'LLaMA-7B', shape: LLAMA_7B, label: 'Prefix 30', pe: { method: 'prefix', tokens: 30 }, paper: 99.88 },
  { foundation: 'GPT-NeoX-20B', shape: NEOX_20B, label: 'LoRA r8 q,k,v', pe: { method: 'lora', rank: 8, targets: ['q', 'k', 'v'] }, paper: 99.52 },
  { foundation: 'GPT-NeoX-20B', shape: NEOX_20B, label: 'Adapter 2×1536', pe: { method: 'adapter', bottleneck: 1536, perLayer: 2 }, paper: 92.52 },
  { foundation: 'GPT-NeoX-20B', shape: NEOX_20B, label: 'Prompt (prefix 8)', pe: { method: 'prefix', tokens: 8 }, paper: 99.98 },
];

export const table1Section: SectionRunner = async () => {
  const rows: Row[] = TABLE1.map((t) => {
    const pct = 100 * sharedParamFraction(t.shape, t.pe);
    return { figure: 'table1', foundation: t.foundation, pe: t.label, shared_pct: Number(pct.toFixed(3)), paper_pct: t.paper, diff_pts: Number((pct - t.paper).toFixed(3)) };
  });
  const matched = rows.filter((r) => Math.abs(r.diff_pts as number) < 0.01).length;
  return {
    rows,
    ratios: { table1_matched: matched },
    tables: [
      {
        columns: [
          { key: 'foundation', header: 'foundation' },
          { key: 'pe', header: 'PE' },
          { key: 'shared_pct', header: 'shared % (ours)' },
          { key: 'paper_pct', header: 'paper %' },
          { key: 'diff_pts', header: 'Δ points' },
        ],
        rows,
        notes: [`Table 1: ${matched} of ${rows.length} shares within 0.01 points of the paper (design note §2.1 expects 5: NeoX LoRA matches no clean configuration).`],
      },
    ],
    svgs: {},
    params: {},
  };
};

// ─── Fig. 5 analogue: memory for N applications ─────────────────────────────────────────────────────────────

export const memorySection: SectionRunner = async (sizes) => {
  const rows: Row[] = [];
  for (const n of sizes.memoryApps) {
    const { chains } = buildSimZoo(appMix(n));
    const perModel = [...chains.values()].reduce((t, c) => t + namedSize(c.blocks.flatMap((b) => b.tensors)).bytes, 0);
    const zoo = uniqueSize([...chains.values()].flatMap((c) => c.blocks.flatMap((b) => b.tensors))).bytes;
    rows.push({ figure: 'fig5', apps: n, per_model_gb: Number((perModel / 1e9).toFixed(2)), zoo_gb: Number((zoo / 1e9).toFixed(2)), zoo_vs_pm: Number((zoo / perModel).toFixed(4)), redundancy_pct: Number((100 * (1 - zoo / perModel)).toFixed(2)) });
  }
  const at20 = rows.find((r) => r.apps === 20);
  const ratios: Record<string, number> = {};
  if (at20) ratios.zoo_memory_vs_pm_20_apps = at20.zoo_vs_pm as number;
  const svg = lineChart({
    title: 'Fig. 5 analogue: parameter bytes for N applications (f16, ChatGLM-6B / LLaMA-7B / LLaMA-13B mix)',
    xLabel: 'applications',
    yLabel: 'GB',
    series: [
      { name: 'per-model provisioning', points: rows.map((r) => ({ x: r.apps as number, y: r.per_model_gb as number })) },
      { name: 'block zoo (each tensor once)', points: rows.map((r) => ({ x: r.apps as number, y: r.zoo_gb as number })) },
    ],
  });
  return {
    rows,
    ratios,
    tables: [
      {
        columns: [
          { key: 'apps', header: 'apps' },
          { key: 'per_model_gb', header: 'per-model GB' },
          { key: 'zoo_gb', header: 'zoo GB' },
          { key: 'zoo_vs_pm', header: 'zoo / PM' },
          { key: 'redundancy_pct', header: 'redundant %' },
        ],
        rows,
        notes: [
          at20 ? `zoo memory for 20 applications = ${fmt(at20.zoo_vs_pm as number)} of per-model provisioning (target ≤ 0.4: ${met((at20.zoo_vs_pm as number) <= 0.4)}).` : 'zoo memory for 20 applications: not measured at this size (target ≤ 0.4).',
          'Bytes from a BlockZoo that ingested the app mix as tensor descriptors of the real shapes (analytic: no weights are materialised); PE fine-tunes modify the last 4 layers.',
        ],
      },
    ],
    svgs: { fig5: svg },
    params: { memory_apps: sizes.memoryApps },
  };
};

// ─── Simulation ────────────────────────────────────────────────────────────────────────────────────────────

const simRow = (figure: string, label: string, r: BlockllmSimResult, extra: Row = {}): Row => ({
  figure,
  config: label,
  ...extra,
  requests: r.requests.length,
  p50_s: Number((r.p50Ms / 1000).toFixed(3)),
  p95_s: Number((r.p95Ms / 1000).toFixed(3)),
  mean_s: Number((r.meanMs / 1000).toFixed(3)),
  throughput_tok_s: Number(r.throughputTokS.toFixed(2)),
  comm_share: Number(r.communicationShare.toFixed(4)),
  inter_server_gb: Number((r.interServerBytes / 1e9).toFixed(3)),
  utilisation: Number(r.utilisation.toFixed(4)),
  param_gb: Number((r.memory.paramBytes / 1e9).toFixed(2)),
  request_gb: Number((r.memory.requestBytes / 1e9).toFixed(3)),
  speculations: r.speculation.speculations,
  spec_accepted: r.speculation.accepted,
  adaptive_requests: r.adaptiveRequests,
  kv_migrations: r.kvMigrations,
  swaps: r.swaps,
  scale_outs: r.scaleOuts,
});

const SIM_COLUMNS = [
  { key: 'figure', header: 'fig' },
  { key: 'config', header: 'config' },
  { key: 'p50_s', header: 'p50 s' },
  { key: 'p95_s', header: 'p95 s' },
  { key: 'throughput_tok_s', header: 'tok/s' },
  { key: 'comm_share', header: 'comm share' },
  { key: 'utilisation', header: 'util' },
  { key: 'param_gb', header: 'params GB' },
  { key: 'request_gb', header: 'request GB' },
];

export const simSection: SectionRunner = async (sizes, ctx) => {
  const s = sizes.sim;
  const base: Omit<BlockllmSimOptions, 'policy'> = { seed: s.seed, requests: s.requests, durationMs: s.durationMs, output: s.output };
  const prebuilt = buildSimZoo(appMix(s.apps));
  const run = (policy: BlockllmSimOptions['policy'], features: BlockllmSimOptions['features'] = {}) => {
    ctx.log(`blockllm sim: ${policy} ${JSON.stringify(features)}`);
    return runBlockllmSimulation({ ...base, policy, features, prebuilt });
  };
  const pm = run('pm');
  const ps = run('ps');
  const bl = run('blockllm');
  const rows: Row[] = [simRow('fig18', 'PM', pm), simRow('fig18', 'PS', ps), simRow('fig18', 'BlockLLM', bl)];
  const ablations: [string, BlockllmSimResult][] = Object.entries(BLOCKLLM_ABLATIONS).map(([name, f]) => [name, run('blockllm', f)]);
  for (const [name, r] of ablations) rows.push(simRow('ablation', name, r, { p95_vs_blockllm: Number((r.p95Ms / bl.p95Ms).toFixed(4)), p50_vs_blockllm: Number((r.p50Ms / bl.p50Ms).toFixed(4)), comm_vs_blockllm: Number((r.transferMs / Math.max(1e-9, bl.transferMs)).toFixed(4)), throughput_vs_blockllm: Number((r.throughputTokS / bl.throughputTokS).toFixed(4)) }));

  // Fig. 22: more applications.
  const scaling: Row[] = [];
  for (const n of sizes.scaling) {
    const pre = buildSimZoo(appMix(n));
    const a = runBlockllmSimulation({ ...base, policy: 'pm', prebuilt: pre });
    const b = runBlockllmSimulation({ ...base, policy: 'blockllm', prebuilt: pre });
    scaling.push({ figure: 'fig22', config: `${n} apps`, apps: n, pm_p95_s: Number((a.p95Ms / 1000).toFixed(3)), blockllm_p95_s: Number((b.p95Ms / 1000).toFixed(3)), p95_vs_pm: Number((b.p95Ms / a.p95Ms).toFixed(4)), throughput_vs_pm: Number((b.throughputTokS / a.throughputTokS).toFixed(4)) });
  }
  // Table 2-style: 4 GPUs, 40 requests from 3–12 apps.
  const table2: Row[] = [];
  for (const n of sizes.table2) {
    const pre = buildSimZoo(appMix(n));
    const t = { ...base, ...sizes.table2Sim, cluster: { servers: [2, 2] }, prebuilt: pre };
    const a = runBlockllmSimulation({ ...t, policy: 'pm' });
    const b = runBlockllmSimulation({ ...t, policy: 'blockllm' });
    table2.push({ figure: 'table2', config: `${n} apps`, apps: n, pm_mean_min: Number((a.meanMs / 60_000).toFixed(4)), pm_tok_s: Number(a.throughputTokS.toFixed(2)), pm_util: Number(a.utilisation.toFixed(4)), blockllm_mean_min: Number((b.meanMs / 60_000).toFixed(4)), blockllm_tok_s: Number(b.throughputTokS.toFixed(2)), blockllm_util: Number(b.utilisation.toFixed(4)), latency_reduction_pct: Number((100 * (1 - b.meanMs / a.meanMs)).toFixed(2)), throughput_ratio: Number((b.throughputTokS / a.throughputTokS).toFixed(4)) });
  }

  const ratios: Record<string, number> = {
    sim_p95_vs_pm: bl.p95Ms / pm.p95Ms,
    sim_p50_vs_pm: bl.p50Ms / pm.p50Ms,
    sim_throughput_vs_pm: bl.throughputTokS / pm.throughputTokS,
    sim_throughput_ps_vs_pm: ps.throughputTokS / pm.throughputTokS,
    sim_p95_vs_ps: bl.p95Ms / ps.p95Ms,
    sim_utilisation_gain_pts: 100 * (bl.utilisation - pm.utilisation),
  };
  for (const [name, r] of ablations) ratios[`sim_ablation_${name.replace(/-/g, '_')}_p95_vs_blockllm`] = r.p95Ms / bl.p95Ms;

  const p95Target = ratios.sim_p95_vs_pm! <= 0.7;
  const medianTarget = Math.abs(ratios.sim_p50_vs_pm! - 1) <= 0.05;
  const thrTarget = bl.throughputTokS > ps.throughputTokS && ps.throughputTokS > pm.throughputTokS;
  // Throughputs within 1 % of each other are the offered load, not a separation of the policies.
  const thrs = [bl.throughputTokS, ps.throughputTokS, pm.throughputTokS];
  const thrSeparated = Math.max(...thrs) / Math.min(...thrs) > 1.01;
  const ab = Object.fromEntries(ablations);
  const notes = [
    `p95 BlockLLM / PM = ${fmt(ratios.sim_p95_vs_pm!)} (target ≤ 0.7: ${met(p95Target)}); p50 BlockLLM / PM = ${fmt(ratios.sim_p50_vs_pm!)} (target within 5 %: ${met(medianTarget)}). Paper: −33.5 % p95, medians 3.34 vs 3.39 min.`,
    `throughput tok/s: BlockLLM ${fmt(bl.throughputTokS)}, PS ${fmt(ps.throughputTokS)}, PM ${fmt(pm.throughputTokS)} (target BlockLLM > PS > PM: ${thrSeparated ? met(thrTarget) : 'not separated: all within 1 %, the offered load'}; paper 1.71× PM, 1.46× PS).`,
    `ablations, p95 over BlockLLM's (paper): no adaptive ${fmt(ab['no-adaptive']!.p95Ms / bl.p95Ms)} (1.156), KV recompute-always ${fmt(ab['kv-recompute']!.p95Ms / bl.p95Ms)} (1.23), KV least-busy ${fmt(ab['kv-least-busy']!.p95Ms / bl.p95Ms)} (1.36), no speculation ${fmt(ab['no-speculation']!.p95Ms / bl.p95Ms)} (1.316), perfect speculation ${fmt(ab['perfect-speculation']!.p95Ms / bl.p95Ms)} (0.873), frag-min ${fmt(ab['frag-min']!.p95Ms / bl.p95Ms)} (1.182).`,
    `communication (transfer ms) over BlockLLM's: KV recompute-always ${fmt(ab['kv-recompute']!.transferMs / Math.max(1e-9, bl.transferMs))} (paper 0.36), least-busy ${fmt(ab['kv-least-busy']!.transferMs / Math.max(1e-9, bl.transferMs))} (1.28); inter-server GB frag-min ${fmt(ab['frag-min']!.interServerBytes / 1e9)} vs locality ${fmt(bl.interServerBytes / 1e9)} (paper: locality cuts them by 72.3 %).`,
    `speculation: ${bl.speculation.speculations} speculations, ${bl.speculation.accepted} accepted (paper 231 / 192); adaptive serving: ${bl.adaptiveRequests} of ${bl.requests.length} requests (paper 136 of 400).`,
    `workload: ${s.requests} requests from ${s.apps} apps over ${s.durationMs / 1000} s, prompt U[8, 512], output U[${s.output.join(', ')}], seed ${s.seed}; 12 simulated A100-80GB on servers [2, 2, 4, 4]; PM's median is ${fmt((100 * pm.p50Ms) / s.durationMs)} % of the arrival window (paper: 17 %).`,
    `GPU time per generated token (ms): BlockLLM ${fmt(bl.computeMs / Math.max(1, bl.requests.reduce((n, q) => n + q.outputTokens, 0)))}, PM ${fmt(pm.computeMs / Math.max(1, pm.requests.reduce((n, q) => n + q.outputTokens, 0)))}; BlockLLM's busiest GPU ${fmt(Math.max(...bl.deviceUtilisation.map((d) => d.busy)))} busy, its idlest ${fmt(Math.min(...bl.deviceUtilisation.map((d) => d.busy)))}.`,
  ];

  const cdf = (r: BlockllmSimResult) => r.requests.map((q) => q.latencyMs / 1000).sort((a, b) => a - b).map((x, i, all) => ({ x, y: (i + 1) / all.length }));
  const svgs: Record<string, string> = {
    fig18: lineChart({ title: 'Fig. 18: latency CDF (simulated 12 GPUs)', xLabel: 'latency (s)', yLabel: 'fraction of requests', series: [{ name: 'PM', points: cdf(pm), markers: false }, { name: 'PS', points: cdf(ps), markers: false }, { name: 'BlockLLM', points: cdf(bl), markers: false }] }),
    fig19: barChart({ title: 'Fig. 19: throughput and utilisation', categories: ['throughput (tok/s)', 'utilisation (%)'], series: [pm, ps, bl].map((r, i) => ({ name: ['PM', 'PS', 'BlockLLM'][i]!, values: [r.throughputTokS, 100 * r.utilisation] })), yLabel: 'value' }),
    fig20: lineChart({ title: 'Fig. 20: GPU utilisation over time', xLabel: 'time (s)', yLabel: 'busy fraction', series: [pm, ps, bl].map((r, i) => ({ name: ['PM', 'PS', 'BlockLLM'][i]!, points: r.utilisationTimeline.map((p) => ({ x: p.tMs / 1000, y: p.busy })), markers: false })) }),
    fig21: barChart({ title: 'Fig. 21: device memory split (mean over samples)', categories: ['parameters (GB)', 'request data (GB)'], series: [pm, ps, bl].map((r, i) => ({ name: ['PM', 'PS', 'BlockLLM'][i]!, values: [r.memory.paramBytes / 1e9, r.memory.requestBytes / 1e9] })), yLabel: 'GB' }),
    fig22: lineChart({ title: 'Fig. 22: p95 latency against the number of applications', xLabel: 'applications', yLabel: 'p95 (s)', series: [{ name: 'PM', points: scaling.map((r) => ({ x: r.apps as number, y: r.pm_p95_s as number })) }, { name: 'BlockLLM', points: scaling.map((r) => ({ x: r.apps as number, y: r.blockllm_p95_s as number })) }] }),
    'fig24-26': barChart({
      title: 'Figs. 24–26: ablations normalised to BlockLLM',
      categories: ablations.map(([n]) => n),
      series: [
        { name: 'p50', values: ablations.map(([, r]) => r.p50Ms / bl.p50Ms) },
        { name: 'p95', values: ablations.map(([, r]) => r.p95Ms / bl.p95Ms) },
        { name: 'communication', values: ablations.map(([, r]) => r.transferMs / Math.max(1e-9, bl.transferMs)) },
      ],
      yLabel: '× BlockLLM',
      referenceLines: [{ value: 1, label: 'BlockLLM' }],
    }),
    table2: barChart({ title: 'Table 2 style: 4 GPUs, 40 requests — mean latency (min)', categories: table2.map((r) => r.config as string), series: [{ name: 'PM', values: table2.map((r) => r.pm_mean_min as number) }, { name: 'BlockLLM', values: table2.map((r) => r.blockllm_mean_min as number) }], yLabel: 'minutes' }),
  };
  return {
    rows: [...rows, ...scaling, ...table2],
    ratios,
    tables: [
      { columns: SIM_COLUMNS, rows, notes },
      {
        columns: [
          { key: 'config', header: 'apps' },
          { key: 'pm_p95_s', header: 'PM p95 s' },
          { key: 'blockllm_p95_s', header: 'BlockLLM p95 s' },
          { key: 'p95_vs_pm', header: 'p95 / PM' },
          { key: 'throughput_vs_pm', header: 'tok/s / PM' },
        ],
        rows: scaling,
        notes: ['Fig. 22: the paper reports −37.4 % p95 and 1.85× throughput at 30 applications.'],
      },
      {
        columns: [
          { key: 'config', header: 'apps' },
          { key: 'pm_mean_min', header: 'PM min' },
          { key: 'pm_tok_s', header: 'PM tok/s' },
          { key: 'pm_util', header: 'PM util' },
          { key: 'blockllm_mean_min', header: 'BlockLLM min' },
          { key: 'blockllm_tok_s', header: 'BlockLLM tok/s' },
          { key: 'blockllm_util', header: 'BlockLLM util' },
        ],
        rows: table2,
        notes: ['Table 2 style (4 GPUs on servers [2, 2], 40 requests): the paper reports latency −14.8 % … −29.5 % and throughput 1.35× … 2.26× for 3 … 12 apps.'],
      },
    ],
    svgs,
    params: { sim: s, scaling: sizes.scaling, table2: sizes.table2, table2_sim: sizes.table2Sim },
  };
};

const realSection: SectionRunner = async (sizes, ctx) => {
  if (sizes.real === null) return { rows: [], ratios: {}, tables: [], svgs: {}, params: { real: null } };
  const out: BlockllmSection = { rows: [], ratios: {}, tables: [], svgs: {}, params: { real: sizes.real } };
  for (const [i, options] of sizes.real.entries()) {
    const real = await runBlockllmRealMiniature(ctx, { ...options, quick: ctx.quick });
    const size = options.demoSize ?? 'small';
    // The first miniature's ratios are the headline `real_*`; a later one's carry its demo size.
    const key = (name: string) => (i === 0 ? name : name.replace(/^real_/, `real_${size}_`));
    out.rows.push(...real.rows.map((r) => ({ figure: 'real', demo: size, ...r })));
    for (const [name, value] of Object.entries(real.ratios)) out.ratios[key(name)] = value;
    const notes = [
      ...real.notes,
      `${key('real_throughput_vs_pm')} ${fmt(real.ratios.real_throughput_vs_pm)} (target ≥ 1.3: ${met(real.ratios.real_throughput_vs_pm >= 1.3)}); ${key('real_p95_vs_pm')} ${fmt(real.ratios.real_p95_vs_pm)}.`,
      ...(real.ratios.real_spec_throughput_vs_blockllm !== undefined
        ? [`${key('real_spec_throughput_vs_blockllm')} ${fmt(real.ratios.real_spec_throughput_vs_blockllm)}; ${key('real_spec_p95_vs_blockllm')} ${fmt(real.ratios.real_spec_p95_vs_blockllm!)} (speculation on surrogates against BlockLLM without it).`]
        : []),
    ];
    const columns = Object.keys(real.rows[0] ?? {}).map((k) => ({ key: k, header: k }));
    out.tables.push({ columns, rows: real.rows, notes });
  }
  return out;
};

/** The sections in order. */
export const SECTIONS: readonly { name: string; run: SectionRunner }[] = [
  { name: 'table1', run: table1Section },
  { name: 'memory', run: memorySection },
  { name: 'simulation', run: simSection },
  { name: 'real miniature', run: realSection },
];

export async function runBlockllmBench(ctx: BenchContext, sizes: BlockllmSizes): Promise<BenchOutput> {
  const parts: BlockllmSection[] = [];
  for (const section of SECTIONS) {
    ctx.log(`blockllm: ${section.name}`);
    parts.push(await section.run(sizes, ctx));
  }
  const [, , sim] = parts as [BlockllmSection, BlockllmSection, BlockllmSection];
  const svgs = Object.assign({}, ...parts.map((p) => p.svgs)) as Record<string, string>;
  const main = svgs.fig18!;
  delete svgs.fig18;
  const tables = parts.flatMap((p) => p.tables);
  const [simMain, ...restSim] = sim.tables;
  return {
    params: Object.assign({ quick: ctx.quick }, ...parts.map((p) => p.params)) as Record<string, unknown>,
    rows: parts.flatMap((p) => p.rows),
    ratios: Object.assign({}, ...parts.map((p) => p.ratios)) as Record<string, number>,
    table: simMain!,
    moreTables: [...tables.filter((t) => !sim.tables.includes(t)), ...restSim],
    svg: main,
    moreSvgs: svgs,
  };
}

export const blockllmBench: Bench = {
  name: 'blockllm',
  run: (ctx) => runBlockllmBench(ctx, ctx.quick ? BLOCKLLM_SIZES.quick : BLOCKLLM_SIZES.full),
};
