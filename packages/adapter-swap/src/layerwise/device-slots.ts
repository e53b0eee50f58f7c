/**
 * The optional device LRU of HMI's layer-wise staging (hmi.md §1.7: the paper keeps no adapter on the device between
 * batches; a device cache of recently used tenants lets a hit skip its copies). A pure policy over slot numbers: it
 * says which device slot holds a tenant, pins slots while a batch reads them, and picks the least recently used
 * unpinned slot to overwrite. The runner owns the buffers and does the copies.
 *
 * A tenant is resident only with the same `identity` it was inserted with (the runner passes its adapter arrays):
 * an updated tenant, or one re-read from disk into new arrays, is a miss, so a slot never serves stale weights.
 */
import { InvalidArgumentError } from '@tessera/core';

interface Entry {
  key: string;
  identity: unknown;
  pins: number;
}

export interface DeviceSlotStats {
  hits: number;
  misses: number;
  inserts: number;
  evictions: number;
  /** Inserts refused because every slot was pinned. */
  full: number;
}

export class DeviceSlotCache {
  readonly capacity: number;
  private readonly slots: (Entry | null)[];
  private readonly bySlotOrder = new Map<number, true>(); // LRU order of occupied slots, least recent first
  private readonly byKey = new Map<string, number>();
  private readonly counts: DeviceSlotStats = { hits: 0, misses: 0, inserts: 0, evictions: 0, full: 0 };

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 0) throw new InvalidArgumentError(`capacity must be a non-negative integer, got ${capacity}`);
    this.capacity = capacity;
    this.slots = new Array<Entry | null>(capacity).fill(null);
  }

  get size(): number {
    return this.byKey.size;
  }

  stats(): DeviceSlotStats {
    return { ...this.counts };
  }

  /** The slot holding `key` with this identity, pinned and made most recent; null (a miss) otherwise. */
  lookup(key: string, identity: unknown): number | null {
    const slot = this.byKey.get(key);
    const entry = slot === undefined ? null : this.slots[slot]!;
    if (slot === undefined || !entry || entry.identity !== identity) {
      this.counts.misses++;
      return null;
    }
    entry.pins++;
    this.touch(slot);
    this.counts.hits++;
    return slot;
  }

  unpin(slot: number): void {
    const entry = this.slots[slot];
    if (!entry || entry.pins === 0) throw new InvalidArgumentError(`device slot ${slot} is not pinned`);
    entry.pins--;
  }

  /**
   * A slot to write `key` into, as the most recent entry (unpinned): its old slot if it had one (a stale identity is
   * replaced), else a free slot, else the least recently used unpinned one (evicted). Null when none can be had.
   */
  insert(key: string, identity: unknown): number | null {
    const own = this.byKey.get(key);
    if (own !== undefined) {
      const entry = this.slots[own]!;
      if (entry.pins > 0) {
        this.counts.full++;
        return null; // a batch still reads the old weights there
      }
      entry.identity = identity;
      this.touch(own);
      this.counts.inserts++;
      return own;
    }
    let slot = this.slots.indexOf(null);
    if (slot < 0) {
      slot = -1;
      for (const s of this.bySlotOrder.keys()) {
        if (this.slots[s]!.pins === 0) {
          slot = s;
          break;
        }
      }
      if (slot < 0) {
        this.counts.full++;
        return null;
      }
      this.byKey.delete(this.slots[slot]!.key);
      this.counts.evictions++;
    }
    this.slots[slot] = { key, identity, pins: 0 };
    this.byKey.set(key, slot);
    this.touch(slot);
    this.counts.inserts++;
    return slot;
  }

  /** Forgets `key` (a deleted tenant); a pinned slot stays until its batch is done, then is free to reuse. */
  delete(key: string): void {
    const slot = this.byKey.get(key);
    if (slot === undefined) return;
    this.byKey.delete(key);
    const entry = this.slots[slot]!;
    if (entry.pins === 0) {
      this.slots[slot] = null;
      this.bySlotOrder.delete(slot);
    } else {
      entry.key = '';
      entry.identity = undefined;
    }
  }

  private touch(slot: number): void {
    this.bySlotOrder.delete(slot);
    this.bySlotOrder.set(slot, true);
  }
}
