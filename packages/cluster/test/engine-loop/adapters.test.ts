/**
 * T24: on-demand adapter loading. A request whose adapter is not resident starts one async load (the engine's
 * loadLoraAdapterAsync reading a real PEFT directory) and waits; every other request keeps stepping; it joins
 * on a step after the load completes; a rejected load fails that request alone. Adapters are pinned exactly
 * while a request uses them.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError, LoraDelta } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';
import { AdapterLoadError, type BatcherRequest, type FinishedRequest, type StepReport } from '@tessera/batcher';
import { makeFixture } from './support/fixtures.js';
import { makeLoop } from './support/loop.js';
import { GatedLoraResidency } from './support/gated-residency.js';

const fx = makeFixture(3);
afterAll(() => fx.dispose());
const [A, X, Y] = [...fx.adapterDirs.keys()] as [string, string, string];
const flush = () => new Promise<void>((resolve) => setImmediate(resolve));

function setup(numPages = 64) {
  const brokenDir = join(fx.root, 'broken');
  mkdirSync(brokenDir, { recursive: true });
  writeFileSync(join(brokenDir, 'adapter_config.json'), '{ "r": 8, ');
  const residency = new GatedLoraResidency(fx.model.config, new Map([...fx.adapterDirs, ['broken', brokenDir]]));
  const delta = new LoraDelta(residency.resident);
  const cache = fx.newCache(numPages);
  const batcher = makeLoop({ model: fx.model, cache, deltas: [delta], adapters: residency });
  const finished = new Map<string, FinishedRequest>();
  const errors = new Map<string, Error>();
  const submit = (r: BatcherRequest) => batcher.submit(r, { onFinish: (f) => finished.set(r.id, f), onError: (e) => errors.set(r.id, e) });
  return { residency, cache, batcher, finished, errors, submit, dispose: () => (cache.dispose(), residency.dispose()) };
}

const request = (id: string, adapter: string | null, maxTokens: number, seed: number): BatcherRequest => ({
  id,
  adapter,
  prompt: fx.prompt(7, seed),
  maxTokens,
  ignoreEos: true,
});
const alone = (r: BatcherRequest) => fx.alone({ prompt: r.prompt, maxTokens: r.maxTokens, ignoreEos: true, key: r.adapter });

describe('on-demand adapters (T24)', () => {
  it('a request for a non-resident adapter starts one load, does not delay the others, and joins after the load', async () => {
    const t = setup();
    await t.residency.ensureResident(A);
    t.residency.ensureCalls.length = 0;
    t.residency.hold(X);
    const a = request('a', A, 14, 1);
    const x = request('x', X, 6, 2);
    const base = request('base', null, 14, 3);
    for (const r of [a, x, base]) t.submit(r);
    // The load of X started at submit; nothing of A or the base model was loaded.
    expect(t.residency.ensureCalls).toEqual([X]);

    const before: StepReport[] = [];
    for (let k = 0; k < 5; k++) {
      before.push(t.batcher.step()!);
      await flush(); // the load may progress between steps; the gate keeps it pending
    }
    // a and base were admitted in the first two steps (x skipped, not waited for) and stepped every time.
    expect(before.map((r) => r.admitted)).toEqual([['a'], ['base'], [], [], []]);
    expect(before.map((r) => r.batchSize)).toEqual([1, 2, 2, 2, 2]);
    expect(t.batcher.stats()).toMatchObject({ waitingForAdapter: 1, queued: 1, running: 2, adapterLoads: 1 });
    expect(t.residency.ensureCalls).toEqual([X]); // once, not once per step
    expect(t.residency.pinCount(A)).toBe(1);
    expect(() => t.residency.evict(A)).toThrow(/pinned/);

    t.residency.release(X);
    await t.residency.settled(X);
    await flush();
    expect(t.residency.isResident(X)).toBe(true);
    const join = t.batcher.step()!;
    expect(join.admitted).toEqual(['x']);
    expect(join.batchSize).toBe(3);
    expect(new Set(join.segments.map((s) => s.key))).toEqual(new Set([X, A, null]));
    expect(t.residency.pinCount(X)).toBe(1);
    while (t.batcher.step() !== null);

    for (const r of [a, x, base]) expect(t.finished.get(r.id)!.tokens).toEqual(alone(r));
    expect(t.residency.pinCount(A)).toBe(0);
    expect(t.residency.pinCount(X)).toBe(0);
    expect(t.cache.freePages).toBe(t.cache.numPages);
    // A resident adapter is reused: no new load for another request on X.
    t.submit(request('x2', X, 2, 4));
    while (t.batcher.step() !== null);
    expect(t.residency.ensureCalls).toEqual([X]);
    expect(t.finished.get('x2')!.finishReason).toBe('length');
    t.dispose();
  });

  it('a rejected load fails only the requests waiting for that adapter, with a typed error', async () => {
    const t = setup();
    await t.residency.ensureResident(A);
    const a = request('a', A, 8, 5);
    t.submit(a);
    t.submit(request('broken', 'broken', 4, 6));
    t.submit(request('missing', 'nobody', 4, 7));
    const y = request('y', Y, 4, 8);
    t.submit(y);
    t.batcher.step();
    await t.residency.settled('broken');
    await t.residency.settled('nobody');
    await t.residency.settled(Y);
    await flush();
    while (t.batcher.step() !== null) await flush();
    const broken = t.errors.get('broken')!;
    expect(broken).toBeInstanceOf(AdapterLoadError);
    expect((broken as AdapterLoadError).adapter).toBe('broken');
    expect(broken.cause).toBeInstanceOf(ConfigError);
    expect(t.errors.get('missing')).toBeInstanceOf(AdapterLoadError);
    expect(t.errors.get('missing')!.message).toMatch(/nobody/);
    expect(t.finished.has('broken')).toBe(false);
    expect(t.finished.get('a')!.tokens).toEqual(alone(a));
    expect(t.finished.get('y')!.tokens).toEqual(alone(y));
    expect(t.batcher.stats()).toMatchObject({ failed: 2, finished: 2, queued: 0, waitingForAdapter: 0 });
    // The id of a failed request is free again.
    expect(() => t.submit(request('broken', null, 2, 9))).not.toThrow();
    t.dispose();
  });

  it('run(): an idle loop wakes when an adapter load completes; a cancelled waiter never runs', async () => {
    const t = setup();
    t.residency.hold(X);
    t.residency.hold(Y);
    const x = request('x', X, 5, 10);
    const done = new Promise<FinishedRequest>((resolve, reject) =>
      t.batcher.submit(x, { onFinish: resolve, onError: reject }),
    );
    t.submit(request('y', Y, 5, 11));
    const controller = new AbortController();
    const loop = t.batcher.run(controller.signal);
    for (let i = 0; i < 10; i++) await flush();
    expect(t.batcher.stats()).toMatchObject({ steps: 0, waitingForAdapter: 2 });
    expect(t.batcher.cancel('y')).toBe(true);
    expect(t.finished.get('y')).toMatchObject({ finishReason: 'cancelled', tokens: [] });
    t.residency.release(X);
    t.residency.release(Y);
    expect((await done).tokens).toEqual(alone(x));
    controller.abort();
    await loop;
    expect(t.residency.pinCount(Y)).toBe(0);
    expect(t.batcher.stats()).toMatchObject({ finished: 1, cancelled: 1, running: 0, kvPagesUsed: 0 });
    t.dispose();
  });
});
