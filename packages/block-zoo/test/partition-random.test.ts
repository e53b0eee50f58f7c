/**
 * Lazy partitioning on random sequences of fine-tunes: every chain covers the model in order with exactly its
 * model's tensors, and the foundation's cuts are exactly those some model needed (minimality), whatever the order.
 */
import { describe, expect, it } from 'vitest';

import { BlockZoo, componentCount, layerRunSpan, type TensorRef } from '../src/planner/index.js';
import { describeModel, ref, tinyArch } from './support/descriptors.js';

function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 2246822507) + 0x9e3779b9) >>> 0;
    return s / 2 ** 32;
  };
}

describe.each([1, 2, 3, 4, 5, 6, 7, 8])('random zoo, seed %i', (seed) => {
  it('chains are complete and exact; cuts are minimal', () => {
    const rand = rng(seed);
    const L = 2 + Math.floor(rand() * 4);
    const C = componentCount(L);
    const arch = tinyArch({ numLayers: L });
    const zoo = new BlockZoo();
    const F = describeModel('F', arch);
    zoo.addFoundation(F);
    const expectedCuts = new Set([0, C]);
    const expectedTensors = new Map<string, Map<string, string>>([['F', new Map(F.tensors.map((t) => [t.name, t.id]))]]);
    for (let m = 0; m < 6; m++) {
      const id = `m${m}`;
      if (rand() < 0.7) {
        // A PE delta on a random set of components (never the embedding-less empty set).
        const comps = [...new Set(Array.from({ length: 1 + Math.floor(rand() * 3) }, () => Math.floor(rand() * C)))];
        const tensors: (TensorRef & { component: number })[] = comps.map((c) => ({ ...ref(`delta.${c}`, [2, 2], id), component: c }));
        zoo.addPeFineTune({ id, base: 'F', method: (['lora', 'adapter', 'prefix', 'bitfit'] as const)[m % 4]!, config: {}, tensors });
        for (const c of comps) {
          expectedCuts.add(c);
          expectedCuts.add(c + 1);
        }
        expectedTensors.set(id, new Map([...expectedTensors.get('F')!, ...tensors.map((t) => [t.name, t.id] as const)]));
      } else {
        const scores = Array.from({ length: L }, () => (rand() < 0.5 ? 0.99 : 0.5));
        const d = describeModel(id, arch);
        zoo.addFullFineTune({ ...d, base: 'F' }, scores);
        for (let l = 1; l < L; l++) if ((scores[l]! >= 0.98) !== (scores[l - 1]! >= 0.98)) expectedCuts.add(layerRunSpan(l, L, L).start);
        expectedTensors.set(id, new Map(d.tensors.map((t) => [t.name, t.id])));
      }
    }
    const cuts = [0, ...zoo.partition('F').map((b) => b.span!.end)];
    expect(cuts).toEqual([...expectedCuts].sort((a, b) => a - b));
    for (const chain of zoo.chains()) {
      const spans = chain.blocks.map((b) => b.span!);
      expect(spans[0]!.start).toBe(0);
      expect(spans.at(-1)!.end).toBe(C);
      for (let i = 1; i < spans.length; i++) expect(spans[i]!.start).toBe(spans[i - 1]!.end);
      const got = new Map(chain.blocks.flatMap((b) => b.tensors.map((t) => [t.name, t.id] as const)));
      expect(got).toEqual(expectedTensors.get(chain.app));
    }
    // Every edge's segments still realise as whole blocks.
    for (const e of zoo.equivalences()) {
      expect(zoo.realize(e.a).length).toBeGreaterThan(0);
      expect(zoo.realize(e.b).length).toBeGreaterThan(0);
    }
  });
});
