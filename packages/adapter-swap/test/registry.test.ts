/**
 * The registry: name validation, duplicate registration, unknown names, unregister while pinned / loading /
 * queued, re-registration under another directory, and dispose().
 */
import { InvalidArgumentError } from '@tessera/native';
import { describe, expect, it } from 'vitest';

import {
  AdapterCacheDisposedError,
  AdapterExistsError,
  AdapterInUseError,
  AdapterNotResidentError,
  InvalidAdapterNameError,
  MAX_ADAPTER_NAME_LENGTH,
  UnknownAdapterError,
  checkAdapterName,
} from '../src/index.js';
import { contents, recordEvents, turn, until } from './support/fixtures.js';
import { useHarness } from './support/harness.js';
import { PeftTestSource } from './support/peft-source.js';

const h = useHarness();
const A = 14_336;

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('expected a throw');
}

describe('adapter names', () => {
  it('accepts ordinary names', () => {
    for (const name of ['a', 'tenant-42', 'sql_lora', 'Llama3.2-1B-math', 'base:adapter', 'org.model@v2', 'x+y', 'A'.repeat(MAX_ADAPTER_NAME_LENGTH)]) {
      expect(() => checkAdapterName(name), name).not.toThrow();
    }
  });

  it.each([
    ['', /empty/],
    ['a/b', /path separator/],
    ['..\\x', /path separator/],
    ['a\\b', /path separator/],
    ['..', /"\.\."/],
    ['a..b', /"\.\."/],
    ['a\0b', /NUL/],
    ['tab\there', /control character/],
    ['line\nbreak', /control character/],
    ['.hidden', /start with a letter or digit/],
    ['-flag', /start with a letter or digit/],
    ['with space', /only letters/],
    ['naïve', /only letters/],
    ['a%2Fb', /only letters/],
    ['x'.repeat(MAX_ADAPTER_NAME_LENGTH + 1), /129 characters/],
  ])('rejects %j', (name, message) => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    const err = caught(() => cache.register(name, h.fx.dirs.a!));
    expect(err).toBeInstanceOf(InvalidAdapterNameError);
    expect(err).toBeInstanceOf(InvalidArgumentError); // a 400 wherever InvalidArgumentError maps to one
    expect(err).toMatchObject({ adapter: name, message });
    expect(cache.names()).toEqual([]);
  });

  it('rejects a name that is not a string, and a directory that is empty or holds NUL', () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    expect(() => cache.register(42 as unknown as string, h.fx.dirs.a!)).toThrow(InvalidAdapterNameError);
    expect(() => cache.register('a', '')).toThrow(InvalidArgumentError);
    expect(() => cache.register('a', 'x\0y')).toThrow(/without NUL/);
    expect(cache.names()).toEqual([]);
  });
});

describe('register, has, names, info', () => {
  it('registers lazily; the same name and directory again is a no-op, another directory AdapterExistsError', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    cache.register('b', h.fx.dirs.b!);
    cache.register('a', h.fx.dirs.a!);
    expect(source.reads).toEqual([]); // nothing read until needed
    expect(cache.names()).toEqual(['b', 'a']);
    expect(cache.has('a')).toBe(true);
    expect(cache.has('c')).toBe(false);
    expect(cache.info('a')).toEqual({
      name: 'a',
      dir: h.fx.dirs.a,
      tier: 'disk',
      deviceBytes: 0,
      hostBytes: 0,
      hostCached: false,
      pins: 0,
      reservations: 0,
      loading: null,
      loads: 0,
      lastUsedMs: null,
      lastLoadMs: null,
    });

    await cache.ensureResident('a');
    cache.register('a', `${h.fx.dirs.a!}/../a/`); // the same directory, spelled differently
    expect(cache.isResident('a')).toBe(true);
    const err = caught(() => cache.register('a', h.fx.dirs.c!));
    expect(err).toBeInstanceOf(AdapterExistsError);
    expect(err).toMatchObject({ adapter: 'a', dir: h.fx.dirs.a, code: 'TESSERA_ADAPTER_EXISTS' });
    expect(cache.info('a')).toMatchObject({ dir: h.fx.dirs.a, tier: 'device' });
    expect(cache.stats().registered).toBe(2);
  });

  it('an unknown name is a typed error everywhere it must be known, and simply absent elsewhere', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    const err = await cache.ensureResident('ghost').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownAdapterError);
    expect(err).toMatchObject({ adapter: 'ghost', code: 'TESSERA_UNKNOWN_ADAPTER' });
    for (const call of [() => cache.pin('ghost'), () => cache.unpin('ghost'), () => cache.info('ghost')]) {
      expect(caught(call)).toBeInstanceOf(UnknownAdapterError);
    }
    await expect(cache.unregister('ghost')).rejects.toBeInstanceOf(UnknownAdapterError);
    expect(cache.get('ghost')).toBeUndefined();
    expect(cache.isResident('ghost')).toBe(false);
    expect(cache.has('ghost')).toBe(false);
    expect(cache.stats()).toMatchObject({ hits: 0, misses: 0, loads: 0, loadFailures: 0 });
  });
});

