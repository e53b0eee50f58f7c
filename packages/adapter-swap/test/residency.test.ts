/**
 * The device tier: hits and misses, LRU eviction, the byte budget (measured by the cache and by the native
 * allocator), pinning, loads that wait for an unpin (first come first served), shared concurrent loads, and the
 * host tier under its own budget. Every adapter is a real PEFT directory read by the engine.
 */
import { loadLoraAdapter } from '@tessera/engine';
import { allocatorStats, resetPeak } from '@tessera/native';
import { rng } from '@tessera/test-utils';
import { describe, expect, expectTypeOf, it } from 'vitest';

import { type AdapterCache, type AdapterSource, AdapterNotPinnedError, AdapterNotResidentError, AdapterTooLargeError } from '../src/index.js';
import { STANDARD, contents, recordEvents, turn, until } from './support/fixtures.js';
import { useHarness } from './support/harness.js';
import { ManualClock } from './support/manual-clock.js';
import { type DeviceLora, type HostLora, PeftTestSource } from './support/peft-source.js';

const h = useHarness();
const A = 14_336; // bytes of each rank-8 q/v adapter a–e

function registerAll(cache: { register(name: string, dir: string): void }, names: readonly string[]): void {
  for (const name of names) cache.register(name, h.fx.dirs[name]!);
}

const isLive = (d: DeviceLora) => [...d.tensors.values()].every((t) => !t.disposed);

describe('contracts', () => {
  it("satisfies @tessera/batcher's AdapterResidency (C4) structurally, and the test source is an AdapterSource", () => {
    // C4, as the batcher declares it (adapter-swap does not depend on the batcher).
    interface AdapterResidency {
      isResident(name: string): boolean;
      ensureResident(name: string): Promise<unknown>;
      pin(name: string): void;
      unpin(name: string): void;
    }
    expectTypeOf<AdapterCache<HostLora, DeviceLora>>().toExtend<AdapterResidency>();
    expectTypeOf<PeftTestSource>().toExtend<AdapterSource<HostLora, DeviceLora>>();
  });
});

describe('hits, misses and loads', () => {
  it('the fixture sizes are what the budgets below assume', () => {
    for (const name of STANDARD) expect(h.fx.bytes[name]).toBe(A);
    expect(h.fx.bytes).toMatchObject({ small: A / 2, large: 2 * A, wide: 74_752 });
  });

  it('get() counts a hit only when resident; ensureResident() counts a miss and loads the real tensors', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A });
    registerAll(cache, ['a', 'b']);

    expect(cache.get('a')).toBeUndefined();
    expect(cache.get('nobody')).toBeUndefined();
    expect(cache.isResident('a')).toBe(false);
    expect(cache.stats()).toMatchObject({ hits: 0, misses: 0, loads: 0 });

    const d = await cache.ensureResident('a');
    expect(cache.stats()).toMatchObject({ hits: 0, misses: 1, loads: 1, residentBytes: A, residentCount: 1, bytesLoaded: A, hostBytes: A, hostCount: 1 });
    expect(h.inUse()).toBe(A);
    expect(cache.isResident('a')).toBe(true);
    expect(cache.get('a')).toBe(d);
    expect(cache.stats().hits).toBe(1);

    // The device value holds exactly the adapter's tensors: A [r, in] and B [out, r] of q and v in both layers.
    const reference = loadLoraAdapter(h.fx.dirs.a!, { base: h.fx.base });
    try {
      expect(d.tensors.size).toBe(2 * reference.modules.size);
      for (const m of reference.modules.values()) {
        expect(d.tensors.get(`${m.module}.lora_A`)!.toArray()).toEqual(m.a.toArray());
        expect(d.tensors.get(`${m.module}.lora_B`)!.toArray()).toEqual(m.b.toArray());
      }
    } finally {
      reference.dispose();
    }

    // Resident: the promise is already resolved (a microtask suffices) and counts a hit.
    let seen: DeviceLora | undefined;
    void cache.ensureResident('a').then((v) => (seen = v));
    await Promise.resolve();
    expect(seen).toBe(d);
    expect(cache.stats()).toMatchObject({ hits: 2, misses: 1, loads: 1 });
    expect(source.reads).toEqual(['a']);

    expect(cache.get('b')).toBeUndefined();
    expect(cache.stats().hits).toBe(2);
  });

  it('concurrent ensureResident() calls share one read and one upload', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A });
    registerAll(cache, ['a']);
    const events = recordEvents(cache);
    const promises = [cache.ensureResident('a'), cache.ensureResident('a'), cache.ensureResident('a', { pin: true }), cache.ensureResident('a')];
    expect(cache.info('a').loading).toBe('reading');
    expect(cache.ensureResident('a', { pin: true })).toBe(promises[0]); // the very same promise
    const values = await Promise.all(promises);
    expect(new Set(values).size).toBe(1);
    expect(source.reads).toEqual(['a']);
    expect(source.uploads).toEqual(['a']);
    expect(cache.stats()).toMatchObject({ misses: 5, loads: 1, hits: 0, pinnedCount: 1, loadsInFlight: 0 });
    expect(cache.info('a').pins).toBe(2); // one per { pin: true } caller
    expect(events.map(([e]) => e)).toEqual(['load-start', 'loaded']);
  });
});

