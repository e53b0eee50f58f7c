/**
 * The pipelined runner (hmi.md A12) gives the same logits as the sequential one, bit for bit: mixed-tenant batches
 * over two PLOT versions (the root and a further-pretrained domain), submitted together so PLOT retrieval of batch
 * i+1 and adapter copies run while batch i computes — with one device buffer per upper layer shared by every
 * batch, a copy made too early would change the numbers. Tenants get random, distinct adapters and heads so any
 * mix-up of rows, slots or layers shows.
 */
import { mulberry32 } from '@tessera/core';
import { type EncoderModel, loadEncoder, TextTokenizer } from '@tessera/engine';
import { adapterStackNumel } from '@tessera/pet-ops';
import { selectByCoverage, TrigramCounts } from '@tessera/plot-store';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { domainCorpus, generalCorpus, tenantTask } from '../src/demo-data.js';
import { PlotService, type PlotSnapshot } from '../src/engine/plot.js';
import { HmiRunner, type RunBatch } from '../src/engine/runner.js';
import { furtherPretrain } from '../src/engine/training.js';
import type { TenantState } from '../src/manager/tenant-store.js';
import { type ModelFixture, tinyModel } from './support/fixture.js';

const M = 4;
let fixture: ModelFixture;
let model: EncoderModel;
let plot: PlotService;
let tok: TextTokenizer;
const snaps: PlotSnapshot[] = [];

beforeAll(async () => {
  fixture = await tinyModel();
  model = loadEncoder(fixture.modelDir);
  tok = TextTokenizer.fromDir(fixture.modelDir);
  plot = new PlotService({ model, lowerLayers: 2, generalCorpus: generalCorpus().map((t) => tok.encode(t)), minCorpusTokens: 0 });
  const corpus = domainCorpus('bio', 60).map((t) => tok.encode(t));
  const step = { signal: new AbortController().signal, progress: async () => {} };
  const fpt = await furtherPretrain({ modelDir: fixture.modelDir, lowerLayers: 2, corpus, steps: 5, batchSize: 8, lr: 1e-3, seed: 1, maskTokenId: tok.tokenToId('[MASK]')!, specialTokenIds: [2, 3, 0] }, step);
  const selection = selectByCoverage(new TrigramCounts().addBatch(plot.codec.keys(corpus)), 0.5);
  plot.tree.createBranch({ domain: 'bio', selection, values: await plot.computeValues(fpt.model, selection.keys, step) });
  fpt.model.weights.dispose();
  snaps.push(plot.snapshot('root'), plot.snapshot('bio@1'));
});
afterAll(() => {
  for (const s of snaps) s.release();
  plot?.close();
  model?.weights.dispose();
  fixture?.cleanup();
});

function randomTenant(id: string, version: string, seed: number): TenantState {
  const d = model.config.hiddenSize;
  const rand = mulberry32(seed);
  const r = (n: number, scale: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * scale);
  const numel = adapterStackNumel({ hidden: d, bottleneck: M });
  return {
    id, domain: version.split('@')[0]!, version, labels: ['a', 'b', 'c'], adapters: [r(numel, 0.3), r(numel, 0.3)], head: { weight: r(3 * d, 1), bias: r(3, 0.1) },
    examples: 0, steps: 0, createdAt: '', updatedAt: '',
  };
}

function batches(): RunBatch[] {
  const tenants = Array.from({ length: 10 }, (_, i) => randomTenant(`t${i}`, i % 2 === 0 ? 'root' : 'bio@1', 100 + i));
  const texts = [...tenantTask('bio', 40, 1).examples, ...tenantTask('eco', 40, 2).examples].map((e) => tok.encode(e.text));
  const rand = mulberry32(5);
  const out: RunBatch[] = [];
  for (let b = 0; b < 14; b++) {
    const version = b % 3 === 0 ? 'bio@1' : 'root';
    const pool = tenants.filter((t) => t.version === version);
    const size = 1 + Math.floor(rand() * 8);
    out.push({
      snapshot: version === 'root' ? snaps[0]! : snaps[1]!,
      requests: Array.from({ length: size }, () => ({ ids: texts[Math.floor(rand() * texts.length)]!, tenant: pool[Math.floor(rand() * pool.length)]! })),
    });
  }
  return out;
}

const bits = (xs: Float32Array[]) => xs.map((x) => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length)));

