/**
 * AdapterCache: registered adapter directories (disk) → a host cache of read adapters → a device-resident set
 * under a byte budget. Punica §5.2 / punica.md §8: a request whose adapter is not resident triggers one
 * asynchronous load while the batch keeps running without it; the request joins once the adapter is resident.
 * The paper leaves residency open; this is LRU by last use with pinning (a pinned adapter is in a running batch
 * and is never evicted), as vLLM's and SGLang's adapter managers do.
 *
 * The three tiers stay explicit (the registry, `host`, `device`), so a later layer-by-layer staging (HMI) can
 * add a tier between host and device without reshaping the API.
 */
import { resolve } from 'node:path';

import { InvalidArgumentError } from '@tessera/core';

import { checkAdapterName } from './adapter-name.js';
import { ByteLru } from './byte-lru.js';
import { type Clock, systemClock } from './clock.js';
import {
  AdapterCacheDisposedError,
  AdapterExistsError,
  AdapterInUseError,
  AdapterLoadError,
  AdapterNotPinnedError,
  AdapterNotResidentError,
  AdapterTooLargeError,
  UnknownAdapterError,
} from './errors.js';
import type { AdapterSource } from './source.js';

/** Where an adapter's freshest copy is: only its directory, the host cache, or the device. */
export type AdapterTier = 'disk' | 'host' | 'device';
/** Where a load starts from. */
export type LoadOrigin = 'disk' | 'host';
/** Why a value left a tier: room for another adapter, unregister(), or dispose(). */
export type EvictionReason = 'budget' | 'unregister' | 'dispose';

export interface AdapterCacheOptions<H, D> {
  source: AdapterSource<H, D>;
  /** Bytes of device values (per `source.deviceBytes`) that may be resident at once. */
  deviceBudgetBytes: number;
  /** Bytes of host values (per `source.hostBytes`) the host cache keeps; default unlimited. 0 disables it. */
  hostBudgetBytes?: number;
  /** Times loads (ms); default {@link systemClock}. */
  clock?: Clock;
}

export interface EnsureResidentOptions {
  /**
   * Pin the adapter in the same step that makes it resident (and before the promise resolves), so no other load
   * can evict it between the resolution and the caller's own pin(). The caller owes one unpin().
   */
  pin?: boolean;
}

export interface AdapterInfo {
  name: string;
  /** The registered directory, resolved to an absolute path. */
  dir: string;
  /** 'device' when resident (a host copy may exist as well), else 'host' when cached on the host, else 'disk'. */
  tier: AdapterTier;
  /** Device bytes while resident, else 0. */
  deviceBytes: number;
  /** Bytes of the host copy while cached on the host, else 0. */
  hostBytes: number;
  hostCached: boolean;
  pins: number;
  /** Reservations: waiting requests that will pin it (see {@link AdapterCache.reserve}). */
  reservations: number;
  /** The phase of a load in flight: reading from disk, or read and queued for device room. */
  loading: 'reading' | 'queued' | null;
  /** Completed loads of this adapter since it was registered. */
  loads: number;
  /** Clock time of the last hit, pin, unpin or load; null if never used. */
  lastUsedMs: number | null;
  /** Duration of the last completed load (read + upload, without time queued for room). */
  lastLoadMs: number | null;
}

export interface AdapterCacheStats {
  registered: number;
  /** get() or ensureResident() calls that found the adapter resident. */
  hits: number;
  /** ensureResident() calls that did not (each caller counts, also one that joins a load in flight). */
  misses: number;
  /** Completed loads (adapters made resident). */
  loads: number;
  /** Loads that rejected: unreadable directory, too large, upload failure, unregistered or disposed meanwhile. */
  loadFailures: number;
  /** Device values evicted to make room (unregister and dispose are not counted). */
  deviceEvictions: number;
  /** Host values evicted to make room. */
  hostEvictions: number;
  /** Sum of load durations: host read (when from disk) plus upload; time spent queued for room is separate. */
  totalLoadMs: number;
  lastLoadMs: number | null;
  /** Sum of the time loads spent queued for device room. */
  totalQueuedMs: number;
  /** Device bytes uploaded by completed loads. */
  bytesLoaded: number;
  residentBytes: number;
  residentCount: number;
  deviceBudgetBytes: number;
  hostBytes: number;
  hostCount: number;
  hostBudgetBytes: number;
  /** Adapters with a pin count above zero. */
  pinnedCount: number;
  /** Adapters with a reservation (and no pin): held for a waiting request, evicted only as a last resort. */
  reservedCount: number;
  /** Loads started and not settled (reading or queued). */
  loadsInFlight: number;
  /** Loads read and waiting, first come first served, for device room that only an unpin can free. */
  queuedLoads: number;
}

