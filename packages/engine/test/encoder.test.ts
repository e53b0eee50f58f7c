import { InvalidArgumentError, Tensor, allocatorStats } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { describe, expect, it } from 'vitest';
import { LoraDelta, type LoraWeights, mergeLoraIntoWeights } from '../src/hooks/lora-delta.js';
import type { LinearSiteCall, ModelDelta, NormSiteCall } from '../src/hooks/sites.js';
import { EncoderModel, unpadBatch } from '../src/models/encoder.js';
import { encoderLinearModules } from '../src/models/names.js';
import { randomEncoder, randomIds, tinyEncoderConfig } from './support/random-models.js';
import { normwiseError } from './support/numerics.js';

const config = tinyEncoderConfig();

function rowsOf(t: Tensor, start: number, count: number): Float32Array {
  const all = t.toArray() as Float32Array;
  const w = t.shape[1]!;
  return all.slice(start * w, (start + count) * w);
}


/** A random LoRA adapter for `modules` (A [r, in], B [out, r]) as LoraWeights. */
function randomLora(name: string, modules: { module: string; in: number; out: number }[], r: number, seed: number, scale = 2): LoraWeights {
  return {
    name,
    modules: new Map(modules.map((m, i) => [m.module, {
      a: Tensor.from(randomFloats(r * m.in, seed * 100 + 2 * i, -0.2, 0.2), [r, m.in]),
      b: Tensor.from(randomFloats(m.out * r, seed * 100 + 2 * i + 1, -0.2, 0.2), [m.out, r]),
      scale,
    }])),
  };
}

