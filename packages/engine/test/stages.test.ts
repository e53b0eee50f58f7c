/**
 * Stages: embed → layers(a, b) in pieces → head is the whole forward, bit for bit, for both families, with and
 * without deltas; the decoder's KV cache can be split by layer range (one cache per block); beforeLayer(j) is
 * awaited on the async path and refused (as a Promise) on the sync one.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError, Tensor, mul } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { generateLoraAdapter, generateModel } from '../src/gen/index.js';
import { loadLoraAdapter } from '../src/formats/peft.js';
import { LoraDelta } from '../src/hooks/lora-delta.js';
import type { AttentionPrefix, AttentionSiteCall, LayerBoundaryCall, ModelDelta, NormSiteCall } from '../src/hooks/sites.js';
import { PagedKvCache, type PagedKvCacheOptions } from '../src/kv/paged-kv-cache.js';
import { type DecoderModel, type DecoderSequence, DecoderStepContext } from '../src/models/decoder.js';
import type { EncoderBatchOptions, EncoderModel, EncoderSequence } from '../src/models/encoder.js';
import { loadDecoder, loadEncoder } from '../src/models/load.js';
import { randomIds } from './support/random-models.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-stages-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** 4 layers, so 1, 2 and L pieces are three different splits. */
const NUM_LAYERS = 4;
/** Layer cut points: [0, L] is one piece, [0, 2, L] two, [0, 1, …, L] L pieces; the last two are uneven. */
const SPLITS: readonly (readonly number[])[] = [[0, 4], [0, 2, 4], [0, 1, 2, 3, 4], [0, 3, 4], [0, 0, 1, 4, 4]];

const host = (t: Tensor): Float32Array => t.toArray() as Float32Array;

/** A delta that records each boundary and waits a few milliseconds there, as layer-wise adapter staging would. */
class SlowBoundary implements ModelDelta {
  readonly layers: number[] = [];
  readonly hiddenAt = new Map<number, Float32Array>();
  constructor(private readonly ms: number, private readonly copyAt = -1) {}
  async beforeLayer(call: LayerBoundaryCall): Promise<void> {
    this.layers.push(call.layer);
    if (call.layer === this.copyAt) this.hiddenAt.set(call.layer, host(call.hidden));
    await new Promise((resolve) => setTimeout(resolve, this.ms));
  }
}

