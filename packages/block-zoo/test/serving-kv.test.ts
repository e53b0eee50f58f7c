import { type Clock, mulberry32 } from '@tessera/core';
import { describe, expect, it } from 'vitest';

import { KvCoordinator, type MigrationPlan, ServingInvalidError, ServingNotFoundError, ServingStateError } from '../src/planner/index.js';

class ManualClock implements Clock {
  t = 0;
  now(): number {
    return this.t;
  }
}

/** Every page of every sequence in the plan is recomputed or copied, exactly once; recompute is a prefix, copy the rest. */
function checkCoverage(plan: MigrationPlan, pageSize = 16): void {
  let global = 0;
  for (const s of plan.sequences) {
    const recomputed = Math.ceil(s.recomputeTokens / pageSize);
    const done = new Array<number>(s.pages).fill(0);
    for (let p = 0; p < recomputed; p++) done[p]! += 1;
    for (const p of s.copyPages) done[p]! += 1;
    expect(done.every((n) => n === 1)).toBe(true);
    // Chunks tile [0, recomputeTokens) front to back.
    let at = 0;
    for (const [a, b] of s.recomputeChunks) {
      expect(a).toBe(at);
      expect(b).toBeGreaterThan(a);
      at = b;
    }
    expect(at).toBe(s.recomputeTokens);
    // Copy pages go back to front.
    expect([...s.copyPages]).toEqual([...s.copyPages].sort((x, y) => y - x));
    // The global split: sequences before it fully recomputed, after it fully copied.
    if (global + s.pages <= plan.split) expect(s.copyPages).toHaveLength(0);
    if (global >= plan.split) expect(s.recomputeTokens).toBe(0);
    global += s.pages;
  }
  expect(global).toBe(plan.totalPages);
}

describe('KvCoordinator: owner map and reference counts (design note §4.4)', () => {
  it('appends into pages, shares full prefix pages by refcount, and frees exactly what loses its last reference', () => {
    const kv = new KvCoordinator({ clock: new ManualClock() });
    kv.append('p', 'b', 'i0', 40); // 3 pages
    expect(kv.owner('p', 'b')).toBe('i0');
    expect(kv.usedPages('i0')).toBe(3);
    kv.sharePrefix('p', 'c', 'b', 'i0', 40); // 2 full pages shared, 8 tokens of its own
    expect(kv.usedPages('i0')).toBe(4);
    expect(kv.sharedPages('c', 'b', 'i0')).toBe(2);
    expect(kv.sharedPages('p', 'b', 'i0')).toBe(2);
    kv.audit();
    expect(kv.release('p')).toEqual([{ request: 'p', block: 'b', instance: 'i0', tokens: 40, freedPages: 1 }]);
    expect(kv.sharedPages('c', 'b', 'i0')).toBe(0);
    kv.audit();
    kv.release('c');
    expect(kv.usedPages('i0')).toBe(0);
    kv.audit();
  });

  it('refuses to append where the KV is not (it must move first) and to truncate into a shared page', () => {
    const kv = new KvCoordinator({ clock: new ManualClock() });
    kv.append('r', 'b', 'i0', 5);
    expect(() => kv.append('r', 'b', 'i1', 1)).toThrow(ServingStateError);
    kv.materialize('r', 'b', 'i1', 5);
    expect(kv.owner('r', 'b')).toBe('i1');
    kv.append('r', 'b', 'i1', 1);
    expect(kv.tokensAt('r', 'b', 'i1')).toBe(6);
    kv.append('p', 'b', 'i0', 32);
    kv.sharePrefix('p', 'c', 'b', 'i0', 32);
    expect(() => kv.truncate('c', 'b', 'i0', 20)).toThrow(ServingInvalidError);
    expect(() => kv.truncate('nobody', 'b', 'i0', 0)).toThrow(ServingNotFoundError);
  });

  it('the redundancy scan keeps the owner\'s copy, frees the others, and runs every period', () => {
    const clock = new ManualClock();
    const kv = new KvCoordinator({ clock, scanPeriodMs: 60_000 });
    kv.append('r', 'b', 'i0', 20);
    kv.materialize('r', 'b', 'i1', 20); // recomputed at i1, which now serves it
    expect(kv.copies('r', 'b').map((c) => c.instance)).toEqual(['i1', 'i0']);
    expect(kv.scanDue()).toBe(false);
    clock.t = 60_000;
    expect(kv.scanDue()).toBe(true);
    expect(kv.redundancyScan()).toEqual([{ request: 'r', block: 'b', instance: 'i0', tokens: 20, freedPages: 2 }]);
    expect(kv.scanDue()).toBe(false);
    expect(kv.copies('r', 'b').map((c) => c.instance)).toEqual(['i1']);
    kv.audit();
  });

  it('orders migration by shared pages ascending, then resume time (behaviour 19)', () => {
    const kv = new KvCoordinator({ clock: new ManualClock() });
    kv.append('base', 'b', 'i0', 64);
    kv.sharePrefix('base', 'shared2', 'b', 'i0', 40); // 2 shared pages
    kv.sharePrefix('base', 'shared1', 'b', 'i0', 20); // 1 shared page
    kv.append('privA', 'b', 'i0', 10);
    kv.append('privB', 'b', 'i0', 10);
    const order = kv.orderForMigration(
      [
        { request: 'shared2', block: 'b', resumeTime: 1 },
        { request: 'privA', block: 'b', resumeTime: 9 },
        { request: 'shared1', block: 'b', resumeTime: 0 },
        { request: 'privB', block: 'b', resumeTime: 3 },
      ],
      'i0',
    );
    expect(order.map((c) => c.request)).toEqual(['privB', 'privA', 'shared1', 'shared2']);
  });
});

