/**
 * How the BlockLLM simulation models GPUs shared by block instances: multiplexed engines under processor sharing
 * (work-conserving: the GPUs' busy time is exactly the batches' standalone compute less their launch latency, which
 * engines running at once overlap), the same results for PM and PS whichever GPU model (they hold one engine per GPU), warm replicas on the GPUs the placement leaves empty (blocks
 * for BlockLLM, engines for PS and PM), and
 * surrogate speedups from the paper's Table 4.
 */
import { describe, expect, it } from 'vitest';

import { SimArgumentError } from '../src/errors.js';
import { tableFourSpeedup } from '../src/blockllm/index.js';
import { appMix, type BlockllmSimOptions, buildSimZoo, runBlockllmSimulation } from '../src/index.js';

const ZOO = buildSimZoo(appMix(6));
const SMALL: Omit<BlockllmSimOptions, 'policy' | 'seed'> = { prebuilt: ZOO, requests: 30, durationMs: 4_000, output: [2, 16], prompt: [8, 64], cluster: { servers: [2, 2] } };
const finishes = (r: { requests: { id: string; finishMs: number }[] }) => r.requests.map((q) => [q.id, q.finishMs]);

describe('BlockLLM simulation: GPUs shared by block instances', () => {
  it('is work-conserving when multiplexed: each GPU is busy exactly as long as its batches compute alone, launches aside', () => {
    const r = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 2, features: { speculation: 'off' } });
    const busy = r.deviceUtilisation.reduce((t, d) => t + d.busy * r.makespanMs, 0);
    const work = r.instanceStats.reduce((t, i) => t + i.computeMs - i.launchMs, 0);
    expect(busy).toBeGreaterThan(0);
    expect(r.instanceStats.reduce((t, i) => t + i.launchMs, 0)).toBeCloseTo(r.launchMs, 6);
    expect(r.launchMs).toBeGreaterThan(0);
    expect(busy).toBeCloseTo(work, 6);
    // With surrogates on the same device their compute is busy time too (perfect speculation: 1/50 of the block).
    const s = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 2, features: { speculation: 'perfect' } });
    const sBusy = s.deviceUtilisation.reduce((t, d) => t + d.busy * s.makespanMs, 0);
    expect(s.speculation.speculations).toBeGreaterThan(0);
    expect(sBusy).toBeGreaterThan(s.instanceStats.reduce((t, i) => t + i.computeMs - i.launchMs, 0));
  });

  it('runs co-located batches concurrently when multiplexed and one at a time when serial', () => {
    const multi = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 3, features: { speculation: 'off' } });
    const serial = runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 3, features: { speculation: 'off' }, gpuSharing: 'serial' });
    expect(finishes(multi)).not.toEqual(finishes(serial));
    for (const r of [multi, serial]) for (const d of r.deviceUtilisation) expect(d.busy).toBeLessThanOrEqual(1 + 1e-9);
    expect(() => runBlockllmSimulation({ ...SMALL, policy: 'blockllm', seed: 3, gpuSharing: 'both' as 'serial' })).toThrow(SimArgumentError);
  });

  it('gives PM and PS the same runs under either GPU model (one engine per GPU); only the launches leave the busy time', () => {
    for (const policy of ['pm', 'ps'] as const) {
      const a = runBlockllmSimulation({ ...SMALL, policy, seed: 4 });
      const b = runBlockllmSimulation({ ...SMALL, policy, seed: 4, gpuSharing: 'serial' });
      const fa = finishes(a);
      const fb = finishes(b);
      expect(fa.map(([id]) => id)).toEqual(fb.map(([id]) => id));
      fa.forEach(([, t], i) => expect(t as number).toBeCloseTo(fb[i]![1] as number, 6));
      const launches = a.launchMs;
      expect(launches).toBeGreaterThan(0);
      const busy = (r: typeof a) => r.deviceUtilisation.reduce((t, d) => t + d.busy * r.makespanMs, 0);
      expect(busy(a)).toBeCloseTo(busy(b) - launches, 3);
    }
  });

  it('fills the GPUs the placement leaves empty with replicas of the most loaded blocks', () => {
    const zoo = buildSimZoo(appMix(3));
    const opts = { prebuilt: zoo, requests: 6, durationMs: 2_000, output: [2, 4] as [number, number], prompt: [8, 16] as [number, number], seed: 1, features: { adaptive: false } };
    const warm = runBlockllmSimulation({ ...opts, policy: 'blockllm' });
    const cold = runBlockllmSimulation({ ...opts, policy: 'blockllm', warmReplicas: false });
    expect(warm.deviceUtilisation.every((d) => d.instances > 0)).toBe(true);
    expect(cold.deviceUtilisation.some((d) => d.instances === 0)).toBe(true);
    // The replicas are of blocks the placement already holds: more instances, no new block.
    const blocks = (r: typeof warm) => new Set(r.instanceStats.map((i) => i.block));
    expect(warm.instances).toBeGreaterThan(cold.instances);
    expect(blocks(warm)).toEqual(blocks(cold));
  });

  it('balances the expected load at placement: the busiest GPU is less busy than when placing by bytes alone', () => {
    // Twenty applications on the 12-GPU cluster: by bytes, the fine-tunes' small tail blocks pile onto a few GPUs.
    const zoo = buildSimZoo(appMix(20));
    const opts = { prebuilt: zoo, requests: 120, durationMs: 15_000, output: [8, 128] as [number, number], seed: 1, features: { speculation: 'off' as const } };
    const busiest = (r: ReturnType<typeof runBlockllmSimulation>) => Math.max(...r.deviceUtilisation.map((d) => d.busy));
    const balanced = runBlockllmSimulation({ ...opts, policy: 'blockllm' });
    const bytes = runBlockllmSimulation({ ...opts, policy: 'blockllm', loadAwarePlacement: false });
    expect(busiest(balanced)).toBeLessThan(0.9 * busiest(bytes));
    expect(balanced.requests).toHaveLength(120);
  }, 60_000);

  it('starts PS and PM with every GPU holding an engine: fewer units than GPUs get replicas of the busiest', () => {
    // Three applications on four GPUs: PS and PM hold three units (one family engine or model each).
    const zoo = buildSimZoo(appMix(3));
    const opts = { prebuilt: zoo, requests: 6, durationMs: 2_000, output: [2, 4] as [number, number], prompt: [8, 16] as [number, number], seed: 1, cluster: { servers: [2, 2] } };
    for (const policy of ['ps', 'pm'] as const) {
      const r = runBlockllmSimulation({ ...opts, policy });
      expect(r.deviceUtilisation.every((d) => d.instances === 1), policy).toBe(true);
      expect(new Set(r.instanceStats.map((i) => i.block)).size, policy).toBe(3);
      expect(r.swaps, policy).toBe(0);
    }
  });

  it("takes each surrogate's speedup from Table 4 by block kind", () => {
    expect(tableFourSpeedup({ kind: 'attention', span: { start: 3, end: 4 } })).toBe(37.43);
    expect(tableFourSpeedup({ kind: 'ffn', span: { start: 4, end: 5 } })).toBe(1.71);
    expect(tableFourSpeedup({ kind: 'layerRange', span: { start: 3, end: 5 } })).toBe(22.91);
    expect(tableFourSpeedup({ kind: 'layerRange', span: { start: 0, end: 17 } })).toBe(18.55);
    expect(tableFourSpeedup({ kind: 'embedding', span: { start: 0, end: 1 } })).toBe(2);
    const links = ZOO.zoo.blocks().flatMap((b) => ZOO.zoo.surrogatesOf(b.blockId).map((l) => ({ b, l })));
    expect(links.length).toBeGreaterThan(0);
    for (const { b, l } of links) expect(l.speedup).toBe(tableFourSpeedup(b));
    const uniform = buildSimZoo(appMix(3), { surrogateSpeedup: 2 });
    for (const b of uniform.zoo.blocks()) for (const l of uniform.zoo.surrogatesOf(b.blockId)) expect(l.speedup).toBe(2);
  });
});