describe('EncoderModel', () => {
  const { weights } = randomEncoder(config, 7);
  const model = new EncoderModel(config, weights());
  const seqs = [randomIds(9, config.vocabSize, 1), randomIds(3, config.vocabSize, 2), randomIds(17, config.vocabSize, 3), randomIds(1, config.vocabSize, 4)];

  // Rows do not interact, but the GEMM picks its kernel (and so its f32 summation order) by the number of rows,
  // so a sequence alone and in a batch may differ in the last bits: 1e-5 relative is a few ulps after 3 layers.
  it('gives every sequence the same outputs whatever its batch mates', () => {
    const batch = model.forward(seqs.map((ids) => ({ ids })));
    seqs.forEach((ids, b) => {
      const alone = model.forward([{ ids }]);
      expect(normwiseError(rowsOf(batch.hidden!, batch.offsets[b]!, ids.length), alone.hidden!.toArray() as Float32Array)).toBeLessThan(1e-5);
      expect(normwiseError(rowsOf(batch.logits!, b, 1), alone.logits!.toArray() as Float32Array)).toBeLessThan(1e-5);
      expect(normwiseError(rowsOf(batch.pooled!, b, 1), alone.pooled!.toArray() as Float32Array)).toBeLessThan(1e-5);
    });
    // Same batch twice: bitwise.
    expect(model.forward(seqs.map((ids) => ({ ids }))).hidden!.toArray()).toEqual(batch.hidden!.toArray());
    expect(batch.hidden!.shape).toEqual([9 + 3 + 17 + 1, config.hiddenSize]);
    expect(batch.logits!.shape).toEqual([4, 3]);
  });

  it('accepts padded HF-style input: padding positions are dropped by the attention mask', () => {
    const padded = [[...seqs[0]!, 0, 0, 0], [...seqs[1]!, 0, 0, 0, 0, 0, 0, 0, 0, 0]];
    const mask = [[...seqs[0]!.map(() => 1), 0, 0, 0], [...seqs[1]!.map(() => 1), ...Array<number>(9).fill(0)]];
    const fromPadded = model.forward(unpadBatch(padded, mask));
    const ragged = model.forward([{ ids: seqs[0]! }, { ids: seqs[1]! }]);
    expect(fromPadded.logits!.toArray()).toEqual(ragged.logits!.toArray());
    expect(() => unpadBatch([[1, 2]], [[1]])).toThrow(/2 ids but 1 mask/);
  });

  it('keeps the token types of padded sentence pairs (token_type_ids)', () => {
    const types = seqs.slice(0, 2).map((ids) => ids.map((_, i) => (i >= ids.length >> 1 ? 1 : 0)));
    const padded = [[...seqs[0]!, 0, 0], [...seqs[1]!, 0, 0, 0, 0, 0]];
    const mask = [[...seqs[0]!.map(() => 1), 0, 0], [...seqs[1]!.map(() => 1), 0, 0, 0, 0, 0]];
    const paddedTypes = [[...types[0]!, 0, 0], [...types[1]!, 0, 0, 0, 0, 0]];
    const unpadded = unpadBatch(padded, mask, paddedTypes);
    expect(unpadded.map((s) => Array.from(s.tokenTypes!))).toEqual(types);
    const ragged = model.forward([{ ids: seqs[0]!, tokenTypes: types[0]! }, { ids: seqs[1]!, tokenTypes: types[1]! }]);
    expect(model.forward(unpadded).logits!.toArray()).toEqual(ragged.logits!.toArray());
    // Dropping them changes the answer: the reason they must be carried.
    expect(model.forward(unpadBatch(padded, mask)).logits!.toArray()).not.toEqual(ragged.logits!.toArray());
    expect(() => unpadBatch(padded, mask, [paddedTypes[0]!])).toThrow(/2 rows of input_ids but 1 rows of token_type_ids/);
    expect(() => unpadBatch([[1, 2]], [[1, 1]], [[0]])).toThrow(/row 0 has 2 ids but 1 token type ids/);
  });

  it('token types change the output', () => {
    const a = model.forward([{ ids: seqs[0]! }]).logits!.toArray();
    const b = model.forward([{ ids: seqs[0]!, tokenTypes: seqs[0]!.map((_, i) => (i > 4 ? 1 : 0)) }]).logits!.toArray();
    expect(a).not.toEqual(b);
  });

  it('runs the upper layers on a supplied hidden state: layers(N, L, hidden) then head equals the whole forward', () => {
    const lowerConfig = { ...config, numLayers: 2 };
    const lower = new EncoderModel(lowerConfig, model.weights);
    const batch = seqs.map((ids) => ({ ids }));
    const lowerHidden = lower.forward(batch, { outputs: { hidden: true, pooled: false, logits: false } }).hidden!;
    const full = model.forward(batch);
    const ctx = model.prepare(batch);
    try {
      model.layers(2, config.numLayers, lowerHidden, ctx);
      const { logits } = model.head(lowerHidden, ctx, { pooled: false });
      expect(logits!.toArray()).toEqual(full.logits!.toArray());
      expect(lowerHidden.toArray()).toEqual(full.hidden!.toArray());
      expect(() => model.layers(2, 3, Tensor.zeros([3, config.hiddenSize]), ctx)).toThrow(/hidden is f32 \[3, 48\], expected f32 \[30, 48\]/);
      expect(() => model.layers(2, 9, lowerHidden, ctx)).toThrow(/\[2, 9\) is not a range of layers within \[0, 3\)/);
    } finally {
      ctx.dispose();
    }
  });

  it('calls every hook site in order with its HF module names and one layout', () => {
    const calls: string[] = [];
    const layouts = new Set<unknown>();
    const recorder: ModelDelta = {
      linear(call: LinearSiteCall) {
        layouts.add(call.layout);
        calls.push(`${call.layer}:${call.site}:${call.outputs.map((o) => o.module.split('.').slice(-3).join('.')).join('|')}:${call.x.shape[1]}->${call.outputs.map((o) => o.y.shape[1]).join('|')}`);
      },
      norm(call: NormSiteCall) {
        layouts.add(call.layout);
        calls.push(`${call.layer}:${call.site}`);
      },
    };
    const out = model.forward([{ ids: seqs[0]!, key: 'a' }, { ids: seqs[1]!, key: 'a' }, { ids: seqs[2]!, key: 'b' }, { ids: seqs[3]! }], { deltas: [recorder] });
    expect(calls.slice(0, 6)).toEqual([
      '0:qkv:attention.self.query|attention.self.key|attention.self.value:48->48|48|48',
      '0:attn_out:attention.output.dense:48->48',
      '0:attn_ln',
      '0:ffn_in:0.intermediate.dense:48->96',
      '0:ffn_out:0.output.dense:96->48',
      '0:ffn_ln',
    ]);
    expect(calls).toHaveLength(6 * config.numLayers);
    expect(layouts.size).toBe(1);
    expect(out.layout.segments).toEqual([
      { key: 'a', start: 0, count: 12 },
      { key: 'b', start: 12, count: 17 },
      { key: null, start: 29, count: 1 },
    ]);
  });

  it('LoRA applied at the hook sites equals the adapter merged into the weights; base rows are untouched', () => {
    const H = config.hiddenSize;
    const mods = (i: number) => encoderLinearModules(config, i);
    const adapter = randomLora('t1', [
      { module: mods(0).query, in: H, out: H },
      { module: mods(0).value, in: H, out: H },
      { module: mods(1).ffn_in, in: H, out: config.intermediateSize },
      { module: mods(2).ffn_out, in: config.intermediateSize, out: H },
      { module: mods(2).attn_out, in: H, out: H },
    ], 4, 3);
    const delta = new LoraDelta(new Map([['t1', adapter]]));
    const batch = [{ ids: seqs[0]!, key: 't1' }, { ids: seqs[1]! }, { ids: seqs[2]!, key: 't1' }];
    const hooked = model.forward(batch, { deltas: [delta] });

    const merged = randomEncoder(config, 7).weights();
    mergeLoraIntoWeights(merged, adapter);
    const mergedModel = new EncoderModel(config, merged);
    const viaMerge = mergedModel.forward([{ ids: seqs[0]! }, { ids: seqs[2]! }]);
    const base = model.forward([{ ids: seqs[1]! }]);

    const hookedLogits = hooked.logits!.toArray() as Float32Array;
    const mergedLogits = viaMerge.logits!.toArray() as Float32Array;
    // Merged and hooked round differently (W + sBA in f32 vs two GEMMs), a few f32 ulps of the logits.
    expect(normwiseError(hookedLogits.slice(0, 3), mergedLogits.slice(0, 3))).toBeLessThan(1e-5);
    expect(normwiseError(hookedLogits.slice(6, 9), mergedLogits.slice(3, 6))).toBeLessThan(1e-5);
    expect(normwiseError(hookedLogits.slice(3, 6), base.logits!.toArray() as Float32Array)).toBeLessThan(1e-5);
    // The adapter really changes the output.
    expect(normwiseError(hookedLogits.slice(0, 3), model.forward([{ ids: seqs[0]! }]).logits!.toArray() as Float32Array)).toBeGreaterThan(1e-2);
    mergedModel.dispose();
  });

  it('rejects bad input before computing anything, and leaks no memory', () => {
    const before = allocatorStats().inUse;
    expect(() => model.forward([{ ids: [] }])).toThrow(InvalidArgumentError);
    expect(() => model.forward([{ ids: randomIds(65, config.vocabSize, 5) }])).toThrow(/65 tokens, more than the 64 positions/);
    expect(() => model.forward([{ ids: [1, 2], tokenTypes: [0] }])).toThrow(/2 ids but 1 token types/);
    expect(() => model.forward([{ ids: [1, 999] }])).toThrow(/999/);
    const bare = new EncoderModel({ ...config, architecture: 'BertModel' }, model.weights);
    expect(() => bare.forward([{ ids: [1] }], { outputs: { logits: true } })).toThrow(/no pooler or classifier/);
    expect(allocatorStats().inUse).toBe(before);
  });
});