describe('identity', () => {
  it('names the registration: stable while registered (also across a same-directory re-register), new after unregister + register', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    cache.register('a', h.fx.dirs.a!);
    cache.register('b', h.fx.dirs.b!);
    const first = cache.identity('a');
    expect(first).toMatch(/^a#/);
    expect(cache.identity('b')).not.toBe(first);
    cache.register('a', h.fx.dirs.a!);
    expect(cache.identity('a')).toBe(first);
    await cache.unregister('a');
    expect(caught(() => cache.identity('a'))).toBeInstanceOf(UnknownAdapterError);
    cache.register('a', h.fx.dirs.a!);
    expect(cache.identity('a')).not.toBe(first);
  });
});

describe('unregister', () => {
  it('rejects with AdapterInUseError while pinned and changes nothing; once unpinned it frees both tiers', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    cache.register('a', h.fx.dirs.a!);
    cache.register('b', h.fx.dirs.b!);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('b');
    const before = contents(cache);
    const events = recordEvents(cache);

    const err = await cache.unregister('a').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AdapterInUseError);
    expect(err).toMatchObject({ adapter: 'a', pins: 1 });
    expect(contents(cache)).toEqual(before);
    expect(events).toEqual([]);

    cache.unpin('a');
    await cache.unregister('a');
    expect(cache.has('a')).toBe(false);
    expect(cache.names()).toEqual(['b']);
    expect(cache.isResident('a')).toBe(false);
    expect(events).toEqual([
      ['evicted', { name: 'a', bytes: A, tier: 'device', reason: 'unregister' }],
      ['evicted', { name: 'a', bytes: A, tier: 'host', reason: 'unregister' }],
    ]);
    expect(cache.stats()).toMatchObject({ residentBytes: A, residentCount: 1, hostBytes: A, deviceEvictions: 0, hostEvictions: 0 });
    expect(h.inUse()).toBe(A);
    await expect(cache.ensureResident('a')).rejects.toBeInstanceOf(UnknownAdapterError);
  });

  it('re-registering a name with another directory serves the new adapter, never the cached old one', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 4 * A });
    cache.register('tenant', h.fx.dirs.a!);
    const old = await cache.ensureResident('tenant');
    expect(old.tensors.get('model.layers.0.self_attn.q_proj.lora_A')!.shape).toEqual([8, 64]);
    await cache.unregister('tenant');
    cache.register('tenant', h.fx.dirs.large!);
    const fresh = await cache.ensureResident('tenant');
    expect(fresh.tensors.get('model.layers.0.self_attn.q_proj.lora_A')!.shape).toEqual([16, 64]);
    expect(cache.info('tenant')).toMatchObject({ dir: h.fx.dirs.large, deviceBytes: 2 * A, loads: 1 });
    expect(source.reads).toEqual(['tenant', 'tenant']);
  });

  it('cancels a load still reading: its callers get UnknownAdapterError, and nothing of it stays', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    cache.register('a', h.fx.dirs.a!);
    const events = recordEvents(cache);
    const hold = source.hold('a');
    const pending = cache.ensureResident('a').catch((e: unknown) => e);
    await hold.arrived; // read from disk, not yet handed to the cache
    expect(cache.info('a').loading).toBe('reading');

    let unregistered = false;
    const done = cache.unregister('a').then(() => (unregistered = true));
    expect(cache.has('a')).toBe(false); // at once
    const err = await pending;
    expect(err).toBeInstanceOf(UnknownAdapterError);
    expect(err).toMatchObject({ adapter: 'a', message: /unregistered while it was loading/ });
    await turn();
    expect(unregistered).toBe(false); // waits for the read to settle
    hold.release();
    await done;
    await turn();
    expect(source.uploads).toEqual([]);
    expect(cache.stats()).toMatchObject({ registered: 0, residentCount: 0, hostCount: 0, loadsInFlight: 0, loadFailures: 1 });
    expect(events.map(([e]) => e)).toEqual(['load-start', 'load-failed']);
    expect(h.inUse()).toBe(0);

    // The name is free again, and the next load is a clean one.
    cache.register('a', h.fx.dirs.a!);
    await cache.ensureResident('a');
    expect(cache.info('a').loads).toBe(1);
  });

  it('cancels a queued load, and the load queued behind it gets the room it was held back from', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A });
    for (const name of ['a', 'b', 'small', 'large']) cache.register(name, h.fx.dirs[name]!);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('small', { pin: true }); // 1.5 A free
    const pLarge = cache.ensureResident('large').catch((e: unknown) => e); // 2 A: waits
    await until(() => cache.stats().queuedLoads === 1, 'large queued');
    const pb = cache.ensureResident('b'); // fits, but waits behind large (first come first served)
    await until(() => cache.stats().queuedLoads === 2, 'b queued');
    expect(cache.isResident('b')).toBe(false);
    await cache.unregister('large');
    expect(await pLarge).toBeInstanceOf(UnknownAdapterError);
    await pb; // no unpin needed: the room was there
    expect(cache.isResident('b')).toBe(true);
    expect(cache.stats()).toMatchObject({ queuedLoads: 0, residentBytes: 2.5 * A, pinnedCount: 2 });
    expect(source.uploads).toEqual(['a', 'small', 'b']);
  });
});

