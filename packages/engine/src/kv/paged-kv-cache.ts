/**
 * PagedKvCache: the decoder's key/value memory, in vLLM's PagedAttention layout. Per layer one K and one V
 * tensor [numPages, PAGE_SIZE, numKvHeads, headDim] f32, allocated through the native budgeted allocator, so
 * the pool is charged to the device budget like any other tensor (it competes with adapters and weights).
 * Each sequence owns a list of pages; position t of a sequence lives in page pages[floor(t / 16)], row t % 16,
 * which is what native `attentionDecode` reads through a block table and what `kvSlot` computes.
 *
 * Lifecycle of a sequence: addSequence → reserve (pages for the tokens about to be written) → slotsFor (flat
 * rows for scatterRows into layerRows) → commit (the tokens are now written) → … → release (all pages free).
 *
 * Free pages are handed out lowest page id first (a min-heap), whatever order they were released in, so the
 * same request history always yields the same page assignment and the same bytes in the cache.
 */
import {
  allocatorStats,
  type Backend,
  BudgetExceededError,
  getBackend,
  InvalidArgumentError,
  PAGE_SIZE,
  Tensor,
} from '@tessera/native';
import { KvCacheExhaustedError } from '../errors.js';

/** A sequence's key in the cache. 1 and '1' are different sequences (Map semantics). */
export type SequenceId = string | number;

/** The per-layer geometry of the cache: what one page holds. */
export interface KvCacheShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}

/** Either an explicit page count or a byte budget the pool may use (it gets floor(budgetBytes / bytesPerPage) pages). */
export type PagedKvCacheOptions = KvCacheShape & ({ numPages: number } | { budgetBytes: number });

export interface KvLayerTensors {
  /** f32 [numPages, PAGE_SIZE, numKvHeads, headDim] (attentionDecode's kCache). */
  readonly k: Tensor;
  /** f32 [numPages, PAGE_SIZE, numKvHeads, headDim] (attentionDecode's vCache). */
  readonly v: Tensor;
}

export interface KvBlockTable {
  /** i32 [batch * maxPages], row-major; entries past a sequence's page list are -1. */
  readonly table: Int32Array;
  readonly maxPages: number;
  /** i32 [batch]: committed tokens per sequence (attentionDecode's contextLens). */
  readonly contextLens: Int32Array;
}

export interface KvCacheStats {
  numPages: number;
  freePages: number;
  usedPages: number;
  sequences: number;
  bytesPerPage: number;
  totalBytes: number;
}

interface SequenceState {
  readonly pages: number[];
  /** Tokens whose K/V have been written (committed). */
  length: number;
}

const F32_BYTES = 4;

function positiveInteger(what: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) throw new InvalidArgumentError(`PagedKvCache: ${what} must be a positive integer, got ${value}`);
  return value;
}

/** `what` is a function so the hot path (every reserve and commit of every step) builds no message string. */
function nonNegativeInteger(what: () => string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(`PagedKvCache: ${what()} must be a non-negative integer, got ${value}`);
  return value;
}

function describeId(id: SequenceId): string {
  return typeof id === 'string' ? JSON.stringify(id) : String(id);
}