describe('LRU eviction under the device budget', () => {
  it('evicts the least recently used adapter; get(), pin() and unpin() refresh recency', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A });
    registerAll(cache, STANDARD);
    const events = recordEvents(cache);
    const evicted = () => events.filter(([e]) => e === 'evicted').map(([, p]) => (p as { name: string }).name);

    for (const name of ['a', 'b', 'c']) await cache.ensureResident(name);
    cache.get('a'); // order now b, c, a
    await cache.ensureResident('d'); // evicts b
    expect(evicted()).toEqual(['b']);
    await cache.ensureResident('c'); // a hit: order a, d, c
    await cache.ensureResident('e'); // evicts a
    expect(evicted()).toEqual(['b', 'a']);
    cache.pin('d');
    cache.unpin('d'); // order c, e, d
    await cache.ensureResident('b'); // evicts c
    expect(evicted()).toEqual(['b', 'a', 'c']);
    expect(['a', 'b', 'c', 'd', 'e'].filter((n) => cache.isResident(n))).toEqual(['b', 'd', 'e']);
    expect(source.disposals).toEqual(['b', 'a', 'c']);
    expect(cache.stats()).toMatchObject({ deviceEvictions: 3, loads: 6, residentBytes: 3 * A, residentCount: 3 });
    expect(events.filter(([e]) => e === 'evicted').every(([, p]) => (p as { tier: string; reason: string }).tier === 'device' && (p as { reason: string }).reason === 'budget')).toBe(true);
  });

  it('never exceeds the budget, by its own count and by the native allocator, over a random workload', async () => {
    const source = new PeftTestSource(h.fx.base);
    const budget = 3 * A; // e.g. large + one rank-8 adapter, or three rank-8 ones
    const cache = h.cache({ source, deviceBudgetBytes: budget, hostBudgetBytes: 4 * A });
    const names = [...STANDARD, 'small', 'large'];
    registerAll(cache, names);
    resetPeak();
    const next = rng(7);
    let pinned: string | null = null;
    for (let step = 0; step < 60; step++) {
      const name = names[Math.floor(next() * names.length)]!;
      const op = next();
      if (op < 0.6) await cache.ensureResident(name);
      else if (op < 0.8) cache.get(name);
      else if (pinned === null && cache.isResident(name)) {
        cache.pin(name);
        pinned = name;
      } else if (pinned !== null) {
        cache.unpin(pinned);
        pinned = null;
      }
      const s = cache.stats();
      expect(s.residentBytes).toBeLessThanOrEqual(budget);
      expect(s.hostBytes).toBeLessThanOrEqual(4 * A);
      expect(h.inUse()).toBe(s.residentBytes);
      expect(names.reduce((sum, n) => sum + cache.info(n).deviceBytes, 0)).toBe(s.residentBytes);
      if (pinned !== null) expect(cache.isResident(pinned)).toBe(true);
    }
    const s = cache.stats();
    expect(s.loads).toBeGreaterThan(10);
    expect(s.deviceEvictions).toBeGreaterThan(5);
    expect(s.hostEvictions).toBeGreaterThan(0);
    // Right after each upload (the read's temporaries are gone by then), the allocator holds at most the budget.
    for (const inUse of source.inUseAfterUpload) expect(inUse - h.baseline).toBeLessThanOrEqual(budget);
    // The peak adds at most one adapter being read from disk while the resident set is full.
    expect(allocatorStats().peak - h.baseline).toBeLessThanOrEqual(budget + 2 * A);
  });

  it('an adapter larger than the whole budget rejects with AdapterTooLargeError and changes nothing', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'wide']);
    await cache.ensureResident('a');
    const before = contents(cache);
    const events = recordEvents(cache);
    const err = await cache.ensureResident('wide').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AdapterTooLargeError);
    expect(err).toMatchObject({ adapter: 'wide', bytes: 74_752, budgetBytes: 2 * A, code: 'TESSERA_ADAPTER_TOO_LARGE' });
    expect(events.map(([e]) => e)).toEqual(['load-start', 'load-failed']);
    expect(events[1]![1]).toMatchObject({ name: 'wide', error: err, from: 'disk' });
    expect(contents(cache)).toEqual(before);
    expect(cache.stats()).toMatchObject({ loadFailures: 1, loads: 1 });
    expect(h.inUse()).toBe(A);
  });

  it('an upload larger than estimated evicts more, or waits for room for its real size', async () => {
    // A source whose estimate is half the truth: the cache must correct itself after the upload.
    class Underestimating extends PeftTestSource {
      estimateDeviceBytes(host: Parameters<PeftTestSource['hostBytes']>[0]): number {
        return this.hostBytes(host) / 2;
      }
    }
    const source = new Underestimating(h.fx.base);
    const budget = 2.5 * A;
    const cache = h.cache({ source, deviceBudgetBytes: budget });
    registerAll(cache, ['a', 'b', 'c']);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('c');
    // b is estimated at A/2, which fits the free A/2; its real A does not: c (unpinned) goes.
    await cache.ensureResident('b');
    expect(cache.isResident('c')).toBe(false);
    expect(cache.stats().residentBytes).toBe(2 * A);
    expect(h.inUse()).toBe(2 * A);

    // Now both residents pinned: c's estimate fits nowhere real, so its upload is undone and it waits for an unpin.
    cache.pin('b');
    await cache.unregister('c'); // forgets the size it measured for c
    cache.register('c', h.fx.dirs.c!);
    const pc = cache.ensureResident('c');
    await until(() => cache.stats().queuedLoads === 1, 'c queued');
    expect(cache.isResident('c')).toBe(false);
    expect(h.inUse()).toBe(2 * A);
    cache.unpin('b');
    await pc;
    expect(cache.isResident('b')).toBe(false);
    expect(cache.stats().residentBytes).toBeLessThanOrEqual(budget);
    expect(h.inUse()).toBe(cache.stats().residentBytes);
    expect(source.disposals).toEqual(['c', 'c', 'b']); // evicted c, c's undone upload, then b
  });
});

