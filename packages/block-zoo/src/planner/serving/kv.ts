/**
 * KV-cache coordination (design note §4.4, algorithm 5.7) as bookkeeping and plans: the owner map (which instance
 * serves a request's next step at a block, and so holds the KV that counts), per-instance pages with reference
 * counts (a page shared by several requests' prefixes is held once per instance), the redundancy scan that frees
 * copies at non-owners, the migration order (shared pages last, soonest resume first) and migration planned as
 * overlapped recompute from the front and copy from the back. Pages are identified per instance; nothing here
 * touches a tensor: the executor carries out the plans.
 */
import { type Clock, KV_PAGE_SIZE } from '@tessera/core';

import type { BlockId } from '../ids.js';
import type { MigrationRates } from './cost-model.js';
import { checkInteger, checkNonNegative, ServingInvalidError, ServingNotFoundError, ServingStateError } from './errors.js';

/** One request's KV at one instance for one block. */
interface Copy {
  tokens: number;
  /** Page ids at the instance, in position order. */
  pages: number[];
}

interface Entry {
  request: string;
  block: BlockId;
  owner: string;
  copies: Map<string, Copy>;
}

interface InstancePages {
  refs: Map<number, number>;
  free: number[];
  next: number;
}

export interface KvCopyView {
  instance: string;
  tokens: number;
  pages: readonly number[];
}

export interface KvFree {
  request: string;
  block: BlockId;
  instance: string;
  tokens: number;
  /** Pages whose last reference went (pages still shared stay). */
  freedPages: number;
}

/** One sequence in a migration plan. */
export interface MigrationSequence {
  request: string;
  block: BlockId;
  tokens: number;
  pages: number;
  /** Positions [0, recomputeTokens) are recomputed at the destination by chunked prefill, front to back. */
  recomputeTokens: number;
  /** The recompute chunks as token ranges [start, end), in order. */
  recomputeChunks: readonly (readonly [number, number])[];
  /** Page indices (within the sequence) copied from the source, in copy order (back to front). */
  copyPages: readonly number[];
}

export interface MigrationPlan {
  src: string;
  dst: string;
  sequences: readonly MigrationSequence[];
  /** Pages in the global order (s_1's pages, then s_2's, …). */
  totalPages: number;
  /** Global index of the first copied page: [0, split) recomputed, [split, total) copied. */
  split: number;
  /** When the two sides meet, from the mocked or profiled rates. */
  estimatedMs: number;
}

/** A candidate for migration, with when its KV is expected to be needed again. */
export interface MigrationCandidate {
  request: string;
  block: BlockId;
  resumeTime: number;
}

/** A request whose KV is at an instance while the request is elsewhere in its chain (proactive migration's input). */
export interface AwayRequest {
  request: string;
  block: BlockId;
  /** t_call: when the request left the instance. */
  leftAt: number;
  /** Expected time from leaving to coming back (the agent's countdown). */
  expectedReturnMs: number;
  /** Whether its next visit is likely to go to the migration's target instead (the caller's prediction). */
  redirect: boolean;
  /** The migration's estimated time (kvMigrationMs). */
  migrationMs: number;
}

export interface ProactiveCandidate extends MigrationCandidate {
  /** T_INT = now − t_call (InferCept's interception time). */
  interceptedMs: number;
}

export interface KvCoordinatorOptions {
  clock: Clock;
  pageSize?: number;
  /** Period of the redundant-KV scan (design note 5.0: 60 s). */
  scanPeriodMs?: number;
}

const key = (request: string, block: BlockId) => `${request}\u0000${block}`;

export class KvCoordinator {
  readonly pageSize: number;
  readonly scanPeriodMs: number;
  private readonly clock: Clock;
  private readonly entries = new Map<string, Entry>();
  private readonly instances = new Map<string, InstancePages>();
  private lastScan: number;

  constructor(options: KvCoordinatorOptions) {
    this.clock = options.clock;
    this.pageSize = checkInteger(options.pageSize ?? KV_PAGE_SIZE, 'pageSize', 1);
    this.scanPeriodMs = checkNonNegative(options.scanPeriodMs ?? 60_000, 'scanPeriodMs');
    this.lastScan = this.clock.now();
  }