describe('listeners that change the cache', () => {
  it('unregistering an adapter from its own load-start or evicted listener cancels the load cleanly', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    for (const name of ['a', 'b', 'c']) cache.register(name, h.fx.dirs[name]!);
    await cache.ensureResident('a');
    await cache.ensureResident('b'); // a: host only
    cache.on('load-start', (e) => {
      if (e.name === 'a') void cache.unregister('a');
    });
    const err = await cache.ensureResident('a').catch((e: unknown) => e); // from the host copy, cancelled at once
    expect(err).toBeInstanceOf(UnknownAdapterError);
    cache.on('evicted', (e) => {
      if (e.name === 'b' && e.reason === 'budget') void cache.unregister('c');
    });
    const errC = await cache.ensureResident('c').catch((e: unknown) => e); // making room for c evicts b
    expect(errC).toBeInstanceOf(UnknownAdapterError);
    expect(source.uploads).toEqual(['a', 'b']);
    expect(cache.names()).toEqual(['b']);
    expect(cache.stats()).toMatchObject({ residentCount: 0, loadsInFlight: 0, loadFailures: 2 });
    expect(h.inUse()).toBe(0);
  });
});

describe('dispose', () => {
  it('frees every device value (pinned ones too), rejects loads in flight, and refuses later calls', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A });
    for (const name of ['a', 'b', 'c', 'd']) cache.register(name, h.fx.dirs[name]!);
    await cache.ensureResident('a');
    await cache.ensureResident('b', { pin: true });
    const hold = source.hold('c');
    const pc = cache.ensureResident('c').catch((e: unknown) => e);
    await hold.arrived;
    expect(h.inUse()).toBe(2 * A);
    const events = recordEvents(cache);

    cache.dispose();
    expect(h.inUse()).toBe(0);
    expect(await pc).toBeInstanceOf(AdapterCacheDisposedError);
    expect(source.disposals.sort()).toEqual(['a', 'b']);
    expect(events.map(([e, p]) => `${e}:${p.name}:${'reason' in p ? p.reason : ''}`).sort()).toEqual([
      'evicted:a:dispose',
      'evicted:a:dispose',
      'evicted:b:dispose',
      'evicted:b:dispose',
      'load-failed:c:',
    ]);
    hold.release();
    await turn();
    expect(source.uploads).toEqual(['a', 'b']); // c's read came back after dispose and was dropped
    expect(h.inUse()).toBe(0);

    cache.dispose(); // idempotent
    expect(() => cache.register('e', h.fx.dirs.a!)).toThrow(AdapterCacheDisposedError);
    await expect(cache.ensureResident('a')).rejects.toBeInstanceOf(AdapterCacheDisposedError);
    await expect(cache.unregister('a')).rejects.toBeInstanceOf(AdapterCacheDisposedError);
    expect(() => cache.pin('a')).toThrow(AdapterCacheDisposedError);
    expect(cache.get('a')).toBeUndefined();
    expect(cache.isResident('a')).toBe(false);
    expect(cache.names()).toEqual([]);
    expect(cache.stats()).toMatchObject({ residentBytes: 0, hostBytes: 0, registered: 0 });
  });

  it('pin() after an eviction is a typed error, not a use of freed memory', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A });
    cache.register('a', h.fx.dirs.a!);
    cache.register('b', h.fx.dirs.b!);
    const a = await cache.ensureResident('a');
    await cache.ensureResident('b');
    expect([...a.tensors.values()].every((t) => t.disposed)).toBe(true);
    expect(() => cache.pin('a')).toThrow(AdapterNotResidentError);
  });
});

describe('construction', () => {
  it('validates budgets and the source', () => {
    const source = new PeftTestSource(h.fx.base);
    expect(() => h.cache({ source, deviceBudgetBytes: -1 })).toThrow(InvalidArgumentError);
    expect(() => h.cache({ source, deviceBudgetBytes: Number.NaN })).toThrow(/deviceBudgetBytes/);
    expect(() => h.cache({ source, deviceBudgetBytes: A, hostBudgetBytes: -5 })).toThrow(/hostBudgetBytes/);
    expect(() => h.cache({ source: Object.assign(Object.create(source) as PeftTestSource, { upload: undefined }), deviceBudgetBytes: A })).toThrow(/source.upload/);
    const unlimited = h.cache({ source, deviceBudgetBytes: Number.POSITIVE_INFINITY });
    expect(unlimited.stats()).toMatchObject({ deviceBudgetBytes: Number.POSITIVE_INFINITY, hostBudgetBytes: Number.POSITIVE_INFINITY });
  });
});
