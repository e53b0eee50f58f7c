/**
 * The cache with the LoRA source it is built for: @tessera/sgmv-kernel's loraAdapterSource (PEFT directory →
 * SGMV-packed host weights → LoraWeightSet on the device) feeding SgmvLoraDelta through `cache.get`. Punica's
 * on-demand loading, step by step: a request whose adapter is not resident starts its load and sits out the
 * step; once resident it is pinned and joins the batch; the batch's logits equal the engine's per-segment
 * LoraDelta (normwise ≤ 1e-5, as in sgmv-kernel's own tests).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type DecoderSequence, type LoraAdapter, LoraDelta, type ModelDelta, PagedKvCache, generateLoraAdapter, generateModel, loadDecoder, loadLoraAdapter } from '@tessera/engine';
import { allocatorStats } from '@tessera/native';
import { type HostLoraWeights, type LoraWeightSet, SgmvLoraDelta, UnknownAdapterError as SgmvUnknownAdapterError, loraAdapterSource } from '@tessera/sgmv-kernel';
import { randomInts } from '@tessera/test-utils';
import { afterAll, describe, expect, expectTypeOf, it } from 'vitest';

import { AdapterCache, type AdapterSource } from '../src/index.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-swap-sgmv-'));
const gen = generateModel(join(root, 'decoder'), { family: 'decoder', size: 'tiny', seed: 4 });
const config = gen.config;
const model = loadDecoder(gen.dir);
const names = ['a', 'b', 'c'] as const;
const dirs = Object.fromEntries(names.map((name, i) => [name, generateLoraAdapter(join(root, name), { base: config, rank: 8, seed: i + 1 }).dir]));
const reference = new Map<string, LoraAdapter>(names.map((name) => [name, loadLoraAdapter(dirs[name]!, { base: config })]));
afterAll(() => {
  for (const a of reference.values()) a.dispose();
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

const A = 14_336; // rank 8 on q and v over 2 layers, packed as A [L, r, in] and B [L, r, out] (scale folded into B)

/** All logits of one forward, as host floats; frees what the forward returned (logits, the layout's indptr). */
function logits(batch: DecoderSequence[], cache: PagedKvCache, delta: ModelDelta): Float32Array {
  const out = model.forward(batch, { cache, deltas: [delta], logits: 'all' });
  try {
    return out.logits!.toArray() as Float32Array;
  } finally {
    out.logits!.dispose();
    out.layout.dispose();
  }
}

function normwiseError(got: Float32Array, want: Float32Array): number {
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < want.length; i++) {
    diff = Math.max(diff, Math.abs(got[i]! - want[i]!));
    scale = Math.max(scale, Math.abs(want[i]!));
  }
  return diff / Math.max(scale, 1e-30);
}

describe('AdapterCache with loraAdapterSource', () => {
  it('loraAdapterSource is an AdapterSource', () => {
    expectTypeOf(loraAdapterSource(config)).toExtend<AdapterSource<HostLoraWeights, LoraWeightSet>>();
  });

  it('serves a mixed-adapter batch with weights it loads on demand, within its budget, never the base model by accident', async () => {
    const inUseBefore = allocatorStats().inUse;
    const cache = new AdapterCache({ source: loraAdapterSource(config), deviceBudgetBytes: 2 * A });
    for (const name of names) cache.register(name, dirs[name]!);
    const sgmv = new SgmvLoraDelta((key) => cache.get(key));
    const plain = new LoraDelta(reference);
    const prompt = (n: number, seed: number) => Array.from(randomInts(n, seed, 3, config.vocabSize - 3));
    const requests: DecoderSequence[] = [
      { id: 1, tokens: prompt(6, 1), key: 'a' },
      { id: 2, tokens: prompt(4, 2), key: null },
      { id: 3, tokens: prompt(5, 3), key: 'b' },
    ];
    try {
      // Step 1: neither adapter is resident: both loads start, only the base-model request would run.
      const loads = requests.filter((r) => r.key && !cache.isResident(r.key)).map((r) => cache.ensureResident(r.key!));
      expect(loads).toHaveLength(2);
      await Promise.all(loads);
      expect(allocatorStats().inUse - inUseBefore).toBe(2 * A);
      // Step 2: both resident; pin them for the requests' lifetime and run the batch.
      for (const r of requests) if (r.key) cache.pin(r.key);
      const c1 = PagedKvCache.create({ ...model.kvShape, numPages: 32 });
      const c2 = PagedKvCache.create({ ...model.kvShape, numPages: 32 });
      try {
        const got = logits(requests, c1, sgmv);
        const want = logits(requests, c2, plain);
        expect(normwiseError(got, want)).toBeLessThanOrEqual(1e-5);
      } finally {
        c1.dispose();
        c2.dispose();
      }
      expect(cache.stats()).toMatchObject({ residentBytes: 2 * A, loads: 2, pinnedCount: 2 });

      // Request 3 finishes (unpin b); a request for c arrives: c's load evicts b, never the pinned a.
      const inUseBeforeSwap = allocatorStats().inUse; // 2 A, plus the delta's scratch until its dispose()
      cache.unpin('b');
      await cache.ensureResident('c', { pin: true });
      expect(allocatorStats().inUse).toBe(inUseBeforeSwap); // b freed, c uploaded: still 2 A of adapters
      expect(names.filter((n) => cache.isResident(n))).toEqual(['a', 'c']);
      const next: DecoderSequence[] = [
        { id: 4, tokens: prompt(3, 4), key: 'c' },
        { id: 5, tokens: prompt(5, 5), key: 'a' },
      ];
      const c3 = PagedKvCache.create({ ...model.kvShape, numPages: 32 });
      const c4 = PagedKvCache.create({ ...model.kvShape, numPages: 32 });
      try {
        const got = logits(next, c3, sgmv);
        const want = logits(next, c4, plain);
        expect(normwiseError(got, want)).toBeLessThanOrEqual(1e-5);
        // b is no longer resident: a batch that names it fails loudly instead of running the base model.
        expect(() => model.forward([{ id: 6, tokens: prompt(2, 6), key: 'b' }], { cache: c3, deltas: [sgmv] })).toThrow(SgmvUnknownAdapterError);
      } finally {
        c3.dispose();
        c4.dispose();
      }
    } finally {
      sgmv.dispose();
      plain.dispose();
      cache.dispose();
    }
    model.trimScratch(); // the model's pooled step scratch is the model's, not the adapters'
    expect(allocatorStats().inUse).toBe(inUseBefore);
  });
});
