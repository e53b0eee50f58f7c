/**
 * Lazy partitioning (design note §3.2, algorithm 5.1; behaviours 4 and 5): the Fig. 12 walk-through, minimality,
 * boundaries only at component edges, fused PE blocks, and equivalence edges between segments.
 */
import { describe, expect, it } from 'vitest';

import {
  BlockZoo,
  type BlockManifest,
  componentCount,
  engineStages,
  layerRunSpan,
  proportionalDepthGroups,
  ZooConflictError,
  ZooInvalidError,
  ZooNotFoundError,
} from '../src/planner/index.js';
import { describeModel, loraTensors, ref, tinyArch } from './support/descriptors.js';

const spans = (blocks: readonly BlockManifest[]) => blocks.map((b) => [b.span!.start, b.span!.end]);

describe('Fig. 12: foundation, a full fine-tune with layer 1 equivalent, then a LoRA on attention', () => {
  const arch = tinyArch({ numLayers: 2 });
  const zoo = new BlockZoo();
  zoo.addFoundation(describeModel('F', arch));

  it('starts as one foundation block: nothing is cut before a model needs it', () => {
    expect(spans(zoo.chain('F').blocks)).toEqual([[0, 6]]);
    expect(zoo.chain('F').blocks[0]!.kind).toBe('layerRange');
  });

  it('the FF model cuts F once: F-L1, F-L2, FF-L1, FF-L2, and F-L1 ≡ FF-L1', () => {
    zoo.addFullFineTune({ ...describeModel('FF', arch), base: 'F' }, [0.995, 0.5], { datasetHash: 'calib-1' });
    // Layer 1 (with the embedding) and layer 2 (with the head), in component coordinates.
    expect(spans(zoo.chain('F').blocks)).toEqual([[0, 3], [3, 6]]);
    expect(spans(zoo.chain('FF').blocks)).toEqual([[0, 3], [3, 6]]);
    expect(zoo.storage().uniqueBlocks).toBe(4);
    const edges = zoo.equivalences();
    expect(edges).toHaveLength(1);
    expect(edges[0]).toMatchObject({ a: { model: 'FF', span: { start: 0, end: 3 } }, b: { model: 'F', span: { start: 0, end: 3 } }, score: 0.995, datasetHash: 'calib-1', requiresStitch: false });
    // The FF blocks are the FF model's own tensors: nothing is shared by bytes.
    const fTensors = new Set(zoo.chain('F').blocks.flatMap((b) => b.tensors.map((t) => t.id)));
    expect(zoo.chain('FF').blocks.flatMap((b) => b.tensors).some((t) => fTensors.has(t.id))).toBe(false);
  });

  it('the LoRA re-partitions F into Att1, FFN1, Att2, FFN2(+head) and its chain reuses the FFN blocks', () => {
    zoo.addPeFineTune({ id: 'LoRA', base: 'F', method: 'lora', config: { r: 2, targets: ['q_proj', 'v_proj'] }, tensors: loraTensors('LoRA', arch, 2, ['q_proj', 'v_proj']) });
    const f = zoo.chain('F').blocks;
    // Lazy: nothing needs FFN2 apart from the head, so they stay one block.
    expect(f.map((b) => b.kind)).toEqual(['embedding', 'attention', 'ffn', 'attention', 'layerRange']);
    expect(f[4]!.stages).toEqual([{ stage: 'ffn', layer: 1 }, { stage: 'head' }]);
    const lora = zoo.chain('LoRA').blocks;
    expect(lora.map((b) => `${b.kind}${b.pe ? `+${b.pe.method}` : ''}`)).toEqual(['embedding', 'attention+lora', 'ffn', 'attention+lora', 'layerRange']);
    // Shared: embedding, FFN1 and FFN2+head are the very same blocks; the attention blocks are fused (host + LoRA).
    for (const i of [0, 2, 4]) expect(lora[i]!.blockId).toBe(f[i]!.blockId);
    for (const i of [1, 3]) {
      expect(lora[i]!.blockId).not.toBe(f[i]!.blockId);
      const host = new Set(f[i]!.tensors.map((t) => t.id));
      expect(lora[i]!.tensors.filter((t) => host.has(t.id))).toHaveLength(f[i]!.tensors.length); // host tensors by reference
      expect(lora[i]!.tensors.filter((t) => t.name.includes('lora_'))).toHaveLength(4);
    }
    // The FF model was not touched (no model needed a cut inside it).
    expect(spans(zoo.chain('FF').blocks)).toEqual([[0, 3], [3, 6]]);
    // 5 foundation + 2 FF + 2 Attention+LoRA: the paper's "9 blocks" (the note's A7 counted 8 without the head).
    expect(zoo.storage().uniqueBlocks).toBe(9);
  });

  it('the equivalent chains are [FF-L1] and [emb, Att1, FFN1] of F', () => {
    const edge = zoo.equivalences()[0]!;
    expect(zoo.realize(edge.a).map((b) => b.blockId)).toEqual([zoo.chain('FF').blocks[0]!.blockId]);
    expect(zoo.realize(edge.b).map((b) => b.kind)).toEqual(['embedding', 'attention', 'ffn']);
    // The scheduler's view: each of F's first three blocks has the FF segment as an equivalent.
    const att1 = zoo.chain('F').blocks[1]!;
    expect(zoo.equivalentsOf('F', att1.blockId).map((e) => e.other)).toEqual([{ model: 'FF', span: { start: 0, end: 3 } }]);
    expect(zoo.equivalentsOf('F', zoo.chain('F').blocks[3]!.blockId)).toEqual([]);
  });

  it('is minimal: a second LoRA on the same components adds no foundation block', () => {
    const before = zoo.partition('F').map((b) => b.blockId);
    zoo.addPeFineTune({ id: 'LoRA2', base: 'F', method: 'lora', config: { r: 2 }, tensors: loraTensors('LoRA2', arch, 2, ['q_proj']) });
    expect(zoo.partition('F').map((b) => b.blockId)).toEqual(before);
    expect(zoo.storage().uniqueBlocks).toBe(11);
  });

  it('a snapshot round-trips to the same chains and edges', () => {
    const copy = BlockZoo.fromJSON(JSON.parse(JSON.stringify(zoo.toJSON())));
    expect(copy.chains().map((c) => c.blocks.map((b) => b.blockId))).toEqual(zoo.chains().map((c) => c.blocks.map((b) => b.blockId)));
    expect(copy.equivalences()).toEqual(zoo.equivalences());
    expect(copy.storage()).toEqual(zoo.storage());
  });
});

