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
 * The page accounting is @tessera/core's pure {@link KvPageAllocator} (page ids, per-sequence lists, lowest free
 * page first); this class adds the tensors. A scheduler may own the allocator's decisions (it reserves the pages
 * of the step it plans on `cache.allocator`); the cache's own sequence methods are the same allocator's.
 *
 * A cache may hold a range of a model's layers (a block of a staged model: `{ numLayers: b - a, firstLayer: a }`),
 * addressed by global layer index; caches of several blocks can share one allocator (one page id, all layers).
 */
import { KvPageAllocator, type KvSequenceId, pagesForLength } from '@tessera/core';
import {
  allocatorStats,
  type Backend,
  BudgetExceededError,
  getBackend,
  gatherRows,
  InvalidArgumentError,
  PAGE_SIZE,
  scatterRows,
  Tensor,
} from '@tessera/native';

export { pagesForLength };

/** A sequence's key in the cache. 1 and '1' are different sequences (Map semantics). */
export type SequenceId = KvSequenceId;

/** The per-layer geometry of the cache: what one page holds. */
export interface KvCacheShape {
  numLayers: number;
  numKvHeads: number;
  headDim: number;
}

/**
 * Either an explicit page count, a byte budget the pool may use (it gets floor(budgetBytes / bytesPerPage) pages),
 * or an existing page allocator to sit on (its page count; e.g. shared by the caches of a staged model's blocks).
 * `firstLayer` (default 0): the global index of the cache's first layer, for a cache of layers [a, a + numLayers).
 */
export type PagedKvCacheOptions = KvCacheShape & { firstLayer?: number } & (
    | { numPages: number }
    | { budgetBytes: number }
    | { allocator: KvPageAllocator }
  );

export interface KvLayerTensors {
  /** f32 [numPages, PAGE_SIZE, numKvHeads, headDim] (attentionDecode's kCache). */
  readonly k: Tensor;
  /** f32 [numPages, PAGE_SIZE, numKvHeads, headDim] (attentionDecode's vCache). */
  readonly v: Tensor;
}

/**
 * One sequence's committed K/V taken out of a cache (exportSequence) to be put into another of the same geometry
 * (importSequence): a KV migration between block instances or devices. Per layer, `length` rows of
 * numKvHeads × headDim f32 each for K and for V, in position order; host memory, so it crosses threads and
 * processes as plain typed arrays.
 */
export interface KvSequenceSnapshot {
  /** Positions [start, start + length) of the sequence (start 0, or absent: the whole committed sequence). */
  start?: number;
  length: number;
  numKvHeads: number;
  headDim: number;
  /** The global index of the first layer (the cache's firstLayer). */
  firstLayer: number;
  layers: { k: Float32Array; v: Float32Array }[];
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

const F32_BYTES = 4;

function positiveInteger(what: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) throw new InvalidArgumentError(`PagedKvCache: ${what} must be a positive integer, got ${value}`);
  return value;
}

function describeId(id: SequenceId): string {
  return typeof id === 'string' ? JSON.stringify(id) : String(id);
}

/** `what` is a function so the hot path (every slotsFor of every step) builds no message string. */
function nonNegativeInteger(what: () => string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) throw new InvalidArgumentError(`PagedKvCache: ${what()} must be a non-negative integer, got ${value}`);
  return value;
}

export class PagedKvCache {
  /** Layers this cache holds: global layers [firstLayer, firstLayer + numLayers). */
  readonly numLayers: number;
  /** Global index of the first layer (0 unless the cache serves one block of a staged model). */
  readonly firstLayer: number;
  readonly numKvHeads: number;
  readonly headDim: number;
  readonly numPages: number;
  /** Bytes one page costs over all layers, K and V. */
  readonly bytesPerPage: number;
  readonly backend: Backend;

  private readonly layers: KvLayerTensors[];
  private readonly rowViews: KvLayerTensors[];
  /** The page accounting (page ids, per-sequence lists): a scheduler plans on it; the sequence methods below are its. */
  readonly allocator: KvPageAllocator;
  private disposed = false;