export interface AdapterCacheEvents {
  'load-start': { name: string; from: LoadOrigin };
  loaded: { name: string; bytes: number; ms: number; queuedMs: number; from: LoadOrigin; tier: 'device' };
  evicted: { name: string; bytes: number; tier: 'host' | 'device'; reason: EvictionReason };
  'load-failed': { name: string; error: Error; ms: number; from: LoadOrigin };
}
export type AdapterCacheEvent = keyof AdapterCacheEvents;
export type AdapterCacheListener<E extends AdapterCacheEvent> = (payload: AdapterCacheEvents[E]) => void;

interface Entry<H, D> {
  readonly name: string;
  readonly dir: string;
  /** This registration's number in the cache (a re-registration of the name gets a new one). */
  readonly registration: number;
  pins: number;
  reservations: number;
  loads: number;
  lastUsedMs: number | null;
  lastLoadMs: number | null;
  /** Device bytes a past upload measured; better than any estimate from the host value. */
  deviceBytesSeen: number | undefined;
  load: Load<H, D> | undefined;
}

interface Load<H, D> {
  readonly entry: Entry<H, D>;
  readonly from: LoadOrigin;
  readonly startMs: number;
  readonly promise: Promise<D>;
  readonly resolve: (d: D) => void;
  readonly reject: (e: Error) => void;
  state: 'reading' | 'queued' | 'settled';
  /** ensureResident({ pin: true }) callers waiting on this load: each gets one pin when it lands. */
  pinRequests: number;
  host: { value: H; bytes: number } | undefined;
  readMs: number;
  /** Device bytes to make room for. */
  need: number;
  queuedAtMs: number | null;
  /** Settles when readHost has (unregister waits for it, so nothing of the adapter is held afterwards). */
  read: Promise<void> | undefined;
}

function checkBudget(what: string, value: unknown): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
    throw new InvalidArgumentError(`${what} must be a number >= 0 (Infinity for no limit), got ${String(value)}`);
  }
  return value;
}

/** Listeners run inside a load can settle it (unregister, dispose); a function call keeps TS from narrowing that away. */
function isSettled(load: { state: string }): boolean {
  return load.state === 'settled';
}

function asError(err: unknown, name: string): Error {
  return err instanceof Error ? err : new AdapterLoadError(name, `loading adapter ${JSON.stringify(name)} failed: ${String(err)}`, { cause: err });
}

export class AdapterCache<H, D> {
  private readonly source: AdapterSource<H, D>;
  private readonly clock: Clock;
  private readonly deviceBudget: number;
  private readonly hostBudget: number;
  private readonly entries = new Map<string, Entry<H, D>>();
  private readonly host = new ByteLru<H>();
  private readonly device = new ByteLru<D>();
  /** Loads waiting for device room, first come first served. */
  private readonly queue: Load<H, D>[] = [];
  private drainScheduled = false;
  /**
   * Adapters that just landed, by how many landings are still protected. The cache's own background work (a read
   * completing, a queue drain) does not evict them until the code awaiting the load has run: a caller that awaits
   * ensureResident() and pins right away never receives an evicted value, and a drain cannot evict what it loaded
   * a moment ago. A caller's own synchronous calls are not second-guessed: they follow LRU (see protectFresh()).
   */
  private readonly fresh = new Map<string, number>();
  private disposed = false;
  private registrations = 0;
  private readonly listeners: { [E in AdapterCacheEvent]: Set<AdapterCacheListener<E>> } = {
    'load-start': new Set(),
    loaded: new Set(),
    evicted: new Set(),
    'load-failed': new Set(),
  };
  private readonly counters = {
    hits: 0,
    misses: 0,
    loads: 0,
    loadFailures: 0,
    deviceEvictions: 0,
    hostEvictions: 0,
    totalLoadMs: 0,
    lastLoadMs: null as number | null,
    totalQueuedMs: 0,
    bytesLoaded: 0,
  };