describe('partition boundaries (behaviour 4)', () => {
  const arch = tinyArch({ numLayers: 4 });

  it('a LoRA on one FFN cuts only around that FFN, and its block is FFN+LoRA, never LoRA alone', () => {
    const zoo = new BlockZoo();
    zoo.addFoundation(describeModel('F', arch));
    const lora = loraTensors('X', arch, 2, ['up_proj']).filter((t) => t.name.includes('layers.2.'));
    zoo.addPeFineTune({ id: 'X', base: 'F', method: 'lora', config: { r: 2 }, tensors: lora });
    expect(spans(zoo.partition('F'))).toEqual([[0, 6], [6, 7], [7, 10]]);
    const chain = zoo.chain('X').blocks;
    expect(chain[1]).toMatchObject({ kind: 'ffn', pe: { method: 'lora' } });
    expect(chain.every((b) => b.tensors.some((t) => !t.name.includes('lora_')))).toBe(true);
    // Every block of every chain is a whole component range the staged engine can describe.
    // Every block is a run of engine stages: embed → layers(0, 2) → attention(2) | ffn(2) | layers(3, 4) → head.
    expect(engineStages({ start: 0, end: 6 }, 4)).toEqual([{ stage: 'embed' }, { stage: 'layers', from: 0, to: 2 }, { stage: 'attention', layer: 2 }]);
    expect(engineStages({ start: 6, end: 7 }, 4)).toEqual([{ stage: 'ffn', layer: 2 }]);
    expect(engineStages({ start: 7, end: 10 }, 4)).toEqual([{ stage: 'layers', from: 3, to: 4 }, { stage: 'head' }]);
    expect(engineStages({ start: 2, end: 8 }, 4)).toEqual([{ stage: 'ffn', layer: 0 }, { stage: 'layers', from: 1, to: 3 }, { stage: 'attention', layer: 3 }]);
    expect(chain.map((b) => b.stages)).toEqual([0, 1, 2].map((i) => engineStages(chain[i]!.span!, 4)));
  });

  it('adapter, prefix and BitFit deltas fuse with their host components', () => {
    const zoo = new BlockZoo();
    zoo.addFoundation(describeModel('F', arch));
    zoo.addPeFineTune({ id: 'adapter', base: 'F', method: 'adapter', config: { bottleneck: 2 }, tensors: [ref('adapter.layers.3.down', [2, 8], 'a'), ref('adapter.layers.3.up', [8, 2], 'a')].map((t) => ({ ...t, component: 8 })) });
    zoo.addPeFineTune({ id: 'prefix', base: 'F', method: 'prefix', config: { tokens: 3 }, tensors: [0, 1, 2, 3].map((l) => ({ ...ref(`prefix.layers.${l}.kv`, [2, 3, 4], 'p'), component: 1 + 2 * l })) });
    zoo.addPeFineTune({ id: 'bitfit', base: 'F', method: 'bitfit', config: {}, tensors: [ref('model.layers.1.mlp.down_proj.bias', [8], 'b')] });
    expect(zoo.chain('adapter').blocks.filter((b) => b.pe).map((b) => [b.kind, b.span!.start])).toEqual([['ffn', 8]]);
    expect(zoo.chain('prefix').blocks.filter((b) => b.pe).map((b) => [b.kind, b.span!.start])).toEqual([['attention', 1], ['attention', 3], ['attention', 5], ['attention', 7]]);
    expect(zoo.chain('bitfit').blocks.filter((b) => b.pe).map((b) => [b.kind, b.span!.start])).toEqual([['ffn', 4]]);
    // Every chain covers the whole model in order.
    for (const c of zoo.chains()) {
      const s = spans(c.blocks);
      expect(s[0]![0]).toBe(0);
      expect(s.at(-1)![1]).toBe(componentCount(4));
      for (let i = 1; i < s.length; i++) expect(s[i]![0]).toBe(s[i - 1]![1]);
    }
  });

  it('runs of equivalent layers group maximally; the threshold is applied as ≥', () => {
    const zoo = new BlockZoo({ threshold: 0.98 });
    zoo.addFoundation(describeModel('F', arch));
    zoo.addFullFineTune({ ...describeModel('FF', arch), base: 'F' }, [0.5, 0.98, 0.99, 0.97]);
    expect(spans(zoo.partition('FF'))).toEqual([layerRunSpan(0, 1, 4), layerRunSpan(1, 3, 4), layerRunSpan(3, 4, 4)].map((s) => [s.start, s.end]));
    expect(zoo.equivalences().map((e) => [e.a.span, e.score])).toEqual([[{ start: 3, end: 7 }, 0.985]]);
  });

  it('refuses what it cannot place, by name', () => {
    const zoo = new BlockZoo();
    zoo.addFoundation(describeModel('F', arch));
    expect(() => zoo.addFoundation(describeModel('F', arch))).toThrow(ZooConflictError);
    expect(() => zoo.addPeFineTune({ id: 'p', base: 'nope', method: 'lora', config: {}, tensors: loraTensors('p', arch, 1, ['q_proj']) })).toThrow(ZooNotFoundError);
    expect(() => zoo.addPeFineTune({ id: 'p', base: 'F', method: 'lora', config: {}, tensors: [ref('mystery.weight', [2], 'p')] })).toThrow(/mystery\.weight/);
    expect(() => zoo.addFullFineTune({ ...describeModel('G', tinyArch({ numLayers: 3 })), base: 'F' }, [1, 1, 1])).toThrow(ZooInvalidError);
    expect(() => zoo.addFullFineTune({ ...describeModel('G', arch), base: 'F' }, [1, 1])).toThrow(/4 layers but 2/);
    expect(() => zoo.chain('nobody')).toThrow(ZooNotFoundError);
    const missing = describeModel('H', arch);
    expect(() => zoo.addFoundation({ ...missing, tensors: missing.tensors.filter((t) => !/layers\.1\.(mlp|post_attention)/.test(t.name)) })).toThrow(/component 4 \(ffn of layer 1\)/);
  });
});

