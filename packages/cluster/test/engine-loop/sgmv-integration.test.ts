/**
 * The batcher with the Punica stack's real parts: @tessera/sgmv-kernel's SgmvLoraDelta (one SGMV shrink +
 * expand per site for the whole mixed batch) and @tessera/adapter-swap's AdapterCache (PEFT directories loaded on
 * demand under a device budget, pinned while in use). Greedy tokens must equal each request run alone with the
 * engine's plain LoraDelta; an adapter the delta cannot resolve fails its own requests only.
 */
import { AdapterCache } from '@tessera/adapter-swap';
import { LoraWeightSet, SgmvLoraDelta, UnknownAdapterError, loraAdapterSource, readLoraForSgmv } from '@tessera/sgmv-kernel';
import { afterAll, describe, expect, it } from 'vitest';
import { type BatcherRequest, type FinishedRequest, type StepReport } from '@tessera/batcher';
import { makeFixture } from './support/fixtures.js';
import { makeLoop } from './support/loop.js';

const fx = makeFixture(6);
afterAll(() => fx.dispose());
const names = [...fx.adapterDirs.keys()];

const request = (id: string, adapter: string | null, maxTokens: number, seed: number): BatcherRequest => ({
  id,
  adapter,
  prompt: fx.prompt(5 + (seed % 9), seed),
  maxTokens,
  ignoreEos: true,
});
const alone = (r: BatcherRequest) => fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });

describe('with SgmvLoraDelta and AdapterCache', () => {
  it('serves 6 adapters through a device budget of 3: same tokens as alone, never more than 3 adapters in a step', async () => {
    const probe = LoraWeightSet.upload(await readLoraForSgmv(fx.adapterDirs.get(names[0]!)!, fx.model.config));
    const adapterBytes = probe.nbytes;
    probe.dispose();
    const adapters = new AdapterCache({ source: loraAdapterSource(fx.model.config), deviceBudgetBytes: 3 * adapterBytes });
    for (const [name, dir] of fx.adapterDirs) adapters.register(name, dir);
    const delta = new SgmvLoraDelta((key) => adapters.get(key));
    const kv = fx.newCache(128);
    const batcher = makeLoop({ model: fx.model, cache: kv, deltas: [delta], adapters });

    const requests = [...names, ...names, null, null].map((a, i) => request(`r${i}`, a, 6 + (i % 5), 40 + i));
    const reports: StepReport[] = [];
    const results = requests.map(
      (r) => new Promise<FinishedRequest>((resolve, reject) => batcher.submit(r, { onFinish: resolve, onError: reject })),
    );
    const controller = new AbortController();
    // Drive the loop by hand to see every step (what run() does, plus the reports).
    const loop = (async () => {
      while (!controller.signal.aborted) {
        const report = batcher.step();
        if (report) reports.push(report);
        await new Promise((r) => setImmediate(r));
      }
    })();
    const finished = await Promise.all(results);
    controller.abort();
    await loop;

    requests.forEach((r, i) => expect(finished[i]!.tokens, r.id).toEqual(alone(r)));
    for (const step of reports) {
      const resident = new Set(step.segments.map((s) => s.key).filter((k) => k !== null));
      expect(resident.size).toBeLessThanOrEqual(3);
    }
    expect(Math.max(...reports.map((r) => r.batchSize))).toBeGreaterThan(3);
    const cacheStats = adapters.stats();
    expect(cacheStats.deviceEvictions).toBeGreaterThan(0);
    expect(cacheStats.pinnedCount).toBe(0);
    expect(cacheStats.residentBytes).toBeLessThanOrEqual(3 * adapterBytes);
    expect(batcher.stats()).toMatchObject({ finished: requests.length, failed: 0, kvPagesUsed: 0 });
    delta.dispose();
    adapters.dispose();
    kv.dispose();
  });

  it('an adapter key the delta cannot resolve fails only its requests, before the forward (prepare)', async () => {
    // Device weights for two adapters only.
    const uploaded = new Map<string, LoraWeightSet>();
    for (const n of names.slice(0, 2)) uploaded.set(n, LoraWeightSet.upload(await readLoraForSgmv(fx.adapterDirs.get(n)!, fx.model.config, { name: n })));
    const delta = new SgmvLoraDelta((key) => uploaded.get(key));
    const kv = fx.newCache(64);
    const batcher = makeLoop({ model: fx.model, cache: kv, deltas: [delta] });
    const finished = new Map<string, FinishedRequest>();
    const errors = new Map<string, Error>();
    const submit = (r: BatcherRequest) => batcher.submit(r, { onFinish: (f) => finished.set(r.id, f), onError: (e) => errors.set(r.id, e) });
    const a = request('a', names[0]!, 8, 1);
    const b = request('b', names[1]!, 8, 2);
    const base = request('base', null, 8, 3);
    submit(a);
    submit(b);
    submit(request('ghost', 'no-such-adapter', 8, 4));
    submit(base);
    const reports: StepReport[] = [];
    for (let r = batcher.step(); r !== null; r = batcher.step()) reports.push(r);
    // Step 3 tried to prefill 'ghost': only it failed; a and b decoded in that same step.
    expect(reports[2]!.failed).toEqual(['ghost']);
    expect(reports[2]!.admitted).toEqual([]);
    expect(reports[2]!.decodes).toBe(2);
    expect(errors.get('ghost')).toBeInstanceOf(UnknownAdapterError);
    expect(errors.size).toBe(1);
    for (const r of [a, b, base]) expect(finished.get(r.id)!.tokens).toEqual(alone(r));
    expect(kv.usedPages).toBe(0);
    delta.dispose();
    for (const s of uploaded.values()) s.dispose();
    kv.dispose();
  });
});
