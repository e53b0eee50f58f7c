/**
 * Step scratch pooling: a decode-size step takes its row-sized scratch (activations, row metadata) from the model's
 * pool and gives it back on dispose. Steps that are open at the same time must each hold their own, steady decode
 * must allocate nothing new, and a step disposed after its model must still free what it holds.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Tensor, allocatorStats } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { generateModel } from '../src/gen/index.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import type { DecoderModel, DecoderSequence } from '../src/models/decoder.js';
import { loadDecoder } from '../src/models/load.js';
import { randomIds } from './support/random-models.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-step-scratch-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const host = (t: Tensor): Float32Array => t.toArray() as Float32Array;

describe('decoder step scratch', () => {
  const dir = join(root, 'decoder');
  const { config } = generateModel(dir, { family: 'decoder', size: 'tiny', seed: 9, overrides: { numLayers: 3 } });
  const model = loadDecoder(dir);
  afterAll(() => model.dispose());
  const prompts = [randomIds(9, config.vocabSize, 1, 3), randomIds(14, config.vocabSize, 2, 3)];

  /** A cache holding both prompts, prefilled by plain forwards. */
  const prefilled = (m: DecoderModel = model): PagedKvCache => {
    const cache = PagedKvCache.create({ ...m.kvShape, numPages: 16 }, m.backend);
    prompts.forEach((tokens, i) => m.forward([{ id: `s${i}`, tokens }], { cache, logits: 'none' }).layout.dispose());
    return cache;
  };

  it('two one-row steps open at once, run layer by layer in turn, give the logits of two forwards, bit for bit', () => {
    const steps: DecoderSequence[] = [{ id: 's0', tokens: [7] }, { id: 's1', tokens: [8] }];
    const refCache = prefilled();
    const want = steps.map((s) => host(model.forward([s], { cache: refCache }).logits!));
    refCache.dispose();

    const cache = prefilled();
    // Same row count, so both would come from one pool entry if the pool handed it out twice.
    const contexts = steps.map((s) => model.prepare([s], { cache }));
    const hidden = contexts.map((ctx) => model.embed(ctx));
    for (let l = 0; l < config.numLayers; l++) contexts.forEach((ctx, i) => model.layers(l, l + 1, hidden[i]!, ctx));
    const got = contexts.map((ctx, i) => {
      ctx.commit();
      const logits = model.head(hidden[i]!, ctx);
      const out = host(logits);
      logits.dispose();
      hidden[i]!.dispose();
      ctx.dispose();
      return out;
    });
    cache.dispose();
    expect(got[0]).toEqual(want[0]);
    expect(got[1]).toEqual(want[1]);
  });

  it('steady decode steps allocate nothing once the first step of their size has run', () => {
    const cache = prefilled();
    const step = (t: number) => {
      const out = model.forward([{ id: 's0', tokens: [t] }, { id: 's1', tokens: [t + 1] }], { cache });
      out.logits!.dispose();
      out.layout.dispose();
    };
    step(3);
    const before = allocatorStats(model.backend);
    for (let t = 0; t < 5; t++) step(10 + t);
    const after = allocatorStats(model.backend);
    cache.dispose();
    // Each step still allocates its per-step tensors (block table, logits, …) and frees them again: in use and
    // live allocations come back to where they were; the pooled scratch is not allocated again.
    expect(after.inUse).toBe(before.inUse);
    expect(after.allocations).toBe(before.allocations);
    const perStep = (after.totalAllocations - before.totalAllocations) / 5;
    // Without the pool a two-row step allocates its scratch too: x, q/k/v and gate/up (each fused output and its
    // parts, with their split indices), attn, o, down and the three row-metadata tensors, some 20 allocations more.
    expect(perStep).toBeLessThan(12);
  });

  it('trimScratch frees the pool, and the next step of a pooled size makes its scratch again', () => {
    const cache = prefilled();
    const step = () => model.forward([{ id: 's0', tokens: [5] }], { cache }).logits!.dispose();
    const inUse = () => allocatorStats(model.backend).inUse;
    step();
    model.trimScratch();
    const empty = inUse();
    step(); // makes a one-row scratch and pools it
    const one = inUse();
    expect(one).toBeGreaterThan(empty);
    step(); // reuses it
    expect(inUse()).toBe(one);
    model.trimScratch();
    expect(inUse()).toBe(empty);
    cache.dispose();
  });

  it('the pool keeps the four most recently used row counts: a fifth drops the one unused the longest', () => {
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 32 }, model.backend);
    const ids = [0, 1, 2, 3, 4].map((i) => `lru${i}`);
    model.forward(ids.map((id, i) => ({ id, tokens: [3 + i, 4 + i] })), { cache, logits: 'none' }).layout.dispose();
    let t = 10;
    /** A decode step over the first `rows` sequences; returns how many allocations it made. */
    const step = (rows: number) => {
      const before = allocatorStats(model.backend).totalAllocations;
      model.forward(ids.slice(0, rows).map((id) => ({ id, tokens: [t++] })), { cache }).logits!.dispose();
      return allocatorStats(model.backend).totalAllocations - before;
    };
    model.trimScratch();
    for (const rows of [1, 2, 3, 4, 1]) step(rows); // pooled sizes, least recently returned first: 2, 3, 4, 1
    const pooled = step(1);
    expect(step(2)).toBe(pooled); // size 2 is pooled (and now the most recent: 3, 4, 1, 2)
    step(5); // a fifth size: drops size 3
    expect(step(1)).toBe(pooled);
    expect(step(3) - pooled).toBeGreaterThan(10); // size 3 makes its scratch again
    cache.dispose();
  });

  it('a step disposed after its model is disposed frees its scratch; pooled scratch goes with the model', () => {
    const start = allocatorStats(model.backend).inUse;
    const other = loadDecoder(dir);
    const cache = prefilled(other); // two prefills: their scratch is freed (14 and 9 rows) or pooled (9 rows)
    const ctx = other.prepare([{ id: 's0', tokens: [4] }], { cache });
    const open = allocatorStats(other.backend).inUse;
    other.dispose();
    // The step still holds its scratch (and its KV reservation) until it is disposed.
    expect(allocatorStats(other.backend).inUse).toBeLessThan(open);
    expect(allocatorStats(other.backend).inUse).toBeGreaterThan(start);
    ctx.dispose();
    cache.dispose();
    // Weights, cache, the pooled scratch and the step's scratch: all gone, nothing kept for a dead model.
    expect(allocatorStats(other.backend).inUse).toBe(start);
  });
});