describe('cross-depth grouping (behaviour 9)', () => {
  it('maps 32 and 40 layers proportionally, covering both stacks without gaps', () => {
    const g = proportionalDepthGroups(32, 40, 8);
    expect(g.map((x) => [x.a.to - x.a.from, x.b.to - x.b.from])).toEqual(Array(8).fill([4, 5]));
    const ten = proportionalDepthGroups(32, 40, 10);
    expect(ten[0]).toEqual({ a: { from: 0, to: 3 }, b: { from: 0, to: 4 } }); // the paper's 3 ↔ 4
    for (const groups of [ten, g, proportionalDepthGroups(7, 11, 3)]) {
      expect(groups[0]!.a.from).toBe(0);
      for (let i = 1; i < groups.length; i++) {
        expect(groups[i]!.a.from).toBe(groups[i - 1]!.a.to);
        expect(groups[i]!.b.from).toBe(groups[i - 1]!.b.to);
      }
    }
    expect(() => proportionalDepthGroups(4, 40, 5)).toThrow(ZooInvalidError);
  });

  it('sibling equivalences split both models and ask for a stitch when widths differ', () => {
    const zoo = new BlockZoo();
    zoo.addFoundation(describeModel('small', tinyArch({ numLayers: 4, hiddenSize: 8 })));
    zoo.addFoundation(describeModel('large', tinyArch({ numLayers: 6, hiddenSize: 12 })));
    const groups = proportionalDepthGroups(4, 6, 2).map((g, i) => ({ ...g, score: i === 0 ? 0.9 : 0.99 }));
    const edges = zoo.addSiblingEquivalence({ a: 'small', b: 'large', groups });
    expect(edges).toHaveLength(1);
    expect(edges[0]!.requiresStitch).toBe(true);
    expect(spans(zoo.partition('small'))).toEqual([[0, 5], [5, 10]]);
    expect(spans(zoo.partition('large'))).toEqual([[0, 7], [7, 14]]);
  });
});