  /** The instance that owns the request's KV for the block (serves its next step there), or null. */
  owner(request: string, block: BlockId): string | null {
    return this.entries.get(key(request, block))?.owner ?? null;
  }

  /** Every instance holding a copy, the owner first. */
  copies(request: string, block: BlockId): KvCopyView[] {
    const e = this.entries.get(key(request, block));
    if (!e) return [];
    const list = [...e.copies].map(([instance, c]) => ({ instance, tokens: c.tokens, pages: [...c.pages] }));
    return list.sort((a, b) => (a.instance === e.owner ? -1 : b.instance === e.owner ? 1 : a.instance < b.instance ? -1 : 1));
  }

  /** Tokens of the request's KV for the block at the instance, or null when it holds none. */
  tokensAt(request: string, block: BlockId, instance: string): number | null {
    return this.entries.get(key(request, block))?.copies.get(instance)?.tokens ?? null;
  }

  /**
   * Appends `tokens` new positions to the request's KV at the instance (a step ran there) and makes it the owner.
   * The instance must hold the request's KV already, unless the request has none anywhere for this block (its
   * first step): KV elsewhere must be migrated or recomputed first (`materialize`).
   */
  append(request: string, block: BlockId, instance: string, tokens: number): void {
    checkInteger(tokens, `tokens appended for ${request}`, 1);
    const k = key(request, block);
    let e = this.entries.get(k);
    if (!e) {
      e = { request, block, owner: instance, copies: new Map() };
      this.entries.set(k, e);
    }
    let c = e.copies.get(instance);
    if (!c) {
      if (e.copies.size > 0) throw new ServingStateError(`request ${request} has KV for block ${block} at ${[...e.copies.keys()].join(', ')} but not at ${instance}: migrate or recompute it first`);
      c = { tokens: 0, pages: [] };
      e.copies.set(instance, c);
    }
    this.grow(instance, c, c.tokens + tokens);
    e.owner = instance;
  }

  /** A full copy of the request's KV (`tokens` positions) now exists at the instance (recomputed or migrated), which becomes the owner. */
  materialize(request: string, block: BlockId, instance: string, tokens: number): void {
    checkInteger(tokens, `tokens materialised for ${request}`, 1);
    const k = key(request, block);
    let e = this.entries.get(k);
    if (!e) {
      e = { request, block, owner: instance, copies: new Map() };
      this.entries.set(k, e);
    }
    const prior = e.copies.get(instance);
    if (prior) this.shrink(instance, prior, 0);
    const c: Copy = { tokens: 0, pages: [] };
    e.copies.set(instance, c);
    this.grow(instance, c, tokens);
    e.owner = instance;
  }

  /**
   * The child request starts with the parent's first `tokens` positions at the instance (a shared prompt prefix):
   * the parent's full pages among them are shared (reference counted), the rest is the child's own.
   */
  sharePrefix(parent: string, child: string, block: BlockId, instance: string, tokens: number): void {
    checkInteger(tokens, `shared tokens`, 1);
    const p = this.entries.get(key(parent, block))?.copies.get(instance);
    if (!p || p.tokens < tokens) throw new ServingNotFoundError('kv', `${parent}@${instance}`, `request ${parent} has no ${tokens} tokens of KV for block ${block} at ${instance}`);
    const k = key(child, block);
    if (this.entries.has(k)) throw new ServingStateError(`request ${child} already has KV for block ${block}`);
    const full = Math.floor(tokens / this.pageSize);
    const pages = this.pagesOf(instance);
    const c: Copy = { tokens: full * this.pageSize, pages: p.pages.slice(0, full) };
    for (const id of c.pages) pages.refs.set(id, pages.refs.get(id)! + 1);
    this.entries.set(k, { request: child, block, owner: instance, copies: new Map([[instance, c]]) });
    if (tokens > c.tokens) this.grow(instance, c, tokens);
  }