describe('KV migration: overlapped front recompute and back copy (algorithm 5.7, behaviour 18)', () => {
  it('meets where the mocked rates say, with no page done twice and none missed', () => {
    const kv = new KvCoordinator({ clock: new ManualClock() });
    kv.append('s1', 'b', 'src', 64); // 4 pages
    kv.append('s2', 'b', 'src', 100); // 7 pages
    // Copy 3× as fast as recompute, no overhead: 11 pages split ≈ 1 : 3 → the recompute front takes pages 0..2.
    const plan = kv.planMigration([{ request: 's1', block: 'b' }, { request: 's2', block: 'b' }], 'src', 'dst', { copyPagesPerMs: 3, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 4 });
    expect(plan.totalPages).toBe(11);
    expect(plan.split).toBe(3);
    expect(plan.sequences[0]).toMatchObject({ recomputeTokens: 48, copyPages: [3] });
    expect(plan.sequences[1]).toMatchObject({ recomputeTokens: 0, copyPages: [6, 5, 4, 3, 2, 1, 0] });
    expect(plan.estimatedMs).toBeCloseTo(3, 12);
    checkCoverage(plan);
    // Equal rates meet in the middle; a recompute-only or copy-only extreme still covers everything once.
    const even = kv.planMigration([{ request: 's2', block: 'b' }], 'src', 'dst', { copyPagesPerMs: 1, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 1 });
    expect(even.split).toBe(4);
    checkCoverage(even);
  });

  it('covers every position exactly once on random sequences, rates and chunk overheads; applying it moves ownership and leaks nothing', () => {
    const rand = mulberry32(5);
    for (let trial = 0; trial < 100; trial++) {
      const kv = new KvCoordinator({ clock: new ManualClock() });
      const n = Math.floor(rand() * 5);
      const seqs = Array.from({ length: n }, (_, i) => ({ request: `s${i}`, block: 'b' }));
      for (const s of seqs) kv.append(s.request, s.block, 'src', 1 + Math.floor(rand() * 90));
      if (n > 1 && rand() < 0.5) kv.sharePrefix('s0', 'child', 'b', 'src', kv.tokensAt('s0', 'b', 'src')!);
      const rates = { copyPagesPerMs: 0.1 + rand() * 5, recomputePagesPerMs: 0.1 + rand() * 5, chunkOverheadMs: rand() < 0.5 ? 0 : rand(), chunkPages: 1 + Math.floor(rand() * 4) };
      const plan = kv.planMigration(seqs, 'src', 'dst', rates);
      checkCoverage(plan);
      const before = kv.usedPages('src');
      const childPages = kv.tokensAt('child', 'b', 'src') === null ? 0 : Math.ceil(kv.tokensAt('child', 'b', 'src')! / 16);
      kv.applyMigration(plan);
      kv.audit();
      for (const s of plan.sequences) {
        expect(kv.owner(s.request, s.block)).toBe('dst');
        expect(kv.tokensAt(s.request, s.block, 'dst')).toBe(s.tokens);
        expect(kv.tokensAt(s.request, s.block, 'src')).toBeNull();
      }
      // Only the child's pages stay at src (shared pages it still references).
      expect(kv.usedPages('src')).toBe(childPages);
      expect(before).toBeGreaterThanOrEqual(childPages);
      kv.release('child');
      for (const s of seqs) kv.release(s.request);
      expect(kv.usedPages('src') + kv.usedPages('dst')).toBe(0);
      kv.audit();
    }
  });

  it('refuses a stale plan and a migration onto itself', () => {
    const kv = new KvCoordinator({ clock: new ManualClock() });
    kv.append('r', 'b', 'src', 30);
    const rates = { copyPagesPerMs: 1, recomputePagesPerMs: 1, chunkOverheadMs: 0, chunkPages: 1 };
    expect(() => kv.planMigration([{ request: 'r', block: 'b' }], 'src', 'src', rates)).toThrow(ServingInvalidError);
    const plan = kv.planMigration([{ request: 'r', block: 'b' }], 'src', 'dst', rates);
    kv.append('r', 'b', 'src', 1);
    expect(() => kv.applyMigration(plan)).toThrow(ServingStateError);
  });
});

