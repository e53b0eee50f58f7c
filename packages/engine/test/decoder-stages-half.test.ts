/**
 * The decoder's half-layer stages: `attention(l)` then `ffn(l)` is `layers(l, l + 1)` bit for bit, so blocks cut
 * mid-layer (BlockLLM's lazy partitioning fuses a PE delta with the half of a layer it modifies) compose into the
 * whole forward; a KV-free step (`cache: null`) runs embed, ffn and head and reserves nothing; `beforeLayer(l)`
 * is called at the attention half only; misuse is refused with messages naming the bad value.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tensor } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { loadLoraAdapter } from '../src/formats/peft.js';
import { generateLoraAdapter, generateModel } from '../src/gen/index.js';
import { LoraDelta } from '../src/hooks/lora-delta.js';
import type { LayerBoundaryCall, ModelDelta } from '../src/hooks/sites.js';
import { PagedKvCache, type PagedKvCacheOptions } from '../src/kv/paged-kv-cache.js';
import type { DecoderSequence, DecoderStepContext } from '../src/models/decoder.js';
import { loadDecoder } from '../src/models/load.js';
import { randomIds } from './support/random-models.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-half-stages-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const NUM_LAYERS = 4;
const host = (t: Tensor): Float32Array => t.toArray() as Float32Array;

/** A stage of a block, as the zoo's manifests list them. */
type Stage = { stage: 'embed' } | { stage: 'head' } | { stage: 'layers'; from: number; to: number } | { stage: 'attention' | 'ffn'; layer: number };

/** A block: its stages, and the layers its own KV cache holds (null: no attention, a KV-free step). */
interface Block {
  stages: readonly Stage[];
  kv: { first: number; count: number } | null;
}

/**
 * Partitions of the 4-layer model into blocks cut at layer boundaries and mid-layer. Each covers the model once,
 * in order; the KV layers of a block are the attention halves it runs.
 */
const PARTITIONS: Record<string, readonly Block[]> = {
  'every half its own block': [
    { stages: [{ stage: 'embed' }], kv: null },
    ...Array.from({ length: NUM_LAYERS }, (_, l) => [
      { stages: [{ stage: 'attention', layer: l }], kv: { first: l, count: 1 } } as Block,
      { stages: [{ stage: 'ffn', layer: l }], kv: null } as Block,
    ]).flat(),
    { stages: [{ stage: 'head' }], kv: null },
  ],
  'cuts inside layers 0, 2 and 3 (embed with attention, ffn with layers, head with ffn)': [
    { stages: [{ stage: 'embed' }, { stage: 'attention', layer: 0 }], kv: { first: 0, count: 1 } },
    { stages: [{ stage: 'ffn', layer: 0 }], kv: null },
    { stages: [{ stage: 'layers', from: 1, to: 2 }, { stage: 'attention', layer: 2 }], kv: { first: 1, count: 2 } },
    { stages: [{ stage: 'ffn', layer: 2 }, { stage: 'attention', layer: 3 }], kv: { first: 3, count: 1 } },
    { stages: [{ stage: 'ffn', layer: 3 }, { stage: 'head' }], kv: null },
  ],
  'one block, halves throughout': [
    {
      stages: [{ stage: 'embed' }, ...Array.from({ length: NUM_LAYERS }, (_, l) => [{ stage: 'attention', layer: l } as Stage, { stage: 'ffn', layer: l } as Stage]).flat(), { stage: 'head' }],
      kv: { first: 0, count: NUM_LAYERS },
    },
  ],
};

/** Records each boundary call. */
class BoundaryLog implements ModelDelta {
  readonly layers: number[] = [];
  beforeLayer(call: LayerBoundaryCall): void {
    this.layers.push(call.layer);
  }
}

