import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  allocatorStats,
  attentionDecode,
  BudgetExceededError,
  getBackend,
  gatherRows,
  InvalidArgumentError,
  kvSlot,
  PAGE_SIZE,
  scatterRows,
  setBudget,
  Tensor,
} from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import { KvCacheExhaustedError } from '../src/errors.js';
import { PagedKvCache, type SequenceId } from '../src/kv/paged-kv-cache.js';

const backend = getBackend();
const TINY = { numLayers: 1, numKvHeads: 1, headDim: 1 } as const;

/** Everything observable about the cache's bookkeeping, for before/after comparisons. */
function snapshot(cache: PagedKvCache) {
  return {
    stats: cache.stats(),
    sequences: cache.sequenceIds().map((id) => ({ id, pages: [...cache.pages(id)], length: cache.length(id) })),
  };
}

describe('PagedKvCache geometry', () => {
  it('prices a page over all layers, K and V, and sizes a pool from a byte budget', () => {
    const shape = { numLayers: 3, numKvHeads: 2, headDim: 8 };
    expect(PagedKvCache.bytesPerPage(shape)).toBe(3 * 2 * PAGE_SIZE * 2 * 8 * 4);
    expect(PagedKvCache.pagesForBudget(10 * 6144 + 6143, shape)).toBe(10);
    const cache = PagedKvCache.create({ ...shape, budgetBytes: 5 * 6144 + 100 }, backend);
    try {
      expect(cache.stats()).toEqual({ numPages: 5, freePages: 5, usedPages: 0, sequences: 0, bytesPerPage: 6144, totalBytes: 5 * 6144 });
      expect(cache.layer(2).k.shape).toEqual([5, PAGE_SIZE, 2, 8]);
      expect(cache.layerRows(2).v.shape).toEqual([5 * PAGE_SIZE, 16]);
      expect(() => cache.layer(3)).toThrow(/layer 3 is outside \[0, 3\)/);
    } finally {
      cache.dispose();
    }
    expect(() => PagedKvCache.create({ ...shape, numPages: 0 }, backend)).toThrow(InvalidArgumentError);
    expect(() => PagedKvCache.bytesPerPage({ ...shape, headDim: 2.5 })).toThrow(/headDim must be a positive integer, got 2.5/);
  });
});