  constructor(options: AdapterCacheOptions<H, D>) {
    const { source } = options;
    for (const method of ['readHost', 'hostBytes', 'upload', 'deviceBytes', 'disposeDevice'] as const) {
      if (typeof source?.[method] !== 'function') throw new InvalidArgumentError(`AdapterCache: source.${method} must be a function`);
    }
    this.source = source;
    this.deviceBudget = checkBudget('deviceBudgetBytes', options.deviceBudgetBytes);
    this.hostBudget = checkBudget('hostBudgetBytes', options.hostBudgetBytes ?? Number.POSITIVE_INFINITY);
    this.clock = options.clock ?? systemClock;
  }

  // ─── registry (disk) ───────────────────────────────────────────────────────────────────────────────────────

  /**
   * Registers `dir` under `name`. Nothing is read yet: the first ensureResident() reads it. Registering the same
   * name with the same directory again does nothing; with another directory it throws {@link AdapterExistsError}.
   */
  register(name: string, dir: string): void {
    this.checkLive();
    checkAdapterName(name);
    if (typeof dir !== 'string' || dir.length === 0 || dir.includes('\0')) {
      throw new InvalidArgumentError(`adapter ${JSON.stringify(name)}: dir must be a non-empty path without NUL, got ${JSON.stringify(dir)}`);
    }
    const absolute = resolve(dir);
    const existing = this.entries.get(name);
    if (existing) {
      if (existing.dir === absolute) return;
      throw new AdapterExistsError(name, existing.dir, `adapter ${JSON.stringify(name)} is registered already with ${existing.dir} (not ${absolute}); unregister it first`);
    }
    this.entries.set(name, { name, dir: absolute, registration: ++this.registrations, pins: 0, reservations: 0, loads: 0, lastUsedMs: null, lastLoadMs: null, deviceBytesSeen: undefined, load: undefined });
  }

  /**
   * Forgets `name` and frees it from both tiers. Rejects with {@link AdapterInUseError} while it is pinned (and
   * changes nothing then). A load in flight is cancelled: its callers get {@link UnknownAdapterError}. The name
   * is free for register() at once; the promise resolves once an in-flight disk read has settled too.
   */
  async unregister(name: string): Promise<void> {
    this.checkLive();
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    if (entry.pins > 0) throw new AdapterInUseError(name, entry.pins);
    this.entries.delete(name);
    if (this.device.has(name)) this.evictDevice(name, 'unregister');
    if (this.host.has(name)) this.evictHost(name, 'unregister');
    this.scheduleDrain(); // freed room, or a cancelled head of the queue, may let a queued load in
    const load = entry.load;
    if (load) {
      this.fail(load, new UnknownAdapterError(name, `adapter ${JSON.stringify(name)} was unregistered while it was loading`));
      if (load.read) await load.read;
    }
  }

  has(name: string): boolean {
    return this.entries.has(name);
  }

  /**
   * A string naming the adapter's current registration: the name and a number that changes when the name is
   * unregistered and registered again (its files may have changed). The batcher's prefix cache keys K/V by it,
   * so a same-name reload never reuses stale pages. Throws UnknownAdapterError for an unregistered name.
   */
  identity(name: string): string {
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    return `${name}#${entry.registration}`;
  }

  /** Registered names, in registration order. */
  names(): string[] {
    return [...this.entries.keys()];
  }

  info(name: string): AdapterInfo {
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    const resident = this.device.has(name);
    const hostCached = this.host.has(name);
    return {
      name,
      dir: entry.dir,
      tier: resident ? 'device' : hostCached ? 'host' : 'disk',
      deviceBytes: this.device.bytesOf(name),
      hostBytes: this.host.bytesOf(name),
      hostCached,
      pins: entry.pins,
      reservations: entry.reservations,
      loading: entry.load ? (entry.load.state === 'queued' ? 'queued' : 'reading') : null,
      loads: entry.loads,
      lastUsedMs: entry.lastUsedMs,
      lastLoadMs: entry.lastLoadMs,
    };
  }

