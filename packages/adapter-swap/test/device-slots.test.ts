/** The device LRU of HMI's layer-wise staging: slots, pins, LRU eviction, identity checks, deletes. */
import { describe, expect, it } from 'vitest';

import { DeviceSlotCache } from '../src/index.js';

describe('DeviceSlotCache', () => {
  it('fills free slots, hits pin and refresh, evicts the least recently used unpinned slot', () => {
    const c = new DeviceSlotCache(2);
    const a = {}, b = {}, d = {};
    expect(c.lookup('a', a)).toBeNull();
    expect(c.insert('a', a)).toBe(0);
    expect(c.insert('b', b)).toBe(1);
    expect(c.lookup('a', a)).toBe(0); // pinned, and now the most recent
    c.unpin(0);
    expect(c.insert('d', d)).toBe(1); // b was least recent
    expect(c.lookup('b', b)).toBeNull();
    expect(c.lookup('d', d)).toBe(1);
    expect(c.lookup('a', a)).toBe(0);
    // Both pinned: nothing can be evicted.
    expect(c.insert('e', {})).toBeNull();
    c.unpin(1);
    expect(c.insert('e', {})).toBe(1); // d unpinned (a still pinned, and more recent anyway)
    c.unpin(0);
    expect(c.stats()).toEqual({ hits: 3, misses: 2, inserts: 4, evictions: 2, full: 1 });
    expect(() => c.unpin(0)).toThrow(/not pinned/);
  });

  it('a new identity is a miss; re-inserting reuses the slot unless a batch still pins the old weights', () => {
    const c = new DeviceSlotCache(3);
    const v1 = {}, v2 = {};
    expect(c.insert('t', v1)).toBe(0);
    expect(c.lookup('t', v2)).toBeNull();
    expect(c.lookup('t', v1)).toBe(0);
    expect(c.insert('t', v2)).toBeNull(); // slot 0 is being read with v1
    c.unpin(0);
    expect(c.insert('t', v2)).toBe(0);
    expect(c.lookup('t', v2)).toBe(0);
    c.unpin(0);
    expect(c.size).toBe(1);
  });

  it('delete frees an unpinned slot at once and a pinned one after its batch', () => {
    const c = new DeviceSlotCache(1);
    const x = {};
    c.insert('x', x);
    c.delete('x');
    expect(c.size).toBe(0);
    expect(c.insert('y', {})).toBe(0);
    const y2 = {};
    c.insert('z', y2); // evicts y
    expect(c.lookup('z', y2)).toBe(0);
    c.delete('z');
    expect(c.lookup('z', y2)).toBeNull();
    expect(c.insert('w', {})).toBeNull(); // still pinned by the batch reading z
    c.unpin(0);
    expect(c.insert('w', {})).toBe(0);
  });

  it('capacity 0 caches nothing; a bad capacity is refused', () => {
    const c = new DeviceSlotCache(0);
    expect(c.insert('a', {})).toBeNull();
    expect(c.lookup('a', {})).toBeNull();
    expect(() => new DeviceSlotCache(-1)).toThrow(/non-negative integer/);
    expect(() => new DeviceSlotCache(1.5)).toThrow(/non-negative integer/);
  });
});