describe('KvCoordinator under random operations (seeded)', () => {
  it('the owner map and refcounts never leak: audit holds after every operation and everything frees at the end', () => {
    const run = (seed: number) => {
      const rand = mulberry32(seed);
      const kv = new KvCoordinator({ clock: new ManualClock() });
      const instances = ['i0', 'i1', 'i2'];
      const blocks = ['b0', 'b1'];
      const live = new Set<string>();
      const log: string[] = [];
      for (let step = 0; step < 400; step++) {
        const r = `r${Math.floor(rand() * 12)}`;
        const b = blocks[Math.floor(rand() * blocks.length)]!;
        const i = instances[Math.floor(rand() * instances.length)]!;
        const op = rand();
        const owner = kv.owner(r, b);
        if (op < 0.4) {
          const at = owner ?? i;
          kv.append(r, b, at, 1 + Math.floor(rand() * 20));
          live.add(r);
          log.push(`append ${r} ${b} ${at}`);
        } else if (op < 0.55 && owner && owner !== i) {
          kv.materialize(r, b, i, kv.tokensAt(r, b, owner)!);
          log.push(`materialize ${r} ${b} ${i}`);
        } else if (op < 0.65 && owner && owner !== i) {
          const plan = kv.planMigration([{ request: r, block: b }], owner, i, { copyPagesPerMs: 1 + rand(), recomputePagesPerMs: 1 + rand(), chunkOverheadMs: 0, chunkPages: 2 });
          checkCoverage(plan);
          if (kv.tokensAt(r, b, i) === null) kv.applyMigration(plan);
          log.push(`migrate ${r} ${b} ${i}`);
        } else if (op < 0.75 && owner) {
          const child = `c${step}`;
          const t = kv.tokensAt(r, b, owner)!;
          kv.sharePrefix(r, child, b, owner, t);
          live.add(child);
          log.push(`share ${r} ${child}`);
        } else if (op < 0.85) {
          kv.release(r);
          live.delete(r);
          log.push(`release ${r}`);
        } else if (op < 0.9) {
          kv.redundancyScan();
          log.push('scan');
        }
        kv.audit();
        for (const x of live) for (const bb of blocks) {
          const copies = kv.copies(x, bb);
          if (copies.length > 0) expect(copies[0]!.instance).toBe(kv.owner(x, bb));
        }
      }
      for (const x of live) kv.release(x);
      kv.audit();
      expect(instances.reduce((n, i) => n + kv.usedPages(i), 0)).toBe(0);
      return log;
    };
    for (const seed of [1, 2, 3]) run(seed);
    expect(run(9)).toEqual(run(9));
  });
});