  private constructor(shape: KvCacheShape, firstLayer: number, allocator: KvPageAllocator, layers: KvLayerTensors[], backend: Backend) {
    const numPages = allocator.numPages;
    this.numLayers = shape.numLayers;
    this.firstLayer = firstLayer;
    this.allocator = allocator;
    this.numKvHeads = shape.numKvHeads;
    this.headDim = shape.headDim;
    this.numPages = numPages;
    this.bytesPerPage = PagedKvCache.bytesPerPage(shape);
    this.backend = backend;
    this.layers = layers;
    const rowShape = [numPages * PAGE_SIZE, shape.numKvHeads * shape.headDim];
    this.rowViews = layers.map(({ k, v }) => ({ k: k.reshape(rowShape), v: v.reshape(rowShape) }));
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
    const firstLayer = options.firstLayer ?? 0;
    if (!Number.isSafeInteger(firstLayer) || firstLayer < 0) throw new InvalidArgumentError(`PagedKvCache: firstLayer must be a non-negative integer, got ${firstLayer}`);
    let numPages: number;
    if ('allocator' in options) {
      if (options.allocator.pageSize !== PAGE_SIZE) {
        throw new InvalidArgumentError(`PagedKvCache: the allocator's pages hold ${options.allocator.pageSize} tokens; the attention kernels read pages of ${PAGE_SIZE}`);
      }
      numPages = options.allocator.numPages;
    } else if ('numPages' in options) {
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
    const allocator = 'allocator' in options ? options.allocator : new KvPageAllocator(numPages, { pageSize: PAGE_SIZE, owner: 'PagedKvCache' });
    return new PagedKvCache(shape, firstLayer, allocator, layers, backend);
  }

  get freePages(): number {
    return this.allocator.freePages;
  }

  get usedPages(): number {
    return this.allocator.usedPages;
  }

  /** Bytes of the whole pool (what it charges to the device budget). */
  get totalBytes(): number {
    return this.numPages * this.bytesPerPage;
  }

  /** The cache tensors of global layer i, [numPages, PAGE_SIZE, numKvHeads, headDim] (for attentionDecode). */
  layer(i: number): KvLayerTensors {
    return this.layerFrom(this.layers, i);
  }

  /** The same memory viewed as [numPages × PAGE_SIZE, numKvHeads × headDim] rows (the dst of scatterRows). */
  layerRows(i: number): KvLayerTensors {
    return this.layerFrom(this.rowViews, i);
  }

  private layerFrom(list: KvLayerTensors[], i: number): KvLayerTensors {
    if (this.disposed) throw new InvalidArgumentError('PagedKvCache: the cache was disposed');
    const entry = Number.isInteger(i) ? list[i - this.firstLayer] : undefined;
    if (!entry) throw new InvalidArgumentError(`PagedKvCache: layer ${i} is outside [${this.firstLayer}, ${this.firstLayer + this.numLayers})`);
    return entry;
  }

  addSequence(id: SequenceId): void {
    this.allocator.addSequence(id);
  }

  hasSequence(id: SequenceId): boolean {
    return this.allocator.hasSequence(id);
  }

  /** The ids of the sequences in the cache, in the order they were added. */
  sequenceIds(): SequenceId[] {
    return this.allocator.sequenceIds();
  }

  /** Tokens of the sequence whose K/V are written (committed). */
  length(id: SequenceId): number {
    return this.allocator.length(id);
  }

  /** Tokens the sequence's pages can hold: pages × PAGE_SIZE. */
  capacity(id: SequenceId): number {
    return this.allocator.capacity(id);
  }

  /** The sequence's pages in position order (its block-table row). */
  pages(id: SequenceId): readonly number[] {
    return this.allocator.pages(id);
  }

  /** Appends the lowest free page to the sequence and returns it. Throws KvCacheExhaustedError (changing nothing) when none is free. */
  acquireOne(id: SequenceId): number {
    return this.allocator.acquireOne(id);
  }

  /**
   * Makes the sequence's pages hold at least `newLength` tokens, acquiring every missing page or none
   * (KvCacheExhaustedError). A length its pages already hold changes nothing; pages are never given back here.
   */
  reserve(id: SequenceId, newLength: number): void {
    this.allocator.reserve(id, newLength);
  }

  /**
   * Flat cache rows (page × PAGE_SIZE + offset) of positions [start, start + count) of the sequence: the idx of
   * scatterRows into layerRows(i). The positions must already be reserved.
   */
  slotsFor(id: SequenceId, start: number, count: number): Int32Array {
    const pages = this.allocator.pages(id);
    nonNegativeInteger(() => `slotsFor(${describeId(id)}): start`, start);
    nonNegativeInteger(() => `slotsFor(${describeId(id)}): count`, count);
    const capacity = pages.length * PAGE_SIZE;
    if (start + count > capacity) {
      throw new InvalidArgumentError(
        `PagedKvCache: slotsFor(${describeId(id)}, ${start}, ${count}) reaches position ${start + count - 1}, but the sequence has ` +
          `${pages.length} pages (${capacity} positions); reserve(${describeId(id)}, ${start + count}) first`,
      );
    }
    const slots = new Int32Array(count);
    for (let i = 0; i < count; i++) {
      const position = start + i;
      slots[i] = pages[Math.floor(position / PAGE_SIZE)]! * PAGE_SIZE + (position % PAGE_SIZE);
    }
    return slots;
  }

  /**
   * Sets how many tokens of the sequence hold written K/V (what attention will read). It may also move back,
   * e.g. to drop rejected speculative tokens; the pages stay reserved.
   */
  commit(id: SequenceId, newLength: number): void {
    this.allocator.commit(id, newLength);
  }

  /**
   * Frees the sequence's pages after its first `keepPages` (newest first back to the pool): undoes a `reserve`
   * whose work failed. The kept pages must still hold the committed length.
   */
  shrinkPages(id: SequenceId, keepPages: number): void {
    this.allocator.shrinkPages(id, keepPages);
  }

  /** Frees all the sequence's pages at once and forgets it. */
  release(id: SequenceId): void {
    this.allocator.release(id);
  }

  /**
   * Extra pages needed for every listed sequence to hold its target length. Sequences not in the cache count
   * as new (no pages yet), so a scheduler can price admissions and growth in one call.
   */
  pagesNeeded(lengthsById: Iterable<readonly [SequenceId, number]>): number {
    return this.allocator.pagesNeeded(lengthsById);
  }

  /** Whether {@link pagesNeeded} fits the free pages. */
  canFit(lengthsById: Iterable<readonly [SequenceId, number]>): boolean {
    return this.allocator.canFit(lengthsById);
  }

  /**
   * The block table and context lengths of a batch, for attentionDecode. maxPages defaults to the longest page
   * list (at least 1, so the table tensor is never empty); shorter rows are padded with -1.
   */
  blockTable(ids: readonly SequenceId[], maxPages?: number): KvBlockTable {
    const alloc = this.allocator;
    const seqs = ids.map((id) => ({ pages: alloc.pages(id), length: alloc.length(id) }));
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

  /**
   * Copies the sequence's committed K/V of positions [from, length) (default: all of it) of every layer to host
   * memory. A migration that recomputes the front of a sequence elsewhere copies only the back.
   */
  exportSequence(id: SequenceId, from = 0): KvSequenceSnapshot {
    const committed = this.allocator.length(id);
    nonNegativeInteger(() => `exportSequence(${describeId(id)}): from`, from);
    if (from > committed) throw new InvalidArgumentError(`PagedKvCache: exportSequence(${describeId(id)}): from ${from} is past the ${committed} committed tokens`);
    const length = committed - from;
    const idx = length > 0 ? Tensor.from(this.slotsFor(id, from, length), [length], { dtype: 'i32', backend: this.backend }) : null;
    const take = (src: Tensor): Float32Array => {
      if (!idx) return new Float32Array(0);
      const rows = gatherRows(src, idx);
      try {
        return rows.toArray() as Float32Array;
      } finally {
        rows.dispose();
      }
    };
    try {
      const layers = Array.from({ length: this.numLayers }, (_, l) => {
        const { k, v } = this.layerRows(this.firstLayer + l);
        return { k: take(k), v: take(v) };
      });
      return { ...(from > 0 ? { start: from } : {}), length, numKvHeads: this.numKvHeads, headDim: this.headDim, firstLayer: this.firstLayer, layers };
    } finally {
      idx?.dispose();
    }
  }

  /**
   * Puts a snapshot in as a new sequence: adds it, reserves its pages (all or none: KvCacheExhaustedError changes
   * nothing), writes every layer's K/V and commits the length. The snapshot must come from a cache of the same
   * layers and geometry (InvalidArgumentError otherwise) and the id must not be in this cache yet. A snapshot that
   * starts at position `start` > 0 (the back of a sequence whose front was recomputed here) extends the sequence,
   * which must hold exactly `start` committed tokens.
   */
  importSequence(id: SequenceId, snap: KvSequenceSnapshot): void {
    const start = snap.start ?? 0;
    const width = this.numKvHeads * this.headDim;
    if (snap.numKvHeads !== this.numKvHeads || snap.headDim !== this.headDim || snap.firstLayer !== this.firstLayer || snap.layers.length !== this.numLayers) {
      throw new InvalidArgumentError(
        `PagedKvCache: importSequence(${describeId(id)}): the snapshot holds layers [${snap.firstLayer}, ${snap.firstLayer + snap.layers.length}) of ${snap.numKvHeads} × ${snap.headDim}, ` +
          `this cache layers [${this.firstLayer}, ${this.firstLayer + this.numLayers}) of ${this.numKvHeads} × ${this.headDim}`,
      );
    }
    nonNegativeInteger(() => `importSequence(${describeId(id)}): length`, snap.length);
    snap.layers.forEach((l, i) => {
      if (l.k.length !== snap.length * width || l.v.length !== snap.length * width) {
        throw new InvalidArgumentError(`PagedKvCache: importSequence(${describeId(id)}): layer ${snap.firstLayer + i} holds ${l.k.length} / ${l.v.length} floats, expected ${snap.length} × ${width}`);
      }
    });
    nonNegativeInteger(() => `importSequence(${describeId(id)}): start`, start);
    if (start === 0) {
      if (this.hasSequence(id)) throw new InvalidArgumentError(`PagedKvCache: importSequence(${describeId(id)}): the sequence is already in the cache`);
      this.addSequence(id);
      try {
        this.reserve(id, snap.length);
      } catch (err) {
        this.release(id);
        throw err;
      }
    } else {
      const have = this.hasSequence(id) ? this.allocator.length(id) : null;
      if (have !== start) throw new InvalidArgumentError(`PagedKvCache: importSequence(${describeId(id)}): the snapshot starts at ${start}, but the cache holds ${have === null ? 'no such sequence' : `${have} committed tokens of it`}`);
      const pagesBefore = this.pages(id).length;
      try {
        this.reserve(id, start + snap.length);
      } catch (err) {
        this.shrinkPages(id, pagesBefore);
        throw err;
      }
    }
    if (snap.length > 0) {
      const idx = Tensor.from(this.slotsFor(id, start, snap.length), [snap.length], { dtype: 'i32', backend: this.backend });
      try {
        snap.layers.forEach((l, i) => {
          const rows = this.layerRows(this.firstLayer + i);
          for (const [data, dst] of [
            [l.k, rows.k],
            [l.v, rows.v],
          ] as const) {
            const src = Tensor.from(data, [snap.length, width], { backend: this.backend });
            try {
              scatterRows(src, idx, dst);
            } finally {
              src.dispose();
            }
          }
        });
      } finally {
        idx.dispose();
      }
    }
    this.commit(id, start + snap.length);
  }

  stats(): KvCacheStats {
    return {
      numPages: this.numPages,
      freePages: this.freePages,
      usedPages: this.usedPages,
      sequences: this.allocator.sequenceCount,
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
}
