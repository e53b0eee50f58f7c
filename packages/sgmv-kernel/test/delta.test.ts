/**
 * SgmvLoraDelta inside the engine's models, with real generated models and PEFT adapters: a mixed batch of
 * several adapters (different ranks, targets, alpha/rsLoRA scales) and base-model rows gives the same logits as
 * the engine's per-segment LoraDelta and as running each request on a model with its adapter merged into the
 * weights. Tolerance: normwise ≤ 1e-5 on the logits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type DecoderSequence,
  type EncoderModel,
  type LoraAdapter,
  LoraDelta,
  PagedKvCache,
  SegmentLayout,
  generateLoraAdapter,
  generateModel,
  loadDecoder,
  loadEncoder,
  loadLoraAdapter,
  mergeLoraIntoWeights,
} from '@tessera/engine';
import { type Tensor, allocatorStats } from '@tessera/native';
import { randomInts } from '@tessera/test-utils';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoraWeightSet, SgmvLoraDelta, UnknownAdapterError, readLoraForSgmv } from '../src/index.js';
import { TOL, normwiseError } from './support.js';

const root = mkdtempSync(join(tmpdir(), 'sgmv-delta-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function take(t: Tensor | undefined): Float32Array {
  const a = t!.toArray() as Float32Array;
  t!.dispose();
  return a;
}

describe('SgmvLoraDelta in the decoder', () => {
  const gen = generateModel(join(root, 'decoder'), { family: 'decoder', size: 'tiny', seed: 4 });
  if (gen.config.family !== 'decoder') throw new Error('expected a decoder');
  const config = gen.config;
  const model = loadDecoder(gen.dir);
  const V = config.vocabSize;
  const specs = {
    a: { rank: 8, alpha: 16, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'], seed: 1 },
    b: { rank: 4, alpha: 4, targets: ['q_proj', 'v_proj'], seed: 2 },
    c: { rank: 16, alpha: 8, targets: ['o_proj', 'gate_proj', 'up_proj', 'down_proj'], rankPattern: { 'layers.0.mlp.down_proj': 2 }, seed: 3 },
    d: { rank: 2, alpha: 32, useRslora: true, targets: ['k_proj'], seed: 4 },
  } as const;
  const dirs = Object.fromEntries(Object.entries(specs).map(([name, s]) => [name, generateLoraAdapter(join(root, name), { base: config, ...s, targets: [...s.targets] }).dir]));
  const loaded = new Map<string, LoraAdapter>(Object.entries(dirs).map(([name, dir]) => [name, loadLoraAdapter(dir, { base: config })]));
  const sets = new Map<string, LoraWeightSet>();
  const newCache = () => PagedKvCache.create({ ...model.kvShape, numPages: 64 }, model.backend);
  const prompt = (n: number, seed: number) => Array.from(randomInts(n, seed, 3, V - 3));

  beforeAll(async () => {
    for (const [name, dir] of Object.entries(dirs)) sets.set(name, LoraWeightSet.upload(await readLoraForSgmv(dir, config)));
  });
  afterAll(() => {
    for (const s of sets.values()) s.dispose();
    for (const a of loaded.values()) a.dispose();
    model.dispose();
  });

  // Adapter a appears in two separate runs (two segments), base rows sit in between.
  const batch: DecoderSequence[] = [
    { id: 1, tokens: prompt(9, 1), key: 'a' },
    { id: 2, tokens: prompt(5, 2), key: null },
    { id: 3, tokens: prompt(7, 3), key: 'b' },
    { id: 4, tokens: prompt(3, 4), key: 'a' },
    { id: 5, tokens: prompt(6, 5), key: 'c' },
    { id: 6, tokens: prompt(4, 6), key: 'd' },
  ];

  it('a mixed prefill batch equals LoraDelta and, request by request, the merged-weight model', () => {
    const sgmv = new SgmvLoraDelta((key) => sets.get(key));
    const plain = new LoraDelta(loaded);
    const c1 = newCache();
    const c2 = newCache();
    try {
      const out = model.forward(batch, { cache: c1, deltas: [sgmv], logits: 'all' });
      const got = take(out.logits);
      expect(out.layout.segments.map((s) => s.key)).toEqual(['a', null, 'b', 'a', 'c', 'd']);
      // One weight list per slice for this layout, not one per (layer, slice).
      expect(sgmv.weightListBuilds).toBe(7);
      const want = take(model.forward(batch, { cache: c2, deltas: [plain], logits: 'all' }).logits);
      expect(normwiseError(got, want)).toBeLessThanOrEqual(TOL);

      // Each request alone on its merged model (or the base model for the null key).
      const offsets = out.offsets;
      for (const [b, seq] of batch.entries()) {
        let solo = model;
        if (seq.key) {
          solo = loadDecoder(gen.dir);
          mergeLoraIntoWeights(solo.weights, loaded.get(seq.key)!);
        }
        const cache = newCache();
        try {
          const alone = take(solo.forward([{ id: 'x', tokens: seq.tokens }], { cache, logits: 'all' }).logits);
          const rows = got.subarray(offsets[b]! * V, offsets[b + 1]! * V);
          expect(normwiseError(rows, alone), `request ${seq.id} (${seq.key})`).toBeLessThanOrEqual(TOL);
          if (seq.key) expect(normwiseError(rows, take(model.forward([{ id: 'y', tokens: seq.tokens }], { cache: newCache(), logits: 'all' }).logits))).toBeGreaterThan(1e-3);
        } finally {
          cache.dispose();
          if (solo !== model) solo.dispose();
        }
      }
    } finally {
      c1.dispose();
      c2.dispose();
      sgmv.dispose();
      plain.dispose();
    }
  });

  it('mixed prefill + decode steps (prefill rows first) keep matching LoraDelta', () => {
    const sgmv = new SgmvLoraDelta((key) => sets.get(key));
    const plain = new LoraDelta(loaded);
    const c1 = newCache();
    const c2 = newCache();
    try {
      const first = batch.slice(0, 4);
      model.forward(first, { cache: c1, deltas: [sgmv], logits: 'none' });
      model.forward(first, { cache: c2, deltas: [plain], logits: 'none' });
      for (let step = 0; step < 3; step++) {
        // A new prompt joins (prefill first), then one decode row per running sequence, sorted by adapter.
        const joining: DecoderSequence = { id: 100 + step, tokens: prompt(5 + step, 50 + step), key: ['c', 'd', null][step]! };
        const decodes = [...first].sort((p, q) => String(p.key).localeCompare(String(q.key))).map((s) => ({ id: s.id, tokens: [3 + step], key: s.key ?? null }));
        const stepBatch = [joining, ...decodes];
        const got = take(model.forward(stepBatch, { cache: c1, deltas: [sgmv] }).logits);
        const want = take(model.forward(stepBatch, { cache: c2, deltas: [plain] }).logits);
        expect(normwiseError(got, want), `step ${step}`).toBeLessThanOrEqual(TOL);
        first.push(joining);
      }
      expect(sgmv.weightListBuilds).toBe(4 * 7); // one layout per forward
    } finally {
      c1.dispose();
      c2.dispose();
      sgmv.dispose();
      plain.dispose();
    }
  });

  it('an unknown key throws UnknownAdapterError (never the base model), from prepare() before any work', () => {
    const sgmv = new SgmvLoraDelta((key) => sets.get(key));
    const layout = SegmentLayout.fromCounts([{ key: 'a', count: 2 }, { key: 'ghost', count: 1 }]);
    try {
      expect(() => sgmv.prepare(layout)).toThrow(UnknownAdapterError);
      let err: unknown;
      try {
        sgmv.prepare(layout);
      } catch (e) {
        err = e;
      }
      expect(err).toMatchObject({ adapter: 'ghost', code: 'TESSERA_UNKNOWN_ADAPTER' });
      expect(String((err as Error).message)).toMatch(/"ghost"/);
      const cache = newCache();
      try {
        expect(() => model.forward([{ id: 1, tokens: [5, 6], key: 'a' }, { id: 2, tokens: [7], key: 'ghost' }], { cache, deltas: [sgmv] })).toThrow(UnknownAdapterError);
      } finally {
        cache.dispose();
      }
    } finally {
      layout.dispose();
      sgmv.dispose();
    }
  });

  it('re-resolves when an adapter is evicted and reloaded, and frees its scratch on dispose', async () => {
    const live = new Map(sets);
    const sgmv = new SgmvLoraDelta((key) => live.get(key));
    const seqs: DecoderSequence[] = [{ id: 1, tokens: prompt(4, 9), key: 'b' }, { id: 2, tokens: prompt(3, 10), key: 'a' }];
    const layout = SegmentLayout.fromRowKeys(['b', 'b', 'b', 'b', 'a', 'a', 'a']);
    const run = () => {
      const cache = newCache();
      try {
        return take(model.forward(seqs, { cache, deltas: [sgmv], layout }).logits);
      } finally {
        cache.dispose();
      }
    };
    const b1 = LoraWeightSet.upload(await readLoraForSgmv(dirs.b!, config));
    live.set('b', b1);
    const b2 = LoraWeightSet.upload(await readLoraForSgmv(dirs.b!, config));
    try {
      const first = run();
      expect(run()).toEqual(first);
      expect(sgmv.weightListBuilds).toBe(7); // same layout, same live sets: reused
      // The cache evicts b (its tensors are freed) and loads it again; the layout object is the same.
      b1.dispose();
      live.set('b', b2);
      expect(run()).toEqual(first);
      expect(sgmv.weightListBuilds).toBe(14);
    } finally {
      b2.dispose();
      layout.dispose();
    }
    // dispose() frees the [rows, rMax] = [7, 8] f32 scratch (measured around the call: other tests' garbage
    // may be finalized at any time, so a before/after of the whole test would be flaky).
    const held = allocatorStats().inUse;
    sgmv.dispose();
    expect(held - allocatorStats().inUse).toBeGreaterThanOrEqual(7 * 8 * 4);
  });
});

describe('SgmvLoraDelta in the encoder', () => {
  let model: EncoderModel;
  let adapters: Map<string, LoraAdapter>;
  const sets = new Map<string, LoraWeightSet>();
  beforeAll(async () => {
    const gen = generateModel(join(root, 'encoder'), { family: 'encoder', size: 'tiny', seed: 2 });
    model = loadEncoder(gen.dir);
    const specs = {
      qv: { rank: 4, targets: ['query', 'value'], seed: 7 },
      all: { rank: 8, alpha: 4, targets: ['query', 'key', 'value', 'dense'], seed: 8 },
    };
    adapters = new Map();
    for (const [name, s] of Object.entries(specs)) {
      const dir = generateLoraAdapter(join(root, `enc-${name}`), { base: gen.config, ...s }).dir;
      adapters.set(name, loadLoraAdapter(dir, { base: gen.config }));
      sets.set(name, LoraWeightSet.upload(await readLoraForSgmv(dir, gen.config)));
    }
  });
  afterAll(() => {
    for (const s of sets.values()) s.dispose();
    for (const a of adapters.values()) a.dispose();
    model.dispose();
  });

  it('lands on the query/key/value slices of the fused qkv site and on attn_out/ffn_in/ffn_out', () => {
    const ids = (n: number, seed: number) => Array.from(randomInts(n, seed, 5, model.config.vocabSize));
    const seqs = [
      { ids: ids(6, 1), key: 'all' },
      { ids: ids(4, 2), key: 'qv' },
      { ids: ids(5, 3), key: null },
      { ids: ids(7, 4), key: 'all' },
    ];
    const sgmv = new SgmvLoraDelta((key) => sets.get(key));
    const plain = new LoraDelta(adapters);
    try {
      const got = model.forward(seqs, { deltas: [sgmv] });
      const want = model.forward(seqs, { deltas: [plain] });
      const base = model.forward(seqs, {});
      expect(normwiseError(take(got.hidden), take(want.hidden))).toBeLessThanOrEqual(TOL);
      const gotLogits = take(got.logits);
      expect(normwiseError(gotLogits, take(want.logits))).toBeLessThanOrEqual(TOL);
      expect(normwiseError(gotLogits, take(base.logits))).toBeGreaterThan(1e-4);
      base.hidden?.dispose();
      base.pooled?.dispose();
      got.pooled?.dispose();
      want.pooled?.dispose();
    } finally {
      sgmv.dispose();
      plain.dispose();
    }
  });
});
