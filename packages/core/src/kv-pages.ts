/**
 * KV page accounting without tensors: which pages of a paged KV pool belong to which sequence, and how many of
 * each sequence's positions hold written keys and values. A scheduler reserves pages for the step it plans
 * (admission, decode growth) and releases them on finish, cancellation or preemption; the engine's tensor pool
 * (`PagedKvCache`) sits on the same allocator and only adds the K/V tensors per layer. The simulator uses it
 * alone: page budgets, growth and frees are the real ones without any memory behind them.
 *
 * Lifecycle of a sequence: addSequence → reserve (pages for the tokens about to be written) → commit (the tokens
 * are now written) → … → release (all pages free). Free pages are handed out lowest page id first (a min-heap),
 * whatever order they were released in, so the same request history always yields the same page assignment.
 *
 * Prefix caching (vLLM's automatic prefix caching): a full page may be published under a key, a hash of its tokens,
 * of every token before it and of the adapter that computed it (the caller computes keys; see the batcher). Pages
 * are reference counted: a new sequence whose leading keys are published attaches those pages (attachPrefix)
 * instead of recomputing them. A published page that no sequence holds any more stays cached: it counts as free,
 * and is evicted (its key forgotten) only when a fresh page is needed and no never-cached page is left, least
 * recently released first. Shared pages are full and never written again: a sequence only writes past its
 * committed length, which starts after its attached prefix.
 */
import { type ErrorKind, InvalidArgumentError, registerErrors, TesseraError } from './errors.js';

/** Tokens per KV page: the native paged-attention kernels' block size (vLLM's and Punica's default, 16). */
export const KV_PAGE_SIZE = 16;

/** A sequence's key in the allocator. 1 and '1' are different sequences (Map semantics). */
export type KvSequenceId = string | number;

/** Pages needed to hold `length` tokens. */
export function pagesForLength(length: number, pageSize: number = KV_PAGE_SIZE): number {
  return Math.ceil(length / pageSize);
}

/** The paged KV cache has no free page left. Nothing was allocated; the caller may evict and retry. */
export class KvCacheExhaustedError extends TesseraError {
  static override readonly kind: ErrorKind = 'unavailable';
  constructor(message: string) {
    super('TESSERA_KV_EXHAUSTED', message);
  }
}

registerErrors(KvCacheExhaustedError);

export interface KvPageAllocatorOptions {
  /** Tokens per page (default {@link KV_PAGE_SIZE}). */
  pageSize?: number;
  /** Who reports errors ('PagedKvCache' when the engine's pool owns the allocator); default 'KvPageAllocator'. */
  owner?: string;
}

export interface KvPageStats {
  numPages: number;
  /** Pages a reserve may take: never-used or freed pages, plus cached pages no sequence holds (evictable). */
  freePages: number;
  /** Pages held by at least one sequence. */
  usedPages: number;
  sequences: number;
  /** Published pages (prefix cache), held or not. */
  cachedPages: number;
  /** Published pages no sequence holds: free, but kept for a later prefix hit until a fresh page is needed. */
  evictablePages: number;
}

interface SequenceState {
  readonly pages: number[];
  /** Tokens whose K/V have been written (committed). */
  length: number;
}

function describeId(id: KvSequenceId): string {
  return typeof id === 'string' ? JSON.stringify(id) : String(id);
}

/** Binary min-heap of free page ids: acquisition is always the lowest free id, in O(log numPages). */
class FreePageHeap {
  private readonly heap: Int32Array;
  private count = 0;

  constructor(capacity: number) {
    this.heap = new Int32Array(capacity);
  }

  get size(): number {
    return this.count;
  }

  push(page: number): void {
    const h = this.heap;
    let i = this.count++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]! <= page) break;
      h[i] = h[parent]!;
      i = parent;
    }
    h[i] = page;
  }

  pop(): number {
    const h = this.heap;
    const top = h[0]!;
    const last = h[--this.count]!;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= this.count) break;
      const right = left + 1;
      const child = right < this.count && h[right]! < h[left]! ? right : left;
      if (h[child]! >= last) break;
      h[i] = h[child]!;
      i = child;
    }
    if (this.count > 0) h[i] = last;
    return top;
  }
}