/** Pages needed to hold `length` tokens. */
export function pagesForLength(length: number): number {
  return Math.ceil(length / PAGE_SIZE);
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

export class PagedKvCache {
  readonly numLayers: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly numPages: number;
  /** Bytes one page costs over all layers, K and V. */
  readonly bytesPerPage: number;
  readonly backend: Backend;

  private readonly layers: KvLayerTensors[];
  private readonly rowViews: KvLayerTensors[];
  private readonly free: FreePageHeap;
  /** 1 where a page belongs to a sequence: guards against double frees and double ownership. */
  private readonly pageInUse: Uint8Array;
  private readonly sequences = new Map<SequenceId, SequenceState>();
  private disposed = false;

  private constructor(shape: KvCacheShape, numPages: number, layers: KvLayerTensors[], backend: Backend) {
    this.numLayers = shape.numLayers;
    this.numKvHeads = shape.numKvHeads;
    this.headDim = shape.headDim;
    this.numPages = numPages;
    this.bytesPerPage = PagedKvCache.bytesPerPage(shape);
    this.backend = backend;
    this.layers = layers;
    const rowShape = [numPages * PAGE_SIZE, shape.numKvHeads * shape.headDim];
    this.rowViews = layers.map(({ k, v }) => ({ k: k.reshape(rowShape), v: v.reshape(rowShape) }));
    this.free = new FreePageHeap(numPages);
    for (let p = 0; p < numPages; p++) this.free.push(p);
    this.pageInUse = new Uint8Array(numPages);
  }

  /** Bytes one page costs: numLayers × (K and V) × PAGE_SIZE × numKvHeads × headDim × 4 (f32). */
  static bytesPerPage(shape: KvCacheShape): number {
    positiveInteger('numLayers', shape.numLayers);
    positiveInteger('numKvHeads', shape.numKvHeads);
    positiveInteger('headDim', shape.headDim);
    return shape.numLayers * 2 * PAGE_SIZE * shape.numKvHeads * shape.headDim * F32_BYTES;
  }

  /** How many whole pages `bytes` buys. (Each tensor is a multiple of 64 bytes, so the allocator's rounding costs nothing.) */
  static pagesForBudget(bytes: number, shape: KvCacheShape): number {
    if (!Number.isFinite(bytes) || bytes < 0) throw new InvalidArgumentError(`PagedKvCache: a budget must be a non-negative number of bytes, got ${bytes}`);
    return Math.floor(bytes / PagedKvCache.bytesPerPage(shape));
  }

  /**
   * Allocates the pool: one K and one V tensor per layer on `backend`, charged to its byte budget. A budget
   * that buys no page, or a pool the device budget cannot hold, throws BudgetExceededError after freeing
   * whatever was already allocated; the message gives the cost of a page and the bytes available.
   */
  static create(options: PagedKvCacheOptions, backend: Backend = getBackend()): PagedKvCache {
    const shape: KvCacheShape = { numLayers: options.numLayers, numKvHeads: options.numKvHeads, headDim: options.headDim };
    const bytesPerPage = PagedKvCache.bytesPerPage(shape);
    let numPages: number;
    if ('numPages' in options) {
      numPages = positiveInteger('numPages', options.numPages);
    } else {
      numPages = PagedKvCache.pagesForBudget(options.budgetBytes, shape);
      if (numPages === 0) {
        throw new BudgetExceededError(
          `PagedKvCache: a page costs ${bytesPerPage} bytes (${shape.numLayers} layers × K and V × ${PAGE_SIZE} rows × ${shape.numKvHeads} kv heads × ${shape.headDim} × 4) ` +
            `but the budget of ${options.budgetBytes} bytes does not hold one`,
        );
      }
    }
    if (numPages * PAGE_SIZE > 0x7fffffff) {
      throw new InvalidArgumentError(`PagedKvCache: ${numPages} pages × ${PAGE_SIZE} rows overflow the i32 slot indices of scatterRows`);
    }
    const tensorShape = [numPages, PAGE_SIZE, shape.numKvHeads, shape.headDim];
    const layers: KvLayerTensors[] = [];
    const allocated: Tensor[] = [];
    try {
      for (let l = 0; l < shape.numLayers; l++) {
        const k = Tensor.empty(tensorShape, 'f32', backend);
        allocated.push(k);
        const v = Tensor.empty(tensorShape, 'f32', backend);
        allocated.push(v);
        layers.push({ k, v });
      }
    } catch (err) {
      for (const t of allocated) t.dispose();
      if (!(err instanceof BudgetExceededError)) throw err;
      // Measured after the partial pool is freed: what a retry could actually use.
      const stats = allocatorStats(backend);
      const available = Math.max(0, stats.budget - stats.inUse);
      throw new BudgetExceededError(
        `PagedKvCache: ${numPages} pages × ${bytesPerPage} bytes = ${numPages * bytesPerPage} bytes do not fit the ${backend.device} budget: ` +
          `${available} bytes available (budget ${stats.budget}, in use ${stats.inUse}), enough for ${Math.floor(available / bytesPerPage)} pages`,
        { cause: err },
      );
    }
    return new PagedKvCache(shape, numPages, layers, backend);
  }

  get freePages(): number {
    return this.free.size;
  }

  get usedPages(): number {
    return this.numPages - this.free.size;
  }

  /** Bytes of the whole pool (what it charges to the device budget). */
  get totalBytes(): number {
    return this.numPages * this.bytesPerPage;
  }

  /** The cache tensors of layer i, [numPages, PAGE_SIZE, numKvHeads, headDim] (for attentionDecode). */
  layer(i: number): KvLayerTensors {
    return this.layerFrom(this.layers, i);
  }

  /** The same memory viewed as [numPages × PAGE_SIZE, numKvHeads × headDim] rows (the dst of scatterRows). */
  layerRows(i: number): KvLayerTensors {
    return this.layerFrom(this.rowViews, i);
  }

  private layerFrom(list: KvLayerTensors[], i: number): KvLayerTensors {
    if (this.disposed) throw new InvalidArgumentError('PagedKvCache: the cache was disposed');
    const entry = Number.isInteger(i) ? list[i] : undefined;
    if (!entry) throw new InvalidArgumentError(`PagedKvCache: layer ${i} is outside [0, ${this.numLayers})`);
    return entry;
  }

  addSequence(id: SequenceId): void {
    if (this.sequences.has(id)) throw new InvalidArgumentError(`PagedKvCache: sequence ${describeId(id)} is already in the cache`);
    this.sequences.set(id, { pages: [], length: 0 });
  }

  hasSequence(id: SequenceId): boolean {
    return this.sequences.has(id);
  }

  /** The ids of the sequences in the cache, in the order they were added. */
  sequenceIds(): SequenceId[] {
    return [...this.sequences.keys()];
  }

  /** Tokens of the sequence whose K/V are written (committed). */
  length(id: SequenceId): number {
    return this.sequence(id).length;
  }

  /** Tokens the sequence's pages can hold: pages × PAGE_SIZE. */
  capacity(id: SequenceId): number {
    return this.sequence(id).pages.length * PAGE_SIZE;
  }

  /** The sequence's pages in position order (its block-table row). */
  pages(id: SequenceId): readonly number[] {
    return this.sequence(id).pages;
  }

  /** Appends the lowest free page to the sequence and returns it. Throws KvCacheExhaustedError (changing nothing) when none is free. */
  acquireOne(id: SequenceId): number {
    const seq = this.sequence(id);
    if (this.free.size === 0) throw this.exhausted(id, 1);
    return this.takePage(seq);
  }

  /**
   * Makes the sequence's pages hold at least `newLength` tokens, acquiring every missing page or none
   * (KvCacheExhaustedError). A length its pages already hold changes nothing; pages are never given back here.
   */
  reserve(id: SequenceId, newLength: number): void {
    const seq = this.sequence(id);
    nonNegativeInteger(() => `reserve(${describeId(id)}): newLength`, newLength);
    const missing = pagesForLength(newLength) - seq.pages.length;
    if (missing <= 0) return;
    if (missing > this.free.size) throw this.exhausted(id, missing);
    for (let i = 0; i < missing; i++) this.takePage(seq);
  }

  /**
   * Flat cache rows (page × PAGE_SIZE + offset) of positions [start, start + count) of the sequence: the idx of
   * scatterRows into layerRows(i). The positions must already be reserved.
   */
  slotsFor(id: SequenceId, start: number, count: number): Int32Array {
    const seq = this.sequence(id);
    nonNegativeInteger(() => `slotsFor(${describeId(id)}): start`, start);
    nonNegativeInteger(() => `slotsFor(${describeId(id)}): count`, count);
    const capacity = seq.pages.length * PAGE_SIZE;
    if (start + count > capacity) {
      throw new InvalidArgumentError(
        `PagedKvCache: slotsFor(${describeId(id)}, ${start}, ${count}) reaches position ${start + count - 1}, but the sequence has ` +
          `${seq.pages.length} pages (${capacity} positions); reserve(${describeId(id)}, ${start + count}) first`,
      );
    }
    const slots = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      const position = start + i;
      slots[i] = seq.pages[Math.floor(position / PAGE_SIZE)]! * PAGE_SIZE + (position % PAGE_SIZE);
    }
    return slots;
  }

  /**
   * Sets how many tokens of the sequence hold written K/V (what attention will read). It may also move back,
   * e.g. to drop rejected speculative tokens; the pages stay reserved.
   */
  commit(id: SequenceId, newLength: number): void {
    const seq = this.sequence(id);
    nonNegativeInteger(() => `commit(${describeId(id)}): newLength`, newLength);
    const capacity = seq.pages.length * PAGE_SIZE;
    if (newLength > capacity) {
      throw new InvalidArgumentError(
        `PagedKvCache: commit(${describeId(id)}, ${newLength}) exceeds the ${capacity} positions of its ${seq.pages.length} pages; reserve first`,
      );
    }
    seq.length = newLength;
  }

  /**
   * Frees the sequence's pages after its first `keepPages` (newest first back to the pool): undoes a `reserve`
   * whose work failed. The kept pages must still hold the committed length.
   */
  shrinkPages(id: SequenceId, keepPages: number): void {
    const seq = this.sequence(id);
    nonNegativeInteger(() => `shrinkPages(${describeId(id)}): keepPages`, keepPages);
    if (keepPages * PAGE_SIZE < seq.length) {
      throw new InvalidArgumentError(`PagedKvCache: shrinkPages(${describeId(id)}, ${keepPages}) would drop committed tokens (length ${seq.length})`);
    }
    while (seq.pages.length > keepPages) {
      const page = seq.pages.pop()!;
      this.pageInUse[page] = 0;
      this.free.push(page);
    }
  }

  /** Frees all the sequence's pages at once and forgets it. */
  release(id: SequenceId): void {
    const seq = this.sequences.get(id);
    if (!seq) throw new InvalidArgumentError(`PagedKvCache: cannot release sequence ${describeId(id)}: it is not in the cache (never added, or already released)`);
    for (const page of seq.pages) {
      if (this.pageInUse[page] !== 1) throw new Error(`PagedKvCache: internal error: page ${page} of ${describeId(id)} is already free`);
      this.pageInUse[page] = 0;
      this.free.push(page);
    }
    this.sequences.delete(id);
  }

  /**
   * Extra pages needed for every listed sequence to hold its target length. Sequences not in the cache count
   * as new (no pages yet), so a scheduler can price admissions and growth in one call.
   */
  pagesNeeded(lengthsById: Iterable<readonly [SequenceId, number]>): number {
    let needed = 0;
    for (const [id, length] of lengthsById) {
      nonNegativeInteger(() => `pagesNeeded: length of ${describeId(id)}`, length);
      const have = this.sequences.get(id)?.pages.length ?? 0;
      needed += Math.max(0, pagesForLength(length) - have);
    }
    return needed;
  }

  /** Whether {@link pagesNeeded} fits the free pages. */
  canFit(lengthsById: Iterable<readonly [SequenceId, number]>): boolean {
    return this.pagesNeeded(lengthsById) <= this.free.size;
  }

  /**
   * The block table and context lengths of a batch, for attentionDecode. maxPages defaults to the longest page
   * list (at least 1, so the table tensor is never empty); shorter rows are padded with -1.
   */
  blockTable(ids: readonly SequenceId[], maxPages?: number): KvBlockTable {
    const seqs = ids.map((id) => this.sequence(id));
    const longest = seqs.reduce((m, s) => Math.max(m, s.pages.length), 0);
    const width = maxPages ?? Math.max(1, longest);
    nonNegativeInteger(() => 'blockTable: maxPages', width);
    if (width < longest) {
      const which = ids[seqs.findIndex((s) => s.pages.length === longest)]!;
      throw new InvalidArgumentError(`PagedKvCache: blockTable maxPages ${width} is less than the ${longest} pages of sequence ${describeId(which)}`);
    }
    const table = new Int32Array(seqs.length * width).fill(-1);
    const contextLens = new Int32Array(seqs.length);
    seqs.forEach((s, b) => {
      table.set(s.pages, b * width);
      contextLens[b] = s.length;
    });
    return { table, maxPages: width, contextLens };
  }

  stats(): KvCacheStats {
    return {
      numPages: this.numPages,
      freePages: this.freePages,
      usedPages: this.usedPages,
      sequences: this.sequences.size,
      bytesPerPage: this.bytesPerPage,
      totalBytes: this.totalBytes,
    };
  }

  /** Frees the pool's memory now (views included). Idempotent; layer()/layerRows() throw afterwards. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const { k, v } of this.rowViews) {
      k.dispose();
      v.dispose();
    }
    for (const { k, v } of this.layers) {
      k.dispose();
      v.dispose();
    }
  }

  private sequence(id: SequenceId): SequenceState {
    const seq = this.sequences.get(id);
    if (!seq) throw new InvalidArgumentError(`PagedKvCache: sequence ${describeId(id)} is not in the cache (addSequence first)`);
    return seq;
  }

  private takePage(seq: SequenceState): number {
    const page = this.free.pop();
    if (this.pageInUse[page] !== 0) throw new Error(`PagedKvCache: internal error: free page ${page} is already owned`);
    this.pageInUse[page] = 1;
    seq.pages.push(page);
    return page;
  }

  private exhausted(id: SequenceId, wanted: number): KvCacheExhaustedError {
    return new KvCacheExhaustedError(
      `KV cache exhausted: sequence ${describeId(id)} needs ${wanted} more page${wanted === 1 ? '' : 's'} of ${PAGE_SIZE} tokens, ` +
        `but only ${this.free.size} of ${this.numPages} pages are free (${this.usedPages} used by ${this.sequences.size} sequences)`,
    );
  }
}
