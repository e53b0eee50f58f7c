import { InvalidArgumentError, Tensor, allocatorStats } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { KvCacheExhaustedError } from '../src/errors.js';
import { generateBatch } from '../src/generate.js';
import { LoraDelta, type LoraWeights, mergeLoraIntoWeights } from '../src/hooks/lora-delta.js';
import type { LinearSiteCall, ModelDelta } from '../src/hooks/sites.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import { DecoderModel } from '../src/models/decoder.js';
import { ModelWeights } from '../src/models/weights.js';
import { decoderLinearModules } from '../src/models/names.js';
import { randomDecoder, randomIds, tinyDecoderConfig } from './support/random-models.js';
import { normwiseError } from './support/numerics.js';

const config = tinyDecoderConfig();


function logitsOf(t: Tensor | undefined): Float32Array {
  const a = t!.toArray() as Float32Array;
  t!.dispose();
  return a;
}

const argmax = (a: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i]! > a[best]!) best = i;
  return best;
};

describe('DecoderModel', () => {
  const model = new DecoderModel(config, randomDecoder(config, 3).weights());
  const newCache = (numPages = 64) => PagedKvCache.create({ ...model.kvShape, numPages }, model.backend);
  const prompt = randomIds(37, config.vocabSize, 9, 3);
  afterAll(() => model.dispose());

  it('prefill logits for every position equal prefilling a prefix and decoding the rest token by token', () => {
    const cacheA = newCache();
    const all = logitsOf(model.forward([{ id: 'a', tokens: prompt }], { cache: cacheA, logits: 'all' }).logits);
    expect(cacheA.length('a')).toBe(prompt.length);

    const cacheB = newCache();
    const split = 20;
    const first = logitsOf(model.forward([{ id: 'b', tokens: prompt.slice(0, split) }], { cache: cacheB, logits: 'all' }).logits);
    expect(normwiseError(first, all.subarray(0, split * config.vocabSize))).toBeLessThan(1e-5);
    for (let t = split; t < prompt.length; t++) {
      const step = logitsOf(model.forward([{ id: 'b', tokens: [prompt[t]!] }], { cache: cacheB }).logits);
      expect(normwiseError(step, all.subarray(t * config.vocabSize, (t + 1) * config.vocabSize))).toBeLessThan(1e-5);
    }
    // A continued prompt (several new tokens after cached ones) takes the paged path for every row.
    const cacheC = newCache();
    model.forward([{ id: 'c', tokens: prompt.slice(0, 5) }], { cache: cacheC, logits: 'none' });
    const rest = logitsOf(model.forward([{ id: 'c', tokens: prompt.slice(5) }], { cache: cacheC, logits: 'all' }).logits);
    expect(normwiseError(rest, all.subarray(5 * config.vocabSize))).toBeLessThan(1e-5);
    for (const c of [cacheA, cacheB, cacheC]) c.dispose();
  });

  it('a mixed prefill + decode + continuation forward equals running the parts separately', () => {
    const p1 = randomIds(13, config.vocabSize, 21, 3);
    const p2 = randomIds(18, config.vocabSize, 22, 3);
    const p3 = randomIds(6, config.vocabSize, 23, 3);
    const setup = (cache: PagedKvCache) => {
      model.forward([{ id: 'dec', tokens: p2 }], { cache, logits: 'none' });
      model.forward([{ id: 'cont', tokens: p3 }], { cache, logits: 'none' });
    };
    const mixedCache = newCache();
    setup(mixedCache);
    const mixed = logitsOf(model.forward(
      [{ id: 'dec', tokens: [5] }, { id: 'new', tokens: p1 }, { id: 'cont', tokens: [7, 8, 9] }],
      { cache: mixedCache },
    ).logits);

    const parts = [
      { id: 'dec', tokens: [5] },
      { id: 'new', tokens: p1 },
      { id: 'cont', tokens: [7, 8, 9] },
    ].map((seq) => {
      const cache = newCache();
      setup(cache);
      const out = logitsOf(model.forward([seq], { cache }).logits);
      cache.dispose();
      return out;
    });
    parts.forEach((p, b) => expect(normwiseError(mixed.subarray(b * config.vocabSize, (b + 1) * config.vocabSize), p)).toBeLessThan(1e-5));
    expect(mixedCache.length('new')).toBe(13);
    expect(mixedCache.length('cont')).toBe(9);
    mixedCache.dispose();
  });

  it('runs LoRA at the q/k/v/o/gate/up/down sites per segment, equal to the merged adapter', () => {
    const lin = (i: number) => decoderLinearModules(i);
    const H = config.hiddenSize;
    const kvDim = config.numKvHeads * config.headDim;
    const r = 4;
    const mod = (module: string, inF: number, outF: number, seed: number) => [module, {
      a: Tensor.from(randomFloats(r * inF, seed, -0.3, 0.3), [r, inF]),
      b: Tensor.from(randomFloats(outF * r, seed + 1, -0.3, 0.3), [outF, r]),
      scale: 1.5,
    }] as const;
    const adapter: LoraWeights = {
      name: 'x',
      modules: new Map([
        mod(lin(0).q, H, H, 100),
        mod(lin(0).v, H, kvDim, 102),
        mod(lin(1).k, H, kvDim, 104),
        mod(lin(1).down, config.intermediateSize, H, 106),
        mod(lin(1).gate, H, config.intermediateSize, 108),
      ]),
    };
    const seen = new Set<string>();
    const recorder: ModelDelta = { linear: (c: LinearSiteCall) => void seen.add(c.site) };
    const cache = newCache();
    const hooked = logitsOf(model.forward(
      [{ id: 1, tokens: prompt, key: 'x' }, { id: 2, tokens: prompt }],
      { cache, deltas: [new LoraDelta(new Map([['x', adapter]])), recorder] },
    ).logits);
    expect([...seen].sort()).toEqual(['down', 'gate', 'k', 'o', 'q', 'up', 'v']);
    const merged = randomDecoder(config, 3).weights();
    mergeLoraIntoWeights(merged, adapter);
    const mergedModel = new DecoderModel(config, merged);
    const cache2 = newCache();
    const viaMerge = logitsOf(mergedModel.forward([{ id: 1, tokens: prompt }], { cache: cache2 }).logits);
    const V = config.vocabSize;
    expect(normwiseError(hooked.subarray(0, V), viaMerge)).toBeLessThan(1e-5);
    const cache3 = newCache();
    const base = logitsOf(model.forward([{ id: 2, tokens: prompt }], { cache: cache3 }).logits);
    expect(normwiseError(hooked.subarray(V), base)).toBeLessThan(1e-5);
    expect(normwiseError(hooked.subarray(0, V), base)).toBeGreaterThan(1e-2);
    mergedModel.dispose();
    for (const c of [cache, cache2, cache3]) c.dispose();
  });

  it('fused q/k/v and gate/up: decode-step LoRA hits the right slices; merges write through; a replaced weight falls back', () => {
    const lin = (i: number) => decoderLinearModules(i);
    const H = config.hiddenSize;
    const kvDim = config.numKvHeads * config.headDim;
    const F = config.intermediateSize;
    const r = 3;
    const mod = (module: string, inF: number, outF: number, seed: number) => [module, {
      a: Tensor.from(randomFloats(r * inF, seed, -0.3, 0.3), [r, inF]),
      b: Tensor.from(randomFloats(outF * r, seed + 1, -0.3, 0.3), [outF, r]),
      scale: 1.25,
    }] as const;
    // Every fused part of both layers, each with its own random delta: a slice mix-up would change the logits.
    const adapter: LoraWeights = {
      name: 'x',
      modules: new Map([0, 1].flatMap((l) => [
        mod(lin(l).q, H, H, 200 + 20 * l), mod(lin(l).k, H, kvDim, 202 + 20 * l), mod(lin(l).v, H, kvDim, 204 + 20 * l),
        mod(lin(l).gate, H, F, 206 + 20 * l), mod(lin(l).up, H, F, 208 + 20 * l),
      ])),
    };
    const steps = [11, 12, 13];
    // Prefill then three decode steps (one row each: the parts are views of the fused output) of one sequence.
    const run = (m: DecoderModel, deltas: ModelDelta[] = [], key: string | null = null): Float32Array[] => {
      const cache = newCache();
      const out = [logitsOf(m.forward([{ id: 's', tokens: prompt.slice(0, 9), key }], { cache, deltas }).logits)];
      for (const t of steps) out.push(logitsOf(m.forward([{ id: 's', tokens: [t], key }], { cache, deltas }).logits));
      cache.dispose();
      return out;
    };
    const expectSame = (got: Float32Array[], want: Float32Array[], what: string) =>
      got.forEach((g, i) => expect(normwiseError(g, want[i]!), `${what} step ${i}`).toBeLessThan(1e-5));
    const names = (l: number) => [lin(l).q, lin(l).k, lin(l).v].map((m) => `${m}.weight`);

    // The reference: merged before the model ever ran (its first forward fuses the merged weights).
    const mergedFirst = randomDecoder(config, 3).weights();
    mergeLoraIntoWeights(mergedFirst, adapter);
    const want = run(new DecoderModel(config, mergedFirst));

    const hooked = run(model, [new LoraDelta(new Map([['x', adapter]]))], 'x');
    expectSame(hooked, want, 'LoRA at the sites');
    expect(model.weights.fusedRows(names(0))).not.toBeNull();
    expect(normwiseError(hooked[3]!, run(model)[3]!)).toBeGreaterThan(1e-2);

    // Merged after the fusion: f32 weights are updated in place, through the views, into the stacked weight.
    const mergedAfter = randomDecoder(config, 3).weights();
    const m2 = new DecoderModel(config, mergedAfter);
    run(m2);
    const stacked = mergedAfter.fusedRows(names(1));
    mergeLoraIntoWeights(mergedAfter, adapter);
    expect(mergedAfter.fusedRows(names(1))).toBe(stacked);
    expectSame(run(m2), want, 'merged after fusion');

    // A weight replaced in the map after the fusion (here by an f32 copy): that projection group runs one GEMM
    // per weight, reading what the map holds now.
    const replaced = randomDecoder(config, 3).weights();
    const m3 = new DecoderModel(config, replaced);
    run(m3);
    const qName = `${lin(0).q}.weight`;
    const view = replaced.get(qName);
    replaced.tensors.set(qName, Tensor.from(view.toArray() as Float32Array, view.shape));
    view.dispose();
    expect(replaced.fusedRows(names(0))).toBeNull();
    mergeLoraIntoWeights(replaced, adapter);
    expectSame(run(m3), want, 'replaced weight');

    // Weights others may share (a map handed to the constructor, not exclusive): nothing is stacked or freed.
    const shared = randomDecoder(config, 3).weights();
    const borrowed = new ModelWeights(new Map(shared.tensors), shared.backend);
    const originals = names(0).map((n) => borrowed.get(n));
    mergeLoraIntoWeights(borrowed, adapter);
    expectSame(run(new DecoderModel(config, borrowed)), want, 'not exclusive');
    expect(borrowed.fusedRows(names(0))).toBeNull();
    expect(names(0).map((n) => borrowed.get(n))).toEqual(originals);
    expect(originals.every((t) => !t.disposed)).toBe(true);
    shared.dispose();
    for (const m of [m2, m3]) m.dispose();
    mergedFirst.dispose();
  });

  it('fails cleanly when the KV cache is full: nothing is reserved and the cache keeps serving', () => {
    const cache = newCache(3);
    model.forward([{ id: 'a', tokens: prompt.slice(0, 20) }], { cache, logits: 'none' });
    const before = cache.stats();
    expect(() => model.forward([{ id: 'a', tokens: [1] }, { id: 'b', tokens: prompt.slice(0, 30) }], { cache })).toThrow(KvCacheExhaustedError);
    expect(cache.stats()).toEqual(before);
    expect(cache.hasSequence('b')).toBe(false);
    const ok = model.forward([{ id: 'a', tokens: [1] }], { cache });
    expect(ok.logits!.shape).toEqual([1, config.vocabSize]);
    ok.logits!.dispose();
    cache.dispose();
  });

  it('a hook that throws mid-forward gives back the pages that forward reserved, and the model keeps working', () => {
    const cache = newCache(8);
    model.forward([{ id: 'a', tokens: prompt.slice(0, 15) }], { cache, logits: 'none' });
    const before = cache.stats();
    const pagesA = [...cache.pages('a')];
    const failing: ModelDelta = {
      linear(call: LinearSiteCall) {
        if (call.layer === 1 && call.site === 'down') throw new Error('tenant delta failed');
      },
    };
    // 'a' grows into a second page, 'b' is new: both reservations must be undone.
    expect(() => model.forward([{ id: 'a', tokens: [1, 2] }, { id: 'b', tokens: prompt.slice(0, 20) }], { cache, deltas: [failing] })).toThrow('tenant delta failed');
    expect(cache.stats()).toEqual(before);
    expect(cache.pages('a')).toEqual(pagesA);
    expect(cache.length('a')).toBe(15);
    expect(cache.hasSequence('b')).toBe(false);
    const ok = model.forward([{ id: 'a', tokens: [1, 2] }], { cache });
    expect(cache.length('a')).toBe(17);
    ok.logits!.dispose();
    cache.dispose();
  });

  it('rejects bad input with clear errors and leaks nothing', () => {
    const cache = newCache();
    const before = allocatorStats().inUse;
    expect(() => model.forward([{ id: 1, tokens: [config.vocabSize] }], { cache })).toThrow(/outside the vocabulary/);
    expect(() => model.forward([{ id: 1, tokens: [1] }, { id: 1, tokens: [2] }], { cache })).toThrow(/appears twice/);
    expect(() => model.forward([{ id: 1, tokens: [] }], { cache })).toThrow(InvalidArgumentError);
    expect(() => model.forward([{ id: 1, tokens: randomIds(129, config.vocabSize, 4) }], { cache })).toThrow(/128 positions/);
    expect(allocatorStats().inUse).toBe(before);
    expect(cache.stats().usedPages).toBe(0);
    cache.dispose();
  });

  it('generateBatch: greedy tokens of a request do not depend on its batch mates; pages are all returned', () => {
    const cache = newCache(128);
    const requests = [0, 1, 2, 3].map((i) => ({ prompt: randomIds(5 + 7 * i, config.vocabSize, 40 + i, 3), maxTokens: 12, ignoreEos: true }));
    const together = generateBatch(model, requests, { cache });
    expect(cache.stats().usedPages).toBe(0);
    requests.forEach((r, i) => {
      const alone = generateBatch(model, [r], { cache })[0]!;
      expect(together[i]!.tokens).toEqual(alone.tokens);
      expect(alone.tokens).toHaveLength(12);
      expect(alone.finishReason).toBe('length');
    });
    // EOS stops a request: make the first greedy token the EOS id and check it ends there.
    const cache2 = newCache(16);
    model.forward([{ id: 'probe', tokens: requests[0]!.prompt }], { cache: cache2, logits: 'none' });
    cache2.release('probe');
    const first = argmax(logitsOf(model.forward([{ id: 'p', tokens: requests[0]!.prompt }], { cache: cache2 }).logits));
    cache2.release('p');
    const eosModel = new DecoderModel({ ...config, eosTokenIds: [first] }, model.weights);
    const stopped = generateBatch(eosModel, [requests[0]!].map((r) => ({ ...r, ignoreEos: false })), { cache: cache2 })[0]!;
    expect(stopped.finishReason).toBe('eos');
    expect(stopped.tokens).toEqual([first]);
    cache.dispose();
    cache2.dispose();
  });
});