export class KvPageAllocator {
  readonly numPages: number;
  readonly pageSize: number;
  private readonly owner: string;
  private readonly free: FreePageHeap;
  /** Sequences holding each page (more than one only for an attached prefix page): guards double frees too. */
  private readonly refs: Int32Array;
  private readonly sequences = new Map<KvSequenceId, SequenceState>();
  /** Prefix cache: key → page, and each published page's key. */
  private readonly pageOfKey = new Map<string, number>();
  private readonly keyOfPage = new Map<number, string>();
  /** Published pages with no holder, least recently released first (Map keeps insertion order). */
  private readonly evictable = new Map<number, true>();
  private evictions = 0;

  constructor(numPages: number, options: KvPageAllocatorOptions = {}) {
    this.owner = options.owner ?? 'KvPageAllocator';
    const pageSize = options.pageSize ?? KV_PAGE_SIZE;
    if (!Number.isSafeInteger(numPages) || numPages <= 0) throw new InvalidArgumentError(`${this.owner}: numPages must be a positive integer, got ${numPages}`);
    if (!Number.isSafeInteger(pageSize) || pageSize <= 0) throw new InvalidArgumentError(`${this.owner}: pageSize must be a positive integer, got ${pageSize}`);
    this.numPages = numPages;
    this.pageSize = pageSize;
    this.free = new FreePageHeap(numPages);
    for (let p = 0; p < numPages; p++) this.free.push(p);
    this.refs = new Int32Array(numPages);
  }

  /** Pages a reserve may take (evictable cached pages included). */
  get freePages(): number {
    return this.free.size + this.evictable.size;
  }

  /** Pages held by at least one sequence. */
  get usedPages(): number {
    return this.numPages - this.freePages;
  }

  /** Cached pages evicted so far to make room for fresh ones. */
  get prefixEvictions(): number {
    return this.evictions;
  }

  /** Sequences holding an entry (with or without pages). */
  get sequenceCount(): number {
    return this.sequences.size;
  }

  /** Pages needed to hold `length` tokens at this allocator's page size. */
  pagesForLength(length: number): number {
    return Math.ceil(length / this.pageSize);
  }

  addSequence(id: KvSequenceId): void {
    if (this.sequences.has(id)) throw new InvalidArgumentError(`${this.owner}: sequence ${describeId(id)} is already in the cache`);
    this.sequences.set(id, { pages: [], length: 0 });
  }

  hasSequence(id: KvSequenceId): boolean {
    return this.sequences.has(id);
  }

  /** The ids of the sequences, in the order they were added. */
  sequenceIds(): KvSequenceId[] {
    return [...this.sequences.keys()];
  }

  /** Tokens of the sequence whose K/V are written (committed). */
  length(id: KvSequenceId): number {
    return this.sequence(id).length;
  }

  /** Tokens the sequence's pages can hold: pages × pageSize. */
  capacity(id: KvSequenceId): number {
    return this.sequence(id).pages.length * this.pageSize;
  }

  /** The sequence's pages in position order (its block-table row). */
  pages(id: KvSequenceId): readonly number[] {
    return this.sequence(id).pages;
  }

  /** Appends the lowest free page to the sequence and returns it. Throws KvCacheExhaustedError (changing nothing) when none is free. */
  acquireOne(id: KvSequenceId): number {
    const seq = this.sequence(id);
    if (this.freePages === 0) throw this.exhausted(id, 1);
    return this.takePage(seq);
  }

  /**
   * Makes the sequence's pages hold at least `newLength` tokens, acquiring every missing page or none
   * (KvCacheExhaustedError). A length its pages already hold changes nothing; pages are never given back here.
   * Returns how many pages it added (the newest entries of {@link pages}).
   */
  reserve(id: KvSequenceId, newLength: number): number {
    const seq = this.sequence(id);
    this.nonNegative(() => `reserve(${describeId(id)}): newLength`, newLength);
    const missing = Math.ceil(newLength / this.pageSize) - seq.pages.length;
    if (missing <= 0) return 0;
    if (missing > this.freePages) throw this.exhausted(id, missing);
    for (let i = 0; i < missing; i++) this.takePage(seq);
    return missing;
  }