  /** Drops the last positions of the request's KV at the instance down to `tokens` (a speculative append rolled back). */
  truncate(request: string, block: BlockId, instance: string, tokens: number): void {
    const e = this.entries.get(key(request, block));
    const c = e?.copies.get(instance);
    if (!e || !c) throw new ServingNotFoundError('kv', `${request}@${instance}`, `request ${request} has no KV for block ${block} at ${instance}`);
    if (!Number.isSafeInteger(tokens) || tokens < 0 || tokens > c.tokens) throw new ServingInvalidError(`cannot truncate ${request}'s KV at ${instance} to ${tokens} tokens (it holds ${c.tokens})`);
    const last = c.pages[Math.ceil(tokens / this.pageSize) - 1];
    if (tokens % this.pageSize !== 0 && last !== undefined && this.pagesOf(instance).refs.get(last)! > 1) {
      throw new ServingInvalidError(`cannot truncate ${request}'s KV at ${instance} to ${tokens} tokens: page ${last} is shared with another request and would be written again`);
    }
    this.shrink(instance, c, tokens);
    if (tokens === 0) this.dropCopy(e, instance);
  }

  /** Frees one copy (pages still referenced by other requests stay). */
  releaseCopy(request: string, block: BlockId, instance: string): KvFree {
    const e = this.entries.get(key(request, block));
    const c = e?.copies.get(instance);
    if (!e || !c) throw new ServingNotFoundError('kv', `${request}@${instance}`, `request ${request} has no KV for block ${block} at ${instance}`);
    const tokens = c.tokens;
    const freed = this.shrink(instance, c, 0);
    this.dropCopy(e, instance);
    return { request, block, instance, tokens, freedPages: freed };
  }

  /** Frees every copy of the request's KV, at every block (it finished). */
  release(request: string): KvFree[] {
    const out: KvFree[] = [];
    for (const e of [...this.entries.values()]) {
      if (e.request !== request) continue;
      for (const instance of [...e.copies.keys()].sort()) out.push(this.releaseCopy(request, e.block, instance));
    }
    return out;
  }

  /** ref(c_i): pages of the request's KV at the instance referenced by more than one request (design note A30). */
  sharedPages(request: string, block: BlockId, instance: string): number {
    const c = this.entries.get(key(request, block))?.copies.get(instance);
    if (!c) return 0;
    const refs = this.pagesOf(instance).refs;
    return c.pages.filter((id) => refs.get(id)! > 1).length;
  }

  /** Pages in use at the instance. */
  usedPages(instance: string): number {
    return this.instances.get(instance)?.refs.size ?? 0;
  }

  /** Whether the redundancy scan is due (every `scanPeriodMs`). */
  scanDue(): boolean {
    return this.clock.now() - this.lastScan >= this.scanPeriodMs;
  }

  /** Frees every copy at a non-owner (design note 5.7, kvRedundancyScan); restarts the period. */
  redundancyScan(): KvFree[] {
    this.lastScan = this.clock.now();
    const out: KvFree[] = [];
    for (const e of [...this.entries.values()]) {
      for (const instance of [...e.copies.keys()].sort()) if (instance !== e.owner) out.push(this.releaseCopy(e.request, e.block, instance));
    }
    return out;
  }

  /** Migration order: private pages first (ref ascending), then sooner resume first; then request id (design note §4.4). */
  orderForMigration(candidates: readonly MigrationCandidate[], instance: string): MigrationCandidate[] {
    const ref = new Map(candidates.map((c) => [key(c.request, c.block), this.sharedPages(c.request, c.block, instance)]));
    return [...candidates].sort((a, b) => ref.get(key(a.request, a.block))! - ref.get(key(b.request, b.block))! || a.resumeTime - b.resumeTime || (a.request < b.request ? -1 : a.request > b.request ? 1 : a.block < b.block ? -1 : 1));
  }

