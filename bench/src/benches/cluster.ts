/**
 * `pnpm bench cluster`: Punica's cluster (Fig. 13) in two parts.
 *   1. simulation (@tessera/sim): 16 virtual GPUs for one simulated hour under a ramped Poisson load with zipf-1.5
 *      adapter popularity, the real PunicaScheduler and batcher Schedulers driven by a virtual clock: request
 *      rate, throughput and per-GPU batch size over time;
 *   2. the same simulation (quick size) with a step-latency model fitted to this machine's measured engine steps
 *      (cluster-fitted.ts);
 *   3. a real run on this machine: the same requests through the single-process server and through a cluster of
 *      three worker processes on Redis (cluster-real.ts).
 */
import type { TableSpec } from '../table.js';
import type { Bench, BenchContext, BenchOutput } from '../types.js';

const fmt = (v: number | undefined) => (v === undefined ? '-' : v.toFixed(2));

export const clusterBench: Bench = {
  name: 'cluster',
  async run(ctx: BenchContext): Promise<BenchOutput> {
    const { clusterSimFigure } = await import('./cluster-sim.js');
    const sim = await clusterSimFigure({ quick: ctx.quick, log: (line) => ctx.log(line) });
    const { clusterFittedFigure } = await import('./cluster-fitted.js');
    const fitted = await clusterFittedFigure({ quick: ctx.quick, log: (line) => ctx.log(line) });
    const { clusterRealFigure } = await import('./cluster-real.js');
    const real = await clusterRealFigure(ctx);
    const simTable: TableSpec = {
      columns: Object.keys(sim.rows[0] ?? {}).map((key) => ({ key, header: key.replaceAll('_', ' ') })),
      rows: sim.rows,
      notes: [
        'Fig. 13 in simulation: the real PunicaScheduler and batcher Schedulers on simulated GPUs (paper latency model), virtual clock',
        `migrations ${sim.ratios.sim_migrations}, busy GPU time at the batch cap ${fmt(sim.ratios.sim_busy_gpu_time_at_cap_frac)}, ` +
          `idle GPUs that stayed idle ${fmt(sim.ratios.sim_idle_gpus_stay_idle)}, token streams exact ${fmt(sim.ratios.sim_exact_token_streams_frac)}`,
      ],
    };
    return {
      params: { sim: sim.json.options, fitted: fitted.params, real: real.params },
      rows: [...sim.rows.map((r) => ({ part: 'sim', ...r })), ...fitted.rows.map((r) => ({ part: 'fitted', ...r })), ...real.rows.map((r) => ({ part: 'real', ...r }))],
      ratios: { ...sim.ratios, ...fitted.ratios, ...real.ratios },
      table: simTable,
      moreTables: [fitted.table, real.table],
      svg: sim.svgs.batch,
      moreSvgs: { rate: sim.svgs.rate, throughput: sim.svgs.throughput },
    };
  },
};
