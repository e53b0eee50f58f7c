/**
 * Failed loads: malformed adapter directories (truncated weights, bad JSON, a missing file, shapes for another
 * base model, no directory at all), an upload the native allocator refuses, and a source that misreports sizes.
 * Each rejects with a typed error, emits 'load-failed', and leaves the cache exactly as it was: what was
 * resident stays resident, other adapters still load, and the failed one loads once its directory is fixed.
 */
import { cpSync, rmSync } from 'node:fs';

import { ConfigError, MissingTensorError, TensorShapeError, TruncatedFileError } from '@tessera/engine';
import { BudgetExceededError, allocatorStats, setBudget } from '@tessera/native';
import { describe, expect, it } from 'vitest';

import { AdapterLoadError } from '../src/index.js';
import { type Breakage, brokenAdapter, contents, recordEvents, turn, until } from './support/fixtures.js';
import { useHarness } from './support/harness.js';
import { PeftTestSource } from './support/peft-source.js';

const h = useHarness();
const A = 14_336;

const cases: Array<[Breakage, new (...args: never[]) => Error, RegExp]> = [
  ['truncated-weights', TruncatedFileError, /truncated/],
  ['bad-config-json', ConfigError, /not readable JSON/],
  ['missing-weights', MissingTensorError, /adapter_model\.safetensors: not found/],
  ['wrong-shapes', TensorShapeError, /down_proj\.lora_A\.weight has shape \[8, 256\]/],
  ['missing-dir', ConfigError, /adapter_config\.json: not found/],
];

describe('a malformed adapter directory', () => {
  it.each(cases)('%s: rejects with the engine error, emits load-failed, leaves the cache as it was', async (kind, ErrorClass, message) => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A, hostBudgetBytes: 2 * A });
    cache.register('a', h.fx.dirs.a!);
    cache.register('b', h.fx.dirs.b!);
    cache.register('c', h.fx.dirs.c!);
    const brokenDir = brokenAdapter(h.fx, kind);
    cache.register('broken', brokenDir);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('b'); // the budget is full: a successful load of 'broken' would evict b
    const before = contents(cache);
    const statsBefore = cache.stats();
    const events = recordEvents(cache);

    // Three callers share the one failing load and all see the same typed error.
    const errors = await Promise.all([1, 2, 3].map(() => cache.ensureResident('broken').catch((e: unknown) => e)));
    const [err] = errors;
    expect(err).toBeInstanceOf(ErrorClass);
    expect((err as Error).message).toMatch(message);
    expect(errors.every((e) => e === err)).toBe(true);
    expect(events).toEqual([
      ['load-start', { name: 'broken', from: 'disk' }],
      ['load-failed', { name: 'broken', error: err, ms: expect.any(Number) as number, from: 'disk' }],
    ]);

    // Nothing lost, nothing half-loaded: same contents, counters moved only by the failure.
    expect(contents(cache)).toEqual(before);
    expect(cache.stats()).toEqual({ ...statsBefore, misses: statsBefore.misses + 3, loadFailures: 1 });
    expect(cache.info('broken')).toMatchObject({ tier: 'disk', loading: null, loads: 0 });
    expect(h.inUse()).toBe(2 * A);
    expect(source.reads).toEqual(['a', 'b', 'broken']);

    // Other adapters still load (c evicts b, not the pinned a) and the failed one can be retried once fixed.
    await cache.ensureResident('c');
    expect(['a', 'b', 'c'].filter((n) => cache.isResident(n))).toEqual(['a', 'c']);
    await expect(cache.ensureResident('broken')).rejects.toBeInstanceOf(ErrorClass);
    rmSync(brokenDir, { recursive: true, force: true });
    cpSync(h.fx.dirs.d!, brokenDir, { recursive: true });
    await cache.ensureResident('broken');
    expect(cache.info('broken')).toMatchObject({ tier: 'device', deviceBytes: A, loads: 1 });
    expect(cache.isResident('a')).toBe(true);
    expect(cache.stats()).toMatchObject({ loadFailures: 2, loads: 4, residentBytes: 2 * A });
    expect(h.inUse()).toBe(2 * A);
  });

  it('a failing load does not hold back loads queued behind it', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    for (const name of ['a', 'b', 'c']) cache.register(name, h.fx.dirs[name]!);
    cache.register('broken', brokenAdapter(h.fx, 'truncated-weights'));
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('b', { pin: true });
    const pc = cache.ensureResident('c');
    await until(() => cache.stats().queuedLoads === 1, 'c queued');
    await expect(cache.ensureResident('broken')).rejects.toBeInstanceOf(TruncatedFileError);
    expect(cache.stats().queuedLoads).toBe(1);
    cache.unpin('b');
    await pc;
    expect(cache.isResident('c')).toBe(true);
  });
});