  // ─── device residency ──────────────────────────────────────────────────────────────────────────────────────

  isResident(name: string): boolean {
    return this.device.has(name);
  }

  /** The device value if resident (a hit: refreshes its LRU position), else undefined (counts nothing). */
  get(name: string): D | undefined {
    const entry = this.entries.get(name);
    if (!entry || !this.device.has(name)) return undefined;
    this.counters.hits++;
    this.touch(entry);
    return this.device.peek(name);
  }

  /**
   * Resolves with the device value once `name` is resident: at once (an already resolved promise) when it is;
   * otherwise through one asynchronous load shared by every concurrent caller: read from disk (or taken from the
   * host cache), then uploaded when device room allows. Room comes from evicting unpinned adapters, least
   * recently used first; when pinned adapters fill the budget the load waits, first come first served, until an
   * unpin frees enough. Rejects with {@link UnknownAdapterError} for an unregistered name,
   * {@link AdapterTooLargeError} when the adapter exceeds the whole budget, and the source's own typed error when
   * the read or upload fails; a failed load leaves the cache as it was, and may be retried.
   *
   * The cache's background work (other reads completing, queued loads) does not evict a value a load resolves
   * with before the code awaiting that promise has run, so it can pin it there; beyond that it stays only while
   * pinned, or until LRU picks it, also for the caller's own later calls. `{ pin: true }` pins it atomically.
   */
  ensureResident(name: string, options: EnsureResidentOptions = {}): Promise<D> {
    if (this.disposed) return Promise.reject(new AdapterCacheDisposedError());
    const entry = this.entries.get(name);
    if (!entry) return Promise.reject(new UnknownAdapterError(name));
    const pins = options.pin === true ? 1 : 0;
    if (this.device.has(name)) {
      this.counters.hits++;
      entry.pins += pins;
      this.touch(entry);
      return Promise.resolve(this.device.peek(name) as D);
    }
    this.counters.misses++;
    if (entry.load) {
      entry.load.pinRequests += pins;
      return entry.load.promise;
    }
    return this.startLoad(entry, pins).promise;
  }

  /** Holds `name` on the device: a pinned adapter is never evicted. Counted; each pin needs one unpin. */
  pin(name: string): void {
    this.checkLive();
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    if (!this.device.has(name)) {
      throw new AdapterNotResidentError(name, `cannot pin adapter ${JSON.stringify(name)}: it is not resident (${entry.load ? 'its load is in flight' : 'call ensureResident first'})`);
    }
    entry.pins++;
    this.touch(entry);
  }

  unpin(name: string): void {
    this.checkLive();
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    if (entry.pins === 0) throw new AdapterNotPinnedError(name);
    entry.pins--;
    this.touch(entry);
    if (entry.pins === 0) this.scheduleDrain();
  }

  /**
   * Holds `name` for a request that waits to be admitted (a scheduler's prefetch; a soft pin). Resident or not:
   * once resident, a reserved adapter is not evicted to make room for another reserved adapter (that load waits,
   * first come first served, for an unpin or an unreserve), and a plain load evicts it only when evicting every
   * unreserved, unpinned adapter would not make room. So loads ahead of admission cannot evict each other.
   * Counted; each reserve needs one unreserve (pin it first when the request is admitted).
   */
  reserve(name: string): void {
    this.checkLive();
    const entry = this.entries.get(name);
    if (!entry) throw new UnknownAdapterError(name);
    entry.reservations++;
  }

  /** Drops one reservation; does nothing for an adapter that holds none or was unregistered meanwhile. */
  unreserve(name: string): void {
    if (this.disposed) return;
    const entry = this.entries.get(name);
    if (!entry || entry.reservations === 0) return;
    entry.reservations--;
    if (entry.reservations === 0) this.scheduleDrain();
  }