describe('PagedKvCache sequences', () => {
  it('hands out the lowest free page first, whatever the release order', () => {
    const cache = PagedKvCache.create({ ...TINY, numPages: 8 }, backend);
    try {
      for (const id of ['a', 'b', 'c']) cache.addSequence(id);
      cache.reserve('a', 33); // 0, 1, 2
      cache.reserve('b', 1); // 3
      cache.reserve('c', 17); // 4, 5
      expect([cache.pages('a'), cache.pages('b'), cache.pages('c')]).toEqual([[0, 1, 2], [3], [4, 5]]);
      cache.release('c');
      cache.release('a');
      cache.addSequence('d');
      expect([cache.acquireOne('d'), cache.acquireOne('d'), cache.acquireOne('d'), cache.acquireOne('d')]).toEqual([0, 1, 2, 4]);
      expect(cache.capacity('d')).toBe(4 * PAGE_SIZE);
    } finally {
      cache.dispose();
    }
  });

  it('maps positions to flat rows exactly as native kvSlot does, and builds a -1 padded block table', () => {
    const cache = PagedKvCache.create({ ...TINY, numPages: 6 }, backend);
    try {
      cache.addSequence(7);
      cache.addSequence('7'); // a different sequence: ids are compared as Map keys
      cache.reserve(7, 20);
      cache.reserve('7', 5);
      cache.acquireOne(7);
      cache.commit(7, 40);
      cache.commit('7', 5);
      const pages = cache.pages(7);
      expect(pages).toEqual([0, 1, 3]);
      const slots = cache.slotsFor(7, 10, 30);
      expect(Array.from(slots)).toEqual(Array.from({ length: 30 }, (_, i) => kvSlot(pages, 10 + i)));
      expect(() => cache.slotsFor('7', 10, 7)).toThrow(/reaches position 16, but the sequence has 1 pages \(16 positions\); reserve\("7", 17\) first/);
      expect(() => cache.commit('7', 17)).toThrow(InvalidArgumentError);

      const { table, maxPages, contextLens } = cache.blockTable(['7', 7]);
      expect(maxPages).toBe(3);
      expect(Array.from(table)).toEqual([2, -1, -1, 0, 1, 3]);
      expect(Array.from(contextLens)).toEqual([5, 40]);
      expect(cache.blockTable([7], 5).table).toEqual(Int32Array.from([0, 1, 3, -1, -1]));
      expect(() => cache.blockTable([7], 2)).toThrow(/maxPages 2 is less than the 3 pages of sequence 7/);
      expect(cache.blockTable([]).maxPages).toBe(1);
    } finally {
      cache.dispose();
    }
  });

  it('reports unknown and duplicate sequences clearly', () => {
    const cache = PagedKvCache.create({ ...TINY, numPages: 2 }, backend);
    try {
      expect(() => cache.release('ghost')).toThrow(/cannot release sequence "ghost": it is not in the cache/);
      expect(() => cache.reserve(3, 1)).toThrow(/sequence 3 is not in the cache \(addSequence first\)/);
      cache.addSequence('x');
      expect(() => cache.addSequence('x')).toThrow(/sequence "x" is already in the cache/);
      cache.release('x');
      expect(() => cache.release('x')).toThrow(/already released/);
    } finally {
      cache.dispose();
    }
  });

  it('exhaustion is a KvCacheExhaustedError with the page counts, and changes nothing', () => {
    const cache = PagedKvCache.create({ ...TINY, numPages: 3 }, backend);
    try {
      cache.addSequence('a');
      cache.addSequence('b');
      cache.reserve('a', 40);
      const before = snapshot(cache);
      expect(() => cache.reserve('b', 17)).toThrow(KvCacheExhaustedError);
      expect(() => cache.reserve('b', 17)).toThrow(/"b" needs 2 more pages of 16 tokens, but only 0 of 3 pages are free \(3 used by 2 sequences\)/);
      expect(() => cache.acquireOne('a')).toThrow(KvCacheExhaustedError);
      expect(snapshot(cache)).toEqual(before);
      expect(cache.canFit([['b', 0], ['a', 48]])).toBe(true);
      expect(cache.pagesNeeded([['b', 1], ['new', 33]])).toBe(4);
      expect(cache.canFit(new Map<SequenceId, number>([['b', 1]]))).toBe(false);
    } finally {
      cache.dispose();
    }
  });
});

type Op =
  | { kind: 'join'; id: number; length: number }
  | { kind: 'grow'; id: number; extra: number }
  | { kind: 'acquire'; id: number }
  | { kind: 'leave'; id: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('join' as const), id: fc.nat(5), length: fc.nat(70) }),
  fc.record({ kind: fc.constant('grow' as const), id: fc.nat(5), extra: fc.nat(40) }),
  fc.record({ kind: fc.constant('acquire' as const), id: fc.nat(5) }),
  fc.record({ kind: fc.constant('leave' as const), id: fc.nat(5) }),
);

