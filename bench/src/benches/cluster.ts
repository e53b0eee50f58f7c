/**
 * `pnpm bench cluster`: Punica's cluster (Fig. 13) in two parts.
 *   1. simulation (@tessera/sim): 16 virtual GPUs for one simulated hour under a ramped Poisson load with zipf-1.5
 *      adapter popularity, the real PunicaScheduler and ContinuousBatchers driven by a virtual clock: request
 *      rate, throughput and per-GPU batch size over time;
 *   2. a real run on this machine: the same requests through the single-process server and through a cluster of
 *      three worker processes on Redis (cluster-real.ts).
 */
import type { Bench, BenchContext, BenchOutput } from '../types.js';

export const clusterBench: Bench = {
  name: 'cluster',
  async run(ctx: BenchContext): Promise<BenchOutput> {
    const { clusterSimFigure } = await import('./cluster-sim.js');
    const sim = await clusterSimFigure({ quick: ctx.quick, log: (line) => ctx.log(line) });
    const { clusterRealFigure } = await import('./cluster-real.js');
    const real = await clusterRealFigure(ctx);
    return {
      params: { sim: sim.params, real: real.params },
      rows: [...sim.rows.map((r) => ({ part: 'sim', ...r })), ...real.rows.map((r) => ({ part: 'real', ...r }))],
      ratios: { ...sim.ratios, ...real.ratios },
      table: sim.table,
      moreTables: [real.table],
      svg: sim.svgs.batch,
      moreSvgs: { rate: sim.svgs.rate, throughput: sim.svgs.throughput },
    };
  },
};