  stats(): AdapterCacheStats {
    let pinnedCount = 0;
    let reservedCount = 0;
    let loadsInFlight = 0;
    for (const entry of this.entries.values()) {
      if (entry.pins > 0) pinnedCount++;
      else if (entry.reservations > 0) reservedCount++;
      if (entry.load) loadsInFlight++;
    }
    return {
      registered: this.entries.size,
      ...this.counters,
      residentBytes: this.device.bytes,
      residentCount: this.device.size,
      deviceBudgetBytes: this.deviceBudget,
      hostBytes: this.host.bytes,
      hostCount: this.host.size,
      hostBudgetBytes: this.hostBudget,
      pinnedCount,
      reservedCount,
      loadsInFlight,
      queuedLoads: this.queue.length,
    };
  }

  on<E extends AdapterCacheEvent>(event: E, listener: AdapterCacheListener<E>): this {
    this.listenersOf(event).add(listener);
    return this;
  }

  off<E extends AdapterCacheEvent>(event: E, listener: AdapterCacheListener<E>): this {
    this.listenersOf(event).delete(listener);
    return this;
  }

  /**
   * Frees every device value (pinned ones too: this is teardown), drops the host cache and the registry, and
   * rejects loads in flight with {@link AdapterCacheDisposedError}. Later calls throw (or reject with) that error.
   */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const entry of this.entries.values()) {
      if (entry.load) this.fail(entry.load, new AdapterCacheDisposedError('the adapter cache was disposed while this adapter was loading'));
    }
    for (const name of this.device.keys()) this.evictDevice(name, 'dispose');
    for (const name of this.host.keys()) this.evictHost(name, 'dispose');
    this.entries.clear();
  }

  // ─── loading ───────────────────────────────────────────────────────────────────────────────────────────────

  private startLoad(entry: Entry<H, D>, pins: number): Load<H, D> {
    let resolveLoad!: (d: D) => void;
    let rejectLoad!: (e: Error) => void;
    const promise = new Promise<D>((res, rej) => {
      resolveLoad = res;
      rejectLoad = rej;
    });
    const hostCached = this.host.has(entry.name);
    const load: Load<H, D> = {
      entry,
      from: hostCached ? 'host' : 'disk',
      startMs: this.clock.now(),
      promise,
      resolve: resolveLoad,
      reject: rejectLoad,
      state: 'reading',
      pinRequests: pins,
      host: undefined,
      readMs: 0,
      need: 0,
      queuedAtMs: null,
      read: undefined,
    };
    entry.load = load;
    this.emit('load-start', { name: entry.name, from: load.from });
    if (load.state !== 'reading') return load; // a listener unregistered it, or disposed the cache
    if (hostCached) {
      this.host.touch(entry.name);
      load.host = { value: this.host.peek(entry.name) as H, bytes: this.host.bytesOf(entry.name) };
      this.place(load, 'caller');
    } else {
      load.read = this.read(load);
    }
    return load;
  }

  private async read(load: Load<H, D>): Promise<void> {
    const { name, dir } = load.entry;
    let value: H;
    let bytes: number;
    try {
      value = await this.source.readHost(name, dir);
      bytes = this.measured('hostBytes', name, this.source.hostBytes(value));
    } catch (err) {
      this.fail(load, asError(err, name));
      return;
    }
    if (load.state !== 'reading') return; // unregistered or disposed meanwhile: drop what was read
    load.host = { value, bytes };
    load.readMs = this.clock.now() - load.startMs;
    this.place(load, 'background');
  }

  /**
   * After the host value is known: reject it if it can never fit, else upload it now or queue it for room.
   * `by` says who is running: the caller of ensureResident (synchronously) or the cache's background work.
   */
  private place(load: Load<H, D>, by: 'caller' | 'background'): void {
    const { name } = load.entry;
    const host = load.host!;
    try {
      load.need = load.entry.deviceBytesSeen ?? this.measured('estimateDeviceBytes', name, this.source.estimateDeviceBytes?.(host.value) ?? host.bytes);
    } catch (err) {
      this.fail(load, asError(err, name));
      return;
    }
    if (load.need > this.deviceBudget) {
      this.fail(load, new AdapterTooLargeError(name, load.need, this.deviceBudget));
      return;
    }
    // First come first served: while others wait for room, a new load queues behind them.
    if (this.queue.length === 0 && this.tryUpload(load, by)) return;
    load.state = 'queued';
    load.queuedAtMs = this.clock.now();
    this.queue.push(load);
  }

  /** Makes room and uploads. False when even evicting every unpinned adapter would not make room (nothing done). */
  private tryUpload(load: Load<H, D>, by: 'caller' | 'background'): boolean {
    const { entry } = load;
    if (!this.makeRoom(load.need, by, entry.reservations > 0)) return false;
    if (isSettled(load)) return true; // an 'evicted' listener unregistered it, or disposed the cache
    const uploadStart = this.clock.now();
    let value: D;
    try {
      value = this.source.upload(load.host!.value);
    } catch (err) {
      this.fail(load, asError(err, entry.name));
      return true;
    }
    let bytes: number;
    try {
      bytes = this.measured('deviceBytes', entry.name, this.source.deviceBytes(value));
    } catch (err) {
      this.source.disposeDevice(value);
      this.fail(load, asError(err, entry.name));
      return true;
    }
    if (bytes !== load.need) {
      // The estimate was off: remember the real size, and make room for it or wait for room.
      entry.deviceBytesSeen = bytes;
      if (bytes > this.deviceBudget) {
        this.source.disposeDevice(value);
        this.fail(load, new AdapterTooLargeError(entry.name, bytes, this.deviceBudget));
        return true;
      }
      if (!this.makeRoom(bytes, by, entry.reservations > 0)) {
        this.source.disposeDevice(value);
        load.need = bytes;
        return false;
      }
      if (isSettled(load)) {
        this.source.disposeDevice(value);
        return true;
      }
    }
    this.commit(load, value, bytes, uploadStart);
    return true;
  }

  /**
   * Evicts unpinned adapters, least recently used first, until `need` more bytes fit the device budget: the
   * unreserved ones first, then (only for a load that is not itself reserved) the reserved ones. Evicts nothing
   * (and returns false) when even all of them would not be enough: the resident set stays useful.
   */
  private makeRoom(need: number, by: 'caller' | 'background', reserved: boolean): boolean {
    const free = this.deviceBudget - this.device.bytes;
    if (need <= free) return true;
    const victims: string[] = [];
    let freed = 0;
    const evictable = this.device.keys().filter((name) => this.entries.get(name)!.pins === 0 && !(by === 'background' && this.fresh.has(name)));
    const isReserved = (name: string) => this.entries.get(name)!.reservations > 0;
    const order = [...evictable.filter((name) => !isReserved(name)), ...(reserved ? [] : evictable.filter(isReserved))];
    for (const name of order) {
      victims.push(name);
      freed += this.device.bytesOf(name);
      if (need <= free + freed) break;
    }
    if (need > free + freed) return false;
    for (const name of victims) this.evictDevice(name, 'budget');
    return true;
  }

  private commit(load: Load<H, D>, value: D, bytes: number, uploadStart: number): void {
    const { entry } = load;
    const now = this.clock.now();
    const uploadMs = now - uploadStart;
    this.settle(load);
    this.device.set(entry.name, value, bytes);
    entry.deviceBytesSeen = bytes;
    entry.pins += load.pinRequests;
    entry.loads++;
    entry.lastUsedMs = now;
    const ms = load.readMs + uploadMs;
    const queuedMs = load.queuedAtMs === null ? 0 : uploadStart - load.queuedAtMs;
    entry.lastLoadMs = ms;
    const c = this.counters;
    c.loads++;
    c.bytesLoaded += bytes;
    c.totalLoadMs += ms;
    c.lastLoadMs = ms;
    c.totalQueuedMs += queuedMs;
    const host = load.host!;
    if (this.host.has(entry.name)) this.host.touch(entry.name);
    else this.insertHost(entry.name, host.value, host.bytes);
    this.emit('loaded', { name: entry.name, bytes, ms, queuedMs, from: load.from, tier: 'device' });
    load.resolve(value);
    this.protectFresh(entry.name);
  }

  /**
   * Protects a landed adapter from background evictions for two microtask hops. The first hop is queued after
   * the reactions of awaiters registered before the load resolved; a caller that awaits a load which landed
   * synchronously (from the host cache) registers its reaction after this returns, which the second hop waits
   * for. Then a drain runs, since the protection may have held a queued load back.
   */
  private protectFresh(name: string): void {
    this.fresh.set(name, (this.fresh.get(name) ?? 0) + 1);
    queueMicrotask(() =>
      queueMicrotask(() => {
        const left = (this.fresh.get(name) ?? 1) - 1;
        if (left > 0) this.fresh.set(name, left);
        else this.fresh.delete(name);
        this.scheduleDrain();
      }),
    );
  }

  /** Rejects a load that has not settled and leaves the cache as it was before the load (counters aside). */
  private fail(load: Load<H, D>, error: Error): void {
    if (load.state === 'settled') return;
    const wasQueued = load.state === 'queued';
    this.settle(load);
    this.counters.loadFailures++;
    this.emit('load-failed', { name: load.entry.name, error, ms: this.clock.now() - load.startMs, from: load.from });
    load.reject(error);
    // The head of the queue may have changed: the loads behind it get their turn.
    if (wasQueued) this.scheduleDrain();
  }

  private settle(load: Load<H, D>): void {
    load.state = 'settled';
    if (load.entry.load === load) load.entry.load = undefined;
    const i = this.queue.indexOf(load);
    if (i >= 0) this.queue.splice(i, 1);
  }

  /** Serves queued loads in order once something may have freed room; runs after the caller's code (a microtask). */
  private scheduleDrain(): void {
    if (this.drainScheduled || this.queue.length === 0) return;
    this.drainScheduled = true;
    queueMicrotask(() => {
      this.drainScheduled = false;
      while (!this.disposed && this.queue.length > 0) {
        if (!this.tryUpload(this.queue[0]!, 'background')) break;
      }
    });
  }

  private insertHost(name: string, value: H, bytes: number): void {
    if (bytes > this.hostBudget) return; // would not fit even alone: used for this upload, not kept
    for (const key of this.host.keys()) {
      if (this.host.bytes + bytes <= this.hostBudget) break;
      this.evictHost(key, 'budget');
    }
    this.host.set(name, value, bytes);
  }

  private evictDevice(name: string, reason: EvictionReason): void {
    const item = this.device.delete(name)!;
    this.source.disposeDevice(item.value);
    if (reason === 'budget') this.counters.deviceEvictions++;
    this.emit('evicted', { name, bytes: item.bytes, tier: 'device', reason });
  }

  private evictHost(name: string, reason: EvictionReason): void {
    const item = this.host.delete(name)!;
    if (reason === 'budget') this.counters.hostEvictions++;
    this.emit('evicted', { name, bytes: item.bytes, tier: 'host', reason });
  }

  // ─── helpers ───────────────────────────────────────────────────────────────────────────────────────────────

  private touch(entry: Entry<H, D>): void {
    this.device.touch(entry.name);
    entry.lastUsedMs = this.clock.now();
  }

  private measured(what: string, name: string, bytes: unknown): number {
    if (typeof bytes !== 'number' || !Number.isSafeInteger(bytes) || bytes < 0) {
      throw new AdapterLoadError(name, `adapter ${JSON.stringify(name)}: source.${what} returned ${String(bytes)}, not a byte count (a safe integer >= 0)`);
    }
    return bytes;
  }

  private checkLive(): void {
    if (this.disposed) throw new AdapterCacheDisposedError();
  }

  private listenersOf<E extends AdapterCacheEvent>(event: E): Set<AdapterCacheListener<E>> {
    const set = this.listeners[event] as Set<AdapterCacheListener<E>> | undefined;
    if (!set) throw new InvalidArgumentError(`AdapterCache: unknown event ${JSON.stringify(event)} (one of ${Object.keys(this.listeners).join(', ')})`);
    return set;
  }

  /**
   * Listeners run synchronously, after the cache's state is consistent. One that throws must not leave a load
   * half-done, so its error is rethrown from a microtask (an uncaught exception, as an EventEmitter's would be).
   */
  private emit<E extends AdapterCacheEvent>(event: E, payload: AdapterCacheEvents[E]): void {
    for (const listener of [...this.listenersOf(event)]) {
      try {
        listener(payload);
      } catch (err) {
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }
}