  /**
   * Sets how many tokens of the sequence hold written K/V (what attention will read). It may also move back,
   * e.g. to drop rejected speculative tokens or to recompute the last position; the pages stay reserved.
   */
  commit(id: KvSequenceId, newLength: number): void {
    const seq = this.sequence(id);
    this.nonNegative(() => `commit(${describeId(id)}): newLength`, newLength);
    const capacity = seq.pages.length * this.pageSize;
    if (newLength > capacity) {
      throw new InvalidArgumentError(
        `${this.owner}: commit(${describeId(id)}, ${newLength}) exceeds the ${capacity} positions of its ${seq.pages.length} pages; reserve first`,
      );
    }
    if (newLength < seq.length) {
      // Rewinding into a published page would let the next forward overwrite K/V other sequences share.
      // (newLength < length ≤ capacity, so the page exists.)
      const page = seq.pages[Math.floor(newLength / this.pageSize)]!;
      if (this.keyOfPage.has(page)) {
        throw new InvalidArgumentError(`${this.owner}: commit(${describeId(id)}, ${newLength}) would rewind into page ${page}, which is published in the prefix cache`);
      }
    }
    seq.length = newLength;
  }

  /**
   * Frees the sequence's pages after its first `keepPages` (newest first back to the pool): undoes a `reserve`
   * whose work failed. The kept pages must still hold the committed length.
   */
  shrinkPages(id: KvSequenceId, keepPages: number): void {
    const seq = this.sequence(id);
    this.nonNegative(() => `shrinkPages(${describeId(id)}): keepPages`, keepPages);
    if (keepPages * this.pageSize < seq.length) {
      throw new InvalidArgumentError(`${this.owner}: shrinkPages(${describeId(id)}, ${keepPages}) would drop committed tokens (length ${seq.length})`);
    }
    while (seq.pages.length > keepPages) this.dropRef(seq.pages.pop()!, id);
  }

  /** Frees all the sequence's pages at once and forgets it. */
  release(id: KvSequenceId): void {
    const seq = this.sequences.get(id);
    if (!seq) throw new InvalidArgumentError(`${this.owner}: cannot release sequence ${describeId(id)}: it is not in the cache (never added, or already released)`);
    for (const page of seq.pages) this.dropRef(page, id);
    this.sequences.delete(id);
  }

  // ─── prefix cache ──────────────────────────────────────────────────────────────────────────────────────────

  /**
   * Publishes page `index` of the sequence under `key` so later sequences with the same prefix can attach it. The
   * page must be full of committed tokens. Returns false (changing nothing) when the key is already published
   * (another sequence computed the same prefix first) or the page already has a key.
   */
  publishPage(id: KvSequenceId, index: number, key: string): boolean {
    const seq = this.sequence(id);
    this.nonNegative(() => `publishPage(${describeId(id)}): index`, index);
    if (index >= seq.pages.length || (index + 1) * this.pageSize > seq.length) {
      throw new InvalidArgumentError(
        `${this.owner}: publishPage(${describeId(id)}, ${index}): only full pages of committed tokens can be published (length ${seq.length}, ${seq.pages.length} pages)`,
      );
    }
    const page = seq.pages[index]!;
    if (this.pageOfKey.has(key) || this.keyOfPage.has(page)) return false;
    this.pageOfKey.set(key, page);
    this.keyOfPage.set(page, key);
    return true;
  }

  /** How many of the leading keys are published (the pages a sequence with this prefix could attach). */
  matchPrefix(keys: readonly string[]): number {
    let n = 0;
    while (n < keys.length && this.pageOfKey.has(keys[n]!)) n++;
    return n;
  }

