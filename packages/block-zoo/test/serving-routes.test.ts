import type { Clock } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { BlockZoo, hopRoutes, KvCoordinator, packOutbox, ServingInvalidError } from '../src/planner/index.js';
import { describeModel, loraTensors, tinyArch } from './support/descriptors.js';

describe('hopRoutes: adaptive serving candidates from the zoo (design note §4.3, Fig. 12)', () => {
  const arch = tinyArch({ numLayers: 2 });
  const zoo = new BlockZoo();
  zoo.addFoundation(describeModel('F', arch));
  zoo.addFullFineTune({ ...describeModel('FF', arch), base: 'F' }, [0.995, 0.5], { datasetHash: 'calib-1' });
  zoo.addPeFineTune({ id: 'LoRA', base: 'F', method: 'lora', config: { r: 2, targets: ['q_proj', 'v_proj'] }, tensors: loraTensors('LoRA', arch, 2, ['q_proj', 'v_proj']) });
  const f = zoo.chain('F').blocks.map((b) => b.blockId);
  const ff = zoo.chain('FF').blocks.map((b) => b.blockId);

  it('offers the equivalent segment of another weight set, rejoining the chain after the segment it replaces', () => {
    expect(hopRoutes(zoo, 'FF', 0)).toEqual([
      { blocks: [ff[0]], family: 'F', designated: true, requiresStitch: false, rejoin: 1, score: null },
      { blocks: f.slice(0, 3), family: 'F', designated: false, requiresStitch: false, rejoin: 1, score: 0.995 },
    ]);
    expect(hopRoutes(zoo, 'F', 0)).toEqual([
      { blocks: [f[0]], family: 'F', designated: true, requiresStitch: false, rejoin: 1, score: null },
      { blocks: [ff[0]], family: 'F', designated: false, requiresStitch: false, rejoin: 3, score: 0.995 },
    ]);
  });

  it('offers nothing where no equivalent segment starts, or where it would replace a fine-tune\'s own block', () => {
    expect(hopRoutes(zoo, 'F', 1)).toHaveLength(1);
    expect(hopRoutes(zoo, 'FF', 1)).toHaveLength(1);
    // LoRA's chain starts with the shared embedding, but the equivalent [FF-L1] would replace its Attention+LoRA too.
    expect(hopRoutes(zoo, 'LoRA', 0)).toHaveLength(1);
    expect(hopRoutes(zoo, 'LoRA', 1)).toHaveLength(1);
    expect(() => hopRoutes(zoo, 'F', 9)).toThrow(ServingInvalidError);
  });
});

describe('proactive migration and the outbox', () => {
  it('picks away requests likely redirected whose migration finishes before they resume, in migration order', () => {
    let now = 100;
    const clock: Clock = { now: () => now };
    const kv = new KvCoordinator({ clock });
    kv.append('base', 'b', 'i0', 48);
    kv.sharePrefix('base', 'shared', 'b', 'i0', 32);
    kv.append('soon', 'b', 'i0', 10);
    kv.append('late', 'b', 'i0', 10);
    kv.append('stay', 'b', 'i0', 10);
    kv.append('tight', 'b', 'i0', 10);
    const away = [
      { request: 'late', block: 'b', leftAt: 90, expectedReturnMs: 50, redirect: true, migrationMs: 5 },
      { request: 'shared', block: 'b', leftAt: 80, expectedReturnMs: 30, redirect: true, migrationMs: 5 },
      { request: 'soon', block: 'b', leftAt: 95, expectedReturnMs: 20, redirect: true, migrationMs: 5 },
      { request: 'stay', block: 'b', leftAt: 95, expectedReturnMs: 20, redirect: false, migrationMs: 5 },
      { request: 'tight', block: 'b', leftAt: 95, expectedReturnMs: 9, redirect: true, migrationMs: 5 },
      { request: 'elsewhere', block: 'b', leftAt: 95, expectedReturnMs: 90, redirect: true, migrationMs: 5 },
    ];
    expect(kv.planProactive('i0', away)).toEqual([
      { request: 'soon', block: 'b', resumeTime: 115, interceptedMs: 5 },
      { request: 'late', block: 'b', resumeTime: 140, interceptedMs: 10 },
      { request: 'shared', block: 'b', resumeTime: 110, interceptedMs: 20 },
    ]);
    now = 136;
    expect(kv.planProactive('i0', away).map((c) => c.request)).toEqual([]);
  });

  it('packs the rows leaving an instance into one message per destination, in first-appearance order', () => {
    const rows = [{ id: 'a', dest: 'x' }, { id: 'b', dest: 'y' }, { id: 'c', dest: 'x' }, { id: 'd', dest: 'z' }];
    expect(packOutbox(rows)).toEqual([
      { dest: 'x', items: [rows[0], rows[2]] },
      { dest: 'y', items: [rows[1]] },
      { dest: 'z', items: [rows[3]] },
    ]);
    expect(packOutbox([])).toEqual([]);
  });
});
