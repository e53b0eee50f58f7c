/**
 * The host adapter store of layer-wise staging (hmi.md §1.7, "disk → host → device"): every tenant's adapters and
 * head in one file under a directory (the disk tier, `adapter-file.ts`), and a host LRU of decoded sets under a
 * byte budget (`ByteLru`). The device tier is the runner's per-layer staging buffers: nothing of a tenant stays
 * there between batches, so this store is all the per-tenant memory there is.
 *
 *   put      encode → temp file (fsync) → rename over `<id>.tsadapt`: readers see the old file or the new one,
 *            never a partial one; the set joins the host tier as the most recently used
 *   get      host hit, else one disk read shared by every caller of that id while it is in flight; the decoded
 *            set joins the host tier and the LRU is trimmed to the budget
 *   prefetch the same reads, started ahead (a batch's tenants while the batch before it runs, §1.8)
 *
 * Every state change (commit of a write, delete) is one synchronous step, so a caller can update its own
 * registry in the same step and never expose a half-applied change. Each committed write gets a revision; a set
 * the store returns carries the revision it was read or written as, which tells a caller whether a read raced a
 * newer write. One store per directory: a second process writing the same directory is not coordinated.
 */
import { closeSync, fstatSync, mkdirSync, openSync, readdirSync, readSync, renameSync, unlinkSync } from 'node:fs';
import { open, readFile, unlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';

import { UnknownAdapterError } from '@tessera/core';

import { checkAdapterName } from '../adapter-name.js';
import { ByteLru } from '../byte-lru.js';
import {
  ADAPTER_FILE_EXTENSION,
  ADAPTER_FILE_HEADER_BYTES,
  byteLengthOf,
  checkAdapterSet,
  decodeAdapterFile,
  decodeAdapterHeader,
  decodeAdapterMeta,
  encodeAdapterFile,
  type LayerwiseAdapterSet,
  type LayerwiseAdapterShape,
} from './adapter-file.js';

export interface LayerwiseAdapterStoreOptions {
  /** The directory of `<id>.tsadapt` files; created if missing, scanned at construction. */
  dir: string;
  shape: LayerwiseAdapterShape;
  /** Host tier budget in bytes (Σ byteLength of the cached sets). Default: unlimited; 0 turns the tier off. */
  hostBudgetBytes?: number;
  /** fsync each file before its rename (default true). Off for a scratch directory removed at exit. */
  durable?: boolean;
}

/** A set as the store hands it out: the arrays plus the revision of the write they come from. */
export interface StoredAdapterSet extends LayerwiseAdapterSet {
  readonly revision: number;
}

/** A write on disk under a temporary name, not yet visible: `commit()` renames it into place. */
export interface StagedAdapterWrite {
  readonly id: string;
  readonly fileBytes: number;
  /** Renames the file into place and updates the index and the host tier, all in this call. */
  commit(): StoredAdapterSet;
  /** Removes the temporary file; nothing changes. */
  abort(): void;
}

export interface AdapterStoreEntry {
  id: string;
  labels: number;
  /** The file's exact length. */
  fileBytes: number;
  metaBytes: number;
  revision: number;
  /** In the host tier now. */
  hostCached: boolean;
}

export interface LayerwiseAdapterStoreStats {
  /** Ids on disk. */
  tenants: number;
  /** Σ file lengths of those ids. */
  diskBytes: number;
  /** Σ byteLength of the sets in the host tier. */
  hostBytes: number;
  hostCount: number;
  hostBudgetBytes: number;
  /** get() calls answered from the host tier. */
  hits: number;
  /** get() calls that had to wait for a disk read (their own or a shared one). */
  misses: number;
  /** Disk reads started (by get or prefetch). */
  reads: number;
  readFailures: number;
  /** Disk reads started by prefetch(). */
  prefetchReads: number;
  /** Sets dropped from the host tier to stay within the budget. */
  evictions: number;
  /** Committed writes. */
  writes: number;
  readsInFlight: number;
}

interface Entry {
  labels: number;
  fileBytes: number;
  metaBytes: number;
  revision: number;
}

const TEMP_SUFFIX = '.tmp';

export class LayerwiseAdapterStore {
  readonly dir: string;
  readonly shape: LayerwiseAdapterShape;
  readonly hostBudgetBytes: number;
  readonly durable: boolean;
  /** Files of the directory that the scan refused (foreign, corrupt, truncated, another shape): left untouched. */
  readonly rejected: { file: string; error: Error }[] = [];
  private readonly entries = new Map<string, Entry>();
  private readonly host = new ByteLru<StoredAdapterSet>();
  private readonly reading = new Map<string, { revision: number; promise: Promise<StoredAdapterSet> }>();
  private diskTotal = 0;
  private revisions = 0;
  private temps = 0;
  private readonly counters = { hits: 0, misses: 0, reads: 0, readFailures: 0, prefetchReads: 0, evictions: 0, writes: 0 };

  constructor(options: LayerwiseAdapterStoreOptions) {
    const { hidden, bottleneck, layers } = options.shape;
    for (const [k, v] of Object.entries({ hidden, bottleneck, layers })) {
      if (!(Number.isInteger(v) && v >= 1 && v <= 0xffff_ffff)) throw new RangeError(`shape.${k} must be a positive integer, got ${v}`);
    }
    const budget = options.hostBudgetBytes ?? Infinity;
    if (!(budget >= 0)) throw new RangeError(`hostBudgetBytes must be ≥ 0, got ${budget}`);
    this.dir = resolve(options.dir);
    this.shape = { hidden, bottleneck, layers };
    this.hostBudgetBytes = budget;
    this.durable = options.durable ?? true;
    mkdirSync(this.dir, { recursive: true });
    this.scan();
  }

  /** Ids on disk. */
  get size(): number {
    return this.entries.size;
  }

  has(id: string): boolean {
    return this.entries.has(id);
  }

  /** Ids on disk: the scanned ones in name order, then the written ones in commit order. */
  ids(): string[] {
    return [...this.entries.keys()];
  }

  info(id: string): AdapterStoreEntry | undefined {
    const e = this.entries.get(id);
    return e && { id, labels: e.labels, fileBytes: e.fileBytes, metaBytes: e.metaBytes, revision: e.revision, hostCached: this.host.has(id) };
  }

  pathOf(id: string): string {
    checkAdapterName(id);
    return join(this.dir, `${id}${ADAPTER_FILE_EXTENSION}`);
  }

  /**
   * Writes `value` (and `meta`, any JSON value, kept in the file for the caller) to a temporary file. Nothing is
   * visible until `commit()`. The store keeps the arrays it is given: do not change them afterwards.
   */
  async stage(id: string, value: LayerwiseAdapterSet, meta?: unknown): Promise<StagedAdapterWrite> {
    const final = this.pathOf(id);
    checkAdapterSet(id, value, this.shape);
    const metaBytes = meta === undefined ? new Uint8Array(0) : new TextEncoder().encode(JSON.stringify(meta));
    const bytes = encodeAdapterFile(id, value, this.shape, metaBytes);
    const temp = join(this.dir, `.${id}.${process.pid}.${++this.temps}${TEMP_SUFFIX}`);
    const labels = value.head.bias.length;
    try {
      const handle = await open(temp, 'wx');
      try {
        await handle.writeFile(bytes);
        if (this.durable) await handle.datasync();
      } finally {
        await handle.close();
      }
    } catch (err) {
      await unlink(temp).catch(() => {});
      throw err;
    }
    let state: 'staged' | 'done' = 'staged';
    const once = () => {
      if (state !== 'staged') throw new Error(`the staged write of ${JSON.stringify(id)} was already committed or aborted`);
      state = 'done';
    };
    return {
      id,
      fileBytes: bytes.length,
      commit: () => {
        once();
        try {
          renameSync(temp, final);
        } catch (err) {
          try {
            unlinkSync(temp);
          } catch {
            // already gone
          }
          throw err;
        }
        const old = this.entries.get(id);
        if (old) this.diskTotal -= old.fileBytes;
        const revision = ++this.revisions;
        this.entries.set(id, { labels, fileBytes: bytes.length, metaBytes: metaBytes.length, revision });
        this.diskTotal += bytes.length;
        this.counters.writes++;
        const stored: StoredAdapterSet = { adapters: value.adapters, head: value.head, revision };
        this.keep(id, stored);
        return stored;
      },
      abort: () => {
        once();
        try {
          unlinkSync(temp);
        } catch {
          // already gone
        }
      },
    };
  }

  /** stage + commit. */
  async put(id: string, value: LayerwiseAdapterSet, meta?: unknown): Promise<StoredAdapterSet> {
    return (await this.stage(id, value, meta)).commit();
  }

  /** The set: from the host tier, else from disk (one read per id in flight, shared). Unknown: UnknownAdapterError. */
  get(id: string): Promise<StoredAdapterSet> {
    const hit = this.host.peek(id);
    if (hit) {
      this.host.touch(id);
      this.counters.hits++;
      return Promise.resolve(hit);
    }
    if (!this.entries.has(id)) return Promise.reject(new UnknownAdapterError(id, `no adapter set ${JSON.stringify(id)} in ${this.dir}`));
    this.counters.misses++;
    return this.read(id, false);
  }

  /** The host tier's set, or undefined. No I/O; counts nothing and leaves the LRU order as it is. */
  peek(id: string): StoredAdapterSet | undefined {
    return this.host.peek(id);
  }

  /**
   * Starts the disk reads of the ids not in the host tier and marks the cached ones most recently used (they are
   * about to be needed). Unknown ids are skipped: a prefetch is a hint. Resolves when the reads settle; a failed
   * read reaches only the get() calls that share it.
   */
  async prefetch(ids: Iterable<string>): Promise<void> {
    const reads: Promise<unknown>[] = [];
    for (const id of new Set(ids)) {
      if (this.host.has(id)) this.host.touch(id);
      else if (this.entries.has(id)) reads.push(this.read(id, true).catch(() => {}));
    }
    await Promise.all(reads);
  }

  /** The JSON metadata stored with the set (undefined when none), read from the file's head: no payload read. */
  readMeta(id: string): unknown {
    const e = this.entries.get(id);
    if (!e) throw new UnknownAdapterError(id, `no adapter set ${JSON.stringify(id)} in ${this.dir}`);
    if (e.metaBytes === 0) return undefined;
    const path = this.pathOf(id);
    const fd = openSync(path, 'r');
    try {
      const bytes = new Uint8Array(ADAPTER_FILE_HEADER_BYTES + e.metaBytes);
      const n = readSync(fd, bytes, 0, bytes.length, 0);
      const h = decodeAdapterHeader(path, bytes.subarray(0, n), this.shape, fstatSync(fd).size);
      return JSON.parse(new TextDecoder().decode(decodeAdapterMeta(path, bytes.subarray(0, n), h)));
    } finally {
      closeSync(fd);
    }
  }

  /** Removes the file and the host copy, in this call. Unknown: UnknownAdapterError. Returns the bytes freed. */
  delete(id: string): { fileBytes: number; hostBytes: number } {
    const e = this.entries.get(id);
    if (!e) throw new UnknownAdapterError(id, `no adapter set ${JSON.stringify(id)} in ${this.dir}`);
    try {
      unlinkSync(this.pathOf(id));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    this.entries.delete(id);
    this.diskTotal -= e.fileBytes;
    const hostBytes = this.host.delete(id)?.bytes ?? 0;
    return { fileBytes: e.fileBytes, hostBytes };
  }

  stats(): LayerwiseAdapterStoreStats {
    return {
      tenants: this.entries.size,
      diskBytes: this.diskTotal,
      hostBytes: this.host.bytes,
      hostCount: this.host.size,
      hostBudgetBytes: this.hostBudgetBytes,
      ...this.counters,
      readsInFlight: this.reading.size,
    };
  }

  /** Host-tier ids, least recently used first. */
  hostIds(): string[] {
    return this.host.keys();
  }

  // ------------------------------------------------------------------ internals

  private read(id: string, prefetch: boolean): Promise<StoredAdapterSet> {
    const revision = this.entries.get(id)!.revision;
    const shared = this.reading.get(id);
    if (shared && shared.revision === revision) return shared.promise;
    this.counters.reads++;
    if (prefetch) this.counters.prefetchReads++;
    const path = this.pathOf(id);
    const promise = readFile(path).then(
      (buf) => {
        const bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
        const { set } = decodeAdapterFile(path, bytes, this.shape);
        const stored: StoredAdapterSet = { adapters: set.adapters, head: set.head, revision };
        // A write or delete committed meanwhile: hand out what was read, but do not cache a stale set.
        if (this.entries.get(id)?.revision === revision && !this.host.has(id)) this.keep(id, stored);
        return stored;
      },
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') throw new UnknownAdapterError(id, `adapter set ${JSON.stringify(id)} was deleted`, { cause: err });
        throw err;
      },
    );
    const tracked = promise.catch((err: unknown) => {
      this.counters.readFailures++;
      throw err;
    }).finally(() => {
      if (this.reading.get(id)?.promise === tracked) this.reading.delete(id);
    });
    this.reading.set(id, { revision, promise: tracked });
    return tracked;
  }

  /** Into the host tier as the most recently used, then trimmed; a set larger than the whole budget is not kept. */
  private keep(id: string, stored: StoredAdapterSet): void {
    const bytes = byteLengthOf(stored);
    this.host.delete(id);
    if (bytes > this.hostBudgetBytes) return;
    this.host.set(id, stored, bytes);
    while (this.host.bytes > this.hostBudgetBytes) {
      const victim = this.host.keys()[0]!;
      this.host.delete(victim);
      this.counters.evictions++;
    }
  }

  private scan(): void {
    for (const name of readdirSync(this.dir).sort()) {
      const path = join(this.dir, name);
      if (name.startsWith('.') && name.endsWith(TEMP_SUFFIX)) {
        // A write that never committed (a crash between write and rename): debris, never visible.
        try {
          unlinkSync(path);
        } catch {
          // raced away
        }
        continue;
      }
      if (!name.endsWith(ADAPTER_FILE_EXTENSION)) continue;
      const id = name.slice(0, -ADAPTER_FILE_EXTENSION.length);
      try {
        checkAdapterName(id);
        const fd = openSync(path, 'r');
        try {
          const size = fstatSync(fd).size;
          const head = new Uint8Array(ADAPTER_FILE_HEADER_BYTES);
          const n = readSync(fd, head, 0, head.length, 0);
          const h = decodeAdapterHeader(path, head.subarray(0, n), this.shape, size);
          this.entries.set(id, { labels: h.labels, fileBytes: size, metaBytes: h.metaBytes, revision: ++this.revisions });
          this.diskTotal += size;
        } finally {
          closeSync(fd);
        }
      } catch (err) {
        this.rejected.push({ file: path, error: err as Error });
      }
    }
  }
}