describe('PagedKvCache invariants under random join / grow / leave (property)', () => {
  it('keeps free + used = total, single ownership, ceil(reserved / 16) pages, lowest-first reuse, atomic exhaustion', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 24 }), fc.array(opArb, { maxLength: 60 }), (numPages, ops) => {
        const cache = PagedKvCache.create({ ...TINY, numPages }, backend);
        // The model: pages each live sequence must have (ceil of the most it reserved, plus single acquisitions).
        const modelPages = new Map<number, number>();
        const expectLowestFree = (taken: readonly number[], ownedBefore: Set<number>) => {
          const lowest: number[] = [];
          for (let p = 0; p < numPages && lowest.length < taken.length; p++) if (!ownedBefore.has(p)) lowest.push(p);
          expect(taken).toEqual(lowest);
        };
        const owned = () => new Set(cache.sequenceIds().flatMap((id) => [...cache.pages(id)]));
        const checkInvariants = () => {
          const s = cache.stats();
          expect(s.freePages + s.usedPages).toBe(numPages);
          const all = cache.sequenceIds().flatMap((id) => [...cache.pages(id)]);
          expect(new Set(all).size, 'a page is owned twice').toBe(all.length);
          expect(all.length).toBe(s.usedPages);
          expect(all.every((p) => Number.isInteger(p) && p >= 0 && p < numPages)).toBe(true);
          expect(s.sequences).toBe(modelPages.size);
          for (const [id, pages] of modelPages) {
            expect(cache.pages(id).length).toBe(pages);
            expect(cache.length(id)).toBeLessThanOrEqual(cache.capacity(id));
          }
          const ids = cache.sequenceIds();
          const { table, maxPages, contextLens } = cache.blockTable(ids);
          ids.forEach((id, b) => {
            const row = Array.from(table.subarray(b * maxPages, (b + 1) * maxPages));
            const pages = cache.pages(id);
            expect(row).toEqual([...pages, ...Array<number>(maxPages - pages.length).fill(-1)]);
            expect(contextLens[b]).toBe(cache.length(id));
          });
        };
        const expectExhausted = (fn: () => void) => {
          const before = snapshot(cache);
          expect(fn).toThrow(KvCacheExhaustedError);
          expect(snapshot(cache)).toEqual(before);
        };
        try {
          for (const op of ops) {
            const before = owned();
            if (op.kind === 'join') {
              if (cache.hasSequence(op.id)) {
                expect(() => cache.addSequence(op.id)).toThrow(InvalidArgumentError);
                continue;
              }
              const need = Math.ceil(op.length / PAGE_SIZE);
              cache.addSequence(op.id);
              modelPages.set(op.id, 0);
              if (need > cache.freePages) {
                expectExhausted(() => cache.reserve(op.id, op.length));
              } else {
                cache.reserve(op.id, op.length);
                cache.commit(op.id, op.length);
                modelPages.set(op.id, need);
                expectLowestFree(cache.pages(op.id), before);
                expect(Array.from(cache.slotsFor(op.id, 0, op.length))).toEqual(
                  Array.from({ length: op.length }, (_, t) => kvSlot(cache.pages(op.id), t)),
                );
              }
            } else if (op.kind === 'grow') {
              if (!cache.hasSequence(op.id)) continue;
              const target = cache.length(op.id) + op.extra;
              const have = modelPages.get(op.id)!;
              const need = Math.max(have, Math.ceil(target / PAGE_SIZE));
              if (need - have > cache.freePages) {
                expectExhausted(() => cache.reserve(op.id, target));
              } else {
                cache.reserve(op.id, target);
                cache.commit(op.id, target);
                modelPages.set(op.id, need);
                expectLowestFree(cache.pages(op.id).slice(have), before);
              }
            } else if (op.kind === 'acquire') {
              if (!cache.hasSequence(op.id)) continue;
              if (cache.freePages === 0) {
                expectExhausted(() => cache.acquireOne(op.id));
              } else {
                const page = cache.acquireOne(op.id);
                modelPages.set(op.id, modelPages.get(op.id)! + 1);
                expectLowestFree([page], before);
              }
            } else {
              if (!cache.hasSequence(op.id)) {
                expect(() => cache.release(op.id)).toThrow(/not in the cache/);
                continue;
              }
              const theirs = [...cache.pages(op.id)];
              const freeBefore = cache.freePages;
              cache.release(op.id);
              modelPages.delete(op.id);
              expect(cache.freePages).toBe(freeBefore + theirs.length);
              const now = owned();
              expect(theirs.some((p) => now.has(p))).toBe(false);
            }
            checkInvariants();
          }
          // Everyone leaves: the whole pool is free again.
          for (const id of cache.sequenceIds()) cache.release(id);
          expect(cache.stats()).toMatchObject({ freePages: numPages, usedPages: 0, sequences: 0 });
        } finally {
          cache.dispose();
        }
      }),
      { seed: 20240611, numRuns: 200 },
    );
  });
});