describe('decoder stages', () => {
  const dir = join(root, 'decoder');
  const { config } = generateModel(dir, { family: 'decoder', size: 'tiny', seed: 5, overrides: { numLayers: NUM_LAYERS } });
  generateLoraAdapter(join(root, 'dec-a'), { base: config, rank: 8, seed: 1 });
  generateLoraAdapter(join(root, 'dec-b'), { base: config, rank: 4, seed: 2, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] });
  const model = loadDecoder(dir);
  const adapters = [loadLoraAdapter(join(root, 'dec-a'), { base: config }), loadLoraAdapter(join(root, 'dec-b'), { base: config })];
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

  const p1 = randomIds(21, config.vocabSize, 31, 3);
  const p2 = randomIds(18, config.vocabSize, 32, 3);
  const p3 = randomIds(6, config.vocabSize, 33, 3);
  /** Two prefills, then one mixed step: a decode row, a fresh prompt and a continued prompt, three tenants. */
  const steps: DecoderSequence[][] = [
    [{ id: 'dec', tokens: p2, key: 'a' }],
    [{ id: 'cont', tokens: p3 }],
    [{ id: 'dec', tokens: [5], key: 'a' }, { id: 'new', tokens: p1, key: 'b' }, { id: 'cont', tokens: [7, 8, 9] }],
    [{ id: 'new', tokens: [11], key: 'b' }, { id: 'dec', tokens: [12], key: 'a' }, { id: 'cont', tokens: [13] }],
  ];

  const wholeForward = (deltas: readonly ModelDelta[]) => {
    const cache = newCache();
    return steps.map((seqs) => host(model.forward(seqs, { cache, deltas, logits: 'all' }).logits!));
  };

  /** One step through the stages: every piece of `cuts` on the cache that holds it; head on the last block's context. */
  function stagedStep(seqs: readonly DecoderSequence[], blocks: readonly { cache: PagedKvCache; cuts: readonly number[] }[], deltas: readonly ModelDelta[]) {
    const contexts = blocks.map((b) => model.prepare(seqs, { cache: b.cache, deltas }));
    try {
      const h = model.embed(contexts[0]!);
      try {
        blocks.forEach((b, i) => {
          for (let p = 0; p + 1 < b.cuts.length; p++) model.layers(b.cuts[p]!, b.cuts[p + 1]!, h, contexts[i]!);
          contexts[i]!.commit();
        });
        const logits = model.head(h, contexts.at(-1)!, 'all');
        try {
          return host(logits);
        } finally {
          logits.dispose();
        }
      } finally {
        h.dispose();
      }
    } finally {
      for (const ctx of contexts) ctx.dispose();
    }
  }

  for (const [name, deltas] of [['no delta', () => []], ['LoRA (two tenants and base rows)', () => [lora]]] as const) {
    it(`embed → layers in 1, 2 and L pieces → head equals forward bit for bit, over mixed prefill + decode steps (${name})`, () => {
      const want = wholeForward(deltas());
      for (const cuts of SPLITS) {
        const cache = newCache();
        const got = steps.map((seqs) => stagedStep(seqs, [{ cache, cuts }], deltas()));
        got.forEach((logits, i) => expect(logits, `split ${cuts.join(',')} step ${i}`).toEqual(want[i]));
      }
    });
  }

  it('the LoRA delta changes every step with adapted rows (so the equalities below are not vacuous)', () => {
    const [base, adapted] = [wholeForward([]), wholeForward([lora])];
    for (const i of [0, 2, 3]) expect(adapted[i]).not.toEqual(base[i]);
    expect(adapted[1]).toEqual(base[1]); // step 1 runs only the base model
  });

  it("head's 'last' rows are forward's default logits", () => {
    const [a, b] = [newCache(), newCache()];
    const want = host(model.forward(steps[0]!, { cache: a, deltas: [lora] }).logits!);
    const ctx = model.prepare(steps[0]!, { cache: b, deltas: [lora] });
    const h = model.embed(ctx);
    model.layers(0, NUM_LAYERS, h, ctx);
    ctx.commit();
    expect(host(model.head(h, ctx))).toEqual(want);
    h.dispose();
    ctx.dispose();
    expect(b.length('dec')).toBe(p2.length);
  });

  /** A KV cache for layers [first, first + numLayers) only: `layer(j)` takes the global layer index. */
  function blockCache(first: number, numLayers: number): PagedKvCache {
    const cache = newCache({ numLayers, firstLayer: first });
    expect(cache.firstLayer).toBe(first);
    return cache;
  }

  it('blocks with KV caches of their own layer ranges give the whole forward bit for bit', () => {
    const want = wholeForward([lora]);
    const low = newCache({ numLayers: 1 }); // layers [0, 1): a cache without firstLayer starts at 0
    const mid = blockCache(1, 2);
    const high = blockCache(3, 1);
    const blocks = [{ cache: low, cuts: [0, 1] }, { cache: mid, cuts: [1, 2, 3] }, { cache: high, cuts: [3, 4] }];
    const got = steps.map((seqs) => stagedStep(seqs, blocks, [lora]));
    got.forEach((logits, i) => expect(logits, `step ${i}`).toEqual(want[i]));
    // Each block's cache tracks the same sequences and lengths.
    for (const c of [low, mid, high]) expect(c.sequenceIds().map((id) => [id, c.length(id)])).toEqual([['dec', p2.length + 2], ['cont', p3.length + 4], ['new', p1.length + 1]]);
  });

  it('refuses layers its cache does not hold, and a commit before every cache layer ran; nothing stays reserved', () => {
    const mid = blockCache(1, 2);
    const ctx = model.prepare(steps[0]!, { cache: mid });
    const h = model.embed(ctx);
    expect(() => model.layers(0, 2, h, ctx)).toThrow(/layers \[0, 2\) are not all in the step's KV cache, which holds layers \[1, 3\)/);
    expect(() => model.layers(1, 5, h, ctx)).toThrow(/\[1, 5\) is not a range of layers within \[0, 4\)/);
    expect(() => model.layers(1, 2, Tensor.zeros([3, config.hiddenSize]), ctx)).toThrow(/hidden is f32 \[3, 64\], expected f32 \[18, 64\]/);
    model.layers(1, 2, h, ctx);
    expect(() => ctx.commit()).toThrow(/layer 2 of the KV cache \(layers \[1, 3\)\) did not run in this step/);
    expect(mid.hasSequence('dec')).toBe(true);
    ctx.dispose();
    h.dispose();
    expect(mid.hasSequence('dec')).toBe(false);
    expect(mid.freePages).toBe(mid.numPages);
    expect(() => model.layers(1, 2, h, ctx)).toThrow(/the step was disposed/);
    // A cache for layers the model does not have.
    expect(() => model.prepare(steps[0]!, { cache: blockCache(3, 2) })).toThrow(/holds layers \[3, 5\), outside this model's \[0, 4\)/);
  });

  it('awaits beforeLayer(j) once per layer, in order, and an async wait there changes nothing', async () => {
    const want = wholeForward([lora]);
    const cache = newCache();
    const boundaries: number[][] = [];
    for (const [i, seqs] of steps.entries()) {
      const slow = new SlowBoundary(i === 2 ? 5 : 0);
      const out = await model.forwardAsync(seqs, { cache, deltas: [slow, lora], logits: 'all' });
      expect(host(out.logits!)).toEqual(want[i]);
      boundaries.push(slow.layers);
    }
    expect(boundaries).toEqual(steps.map(() => [0, 1, 2, 3]));

    // Piecewise: layersAsync calls the boundaries of its own range only; the hidden state at beforeLayer(2) is the
    // output of layers [0, 2), what BlockLLM hands to the next block.
    const slow = new SlowBoundary(1, 2);
    const [a, b] = [newCache(), newCache()];
    const ctx = model.prepare(steps[0]!, { cache: a, deltas: [lora, slow] });
    const h = model.embed(ctx);
    await model.layersAsync(0, 1, h, ctx);
    await model.layersAsync(1, 4, h, ctx);
    ctx.commit();
    expect(slow.layers).toEqual([0, 1, 2, 3]);
    expect(host(model.head(h, ctx, 'all'))).toEqual(want[0]);
    ctx.dispose();
    h.dispose();
    const ref = model.prepare(steps[0]!, { cache: b, deltas: [lora] });
    const hRef = model.embed(ref);
    model.layers(0, 2, hRef, ref);
    expect(slow.hiddenAt.get(2)).toEqual(host(hRef));
    ref.dispose();
    hRef.dispose();
  });

  it('the sync path calls a void beforeLayer per layer and refuses a Promise, leaving the cache as it was', async () => {
    const seen: number[] = [];
    const cache = newCache();
    model.forward(steps[0]!, { cache, deltas: [{ beforeLayer: (call) => void seen.push(call.layer) }] });
    expect(seen).toEqual([0, 1, 2, 3]);
    const free = cache.freePages;
    const sync = () => model.forward(steps[2]!, { cache, deltas: [lora, new SlowBoundary(0)] });
    expect(sync).toThrow(InvalidArgumentError);
    expect(sync).toThrow(/beforeLayer\(0\) returned a Promise, which the synchronous forward cannot wait for; use forwardAsync or layersAsync/);
    expect(cache.freePages).toBe(free);
    expect(cache.hasSequence('new')).toBe(false);
    expect(cache.length('dec')).toBe(p2.length);
    // A rejected wait on the async path fails the forward and rolls back too; a rejected Promise the sync path
    // refused is not left unhandled (vitest would report it).
    const failing: ModelDelta = { beforeLayer: (call) => (call.layer === 2 ? Promise.reject(new Error('adapter fetch failed')) : undefined) };
    await expect(model.forwardAsync(steps[2]!, { cache, deltas: [failing] })).rejects.toThrow(/adapter fetch failed/);
    expect(() => model.forward(steps[2]!, { cache, deltas: [failing] })).toThrow(/beforeLayer\(2\) returned a Promise/);
    expect(cache.freePages).toBe(free);
    expect(cache.hasSequence('new')).toBe(false);
  });

  it('a context belongs to its model and its step', () => {
    const other = loadDecoder(dir);
    const cache = newCache();
    const ctx = model.prepare(steps[0]!, { cache });
    expect(ctx).toBeInstanceOf(DecoderStepContext);
    expect(ctx.rows).toBe(p2.length);
    expect(Array.from(ctx.offsets)).toEqual([0, p2.length]);
    expect(() => other.embed(ctx)).toThrow(/prepared by another model/);
    ctx.dispose();
    ctx.dispose(); // idempotent
    expect(() => ctx.commit()).toThrow(/disposed/);
    other.dispose();
  });
});

/** A PET-style delta (prefix-tuning's extra keys and values, a task LayerNorm's rescale) keyed by tenant. */
class PrefixAndNormDelta implements ModelDelta {
  private readonly prefixes = new Map<string, AttentionPrefix[]>();
  private readonly gains = new Map<string, Tensor>();
  constructor(model: EncoderModel, keys: readonly string[]) {
    const H = model.config.hiddenSize;
    keys.forEach((key, i) => {
      const rnd = (n: number, s: number) => Float32Array.from({ length: n }, (_, j) => Math.sin(17 * s + 3.1 * j) * 0.5);
      this.prefixes.set(key, Array.from({ length: model.config.numLayers }, (_, l) => ({
        key: Tensor.from(rnd(3 * H, 10 * i + l), [3, H], { backend: model.backend }),
        value: Tensor.from(rnd(3 * H, 10 * i + l + 5), [3, H], { backend: model.backend }),
      })));
      this.gains.set(key, Tensor.from(Float32Array.from({ length: H }, (_, j) => 1 + 0.1 * Math.cos(i + j)), [H], { backend: model.backend }));
    });
  }
  attentionPrefix(call: AttentionSiteCall): AttentionPrefix | null {
    return call.key === null ? null : (this.prefixes.get(call.key)?.[call.layer] ?? null);
  }
  norm(call: NormSiteCall): void {
    if (call.site !== 'ffn_ln') return;
    for (const { key, start, count } of call.layout.segments) {
      const gain = key === null ? undefined : this.gains.get(key);
      if (!gain || count === 0) continue;
      const y = call.y.rows(start, count);
      mul(y, gain, { out: y });
      y.dispose();
    }
  }
  dispose(): void {
    for (const ps of this.prefixes.values()) for (const p of ps) (p.key.dispose(), p.value.dispose());
    for (const g of this.gains.values()) g.dispose();
  }
}

describe('encoder stages', () => {
  const dir = join(root, 'encoder');
  const { config } = generateModel(dir, { family: 'encoder', size: 'tiny', seed: 6, overrides: { numLayers: NUM_LAYERS } });
  generateLoraAdapter(join(root, 'enc-a'), { base: config, rank: 8, seed: 3 });
  generateLoraAdapter(join(root, 'enc-b'), { base: config, rank: 4, seed: 4, targets: ['query', 'key', 'value', 'output.dense', 'intermediate.dense'] });
  const model = loadEncoder(dir);
  const adapters = [loadLoraAdapter(join(root, 'enc-a'), { base: config }), loadLoraAdapter(join(root, 'enc-b'), { base: config })];
  const lora = new LoraDelta(new Map([['a', adapters[0]!], ['b', adapters[1]!]]));
  const pet = new PrefixAndNormDelta(model, ['b', 'c']);
  afterAll(() => {
    lora.dispose();
    pet.dispose();
    for (const a of adapters) a.dispose();
    model.dispose();
  });

  const batch: EncoderSequence[] = [
    { ids: randomIds(9, config.vocabSize, 41, 1), key: 'a' },
    { ids: randomIds(3, config.vocabSize, 42, 1), key: 'a' },
    { ids: randomIds(17, config.vocabSize, 43, 1), key: 'b' },
    { ids: randomIds(5, config.vocabSize, 44, 1), key: 'c' },
    { ids: randomIds(12, config.vocabSize, 45, 1) },
  ];
  const variants: [string, () => readonly ModelDelta[]][] = [
    ['no delta', () => []],
    ['LoRA', () => [lora]],
    ['LoRA + prefix / task-norm PET delta', () => [lora, pet]],
  ];
  const layouts: [string, EncoderBatchOptions][] = [['packed', {}], ['padded', { padTo: 20 }]];

  function staged(options: EncoderBatchOptions, cuts: readonly number[]) {
    const ctx = model.prepare(batch, options);
    try {
      const h = model.embed(ctx);
      for (let p = 0; p + 1 < cuts.length; p++) model.layers(cuts[p]!, cuts[p + 1]!, h, ctx);
      const { pooled, logits } = model.head(h, ctx);
      const out = { hidden: host(h), pooled: host(pooled!), logits: host(logits!) };
      for (const t of [h, pooled!, logits!]) t.dispose();
      return out;
    } finally {
      ctx.dispose();
    }
  }

  const whole = (options: EncoderBatchOptions) => {
    const out = model.forward(batch, options);
    return { hidden: host(out.hidden!), pooled: host(out.pooled!), logits: host(out.logits!) };
  };

  it('the deltas under test change the outputs (so the equalities below are not vacuous)', () => {
    const [base, withLora, withPet] = variants.map(([, deltas]) => whole({ deltas: deltas() }).logits);
    expect(withLora).not.toEqual(base);
    expect(withPet).not.toEqual(withLora);
  });

  for (const [layoutName, layoutOptions] of layouts) {
    for (const [name, deltas] of variants) {
      it(`embed → layers in 1, 2 and L pieces → head equals forward bit for bit (${layoutName}, ${name})`, () => {
        const options = { ...layoutOptions, deltas: deltas() };
        const want = whole(options);
        for (const cuts of SPLITS) expect(staged(options, cuts), `split ${cuts.join(',')}`).toEqual(want);
      });
    }
  }

  it('layers(N, L, suppliedHidden) → head equals the whole forward (HMI: the lower layers looked up)', () => {
    for (const [, layoutOptions] of layouts) {
      const options = { ...layoutOptions, deltas: [lora, pet] };
      const want = whole(options);
      for (const N of [0, 1, 3, NUM_LAYERS]) {
        // The "table": layers [0, N) of the same batch, computed once and copied out.
        const lookup = model.prepare(batch, options);
        const lower = model.embed(lookup);
        model.layers(0, N, lower, lookup);
        const table = host(lower);
        lower.dispose();
        lookup.dispose();

        const ctx = model.prepare(batch, options);
        const supplied = Tensor.from(table, [ctx.rows, config.hiddenSize], { backend: model.backend });
        model.layers(N, NUM_LAYERS, supplied, ctx);
        const { logits } = model.head(supplied, ctx, { pooled: false });
        expect(host(supplied)).toEqual(want.hidden);
        expect(host(logits!)).toEqual(want.logits);
        for (const t of [supplied, logits!]) t.dispose();
        ctx.dispose();
      }
    }
  });

  it('awaits beforeLayer(j) once per layer in order; an async wait changes nothing; the sync path refuses a Promise', async () => {
    for (const [, layoutOptions] of layouts) {
      const options = { ...layoutOptions, deltas: [lora, pet] };
      const want = whole(options);
      const slow = new SlowBoundary(2, 1);
      const out = await model.forwardAsync(batch, { ...layoutOptions, deltas: [slow, lora, pet] });
      expect({ hidden: host(out.hidden!), pooled: host(out.pooled!), logits: host(out.logits!) }).toEqual(want);
      expect(slow.layers).toEqual([0, 1, 2, 3]);
      expect(slow.hiddenAt.get(1)).toEqual(staged1(options));
    }
    expect(() => model.forward(batch, { deltas: [new SlowBoundary(0)] })).toThrow(/EncoderModel: a delta's beforeLayer\(0\) returned a Promise/);
    const seen: number[] = [];
    model.forward(batch, { deltas: [{ beforeLayer: (call) => void seen.push(call.layer) }] });
    expect(seen).toEqual([0, 1, 2, 3]);
  });

  /** The hidden state after layer 0: what beforeLayer(1) sees. */
  function staged1(options: EncoderBatchOptions): Float32Array {
    const ctx = model.prepare(batch, options);
    const h = model.embed(ctx);
    model.layers(0, 1, h, ctx);
    const out = host(h);
    h.dispose();
    ctx.dispose();
    return out;
  }

  it('layers refuse a foreign or disposed context', () => {
    const bare = loadEncoder(dir);
    const ctx = model.prepare(batch);
    const h = model.embed(ctx);
    expect(() => bare.layers(0, 1, h, ctx)).toThrow(/prepared by another model/);
    ctx.dispose();
    expect(() => model.layers(0, 1, h, ctx)).toThrow(/the batch was disposed/);
    h.dispose();
    bare.dispose();
  });
});