  /**
   * Proactive migration (design note 5.7): of the requests away from `instance` whose KV is there and whose next
   * visit is likely redirected, those whose migration would finish before they resume (now + T_mig ≤ resumeTime,
   * resumeTime = t_call + expected return), in migration order.
   */
  planProactive(instance: string, away: readonly AwayRequest[]): ProactiveCandidate[] {
    const now = this.clock.now();
    const picked = away.filter((a) => a.redirect && this.tokensAt(a.request, a.block, instance) !== null && now + checkNonNegative(a.migrationMs, `migrationMs of ${a.request}`) <= a.leftAt + a.expectedReturnMs);
    const byKey = new Map(picked.map((a) => [key(a.request, a.block), a]));
    return this.orderForMigration(picked.map((a) => ({ request: a.request, block: a.block, resumeTime: a.leftAt + a.expectedReturnMs })), instance).map((c) => ({ ...c, interceptedMs: now - byKey.get(key(c.request, c.block))!.leftAt }));
  }

  /**
   * Plans moving the sequences' KV from src to dst (algorithm 5.7): the pages in global order s_1…s_n, recomputed
   * from the front (chunked prefill, each chunk paying the launch overhead) while pages are copied from the back;
   * each page goes to the side that would finish it first, so the two meet once and no page is done twice.
   */
  planMigration(sequences: readonly { request: string; block: BlockId }[], src: string, dst: string, rates: MigrationRates): MigrationPlan {
    if (src === dst) throw new ServingInvalidError(`a migration needs two instances, got ${src} twice`);
    const seqs = sequences.map(({ request, block }) => {
      const c = this.entries.get(key(request, block))?.copies.get(src);
      if (!c) throw new ServingNotFoundError('kv', `${request}@${src}`, `request ${request} has no KV for block ${block} at ${src}`);
      return { request, block, tokens: c.tokens, pages: c.pages.length };
    });
    const seen = new Set<string>();
    for (const s of seqs) {
      if (seen.has(key(s.request, s.block))) throw new ServingInvalidError(`request ${s.request} appears twice in one migration`);
      seen.add(key(s.request, s.block));
    }
    const total = seqs.reduce((n, s) => n + s.pages, 0);
    const owners: number[] = [];
    seqs.forEach((s, i) => {
      for (let p = 0; p < s.pages; p++) owners.push(i);
    });
    const recomputePage = Number.isFinite(rates.recomputePagesPerMs) ? 1 / rates.recomputePagesPerMs : 0;
    const copyPage = Number.isFinite(rates.copyPagesPerMs) ? 1 / rates.copyPagesPerMs : 0;
    if (!(rates.recomputePagesPerMs > 0) || !(rates.copyPagesPerMs > 0)) throw new ServingInvalidError(`migration rates must be > 0, got recompute ${rates.recomputePagesPerMs}, copy ${rates.copyPagesPerMs}`);
    const chunk = Math.max(1, Math.floor(rates.chunkPages));
    let front = 0;
    let back = total - 1;
    let tf = 0;
    let tb = 0;
    let inChunk = 0;
    while (front <= back) {
      const newChunk = inChunk === 0 || (front > 0 && owners[front] !== owners[front - 1]);
      const nextFront = tf + recomputePage + (newChunk ? rates.chunkOverheadMs : 0);
      const nextBack = tb + copyPage;
      if (nextFront <= nextBack) {
        tf = nextFront;
        inChunk = newChunk ? 1 : inChunk + 1;
        if (inChunk >= chunk) inChunk = 0;
        front++;
      } else {
        tb = nextBack;
        back--;
      }
    }
    const split = front;
    let at = 0;
    const planned: MigrationSequence[] = seqs.map((s) => {
      const recomputedPages = Math.max(0, Math.min(s.pages, split - at));
      const recomputeTokens = Math.min(s.tokens, recomputedPages * this.pageSize);
      const chunks: [number, number][] = [];
      for (let t = 0; t < recomputeTokens; t += chunk * this.pageSize) chunks.push([t, Math.min(recomputeTokens, t + chunk * this.pageSize)]);
      const copyPages: number[] = [];
      for (let p = s.pages - 1; p >= recomputedPages; p--) copyPages.push(p);
      at += s.pages;
      return { ...s, recomputeTokens, recomputeChunks: chunks, copyPages };
    });
    // The copy side works back to front across sequences: s_n's pages first.
    return { src, dst, sequences: planned, totalPages: total, split, estimatedMs: Math.max(tf, tb) };
  }

