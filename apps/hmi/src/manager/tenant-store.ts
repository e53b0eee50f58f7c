/**
 * The tenants (hmi.md §1.6–1.8, A8): their metadata here, in memory; their adapters and heads in
 * `@tessera/adapter-swap`'s `LayerwiseAdapterStore` — one file per tenant on disk (`<dir>/<id>.tsadapt`, the metadata
 * record inside it, so a restart finds both) and a host LRU under a byte budget. Nothing of a tenant lives on the
 * device between batches: the runner copies a batch's vectors into its per-layer staging buffers (A12), so a
 * tenant adds 0 device bytes (§4.1 behaviour 8).
 *
 * A tenant's arrays are one flat f32 vector per upper layer, `[W_down (m·d) | b_down (m) | W_up (d·m) | b_up (d)]`,
 * plus its head (`W [labels, d]`, `b [labels]`). Accounting is exact: the state bytes are those arrays'
 * byteLengths (the store refuses any other shape, so they equal the formula); the disk bytes are the files'
 * lengths and the host bytes the cached arrays', both counted by the store.
 *
 * A write is staged (the file written under a temporary name) and then committed in one synchronous step with the
 * metadata, so a request never sees one tenant's new arrays with its old version, or the reverse; a read that
 * raced a commit is retried (`load`).
 */
import { AdapterShapeError, LayerwiseAdapterStore, type LayerwiseAdapterStoreStats, type StoredAdapterSet } from '@tessera/adapter-swap';
import { UnknownAdapterError } from '@tessera/core';
import { adapterStackNumel } from '@tessera/pet-ops';

import { UnknownTenantError } from '../errors.js';

export interface TenantHead {
  /** f32 [labels, hidden], row-major. */
  weight: Float32Array;
  /** f32 [labels]. */
  bias: Float32Array;
}

export interface TenantState {
  readonly id: string;
  /** The domain the tenant was created on ('root' for the root model). */
  readonly domain: string;
  /** The PLOT version it was fine-tuned on and reads (pinned in the version tree). */
  readonly version: string;
  /** Its class names; the head's rows, in order. */
  readonly labels: readonly string[];
  /** One flat adapter vector per upper layer. */
  readonly adapters: readonly Float32Array[];
  readonly head: TenantHead;
  /** Training examples seen so far (create + updates). */
  readonly examples: number;
  /** Optimiser steps taken so far. */
  readonly steps: number;
  readonly createdAt: string;
  readonly updatedAt: string;
}

/** A tenant without its arrays: what stays in memory. */
export interface TenantRecord extends Omit<TenantState, 'adapters' | 'head'> {
  /** The store's revision of the tenant's file. */
  readonly revision: number;
  /** Fingerprint of the PLOT version's table it was trained on (a restart serves it only on the same table). */
  readonly plot: string;
}

/** A tenant as the runner needs it: its record and the arrays of that same revision. */
export type LoadedTenant = TenantState & { readonly revision: number };

export interface TenantShape {
  hidden: number;
  bottleneck: number;
  /** Upper layers (one adapter each). */
  layers: number;
}

export interface TenantBytes {
  adapters: number;
  head: number;
  total: number;
}

export interface TenantStoreOptions {
  /** The directory of tenant files. */
  dir: string;
  /** Host LRU budget in bytes (default unlimited). */
  hostBudgetBytes?: number | undefined;
  /** fsync each file (default true; off for a scratch directory removed at close). */
  durable?: boolean | undefined;
}

/** Bytes of one tenant's state: the byteLength of every array it holds. */
export function tenantBytes(t: Pick<TenantState, 'adapters' | 'head'>): TenantBytes {
  let adapters = 0;
  for (const a of t.adapters) adapters += a.byteLength;
  const head = t.head.weight.byteLength + t.head.bias.byteLength;
  return { adapters, head, total: adapters + head };
}