describe('decoder half-layer stages', () => {
  const dir = join(root, 'decoder');
  const { config } = generateModel(dir, { family: 'decoder', size: 'tiny', seed: 11, overrides: { numLayers: NUM_LAYERS } });
  // One adapter on attention only, one on every linear: the halves' sites get deltas on both sides of the cut.
  generateLoraAdapter(join(root, 'a'), { base: config, rank: 8, seed: 3 });
  generateLoraAdapter(join(root, 'b'), { base: config, rank: 4, seed: 4, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] });
  const model = loadDecoder(dir);
  const adapters = [loadLoraAdapter(join(root, 'a'), { base: config }), loadLoraAdapter(join(root, 'b'), { base: config })];
  const lora = new LoraDelta(new Map([['a', adapters[0]!], ['b', adapters[1]!]]));
  const caches: PagedKvCache[] = [];
  const newCache = (options: Partial<PagedKvCacheOptions> = {}) => {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 32, ...options } as PagedKvCacheOptions, model.backend);
    caches.push(cache);
    return cache;
  };
  afterAll(() => {
    for (const c of caches) c.dispose();
    lora.dispose();
    for (const a of adapters) a.dispose();
    model.dispose();
  });

  const p1 = randomIds(19, config.vocabSize, 51, 3);
  const p2 = randomIds(23, config.vocabSize, 52, 3);
  const p3 = randomIds(5, config.vocabSize, 53, 3);
  /** Prefills, a mixed step (decode, fresh prompt, continued prompt), then decode steps, over three tenants. */
  const steps: DecoderSequence[][] = [
    [{ id: 'x', tokens: p2, key: 'a' }, { id: 'y', tokens: p3 }],
    [{ id: 'x', tokens: [4], key: 'a' }, { id: 'z', tokens: p1, key: 'b' }, { id: 'y', tokens: [7, 8, 9, 10] }],
    [{ id: 'z', tokens: [12], key: 'b' }, { id: 'x', tokens: [13], key: 'a' }, { id: 'y', tokens: [14] }],
    [{ id: 'y', tokens: [15] }, { id: 'z', tokens: [16], key: 'b' }, { id: 'x', tokens: [17], key: 'a' }],
  ];

  const wholeForward = (deltas: readonly ModelDelta[]) => {
    const cache = newCache();
    return steps.map((seqs) => host(model.forward(seqs, { cache, deltas, logits: 'all' }).logits!));
  };

  /** One step through the blocks: a context per block (its own cache, or none), the hidden state handed along. */
  function blockStep(seqs: readonly DecoderSequence[], blocks: readonly Block[], caches: readonly (PagedKvCache | null)[], deltas: readonly ModelDelta[]): Float32Array {
    const contexts = blocks.map((_, i) => model.prepare(seqs, { cache: caches[i]!, deltas }));
    let h: Tensor | null = null;
    let logits: Tensor | null = null;
    try {
      blocks.forEach((b, i) => {
        const ctx = contexts[i]!;
        for (const s of b.stages) {
          if (s.stage === 'embed') h = model.embed(ctx);
          else if (s.stage === 'attention') model.attention(s.layer, h!, ctx);
          else if (s.stage === 'ffn') model.ffn(s.layer, h!, ctx);
          else if (s.stage === 'layers') model.layers(s.from, s.to, h!, ctx);
          else logits = model.head(h!, ctx, 'all');
        }
        ctx.commit();
      });
      return host(logits!);
    } finally {
      (logits as Tensor | null)?.dispose();
      (h as Tensor | null)?.dispose();
      for (const ctx of contexts) ctx.dispose();
    }
  }

  for (const [name, deltas] of [['no delta', () => []], ['LoRA on attention and on every linear, base rows too', () => [lora]]] as const) {
    for (const [partition, blocks] of Object.entries(PARTITIONS)) {
      it(`blocks cut mid-layer give the whole forward bit for bit over prefill and decode steps (${partition}; ${name})`, () => {
        const want = wholeForward(deltas());
        const blockCaches = blocks.map((b) => (b.kv ? newCache({ numLayers: b.kv.count, firstLayer: b.kv.first }) : null));
        const got = steps.map((seqs) => blockStep(seqs, blocks, blockCaches, deltas()));
        got.forEach((logits, i) => expect(logits, `step ${i}`).toEqual(want[i]));
        // Every block with KV tracks the same sequences and lengths; the KV-free blocks reserve nothing.
        for (const c of blockCaches) {
          if (c) expect(c.sequenceIds().map((id) => [id, c.length(id)])).toEqual([['x', p2.length + 3], ['y', p3.length + 6], ['z', p1.length + 2]]);
        }
      });
    }
  }

  it('the LoRA deltas change the logits (so the equalities above are not vacuous)', () => {
    const [base, adapted] = [wholeForward([]), wholeForward([lora])];
    for (let i = 0; i < steps.length; i++) expect(adapted[i]).not.toEqual(base[i]);
  });

  it('attention(l) then ffn(l) leaves the same hidden state as layers(l, l + 1), layer by layer', () => {
    const [a, b] = [newCache(), newCache()];
    const ca = model.prepare(steps[0]!, { cache: a, deltas: [lora] });
    const cb = model.prepare(steps[0]!, { cache: b, deltas: [lora] });
    const ha = model.embed(ca);
    const hb = model.embed(cb);
    for (let l = 0; l < NUM_LAYERS; l++) {
      model.layers(l, l + 1, ha, ca);
      const beforeFfn = host(model.attention(l, hb, cb));
      expect(beforeFfn).not.toEqual(host(ha)); // the FFN half does something
      expect(host(model.ffn(l, hb, cb))).toEqual(host(ha));
    }
    for (const t of [ha, hb]) t.dispose();
    for (const c of [ca, cb]) (c.commit(), c.dispose());
  });

  it('beforeLayer(l) is called once per layer, at the attention half; ffn calls none', () => {
    const log = new BoundaryLog();
    const cache = newCache();
    const ctx = model.prepare(steps[0]!, { cache, deltas: [log] });
    const h = model.embed(ctx);
    model.attention(0, h, ctx);
    model.ffn(0, h, ctx);
    model.layers(1, 3, h, ctx);
    model.attention(3, h, ctx);
    model.ffn(3, h, ctx);
    expect(log.layers).toEqual([0, 1, 2, 3]);
    ctx.commit();
    h.dispose();
    ctx.dispose();
  });

  it('attentionAsync awaits beforeLayer and gives the same bits', async () => {
    const want = wholeForward([lora])[0]!;
    let waited = 0;
    const slow: ModelDelta = { beforeLayer: () => new Promise<void>((resolve) => setTimeout(() => (waited++, resolve()), 2)) };
    const cache = newCache();
    const ctx = model.prepare(steps[0]!, { cache, deltas: [slow, lora] });
    const h = model.embed(ctx);
    for (let l = 0; l < NUM_LAYERS; l++) {
      await model.attentionAsync(l, h, ctx);
      model.ffn(l, h, ctx);
    }
    ctx.commit();
    expect(waited).toBe(NUM_LAYERS);
    expect(host(model.head(h, ctx, 'all'))).toEqual(want);
    expect(() => model.attention(0, h, ctx)).toThrow(/beforeLayer\(0\) returned a Promise/);
    h.dispose();
    ctx.dispose();
  });

  it('a KV-free step (cache: null) runs embed, ffn and head, reserves nothing, and refuses attention and layers', () => {
    const ctx: DecoderStepContext = model.prepare(steps[1]!, { cache: null, deltas: [lora] });
    expect(ctx.cache).toBeNull();
    const h = model.embed(ctx);
    expect(() => model.attention(0, h, ctx)).toThrow(/layer 0's attention needs a KV cache, but the step was prepared without one \(cache: null\)/);
    expect(() => model.layers(0, 1, h, ctx)).toThrow(/layers \[0, 1\) need a KV cache, but the step was prepared without one/);
    model.layers(2, 2, h, ctx); // an empty range needs nothing
    model.ffn(1, h, ctx);
    const logits = model.head(h, ctx);
    expect(logits.shape).toEqual([3, config.vocabSize]);
    ctx.commit(); // nothing to mark
    for (const t of [logits, h]) t.dispose();
    ctx.dispose();
    // Positions are not checked either: a KV-free step has none (a block without attention never needs them).
    const long = model.prepare([{ id: 'long', tokens: randomIds(config.maxPositions + 1, config.vocabSize, 9, 0) }], { cache: null });
    long.dispose();
  });

  it('refuses a half outside the model or the cache, and a foreign hidden state', () => {
    const cache = newCache({ numLayers: 2, firstLayer: 1 });
    const ctx = model.prepare(steps[0]!, { cache });
    const h = model.embed(ctx);
    expect(() => model.attention(0, h, ctx)).toThrow(/DecoderModel.attention: layer 0 is not in the step's KV cache, which holds layers \[1, 3\)/);
    expect(() => model.attention(3, h, ctx)).toThrow(/layer 3 is not in the step's KV cache/);
    expect(() => model.ffn(4, h, ctx)).toThrow(/DecoderModel.ffn: layer 4 is not a layer within \[0, 4\)/);
    expect(() => model.ffn(1.5, h, ctx)).toThrow(/layer 1.5 is not a layer/);
    expect(() => model.ffn(0, Tensor.zeros([2, config.hiddenSize]), ctx)).toThrow(/hidden is f32 \[2, 64\], expected f32 \[28, 64\]/);
    model.attention(1, h, ctx);
    // The commit needs layer 2's K/V too: the FFN half writes none.
    model.ffn(1, h, ctx);
    model.ffn(2, h, ctx);
    expect(() => ctx.commit()).toThrow(/layer 2 of the KV cache \(layers \[1, 3\)\) did not run in this step/);
    model.attention(2, h, ctx);
    ctx.commit();
    h.dispose();
    ctx.dispose();
    expect(() => model.ffn(0, h, ctx)).toThrow(/the step was disposed/);
  });
});