describe('pipelined runner', () => {
  it('equals the sequential runner bit for bit, in every pipeline mode, while stages of different batches interleave', async () => {
    const work = batches();
    const sequential = new HmiRunner({ model, plot, bottleneck: M, maxBatch: 8, slots: 1 });
    const want = work.map((b) => bits(sequential.runSequential(b)));
    sequential.close();
    for (const mode of ['fine', 'coarse', 'synchronized'] as const) {
      const runner = new HmiRunner({ model, plot, bottleneck: M, maxBatch: 8, slots: 4, mode });
      runner.traceOn = true;
      const got = await Promise.all(work.map((b) => runner.run(b)));
      expect(got.map(bits), mode).toEqual(want);
      expect(runner.times.adapterCopies).toBe(2 * work.reduce((n, b) => n + b.requests.length, 0));
      if (mode === 'fine') {
        // Overlap: a later batch's retrieval and copies were issued before an earlier batch's last layer.
        const at = (kind: string, batch: number, layer = -1) => runner.trace.findIndex((e) => e.kind === kind && e.batch === batch && e.layer === layer);
        let overlaps = 0;
        for (let b = 0; b + 1 < work.length; b++) if (at('retrieve', b + 1) < at('compute', b, 1)) overlaps++;
        expect(overlaps).toBeGreaterThan(work.length / 2);
        // Per-layer staging: some batch's copy for layer 1 is issued after its layer 0 was handed to the compute
        // (through beforeLayer), i.e. while layer 0 runs.
        expect(work.some((_, b) => at('compute', b, 0) < at('copy', b, 1) && at('copy', b, 1) < at('computed', b, 0))).toBe(true);
        // A12's rule: batch b copies into layer j's buffer only after batch b−1 finished layer j, and computes
        // layer j only after that copy.
        for (const e of runner.trace) {
          if (e.kind !== 'copy') continue;
          const copyAt = runner.trace.indexOf(e);
          if (e.batch > 0) expect(at('computed', e.batch - 1, e.layer), `copy ${e.batch}/${e.layer}`).toBeLessThan(copyAt);
          expect(copyAt).toBeLessThan(at('compute', e.batch, e.layer));
        }
      }
      runner.close();
    }
  });

  it('with a device LRU smaller than the tenants: hits skip their copies, evictions and updated tenants miss, and the bits stay the sequential ones', async () => {
    const work = batches();
    const sequential = new HmiRunner({ model, plot, bottleneck: M, maxBatch: 8, slots: 1 });
    const want = work.map((b) => bits(sequential.runSequential(b)));
    // Two tenants updated between rounds: new arrays, the same id (a cached slot must not serve the old weights).
    const updated = new Map<TenantState, TenantState>();
    const again = work.map((b) => ({
      ...b,
      requests: b.requests.map((r) => {
        if (r.tenant.id !== 't0' && r.tenant.id !== 't3') return r;
        if (!updated.has(r.tenant)) updated.set(r.tenant, randomTenant(r.tenant.id, r.tenant.version, 900 + Number(r.tenant.id.slice(1))));
        return { ...r, tenant: updated.get(r.tenant)! };
      }),
    }));
    const wantAgain = again.map((b) => bits(sequential.runSequential(b)));
    sequential.close();
    const runner = new HmiRunner({ model, plot, bottleneck: M, maxBatch: 8, slots: 4, mode: 'fine', deviceCache: 3 });
    const requests = work.reduce((n, b) => n + b.requests.length, 0);
    expect((await Promise.all(work.map((b) => runner.run(b)))).map(bits)).toEqual(want);
    expect((await Promise.all(again.map((b) => runner.run(b)))).map(bits)).toEqual(wantAgain);
    const { deviceHits, adapterCopies, deviceCacheWrites } = runner.times;
    expect(deviceHits).toBeGreaterThan(0);
    expect(adapterCopies).toBe(2 * (2 * requests - deviceHits)); // two upper layers per copied request
    expect(deviceCacheWrites).toBeGreaterThan(0);
    const stats = runner.deviceCache.stats();
    expect(stats.evictions).toBeGreaterThan(0); // 10 tenants through 3 slots
    expect(stats.hits).toBe(deviceHits);
    expect(runner.deviceCache.size).toBeLessThanOrEqual(3);
    runner.close();
  });

  it('gives each row its own tenant: swapping two tenants’ adapters changes their logits', () => {
    const runner = new HmiRunner({ model, plot, bottleneck: M, maxBatch: 8, slots: 1 });
    const a = randomTenant('a', 'root', 1);
    const b = randomTenant('b', 'root', 2);
    const ids = tok.encode('the blood test of the river fish');
    const swapped = { ...a, adapters: b.adapters };
    const [la, lswap] = [a, swapped].map((t) => runner.runSequential({ snapshot: snaps[0]!, requests: [{ ids, tenant: t }] })[0]!);
    expect(Array.from(la!)).not.toEqual(Array.from(lswap!));
    // Alone or in a mixed batch, a request's logits are the same.
    const mixed = runner.runSequential({ snapshot: snaps[0]!, requests: [{ ids: tok.encode('market price'), tenant: b }, { ids, tenant: a }] });
    expect(Array.from(mixed[1]!)).toEqual(Array.from(la!));
    runner.close();
  });
});