describe('pinning', () => {
  it('counts pins; pin() of a non-resident adapter and unpin() below zero throw typed errors', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'b']);
    expect(() => cache.pin('a')).toThrow(AdapterNotResidentError);
    expect(() => cache.unpin('a')).toThrow(AdapterNotPinnedError);
    const loading = cache.ensureResident('a');
    expect(() => cache.pin('a')).toThrow(/load is in flight/);
    await loading;
    cache.pin('a');
    cache.pin('a');
    expect(cache.info('a').pins).toBe(2);
    expect(cache.stats().pinnedCount).toBe(1);
    cache.unpin('a');
    expect(cache.info('a').pins).toBe(1);
    cache.unpin('a');
    expect(cache.stats().pinnedCount).toBe(0);
    const err = (() => {
      try {
        cache.unpin('a');
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(AdapterNotPinnedError);
    expect(err).toMatchObject({ adapter: 'a', code: 'TESSERA_ADAPTER_NOT_PINNED' });
  });

  it('a pinned adapter is never evicted: a load waits until an unpin frees room, then evicts only what is unpinned', async () => {
    const clock = new ManualClock(100);
    const source = new PeftTestSource(h.fx.base, { clock, readMs: 5, uploadMs: 1 });
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A, clock });
    registerAll(cache, ['a', 'b', 'c']);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('b');
    cache.pin('b');
    const events = recordEvents(cache);

    let settled = false;
    const pc = cache.ensureResident('c').finally(() => (settled = true));
    await until(() => cache.stats().queuedLoads === 1, 'c queued for room');
    expect(cache.info('c')).toMatchObject({ tier: 'disk', loading: 'queued' });
    expect(cache.stats()).toMatchObject({ queuedLoads: 1, loadsInFlight: 1, residentCount: 2 });
    // Other calls and other turns do not let it in while a and b are pinned.
    cache.get('a');
    await cache.ensureResident('a');
    for (let i = 0; i < 20; i++) await turn();
    expect(settled).toBe(false);
    expect(events.map(([e]) => e)).toEqual(['load-start']);

    clock.advance(10);
    cache.pin('a');
    cache.unpin('a'); // a is still pinned once: nothing changes
    await turn();
    expect(settled).toBe(false);
    cache.unpin('b'); // b is free: c takes its place, a stays
    const c = await pc;
    expect(isLive(c)).toBe(true);
    expect(['a', 'b', 'c'].filter((n) => cache.isResident(n))).toEqual(['a', 'c']);
    expect(events.map(([e, p]) => `${e}:${p.name}`)).toEqual(['load-start:c', 'evicted:b', 'loaded:c']);
    expect(events[2]![1]).toMatchObject({ ms: 6, queuedMs: 10, from: 'disk', bytes: A });
    expect(cache.stats()).toMatchObject({ queuedLoads: 0, loadsInFlight: 0, totalQueuedMs: 10, deviceEvictions: 1 });
    expect(h.inUse()).toBe(2 * A);
  });

  it('queued loads are served first come first served, even when a later one would fit sooner', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 3 * A }); // a + small pinned leave 1.5 A free
    registerAll(cache, ['a', 'b', 'small', 'large']);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('small', { pin: true });
    const events = recordEvents(cache);

    const pLarge = cache.ensureResident('large', { pin: true }); // 2 A: must wait
    await until(() => cache.stats().queuedLoads === 1, 'large queued');
    const pb = cache.ensureResident('b', { pin: true }); // A would fit now, but large came first
    await until(() => cache.stats().queuedLoads === 2, 'b queued');
    expect(cache.isResident('b')).toBe(false);

    cache.unpin('small'); // 2 A free: large lands (pinned); b still has no room
    await pLarge;
    await turn();
    expect(cache.isResident('large')).toBe(true);
    expect(cache.isResident('b')).toBe(false);
    expect(cache.stats().queuedLoads).toBe(1);
    cache.unpin('a');
    await pb;
    expect(['a', 'b', 'small', 'large'].filter((n) => cache.isResident(n))).toEqual(['b', 'large']);
    expect(events.filter(([e]) => e !== 'load-start').map(([e, p]) => `${e}:${p.name}`)).toEqual(['evicted:small', 'loaded:large', 'evicted:a', 'loaded:b']);
    cache.unpin('large');
    cache.unpin('b');
  });

  it('a value a load resolves with is not evicted before the code awaiting it has run', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'b', 'c', 'd']);
    await cache.ensureResident('a', { pin: true });
    await cache.ensureResident('b', { pin: true });
    const seen: string[] = [];
    // c's caller pins right after its await; d's load, queued behind c, must not evict c before that.
    const pc = cache.ensureResident('c').then((c) => {
      seen.push(`c live=${isLive(c)}`);
      cache.pin('c');
      return c;
    });
    await until(() => cache.stats().queuedLoads === 1, 'c queued');
    const pd = cache.ensureResident('d').then((d) => {
      seen.push(`d live=${isLive(d)}`);
      return d;
    });
    await until(() => cache.stats().queuedLoads === 2, 'd queued');
    cache.unpin('a');
    const c = await pc;
    await turn();
    expect(seen).toEqual(['c live=true']);
    expect(cache.isResident('c')).toBe(true);
    expect(cache.stats().queuedLoads).toBe(1); // d waits: b and c are pinned
    cache.unpin('b');
    await pd;
    expect(seen).toEqual(['c live=true', 'd live=true']);
    expect(isLive(c)).toBe(true);
  });

  it("a caller's own calls follow LRU exactly, also right after a load that landed at once from the host cache", async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'b', 'c']);
    for (const name of ['a', 'b', 'c']) await cache.ensureResident(name); // all three cached on the host; b, c resident
    const pa = cache.ensureResident('a'); // lands now, from the host copy, evicting b
    expect(cache.isResident('a')).toBe(true);
    cache.get('c'); // LRU order: a, c
    const pb = cache.ensureResident('b'); // lands now too, and evicts a: the caller asked for it
    expect(['a', 'b', 'c'].filter((n) => cache.isResident(n))).toEqual(['b', 'c']);
    expect(isLive(await pa)).toBe(false);
    expect(isLive(await pb)).toBe(true);
    // Pinned in the same step, a stays.
    const pc = cache.ensureResident('a', { pin: true });
    cache.get('b');
    await cache.ensureResident('c');
    expect(isLive(await pc)).toBe(true);
    expect(['a', 'b', 'c'].filter((n) => cache.isResident(n))).toEqual(['a', 'c']);
    expect(source.reads).toEqual(['a', 'b', 'c']);
  });
});