/** What a tenant of `labels` classes costs by the formula: L_up × (2dm + m + d) × 4 + (labels·d + labels) × 4. */
export function expectedTenantBytes(shape: TenantShape, labels: number): number {
  return 4 * (shape.layers * adapterStackNumel(shape) + labels * shape.hidden + labels);
}

/** The metadata kept in each tenant's file. */
interface PersistedMeta {
  id: string;
  domain: string;
  version: string;
  plot: string;
  labels: string[];
  examples: number;
  steps: number;
  createdAt: string;
  updatedAt: string;
}

/** A write on disk, not yet visible: `commit()` makes the tenant's new arrays and metadata current in one step. */
export interface StagedTenant {
  commit(): TenantRecord;
  abort(): void;
}

export class TenantStore {
  readonly shape: TenantShape;
  readonly numel: number;
  /** The disk and host tiers of the tenants' arrays. */
  readonly files: LayerwiseAdapterStore;
  private readonly records = new Map<string, TenantRecord>();
  /** On disk from an earlier run, not served: their PLOT version does not exist (yet) in this run. */
  private readonly dormant = new Map<string, TenantRecord>();
  /** Files on disk this store could not use (refused by the scan, or without readable metadata). */
  readonly unreadable: { file: string; error: Error }[] = [];
  private adapterBytesTotal = 0;
  private headBytesTotal = 0;

  constructor(shape: TenantShape, options: TenantStoreOptions) {
    this.shape = shape;
    this.numel = adapterStackNumel(shape);
    this.files = new LayerwiseAdapterStore({ dir: options.dir, shape, hostBudgetBytes: options.hostBudgetBytes ?? Infinity, durable: options.durable ?? true });
    this.unreadable.push(...this.files.rejected);
    for (const id of this.files.ids()) {
      try {
        const meta = this.files.readMeta(id) as PersistedMeta | undefined;
        const info = this.files.info(id)!;
        if (!meta || meta.id !== id || !Array.isArray(meta.labels) || meta.labels.length !== info.labels) throw new Error(`${this.files.pathOf(id)}: no tenant metadata matching its head`);
        this.dormant.set(id, { ...meta, revision: info.revision });
      } catch (err) {
        this.unreadable.push({ file: this.files.pathOf(id), error: err as Error });
      }
    }
  }

  get size(): number {
    return this.records.size;
  }

  /** Σ tenants' state bytes (adapters + heads), served tenants only. */
  get bytes(): number {
    return this.adapterBytesTotal + this.headBytesTotal;
  }

  get adapterBytes(): number {
    return this.adapterBytesTotal;
  }

  get headBytes(): number {
    return this.headBytesTotal;
  }

  /** The store's tiers: disk bytes (Σ file lengths), host bytes (Σ cached arrays), hits, misses, reads, evictions. */
  tiers(): LayerwiseAdapterStoreStats {
    return this.files.stats();
  }

  has(id: string): boolean {
    return this.records.has(id);
  }

  record(id: string): TenantRecord | undefined {
    return this.records.get(id);
  }

  values(): IterableIterator<TenantRecord> {
    return this.records.values();
  }

  /** Persisted tenants not served (their PLOT version is not in this run's tree). */
  dormantRecords(): TenantRecord[] {
    return [...this.dormant.values()];
  }

  isDormant(id: string): boolean {
    return this.dormant.has(id);
  }

  /** Serves a dormant tenant (its version now exists with the same table). */
  adopt(id: string): TenantRecord {
    const r = this.dormant.get(id);
    if (!r) throw new UnknownTenantError(id);
    this.dormant.delete(id);
    this.records.set(id, r);
    this.account(r.labels.length, 1);
    return r;
  }

  /** Tenants on any version of `domain`. */
  countOnDomain(domain: string): number {
    let n = 0;
    for (const t of this.records.values()) if (t.domain === domain) n++;
    return n;
  }

