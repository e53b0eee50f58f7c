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
    expect(a.stats()).toEqual({ numPages: 8, freePages: 5, usedPages: 3, sequences: 2, cachedPages: 0, evictablePages: 0 });
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

describe('KvPageAllocator prefix cache', () => {
  /** A sequence of `pages` full pages, committed, each published under `${prefix}${i}`. */
  const publishedSequence = (a: KvPageAllocator, id: string, prefix: string, pages: number) => {
    a.addSequence(id);
    a.reserve(id, pages * KV_PAGE_SIZE + 3);
    a.commit(id, pages * KV_PAGE_SIZE + 3);
    for (let i = 0; i < pages; i++) expect(a.publishPage(id, i, `${prefix}${i}`)).toBe(true);
  };

  it('a later sequence attaches the published pages of its longest matching prefix and starts after them', () => {
    const a = new KvPageAllocator(10);
    publishedSequence(a, 'x', 'k', 3);
    expect(a.pages('x')).toEqual([0, 1, 2, 3]);
    expect(a.matchPrefix(['k0', 'k1', 'zz', 'k2'])).toBe(2);
    a.addSequence('y');
    expect(a.attachPrefix('y', ['k0', 'k1', 'zz'])).toBe(2);
    expect(a.pages('y')).toEqual([0, 1]);
    expect(a.length('y')).toBe(2 * KV_PAGE_SIZE);
    // Shared pages count once as used; the new tokens go to a fresh page.
    expect(a.usedPages).toBe(4);
    a.reserve('y', 2 * KV_PAGE_SIZE + 5);
    expect(a.pages('y')).toEqual([0, 1, 4]);
    // The first holder leaves: the shared pages stay held; its own published page 2 becomes evictable; page 3 free.
    a.release('x');
    expect(a.stats()).toMatchObject({ usedPages: 3, cachedPages: 3, evictablePages: 1, freePages: 7 });
    a.release('y');
    expect(a.stats()).toMatchObject({ usedPages: 0, cachedPages: 3, evictablePages: 3, freePages: 10 });
    // A new sequence re-attaches all three cached pages.
    a.addSequence('z');
    expect(a.attachPrefix('z', ['k0', 'k1', 'k2', 'k3'])).toBe(3);
    expect(a.stats()).toMatchObject({ usedPages: 3, evictablePages: 0 });
  });

  it('evicts cached pages only when no never-cached page is left, least recently released first; keys are forgotten', () => {
    const a = new KvPageAllocator(4);
    publishedSequence(a, 'x', 'x', 1); // pages 0 (published), 1
    publishedSequence(a, 'y', 'y', 1); // pages 2 (published), 3
    a.release('y');
    a.release('x');
    expect(a.stats()).toMatchObject({ freePages: 4, evictablePages: 2, cachedPages: 2 });
    a.addSequence('n');
    // The two never-cached pages first (lowest first), then y's page (released first), then x's.
    a.reserve('n', 3 * KV_PAGE_SIZE);
    expect(a.pages('n')).toEqual([1, 3, 2]);
    expect(a.prefixEvictions).toBe(1);
    expect(a.matchPrefix(['y0'])).toBe(0);
    expect(a.matchPrefix(['x0'])).toBe(1);
    // All or nothing still: two more pages do not fit.
    expect(() => a.reserve('n', 5 * KV_PAGE_SIZE)).toThrow(KvCacheExhaustedError);
    expect(a.matchPrefix(['x0'])).toBe(1);
  });

  it('publishing: full committed pages only; a key or page published once; rewinding into a published page refused', () => {
    const a = new KvPageAllocator(6);
    a.addSequence('s');
    a.reserve('s', 40);
    a.commit('s', 20);
    expect(() => a.publishPage('s', 1, 'p1')).toThrow(/only full pages/);
    expect(a.publishPage('s', 0, 'p0')).toBe(true);
    expect(a.isPublished('s', 0)).toBe(true);
    expect(a.isPublished('s', 1)).toBe(false);
    expect(a.publishPage('s', 0, 'other')).toBe(false);
    a.addSequence('t');
    a.reserve('t', 16);
    a.commit('t', 16);
    expect(a.publishPage('t', 0, 'p0')).toBe(false);
    expect(() => a.commit('s', 10)).toThrow(/published in the prefix cache/);
    a.commit('s', 16); // rewinding within unpublished pages is fine
    expect(() => a.attachPrefix('s', ['p0'])).toThrow(/already holds/);
  });

  it('random publish / attach / release never loses or double-frees a page', () => {
    const random = mulberry32(7);
    const a = new KvPageAllocator(24);
    const live = new Map<string, string[]>();
    let next = 0;
    for (let step = 0; step < 3000; step++) {
      const r = random();
      if (r < 0.5) {
        const id = `s${next++}`;
        // Prefixes from a small family so that hits happen: keys 'f{family}/{i}' chain by construction.
        const family = Math.floor(random() * 3);
        const pages = 1 + Math.floor(random() * 4);
        const keys = Array.from({ length: pages }, (_, i) => `f${family}/${i}`);
        a.addSequence(id);
        const attached = a.attachPrefix(id, keys);
        try {
          a.reserve(id, pages * KV_PAGE_SIZE);
        } catch (err) {
          expect(err).toBeInstanceOf(KvCacheExhaustedError);
          a.release(id);
          continue;
        }
        a.commit(id, pages * KV_PAGE_SIZE);
        for (let i = attached; i < pages; i++) a.publishPage(id, i, keys[i]!);
        live.set(id, keys);
      } else if (live.size > 0) {
        const id = [...live.keys()][Math.floor(random() * live.size)]!;
        a.release(id);
        live.delete(id);
      }
      const held = new Set([...live.keys()].flatMap((id) => a.pages(id)));
      expect(held.size).toBe(a.usedPages);
      expect(a.usedPages + a.freePages).toBe(24);
    }
    for (const id of live.keys()) a.release(id);
    expect(a.usedPages).toBe(0);
  });
});