describe('the host tier', () => {
  it('keeps read adapters under hostBudgetBytes (LRU), so a reload after a device eviction skips the disk', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A, hostBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'b', 'c']);
    const events = recordEvents(cache);
    for (const name of ['a', 'b', 'c']) await cache.ensureResident(name);
    expect(source.reads).toEqual(['a', 'b', 'c']);
    // Device: one at a time. Host: a was the least recently used when c arrived.
    expect(events.filter(([e]) => e === 'evicted').map(([, p]) => p)).toEqual([
      { name: 'a', bytes: A, tier: 'device', reason: 'budget' },
      { name: 'b', bytes: A, tier: 'device', reason: 'budget' },
      { name: 'a', bytes: A, tier: 'host', reason: 'budget' },
    ]);
    expect(cache.info('a')).toMatchObject({ tier: 'disk', hostCached: false, hostBytes: 0 });
    expect(cache.info('b')).toMatchObject({ tier: 'host', hostCached: true, hostBytes: A, deviceBytes: 0 });
    expect(cache.info('c')).toMatchObject({ tier: 'device', hostCached: true, deviceBytes: A });
    expect(cache.stats()).toMatchObject({ hostBytes: 2 * A, hostCount: 2, hostEvictions: 1, deviceEvictions: 2 });

    events.length = 0;
    await cache.ensureResident('b'); // from the host copy: no read
    expect(source.reads).toEqual(['a', 'b', 'c']);
    expect(events.map(([e, p]) => [e, p.name, 'from' in p ? p.from : p.tier])).toEqual([
      ['load-start', 'b', 'host'],
      ['evicted', 'c', 'device'],
      ['loaded', 'b', 'host'],
    ]);
    await cache.ensureResident('a'); // from disk again; its host copy evicts c's (b was just used)
    expect(source.reads).toEqual(['a', 'b', 'c', 'a']);
    expect(cache.info('c').hostCached).toBe(false);
    expect(cache.info('b').hostCached).toBe(true);
  });

  it('a value larger than the whole host budget is uploaded but not kept, and evicts nothing from the host', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A, hostBudgetBytes: A / 2 });
    registerAll(cache, ['a', 'small']);
    await cache.ensureResident('small');
    await cache.ensureResident('a');
    expect(cache.info('small')).toMatchObject({ tier: 'host', hostBytes: A / 2 });
    expect(cache.info('a')).toMatchObject({ tier: 'device', hostCached: false });
    await cache.ensureResident('small'); // from the host
    await cache.ensureResident('a'); // from disk again
    expect(source.reads).toEqual(['small', 'a', 'a']);
    expect(cache.stats()).toMatchObject({ hostBytes: A / 2, hostCount: 1, hostEvictions: 0 });
  });

  it('hostBudgetBytes 0 keeps nothing on the host: every load reads the disk', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: A, hostBudgetBytes: 0 });
    registerAll(cache, ['a', 'b']);
    for (const name of ['a', 'b', 'a', 'b']) await cache.ensureResident(name);
    expect(source.reads).toEqual(['a', 'b', 'a', 'b']);
    expect(cache.stats()).toMatchObject({ hostBytes: 0, hostCount: 0, hostEvictions: 0, loads: 4 });
  });
});