  /** State bytes of a served tenant (by its label count: the store holds exactly those arrays). */
  bytesOf(id: string): TenantBytes {
    const r = this.records.get(id);
    if (!r) throw new UnknownTenantError(id);
    const total = expectedTenantBytes(this.shape, r.labels.length);
    const head = 4 * (r.labels.length * this.shape.hidden + r.labels.length);
    return { adapters: total - head, head, total };
  }

  /** The tenant's file length. */
  fileBytesOf(id: string): number {
    return this.files.info(id)?.fileBytes ?? 0;
  }

  /**
   * Writes a tenant's file (new or replacing) under a temporary name; `commit()` then makes it current, with its
   * metadata, in one synchronous step. Shape errors throw before anything is written.
   */
  async stage(state: TenantState, plot: string): Promise<StagedTenant> {
    const { adapters, head, ...rest } = state;
    if (head.bias.length !== state.labels.length) throw new RangeError(`tenant ${state.id}: a head of ${head.bias.length} rows for ${state.labels.length} labels`);
    const meta: PersistedMeta = { id: rest.id, domain: rest.domain, version: rest.version, plot, labels: [...rest.labels], examples: rest.examples, steps: rest.steps, createdAt: rest.createdAt, updatedAt: rest.updatedAt };
    let staged;
    try {
      staged = await this.files.stage(state.id, { adapters, head }, meta);
    } catch (err) {
      if (err instanceof AdapterShapeError) throw new RangeError(err.message, { cause: err });
      throw err;
    }
    return {
      commit: () => {
        const stored = staged.commit();
        const old = this.records.get(state.id) ?? this.dormant.get(state.id);
        if (this.records.has(state.id)) this.account(old!.labels.length, -1);
        this.dormant.delete(state.id);
        const record: TenantRecord = { ...meta, labels: meta.labels, revision: stored.revision };
        this.records.set(state.id, record);
        this.account(record.labels.length, 1);
        return record;
      },
      abort: () => staged.abort(),
    };
  }

  /** stage + commit. */
  async put(state: TenantState, plot = ''): Promise<TenantRecord> {
    return (await this.stage(state, plot)).commit();
  }

  /** Removes a served or dormant tenant: its file and host copy, in this call. Returns its record. */
  delete(id: string): TenantRecord | undefined {
    const r = this.records.get(id) ?? this.dormant.get(id);
    if (!r) return undefined;
    if (this.files.has(id)) this.files.delete(id);
    if (this.records.delete(id)) this.account(r.labels.length, -1);
    this.dormant.delete(id);
    return r;
  }

  /**
   * The tenant's record with the arrays of the same revision: from the host tier, else from disk. A read that raced
   * a commit (it returns an older revision) is done again. Unknown or deleted meanwhile: UnknownTenantError.
   */
  async load(id: string): Promise<LoadedTenant> {
    for (let attempt = 0; attempt < 16; attempt++) {
      if (!this.records.has(id)) throw new UnknownTenantError(id);
      let set: StoredAdapterSet;
      try {
        set = await this.files.get(id);
      } catch (err) {
        if (err instanceof UnknownAdapterError) throw new UnknownTenantError(id);
        throw err;
      }
      const r = this.records.get(id);
      if (!r) throw new UnknownTenantError(id);
      if (set.revision === r.revision) return { ...r, adapters: set.adapters, head: { weight: set.head.weight, bias: set.head.bias } };
    }
    throw new Error(`tenant ${id}: its file kept changing while it was read`);
  }

  /** Starts the disk reads of these tenants' arrays (hmi.md §1.8's prefetch, disk → host). */
  prefetch(ids: Iterable<string>): Promise<void> {
    return this.files.prefetch(ids);
  }

  private account(labels: number, sign: 1 | -1): void {
    const head = 4 * (labels * this.shape.hidden + labels);
    this.adapterBytesTotal += sign * (expectedTenantBytes(this.shape, labels) - head);
    this.headBytesTotal += sign * head;
  }
}