describe('memoised chains and block index', () => {
  it('see every later cut and model, and a caller cannot edit them', () => {
    const arch = tinyArch({ numLayers: 2 });
    const zoo = new BlockZoo();
    zoo.addFoundation(describeModel('F', arch));
    const whole = zoo.chain('F').blocks[0]!;
    expect(zoo.block(whole.blockId)).toEqual(whole);
    zoo.chain('F').blocks.pop(); // a caller's copy
    expect(zoo.chain('F').blocks).toHaveLength(1);
    expect(zoo.ensureBoundary('F', 3)).toBe(true);
    expect(spans(zoo.chain('F').blocks)).toEqual([[0, 3], [3, 6]]);
    const [first, second] = zoo.chain('F').blocks;
    expect(zoo.block(first!.blockId).span).toEqual({ start: 0, end: 3 });
    expect(zoo.block(second!.blockId).span).toEqual({ start: 3, end: 6 });
    expect(() => zoo.block(whole.blockId)).toThrow(ZooNotFoundError); // the old block is no longer in any chain
    expect(zoo.ensureBoundary('F', 3)).toBe(false);
    zoo.addFullFineTune({ ...describeModel('FF', arch), base: 'F' }, [0.5, 0.5]);
    expect(zoo.apps()).toEqual(['F', 'FF']);
    expect(zoo.usersOf(first!.blockId)).toEqual(['F']);
  });
});
