/** Content ids (behaviour 1), manifest identity, and device residency deduplicated at the tensor level. */
import { describe, expect, it } from 'vitest';

import {
  BlockZoo,
  DeviceResidency,
  canonicalJson,
  isBlockId,
  isTensorId,
  tensorId,
  verifyManifest,
  ZooBudgetError,
  ZooInvalidError,
  ZooNotFoundError,
} from '../src/planner/index.js';
import { describeModel, loraTensors, tinyArch } from './support/descriptors.js';

describe('tensorId', () => {
  const data = Float32Array.from({ length: 12 }, (_, i) => i * 0.5 - 2);

  it('is stable for the same dtype, shape and bytes, and changes with any of them', () => {
    const id = tensorId({ dtype: 'f32', shape: [3, 4] }, data);
    expect(isTensorId(id)).toBe(true);
    expect(tensorId({ dtype: 'f32', shape: [3, 4] }, new Float32Array(data))).toBe(id);
    expect(tensorId({ dtype: 'f32', shape: [4, 3] }, data)).not.toBe(id);
    expect(tensorId({ dtype: 'i32', shape: [3, 4] }, new Int32Array(data.buffer))).not.toBe(id);
    for (let bit = 0; bit < 8; bit += 3) {
      const flipped = new Uint8Array(new Float32Array(data).buffer);
      flipped[17] = flipped[17]! ^ (1 << bit);
      expect(tensorId({ dtype: 'f32', shape: [3, 4] }, flipped)).not.toBe(id);
    }
  });

  it('hashes a view by its own bytes, and an empty tensor too', () => {
    const big = new Float32Array(20);
    big.set(data, 5);
    expect(tensorId({ dtype: 'f32', shape: [12] }, big.subarray(5, 17))).toBe(tensorId({ dtype: 'f32', shape: [12] }, data));
    expect(isTensorId(tensorId({ dtype: 'f16', shape: [0, 7] }, new Uint16Array(0)))).toBe(true);
  });

  it('refuses bytes that do not match the descriptor, and unknown dtypes', () => {
    expect(() => tensorId({ dtype: 'f32', shape: [5] }, data)).toThrow(/20 bytes, but 48/);
    expect(() => tensorId({ dtype: 'q4', shape: [1] }, data)).toThrow(ZooInvalidError);
    expect(() => tensorId({ dtype: 'f32', shape: [-1] }, data)).toThrow(ZooInvalidError);
  });

  it('canonical JSON ignores key order', () => {
    expect(canonicalJson({ b: 1, a: [1, { d: 2, c: null }] })).toBe(canonicalJson({ a: [1, { c: null, d: 2 }], b: 1 }));
  });
});

describe('block identity', () => {
  it('byte-identical blocks of two zoos get one id; any change gives a new id; tampering is detected', () => {
    const arch = tinyArch();
    const one = new BlockZoo();
    const two = new BlockZoo();
    one.addFoundation(describeModel('F', arch));
    two.addFoundation(describeModel('other-name', arch, () => 'F'));
    expect(two.chain('other-name').blocks[0]!.blockId).toBe(one.chain('F').blocks[0]!.blockId);
    const m = one.chain('F').blocks[0]!;
    expect(isBlockId(m.blockId)).toBe(true);
    expect(verifyManifest(m)).toBe(true);
    expect(verifyManifest({ ...m, span: { start: 0, end: 5 } })).toBe(false);
  });
});

describe('DeviceResidency', () => {
  const arch = tinyArch();
  const zoo = new BlockZoo();
  zoo.addFoundation(describeModel('F', arch));
  zoo.addPeFineTune({ id: 'A', base: 'F', method: 'lora', config: {}, tensors: loraTensors('A', arch, 2, ['q_proj']) });
  zoo.addPeFineTune({ id: 'B', base: 'F', method: 'lora', config: {}, tensors: loraTensors('B', arch, 2, ['q_proj']) });

  it('holds a tensor shared by several resident blocks once, and frees it with the last', () => {
    const dev = new DeviceResidency(10_000_000);
    const chains = ['F', 'A', 'B'].map((app) => zoo.chain(app).blocks);
    for (const c of chains) for (const b of c) dev.load(b);
    const s = dev.stats();
    expect(s.residentBytes).toBe(zoo.storage().uniqueBytes);
    const distinctBlocks = new Map(chains.flat().map((b) => [b.blockId, b] as const));
    expect(s.blocks).toBe(distinctBlocks.size);
    expect(s.logicalBytes).toBe([...distinctBlocks.values()].reduce((n, b) => n + b.paramBytes, 0));
    expect(s.logicalBytes).toBeGreaterThan(s.residentBytes);
    // The q_proj of layer 0 is in F's attention block and in A's and B's fused ones.
    const q0 = chains[0]![1]!.tensors.find((t) => t.name === 'model.layers.0.self_attn.q_proj.weight')!;
    expect(dev.refCount(q0.id)).toBe(3);
    for (const b of chains[1]!.filter((b) => b.pe)) expect(dev.unload(b.blockId).some((id) => id === q0.id)).toBe(false);
    expect(dev.refCount(q0.id)).toBe(2);
    for (const c of chains) for (const b of c) if (dev.isResident(b.blockId)) dev.unload(b.blockId);
    // Shared blocks were loaded more than once (F's and the LoRA chains share them): unload until empty.
    while (dev.residentBlocks().length > 0) dev.unload(dev.residentBlocks()[0]!);
    expect(dev.stats()).toMatchObject({ residentBytes: 0, logicalBytes: 0, tensors: 0, blocks: 0 });
    expect(() => dev.unload(chains[0]![0]!.blockId)).toThrow(ZooNotFoundError);
  });

  it('refuses a load over budget and changes nothing; a shared tensor costs nothing the second time', () => {
    const f = zoo.chain('F').blocks;
    const a = zoo.chain('A').blocks;
    const need = f.reduce((n, b) => n + b.paramBytes, 0);
    const dev = new DeviceResidency(need);
    for (const b of f) dev.load(b);
    const fused = a.find((b) => b.pe)!;
    const extra = fused.tensors.filter((t) => t.name.includes('lora_')).reduce((n, t) => n + zoo.tensor(t.id).bytes, 0);
    expect(dev.costOf(fused)).toBe(extra);
    expect(() => dev.load(fused)).toThrow(ZooBudgetError);
    expect(dev.stats().residentBytes).toBe(need);
    dev.setBudget(need + extra);
    expect(dev.load(fused).length).toBe(2);
    expect(dev.stats().residentBytes).toBe(need + extra);
    expect(() => new DeviceResidency(-1)).toThrow(ZooInvalidError);
  });
});