describe('a failed upload', () => {
  it('the native allocator refusing the upload: BudgetExceededError, partial tensors freed, retry works', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    for (const name of ['a', 'b', 'c']) cache.register(name, h.fx.dirs[name]!);
    for (const name of ['a', 'b', 'c']) await cache.ensureResident(name); // c evicted a: a is on the host only
    await cache.unregister('b'); // room for a without evicting anything
    expect(cache.info('a').tier).toBe('host');
    const before = contents(cache);
    const events = recordEvents(cache);

    // Room for half of a's tensors in the allocator: the cache's budget allows it, the device does not.
    const { budget } = allocatorStats();
    setBudget(allocatorStats().inUse + A / 2);
    let err: unknown;
    try {
      err = await cache.ensureResident('a').catch((e: unknown) => e);
    } finally {
      setBudget(budget);
    }
    expect(err).toBeInstanceOf(BudgetExceededError);
    expect(events.map(([e]) => e)).toEqual(['load-start', 'load-failed']);
    expect(contents(cache)).toEqual(before);
    expect(h.inUse()).toBe(A); // c only: a's partial upload was freed
    await cache.ensureResident('a');
    expect(cache.stats()).toMatchObject({ residentBytes: 2 * A, loadFailures: 1 });
    expect(source.reads).toEqual(['a', 'b', 'c']); // the retry, too, came from the host copy
  });

  it('a host-cached adapter whose upload fails keeps its host copy and loads from it later', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    cache.register('a', h.fx.dirs.a!);
    cache.register('b', h.fx.dirs.b!);
    await cache.ensureResident('a');
    await cache.ensureResident('b'); // a: host only
    cache.pin('b');
    expect(cache.info('a').tier).toBe('host');
    const { budget } = allocatorStats();
    // The cache makes no room (b is pinned) so the load queues; free b, and the allocator refuses the upload.
    const pa = cache.ensureResident('a').catch((e: unknown) => e);
    await turn();
    expect(cache.stats().queuedLoads).toBe(1);
    setBudget(allocatorStats().inUse - 64);
    try {
      cache.unpin('b');
      expect(await pa).toBeInstanceOf(BudgetExceededError);
    } finally {
      setBudget(budget);
    }
    // b was evicted to make room before the upload failed: that eviction stands; a's host copy is kept.
    expect(cache.info('a')).toMatchObject({ tier: 'host', hostCached: true });
    expect(cache.isResident('b')).toBe(false);
    await cache.ensureResident('a');
    expect(source.reads).toEqual(['a', 'b']);
  });
});

describe('a source that misreports', () => {
  it('a byte count that is not a safe integer >= 0 fails the load with AdapterLoadError', async () => {
    class NegativeHostBytes extends PeftTestSource {
      override hostBytes(): number {
        return -1;
      }
    }
    class FractionalDeviceBytes extends PeftTestSource {
      override deviceBytes(): number {
        return 0.5;
      }
    }
    for (const source of [new NegativeHostBytes(h.fx.base), new FractionalDeviceBytes(h.fx.base)]) {
      const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
      cache.register('a', h.fx.dirs.a!);
      const err = await cache.ensureResident('a').catch((e: unknown) => e);
      expect(err).toBeInstanceOf(AdapterLoadError);
      expect(err).toMatchObject({ adapter: 'a', code: 'TESSERA_ADAPTER_LOAD_FAILED', message: /returned (-1|0\.5), not a byte count/ });
      expect(cache.stats()).toMatchObject({ residentCount: 0, hostCount: 0, loadFailures: 1 });
      expect(h.inUse()).toBe(0); // the upload measured wrongly was freed
    }
  });

  it('a source that throws a non-Error is wrapped in AdapterLoadError with the value as cause', async () => {
    class ThrowsString extends PeftTestSource {
      override readHost(): Promise<never> {
        return Promise.reject('disk on fire');
      }
    }
    const cache = h.cache({ source: new ThrowsString(h.fx.base), deviceBudgetBytes: A });
    cache.register('a', h.fx.dirs.a!);
    const err = await cache.ensureResident('a').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AdapterLoadError);
    expect(err).toMatchObject({ cause: 'disk on fire', message: /disk on fire/ });
  });
});