  /** The plan was carried out: dst holds full copies and owns them; src's copies are freed (shared pages stay). */
  applyMigration(plan: MigrationPlan): KvFree[] {
    const out: KvFree[] = [];
    for (const s of plan.sequences) {
      const c = this.entries.get(key(s.request, s.block))?.copies.get(plan.src);
      if (!c || c.tokens !== s.tokens) throw new ServingStateError(`request ${s.request}'s KV at ${plan.src} changed since the migration was planned (${c?.tokens ?? 0} tokens, planned ${s.tokens})`);
    }
    for (const s of plan.sequences) {
      this.materialize(s.request, s.block, plan.dst, s.tokens);
      out.push(this.releaseCopy(s.request, s.block, plan.src));
    }
    return out;
  }

  /**
   * Internal consistency, for tests and debug endpoints: every page's reference count equals the copies that list
   * it, each copy has exactly the pages its tokens need, every owner holds a copy, and no page is both used and free.
   */
  audit(): void {
    const counted = new Map<string, Map<number, number>>();
    for (const e of this.entries.values()) {
      if (e.copies.size === 0) throw new ServingStateError(`KV entry ${e.request}/${e.block} has no copies`);
      if (!e.copies.has(e.owner)) throw new ServingStateError(`the owner ${e.owner} of ${e.request}/${e.block} holds no copy`);
      for (const [instance, c] of e.copies) {
        if (c.pages.length !== Math.ceil(c.tokens / this.pageSize)) throw new ServingStateError(`${e.request}/${e.block} at ${instance} holds ${c.pages.length} pages for ${c.tokens} tokens`);
        const m = counted.get(instance) ?? new Map<number, number>();
        counted.set(instance, m);
        for (const id of c.pages) m.set(id, (m.get(id) ?? 0) + 1);
      }
    }
    for (const [instance, pages] of this.instances) {
      const m = counted.get(instance) ?? new Map<number, number>();
      if (m.size !== pages.refs.size) throw new ServingStateError(`instance ${instance} counts ${pages.refs.size} used pages but copies list ${m.size}`);
      for (const [id, refs] of pages.refs) if (m.get(id) !== refs) throw new ServingStateError(`page ${id} at ${instance} has refcount ${refs} but ${m.get(id) ?? 0} copies list it`);
      for (const id of pages.free) if (pages.refs.has(id)) throw new ServingStateError(`page ${id} at ${instance} is both used and free`);
    }
  }

  private pagesOf(instance: string): InstancePages {
    let p = this.instances.get(instance);
    if (!p) {
      p = { refs: new Map(), free: [], next: 0 };
      this.instances.set(instance, p);
    }
    return p;
  }

  private grow(instance: string, c: Copy, tokens: number): void {
    const pages = this.pagesOf(instance);
    // A shared (full) last page is never written again: growth only ever adds new pages after it.
    while (c.pages.length * this.pageSize < tokens) {
      pages.free.sort((a, b) => a - b);
      const id = pages.free.length > 0 ? pages.free.shift()! : pages.next++;
      pages.refs.set(id, 1);
      c.pages.push(id);
    }
    c.tokens = tokens;
  }

  /** Drops pages beyond `tokens`; returns how many pages lost their last reference. */
  private shrink(instance: string, c: Copy, tokens: number): number {
    const pages = this.pagesOf(instance);
    const keep = Math.ceil(tokens / this.pageSize);
    let freed = 0;
    while (c.pages.length > keep) {
      const id = c.pages.pop()!;
      const refs = pages.refs.get(id)! - 1;
      if (refs === 0) {
        pages.refs.delete(id);
        pages.free.push(id);
        freed++;
      } else pages.refs.set(id, refs);
    }
    c.tokens = tokens;
    return freed;
  }

  private dropCopy(e: Entry, instance: string): void {
    e.copies.delete(instance);
    if (e.copies.size === 0) this.entries.delete(key(e.request, e.block));
    else if (e.owner === instance) e.owner = [...e.copies.keys()].sort()[0]!;
  }
}
