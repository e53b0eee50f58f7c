/**
 * KvPageAllocator: reserve / commit / release, all-or-nothing exhaustion, lowest-free-first reuse, and no leaks
 * whatever order sequences leave in (a scheduler's cancel included).
 */
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, KV_PAGE_SIZE, KvCacheExhaustedError, KvPageAllocator, mulberry32, pagesForLength, serializeError } from '../src/index.js';

describe('KvPageAllocator', () => {
  it('reserve takes ceil(length / 16) pages, lowest ids first; commit moves the written length; release frees all', () => {
    const a = new KvPageAllocator(8);
    expect(a.pageSize).toBe(KV_PAGE_SIZE);
    a.addSequence('x');
    expect(a.reserve('x', 17)).toBe(2);
    expect(a.pages('x')).toEqual([0, 1]);
    expect(a.reserve('x', 32)).toBe(0);
    expect(a.length('x')).toBe(0);
    a.commit('x', 17);
    expect(a.length('x')).toBe(17);
    expect(a.capacity('x')).toBe(32);
    expect(() => a.commit('x', 33)).toThrow(InvalidArgumentError);
    a.addSequence(7);
    expect(a.acquireOne(7)).toBe(2);
    expect(a.stats()).toEqual({ numPages: 8, freePages: 5, usedPages: 3, sequences: 2 });
    a.release('x');
    expect(a.freePages).toBe(7);
    // Freed pages come back lowest first.
    a.addSequence('y');
    a.reserve('y', 40);
    expect(a.pages('y')).toEqual([0, 1, 3]);
    expect(() => a.release('x')).toThrow(/not in the cache/);
    expect(pagesForLength(33)).toBe(3);
    expect(a.pagesNeeded([['y', 48], ['new', 1]])).toBe(1);
    expect(a.canFit([['new', 16 * 5]])).toBe(false);
  });

  it('exhaustion is all or nothing, and a typed capacity-kind error', () => {
    const a = new KvPageAllocator(3);
    a.addSequence('a');
    a.reserve('a', 20);
    a.addSequence('b');
    let caught: unknown;
    try {
      a.reserve('b', 40);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(KvCacheExhaustedError);
    expect((caught as KvCacheExhaustedError).code).toBe('TESSERA_KV_EXHAUSTED');
    expect(serializeError(caught).kind).toBe((caught as KvCacheExhaustedError).kind);
    expect(a.pages('b')).toEqual([]);
    expect(a.freePages).toBe(1);
    a.shrinkPages('a', 1);
    expect(a.freePages).toBe(2);
    a.commit('a', 16);
    expect(() => a.shrinkPages('a', 0)).toThrow(/committed/);
  });

  it('random admissions, growth, cancels and finishes leak nothing and never share a page', () => {
    const random = mulberry32(5);
    const a = new KvPageAllocator(64);
    const live = new Map<string, number>();
    let next = 0;
    for (let step = 0; step < 2000; step++) {
      const r = random();
      if (r < 0.3) {
        const id = `s${next++}`;
        const length = 1 + Math.floor(random() * 60);
        if (a.canFit([[id, length]])) {
          a.addSequence(id);
          a.reserve(id, length);
          a.commit(id, length);
          live.set(id, length);
        }
      } else if (r < 0.8 && live.size > 0) {
        const id = [...live.keys()][Math.floor(random() * live.size)]!;
        const length = live.get(id)! + 1;
        try {
          a.reserve(id, length);
          a.commit(id, length);
          live.set(id, length);
        } catch (err) {
          expect(err).toBeInstanceOf(KvCacheExhaustedError);
        }
      } else if (live.size > 0) {
        // A cancel or a finish: all the sequence's pages go back.
        const id = [...live.keys()][Math.floor(random() * live.size)]!;
        a.release(id);
        live.delete(id);
      }
      const owned = [...live.keys()].flatMap((id) => a.pages(id));
      expect(new Set(owned).size).toBe(owned.length);
      expect(owned.length).toBe(a.usedPages);
      for (const [id, length] of live) expect(a.pages(id).length).toBe(pagesForLength(length));
    }
    for (const id of live.keys()) a.release(id);
    expect(a.usedPages).toBe(0);
    expect(a.sequenceIds()).toEqual([]);
  });
});