/** softmax(scale q·k) v for one query over contiguous rows, in float64 (GQA: head h reads kv head h / group). */
function referenceDecode(q: Float32Array, k: Float32Array, v: Float32Array, len: number, nHeads: number, nKv: number, d: number): Float64Array {
  const out = new Float64Array(nHeads * d);
  const group = nHeads / nKv;
  const scale = 1 / Math.sqrt(d);
  for (let h = 0; h < nHeads; h++) {
    const kvh = Math.floor(h / group);
    const scores = new Float64Array(len);
    let max = -Infinity;
    for (let t = 0; t < len; t++) {
      let dot = 0;
      for (let i = 0; i < d; i++) dot += q[h * d + i]! * k[(t * nKv + kvh) * d + i]!;
      scores[t] = dot * scale;
      max = Math.max(max, scores[t]!);
    }
    let sum = 0;
    for (let t = 0; t < len; t++) sum += scores[t] = Math.exp(scores[t]! - max);
    for (let t = 0; t < len; t++) {
      for (let i = 0; i < d; i++) out[h * d + i]! += (scores[t]! / sum) * v[(t * nKv + kvh) * d + i]!;
    }
  }
  return out;
}

describe('PagedKvCache with the native kernels', () => {
  it('K/V scattered at slotsFor and read by attentionDecode through the block table match contiguous attention', () => {
    const [numLayers, nHeads, nKv, d] = [2, 4, 2, 8];
    const rowWidth = nKv * d;
    const cache = PagedKvCache.create({ numLayers, numKvHeads: nKv, headDim: d, numPages: 8 }, backend);
    const owned: Tensor[] = [];
    const keep = <T extends Tensor>(t: T): T => (owned.push(t), t);
    try {
      // Contiguous host copies of what each sequence has written, per layer: the oracle's input.
      const lens = { a: 0, b: 0 };
      const host: Record<'a' | 'b', { k: Float32Array; v: Float32Array }[]> = { a: [], b: [] };
      for (const id of ['a', 'b'] as const) {
        cache.addSequence(id);
        for (let l = 0; l < numLayers; l++) host[id].push({ k: new Float32Array(64 * rowWidth), v: new Float32Array(64 * rowWidth) });
      }
      let seed = 1;
      const write = (id: 'a' | 'b', count: number) => {
        const start = lens[id];
        cache.reserve(id, start + count);
        const slots = keep(Tensor.from(cache.slotsFor(id, start, count), [count], { backend }));
        for (let l = 0; l < numLayers; l++) {
          const kRows = randomFloats(count * rowWidth, seed++);
          const vRows = randomFloats(count * rowWidth, seed++);
          scatterRows(keep(Tensor.from(kRows, [count, rowWidth], { backend })), slots, cache.layerRows(l).k);
          scatterRows(keep(Tensor.from(vRows, [count, rowWidth], { backend })), slots, cache.layerRows(l).v);
          host[id][l]!.k.set(kRows, start * rowWidth);
          host[id][l]!.v.set(vRows, start * rowWidth);
        }
        cache.commit(id, start + count);
        lens[id] = start + count;
      };
      // Interleaved growth: prefills of 20 and 5 tokens, then chunks and single decode steps that cross pages.
      write('a', 20); // a: pages 0, 1
      write('b', 5); // b: page 2
      write('a', 13); // a: page 3 (33 tokens)
      write('b', 12); // b: 17 tokens, page 4
      for (let step = 0; step < 3; step++) {
        write('a', 1);
        write('b', 1);
      }
      expect(cache.pages('a')).toEqual([0, 1, 3]);
      expect(cache.pages('b')).toEqual([2, 4]);
      expect(lens).toEqual({ a: 36, b: 20 });

      const ids = ['b', 'a'] as const;
      const { table, maxPages, contextLens } = cache.blockTable([...ids]);
      const blockTable = keep(Tensor.from(table, [ids.length, maxPages], { backend }));
      const contextLensT = keep(Tensor.from(contextLens, [ids.length], { backend }));
      const qData = randomFloats(ids.length * nHeads * d, 999);
      const q = keep(Tensor.from(qData, [ids.length, nHeads, d], { backend }));
      for (let l = 0; l < numLayers; l++) {
        // The written rows read back in position order are exactly the contiguous copies.
        for (const id of ids) {
          const idx = keep(Tensor.from(cache.slotsFor(id, 0, lens[id]), [lens[id]], { backend }));
          const gathered = keep(gatherRows(cache.layerRows(l).k, idx)).toArray() as Float32Array;
          expect(gathered).toEqual(host[id][l]!.k.subarray(0, lens[id] * rowWidth));
        }
        const { k, v } = cache.layer(l);
        const got = keep(attentionDecode(q, k, v, blockTable, contextLensT)).toArray() as Float32Array;
        ids.forEach((id, b) => {
          const want = referenceDecode(qData.subarray(b * nHeads * d), host[id][l]!.k, host[id][l]!.v, lens[id], nHeads, nKv, d);
          const row = got.subarray(b * nHeads * d, (b + 1) * nHeads * d);
          for (let i = 0; i < want.length; i++) expect(Math.abs(row[i]! - want[i]!), `layer ${l} ${id}[${i}]`).toBeLessThanOrEqual(1e-5);
        });
      }
    } finally {
      for (const t of owned) t.dispose();
      cache.dispose();
    }
  });
});