  /**
   * Attaches the published pages of the longest matching prefix of `keys` to a sequence that holds no page yet,
   * and commits their tokens: the sequence's forward starts after them. Returns the pages attached.
   */
  attachPrefix(id: KvSequenceId, keys: readonly string[]): number {
    const seq = this.sequence(id);
    if (seq.pages.length > 0) {
      throw new InvalidArgumentError(`${this.owner}: attachPrefix(${describeId(id)}): the sequence already holds ${seq.pages.length} pages; attach before reserving`);
    }
    const n = this.matchPrefix(keys);
    for (let i = 0; i < n; i++) {
      const page = this.pageOfKey.get(keys[i]!)!;
      if (this.refs[page] === 0) this.evictable.delete(page);
      this.refs[page]!++;
      seq.pages.push(page);
    }
    seq.length = n * this.pageSize;
    return n;
  }

  /** Whether page `index` of the sequence is published (a sequence keeps track of what it still has to publish). */
  isPublished(id: KvSequenceId, index: number): boolean {
    const page = this.sequence(id).pages[index];
    return page !== undefined && this.keyOfPage.has(page);
  }

  /**
   * Extra pages needed for every listed sequence to hold its target length. Sequences not in the allocator count
   * as new (no pages yet), so a scheduler can price admissions and growth in one call.
   */
  pagesNeeded(lengthsById: Iterable<readonly [KvSequenceId, number]>): number {
    let needed = 0;
    for (const [id, length] of lengthsById) {
      this.nonNegative(() => `pagesNeeded: length of ${describeId(id)}`, length);
      const have = this.sequences.get(id)?.pages.length ?? 0;
      needed += Math.max(0, Math.ceil(length / this.pageSize) - have);
    }
    return needed;
  }

  /** Whether {@link pagesNeeded} fits the free pages. */
  canFit(lengthsById: Iterable<readonly [KvSequenceId, number]>): boolean {
    return this.pagesNeeded(lengthsById) <= this.freePages;
  }

  stats(): KvPageStats {
    return {
      numPages: this.numPages,
      freePages: this.freePages,
      usedPages: this.usedPages,
      sequences: this.sequences.size,
      cachedPages: this.keyOfPage.size,
      evictablePages: this.evictable.size,
    };
  }

  private sequence(id: KvSequenceId): SequenceState {
    const seq = this.sequences.get(id);
    if (!seq) throw new InvalidArgumentError(`${this.owner}: sequence ${describeId(id)} is not in the cache (addSequence first)`);
    return seq;
  }

  /** `what` is a function so the hot path (every reserve and commit of every step) builds no message string. */
  private nonNegative(what: () => string, value: number): void {
    if (!Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(`${this.owner}: ${what()} must be a non-negative integer, got ${value}`);
  }

  /** A never-cached free page (lowest id) when there is one, else the least recently released cached page. */
  private takePage(seq: SequenceState): number {
    let page: number;
    if (this.free.size > 0) page = this.free.pop();
    else {
      page = this.evictable.keys().next().value!;
      this.evictable.delete(page);
      this.pageOfKey.delete(this.keyOfPage.get(page)!);
      this.keyOfPage.delete(page);
      this.evictions++;
    }
    if (this.refs[page] !== 0) throw new Error(`${this.owner}: internal error: free page ${page} is already owned`);
    this.refs[page] = 1;
    seq.pages.push(page);
    return page;
  }

  /** One holder lets go of a page: at no holder it is free again (kept cached when published). */
  private dropRef(page: number, id: KvSequenceId): void {
    if (this.refs[page]! <= 0) throw new Error(`${this.owner}: internal error: page ${page} of ${describeId(id)} is already free`);
    if (--this.refs[page]! > 0) return;
    if (this.keyOfPage.has(page)) this.evictable.set(page, true);
    else this.free.push(page);
  }

  private exhausted(id: KvSequenceId, wanted: number): KvCacheExhaustedError {
    return new KvCacheExhaustedError(
      `KV cache exhausted: sequence ${describeId(id)} needs ${wanted} more page${wanted === 1 ? '' : 's'} of ${this.pageSize} tokens, ` +
        `but only ${this.freePages} of ${this.numPages} pages are free (${this.usedPages} used by ${this.sequences.size} sequences)`,
    );
  }
}