describe('events and load times', () => {
  it('emits load-start, evicted and loaded in order, with times from the injected clock', async () => {
    const clock = new ManualClock(1000);
    const source = new PeftTestSource(h.fx.base, { clock, readMs: 5, uploadMs: 2 });
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A, clock });
    registerAll(cache, ['a', 'b', 'c']);
    const events = recordEvents(cache);
    await cache.ensureResident('a');
    await cache.ensureResident('b');
    await cache.ensureResident('c');
    clock.advance(50);
    await cache.ensureResident('a'); // from the host cache: upload time only
    expect(events).toEqual([
      ['load-start', { name: 'a', from: 'disk' }],
      ['loaded', { name: 'a', bytes: A, ms: 7, queuedMs: 0, from: 'disk', tier: 'device' }],
      ['load-start', { name: 'b', from: 'disk' }],
      ['loaded', { name: 'b', bytes: A, ms: 7, queuedMs: 0, from: 'disk', tier: 'device' }],
      ['load-start', { name: 'c', from: 'disk' }],
      ['evicted', { name: 'a', bytes: A, tier: 'device', reason: 'budget' }],
      ['loaded', { name: 'c', bytes: A, ms: 7, queuedMs: 0, from: 'disk', tier: 'device' }],
      ['load-start', { name: 'a', from: 'host' }],
      ['evicted', { name: 'b', bytes: A, tier: 'device', reason: 'budget' }],
      ['loaded', { name: 'a', bytes: A, ms: 2, queuedMs: 0, from: 'host', tier: 'device' }],
    ]);
    expect(cache.stats()).toMatchObject({ loads: 4, totalLoadMs: 23, lastLoadMs: 2, bytesLoaded: 4 * A, deviceEvictions: 2 });
    expect(cache.info('a')).toMatchObject({ loads: 2, lastLoadMs: 2, lastUsedMs: 1000 + 21 + 50 + 2 });
    cache.get('c');
    expect(cache.info('c').lastUsedMs).toBe(clock.now());
    expect(cache.info('b')).toMatchObject({ tier: 'host', loads: 1, lastLoadMs: 7, pins: 0, loading: null });
  });

  it('off() removes a listener', async () => {
    const source = new PeftTestSource(h.fx.base);
    const cache = h.cache({ source, deviceBudgetBytes: 2 * A });
    registerAll(cache, ['a', 'b']);
    const names: string[] = [];
    const listener = (p: { name: string }) => void names.push(p.name);
    cache.on('loaded', listener);
    await cache.ensureResident('a');
    cache.off('loaded', listener);
    await cache.ensureResident('b');
    expect(names).toEqual(['a']);
  });
});