describe('PagedKvCache and the device budget', () => {
  const savedBudget = allocatorStats(backend).budget;
  afterEach(() => {
    setBudget(savedBudget, backend);
  });

  it('charges the pool to the budget and frees all of it on dispose', () => {
    const shape = { numLayers: 4, numKvHeads: 2, headDim: 16 };
    const base = allocatorStats(backend);
    const cache = PagedKvCache.create({ ...shape, numPages: 10 }, backend);
    const held = allocatorStats(backend);
    expect(held.inUse - base.inUse).toBe(cache.totalBytes);
    expect(cache.totalBytes).toBe(10 * PagedKvCache.bytesPerPage(shape));
    expect(held.allocations - base.allocations).toBe(2 * shape.numLayers);
    cache.dispose();
    cache.dispose(); // idempotent
    expect(allocatorStats(backend).inUse).toBe(base.inUse);
    expect(allocatorStats(backend).allocations).toBe(base.allocations);
    expect(() => cache.layer(0)).toThrow(/disposed/);
  });

  it('a pool the device budget cannot hold fails cleanly: partial layers freed, the message prices a page', () => {
    const shape = { numLayers: 4, numKvHeads: 2, headDim: 16 };
    const perPage = PagedKvCache.bytesPerPage(shape); // 16384
    const perTensor = 10 * perPage / (2 * shape.numLayers);
    const base = allocatorStats(backend);
    // Room for 5 of the 8 tensors: the allocation fails part-way through layer 2.
    setBudget(base.inUse + 5 * perTensor, backend);
    let error: unknown;
    try {
      PagedKvCache.create({ ...shape, numPages: 10 }, backend);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(BudgetExceededError);
    const message = (error as Error).message;
    expect(message).toContain(`10 pages × ${perPage} bytes = ${10 * perPage} bytes do not fit`);
    expect(message).toContain(`${5 * perTensor} bytes available`);
    expect(message).toContain(`enough for ${Math.floor((5 * perTensor) / perPage)} pages`);
    const after = allocatorStats(backend);
    expect(after.inUse).toBe(base.inUse);
    expect(after.allocations).toBe(base.allocations);

    // What the message says fits does fit.
    const fits = PagedKvCache.create({ ...shape, budgetBytes: 5 * perTensor }, backend);
    expect(fits.numPages).toBe(Math.floor((5 * perTensor) / perPage));
    fits.dispose();
  });

  it('a byte budget smaller than one page is a clear error that allocates nothing', () => {
    const base = allocatorStats(backend);
    const shape = { numLayers: 2, numKvHeads: 1, headDim: 4 };
    expect(() => PagedKvCache.create({ ...shape, budgetBytes: 1000 }, backend)).toThrow(
      /a page costs 1024 bytes \(2 layers × K and V × 16 rows × 1 kv heads × 4 × 4\) but the budget of 1000 bytes does not hold one/,
    );
    expect(allocatorStats(backend).inUse).toBe(base.inUse);
  });
});

describe('PagedKvCache sequence export and import (KV migration)', () => {
  const [numLayers, firstLayer, nHeads, nKv, d] = [2, 3, 4, 2, 8];
  const rowWidth = nKv * d;
  const geometry = { numLayers, firstLayer, numKvHeads: nKv, headDim: d };
  /** Writes `count` random rows of every layer for the sequence (appending) and commits them. */
  const write = (cache: PagedKvCache, id: string, count: number, seed: number) => {
    const start = cache.hasSequence(id) ? cache.length(id) : (cache.addSequence(id), 0);
    cache.reserve(id, start + count);
    const slots = Tensor.from(cache.slotsFor(id, start, count), [count], { backend });
    try {
      for (let l = firstLayer; l < firstLayer + numLayers; l++) {
        for (const dst of [cache.layerRows(l).k, cache.layerRows(l).v]) {
          const rows = Tensor.from(randomFloats(count * rowWidth, seed++), [count, rowWidth], { backend });
          scatterRows(rows, slots, dst);
          rows.dispose();
        }
      }
    } finally {
      slots.dispose();
    }
    cache.commit(id, start + count);
  };
  const decode = (cache: PagedKvCache, id: string, layer: number, q: Tensor) => {
    const { table, maxPages, contextLens } = cache.blockTable([id]);
    const bt = Tensor.from(table, [1, maxPages], { backend });
    const cl = Tensor.from(contextLens, [1], { backend });
    try {
      const out = attentionDecode(q, cache.layer(layer).k, cache.layer(layer).v, bt, cl);
      const host = out.toArray() as Float32Array;
      out.dispose();
      return host;
    } finally {
      bt.dispose();
      cl.dispose();
    }
  };

  it('moves a sequence to another cache on other pages: the same K/V rows and bit-identical attention', () => {
    const src = PagedKvCache.create({ ...geometry, numPages: 8 }, backend);
    const dst = PagedKvCache.create({ ...geometry, numPages: 8 }, backend);
    const q = Tensor.from(randomFloats(nHeads * d, 77), [1, nHeads, d], { backend });
    try {
      // Interleaved growth so the source's pages are not contiguous; the destination already holds another sequence.
      write(src, 'a', 20, 1);
      write(src, 'b', 5, 100);
      write(src, 'a', 17, 200);
      write(dst, 'x', 30, 300);
      const snap = src.exportSequence('a');
      expect(snap.length).toBe(37);
      expect(snap.layers).toHaveLength(numLayers);
      expect(snap.layers[0]!.k).toHaveLength(37 * rowWidth);
      dst.importSequence('a', snap);
      expect(dst.length('a')).toBe(37);
      expect(dst.pages('a')).not.toEqual(src.pages('a'));
      expect(dst.exportSequence('a')).toEqual(snap);
      for (let l = firstLayer; l < firstLayer + numLayers; l++) expect(decode(dst, 'a', l, q)).toEqual(decode(src, 'a', l, q));
      // The destination's own sequence is untouched, and the moved one keeps growing there.
      write(dst, 'a', 3, 400);
      expect(dst.length('a')).toBe(40);
      // An empty sequence moves as an empty one.
      src.addSequence('e');
      const empty = src.exportSequence('e');
      expect(empty.length).toBe(0);
      dst.importSequence('e', empty);
      expect(dst.hasSequence('e')).toBe(true);
      expect(dst.length('e')).toBe(0);
    } finally {
      q.dispose();
      src.dispose();
      dst.dispose();
    }
  });

  it('moves the back of a sequence onto a front written here (a migration that recomputes the front)', () => {
    const src = PagedKvCache.create({ ...geometry, numPages: 8 }, backend);
    const dst = PagedKvCache.create({ ...geometry, numPages: 8 }, backend);
    const q = Tensor.from(randomFloats(nHeads * d, 78), [1, nHeads, d], { backend });
    try {
      write(src, 'a', 21, 1);
      write(src, 'a', 18, 500);
      // The destination writes the first 21 positions itself (the same rows: the recomputed front).
      write(dst, 'a', 21, 1);
      const back = src.exportSequence('a', 21);
      expect(back.start).toBe(21);
      expect(back.length).toBe(18);
      expect(back.layers[0]!.k).toHaveLength(18 * rowWidth);
      dst.importSequence('a', back);
      expect(dst.length('a')).toBe(39);
      expect(dst.exportSequence('a')).toEqual(src.exportSequence('a'));
      for (let l = firstLayer; l < firstLayer + numLayers; l++) expect(decode(dst, 'a', l, q)).toEqual(decode(src, 'a', l, q));
      // Nothing left to copy: an empty back at the end is a no-op.
      dst.importSequence('a', src.exportSequence('a', 39));
      expect(dst.length('a')).toBe(39);
      // The back must meet the front exactly.
      expect(() => dst.importSequence('a', back)).toThrow(/starts at 21, but the cache holds 39/);
      expect(() => dst.importSequence('z', back)).toThrow(/no such sequence/);
      expect(() => src.exportSequence('a', 40)).toThrow(/past the 39 committed/);
      // A back that does not fit changes nothing.
      const small = PagedKvCache.create({ ...geometry, numPages: 2 }, backend);
      try {
        write(small, 'a', 21, 1);
        const before = snapshot(small);
        expect(() => small.importSequence('a', back)).toThrow(KvCacheExhaustedError);
        expect(snapshot(small)).toEqual(before);
        expect(small.length('a')).toBe(21);
      } finally {
        small.dispose();
      }
    } finally {
      q.dispose();
      src.dispose();
      dst.dispose();
    }
  });

  it('refuses a snapshot of other layers or geometry, or an id already there; a full cache changes nothing', () => {
    const src = PagedKvCache.create({ ...geometry, numPages: 4 }, backend);
    const other = PagedKvCache.create({ ...geometry, headDim: d / 2, numPages: 4 }, backend);
    const shifted = PagedKvCache.create({ ...geometry, firstLayer: 0, numPages: 4 }, backend);
    const small = PagedKvCache.create({ ...geometry, numPages: 2 }, backend);
    try {
      write(src, 'a', 40, 1);
      const snap = src.exportSequence('a');
      expect(() => other.importSequence('a', snap)).toThrow(InvalidArgumentError);
      expect(() => shifted.importSequence('a', snap)).toThrow(/layers \[3, 5\)/);
      expect(() => src.importSequence('a', snap)).toThrow(/already in the cache/);
      const torn = { ...snap, layers: snap.layers.map((l) => ({ k: l.k.subarray(1), v: l.v })) };
      expect(() => small.importSequence('t', torn)).toThrow(InvalidArgumentError);
      const before = snapshot(small);
      expect(() => small.importSequence('a', snap)).toThrow(KvCacheExhaustedError);
      expect(snapshot(small)).toEqual(before);
      expect(small.hasSequence('a')).toBe(false);
    } finally {
      for (const c of [src, other, shifted, small]) c.dispose();
    }
  });
});
