/**
 * Replacement (arlo.md §6.6, §12 items 16–20): minimal moves, least-loaded donors, batches within the size and
 * the floor (checked by playing the plan out step by step on random instances), and ReplacementRun driving a
 * dispatcher (a draining instance gets no new dispatches).
 */
import { mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { LengthSchedulerArgumentError, MultiLevelDispatcher, planReplacement, ReplacementFloorError, type ReplacementInstance, ReplacementRun } from '../src/index.js';

function fleet(runtimes: number[], outstanding: (k: number) => number = () => 0): ReplacementInstance[] {
  return runtimes.map((runtime, k) => ({ id: `g${k}`, runtime, outstanding: outstanding(k) }));
}

describe('planReplacement', () => {
  it('moves Σ max(0, cur − N) instances and lands on the target (§12 item 16)', () => {
    const rand = mulberry32(21);
    for (let trial = 0; trial < 200; trial++) {
      const I = 1 + Math.floor(rand() * 6);
      const G = 1 + Math.floor(rand() * 40);
      const insts = fleet(Array.from({ length: G }, () => Math.floor(rand() * I)), () => Math.floor(rand() * 9));
      const target = new Array<number>(I).fill(0);
      for (let k = 0; k < G; k++) target[Math.floor(rand() * I)]!++;
      const cur = new Array<number>(I).fill(0);
      for (const s of insts) cur[s.runtime]!++;
      const plan = planReplacement(insts, target, { batchSize: 1 + Math.floor(rand() * 5) });
      expect(plan.moves.length).toBe(cur.reduce((a, c, i) => a + Math.max(0, c - target[i]!), 0));
      const after = [...cur];
      for (const m of plan.moves) {
        expect(insts.find((s) => s.id === m.id)!.runtime).toBe(m.from);
        after[m.from]!--;
        after[m.to]!++;
      }
      expect(after).toEqual(target);
      expect(new Set(plan.moves.map((m) => m.id)).size).toBe(plan.moves.length);
      expect(plan.batches.flat()).toEqual(plan.moves);
    }
  });

  it('moves nothing when the allocation is unchanged (§12 item 17)', () => {
    const plan = planReplacement(fleet([0, 0, 1, 2]), [2, 1, 1]);
    expect(plan).toEqual({ moves: [], batches: [] });
  });

  it('takes the least-loaded instances as donors (§12 item 18)', () => {
    const insts = fleet([0, 0, 0, 0, 1], (k) => [5, 1, 9, 0, 3][k]!);
    const plan = planReplacement(insts, [2, 3]);
    expect(plan.moves.map((m) => m.id).sort()).toEqual(['g1', 'g3']);
  });

  it('fills an empty runtime first, the longest first', () => {
    const plan = planReplacement(fleet([0, 0, 0, 0]), [1, 0, 1, 2], { batchSize: 1 });
    expect(plan.batches.map((b) => b[0]!.to)).toEqual([3, 2, 3]);
  });

  it('never lets the serving instances drop below the floor, nor a runtime below min(cur, N) (§12 item 19)', () => {
    const rand = mulberry32(33);
    for (let trial = 0; trial < 150; trial++) {
      const I = 2 + Math.floor(rand() * 5);
      const G = 2 + Math.floor(rand() * 30);
      const insts = fleet(Array.from({ length: G }, () => Math.floor(rand() * I)));
      const target = new Array<number>(I).fill(0);
      for (let k = 0; k < G; k++) target[Math.floor(rand() * I)]!++;
      const floor = Math.floor(rand() * G);
      const batchSize = 1 + Math.floor(rand() * 6);
      const plan = planReplacement(insts, target, { batchSize, floor });
      const serving = new Array<number>(I).fill(0);
      for (const s of insts) serving[s.runtime]!++;
      const cur = [...serving];
      for (const batch of plan.batches) {
        expect(batch.length).toBeLessThanOrEqual(batchSize);
        // While a batch swaps, its instances serve nothing.
        for (const m of batch) serving[m.from]!--;
        expect(serving.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(floor);
        for (let i = 0; i < I; i++) expect(serving[i]).toBeGreaterThanOrEqual(Math.min(cur[i]!, target[i]!));
        for (const m of batch) serving[m.to]!++;
      }
      expect(serving).toEqual(target);
    }
  });

  it('defaults the batch size to max(1, ⌈0.05·G⌉)', () => {
    const insts = fleet(Array.from({ length: 40 }, () => 0));
    const plan = planReplacement(insts, [20, 20]);
    expect(plan.batches.map((b) => b.length)).toEqual(Array(10).fill(2));
  });

  it('refuses a plan that cannot keep the floor, and a target of the wrong size', () => {
    expect(() => planReplacement(fleet([0, 0]), [0, 2], { floor: 2 })).toThrow(ReplacementFloorError);
    expect(planReplacement(fleet([0, 1]), [1, 1], { floor: 2 }).moves).toEqual([]);
    // A single instance has to stop to swap: its default floor is 0.
    expect(planReplacement(fleet([0]), [0, 1]).moves).toEqual([{ id: 'g0', from: 0, to: 1 }]);
    expect(() => planReplacement(fleet([0, 0]), [1, 2])).toThrow(/allocates 3 instances but 2/);
    expect(() => planReplacement(fleet([0, 5]), [1, 1])).toThrow(LengthSchedulerArgumentError);
    expect(() => planReplacement([{ id: 'x', runtime: 0, outstanding: 0 }, { id: 'x', runtime: 1, outstanding: 0 }], [1, 1])).toThrow(/listed twice/);
  });
});

describe('ReplacementRun', () => {
  it('drains, waits for outstanding requests, swaps batch by batch; draining instances get no dispatches (§12 item 20)', () => {
    const d = new MultiLevelDispatcher({ lengths: [64, 128, 256], capacities: [50, 30, 10] });
    for (let k = 0; k < 4; k++) d.add(`a${k}`, 0);
    d.add('c0', 2);
    const plan = planReplacement(
      d.instances().map((s) => ({ id: s.id, runtime: s.runtime, outstanding: s.outstanding })),
      [2, 1, 2],
      { batchSize: 1 },
    );
    expect(plan.moves.length).toBe(2);
    const run = new ReplacementRun(d, plan);
    const first = run.start();
    expect(first.length).toBe(1);
    const moving = first[0]!.id;
    expect(d.instance(moving).state).toBe('draining');
    for (let k = 0; k < 50; k++) expect(d.dispatch(30).id).not.toBe(moving);
    expect(run.drained().map((m) => m.id)).toEqual([moving]);
    expect(d.instance(moving).state).toBe('loading');
    expect(run.swapped(moving).length).toBe(1); // next batch drained
    expect(d.instance(moving).state).toBe('active');
    expect(d.instance(moving).runtime).toBe(first[0]!.to);
    expect(run.done).toBe(false);
    const second = plan.batches[1]![0]!;
    // The second donor still holds requests: it is not handed over until they complete.
    const held = d.instance(second.id).outstanding;
    if (held > 0) {
      expect(run.drained()).toEqual([]);
      for (let k = 0; k < held; k++) d.complete(second.id);
    }
    expect(run.drained().map((m) => m.id)).toEqual([second.id]);
    expect(run.swapped(second.id)).toEqual([]);
    expect(run.done).toBe(true);
    expect(d.activeCounts()).toEqual([2, 1, 2]);
    expect(() => run.swapped(second.id)).toThrow(/not being swapped/);
  });
});
