/**
 * The PLOT version tree (hmi.md §1.1, §1.5, A2, A6, A7): a root table Φ_root plus one sparse table Φ_v per domain
 * version, each a key → row index over one shared, reference-counted value store.
 *
 * - Lookup (A2) walks the ancestor chain for the exact key first, then for its bi-gram back-off, then its uni-gram,
 *   and ends at the zero row; the separator always reads the zero row.
 * - A domain branch holds the keys an α-coverage selection chose (A6).
 * - Nothing is changed in place (A7). Updating a domain makes a new version beside the old one (same parent) and
 *   marks the old one superseded; editing a version (`derive`) makes a new version whose table shares every
 *   unchanged row with the old one. A version that is superseded or deleted is collected once nothing refers to it
 *   (no pins from tenants, no child versions), and collecting it releases only its own references to rows. So no
 *   update, delete or collection changes what any other version's lookups return.
 *
 * This is policy: it sees keys, row ids and byte counts, never a tensor. The values come in from the caller (the
 * window-mode builder, later), already computed for the keys the policy chose.
 */
import { CorpusTooSmallError, PlotStoreArgumentError, UnknownVersionError, VersionStateError } from './errors.js';
import type { CoverageBoundary, CoverageSelection } from './coverage.js';
import { type BackoffStep, formatKey, KEY_ID_BITS, type PlotKey, SEPARATOR_KEY, type TrigramKeyCodec } from './keys.js';
import { MISSING_ROW, OpenAddressingPlotIndex, type PlotIndex } from './plot-index.js';
import { type PlotValueStore, ZERO_ROW } from './value-store.js';

/** A version's id: `root`, or `<domain>@<generation>` (`bio@1`, then `bio@2` after an update). */
export type VersionId = string;

/** The id of the root version. */
export const ROOT_VERSION: VersionId = 'root';

/**
 * `live`: the current version of its domain (or the root). `superseded`: an update or edit replaced it; tenants
 * pinned to it keep reading it. `deleted`: its domain was deleted. Superseded and deleted versions are collected
 * when their last pin and child are gone.
 */
export type VersionState = 'live' | 'superseded' | 'deleted';

/** What a domain version records about how its table was chosen (A6). */
export interface CoverageRecord {
  alpha: number;
  boundary: CoverageBoundary;
  /** Key occurrences (tokens) in the domain corpus counted for the selection. */
  corpusTokens: number;
  distinct: number;
  kept: number;
  coveredOccurrences: number;
  coveredFraction: number;
  keptFraction: number;
}

export interface VersionInfo {
  id: VersionId;
  /** `root`, or the domain's name. */
  domain: string;
  /** 0 for the root, then 1, 2, … per domain. */
  generation: number;
  parent: VersionId | null;
  state: VersionState;
  /** Tenants (hPLMs) pinned to this version. */
  pins: number;
  /** Child versions not yet collected. */
  children: VersionId[];
  /** Keys in this version's own table. */
  entries: number;
  /**
   * How the table was chosen, for versions built from an α-coverage selection (a `derive`d version carries the
   * record of the version it edited; its `entries` are the edited table's). Null for the root.
   */
  coverage: CoverageRecord | null;
}

/** Where a lookup found its row. */
export interface LookupResult {
  /** The row to gather; {@link ZERO_ROW} for a separator or a key with no entry at any back-off step. */
  row: number;
  /** The key whose entry was used (the key itself or one of its back-offs); null when the row is the zero row. */
  key: PlotKey | null;
  /** The version whose table held it; null for the zero row. */
  version: VersionId | null;
  /** `exact`, `bigram`, `unigram`; `zero` when nothing was found; `separator` for the all-PAD key. */
  step: BackoffStep | 'zero' | 'separator';
}

/** Storage of one version's table. A row shared by two tables counts in both tables' `valueBytes` but is stored once. */
export interface TableStorage {
  version: VersionId;
  state: VersionState;
  entries: number;
  /** entries × bytesPerRow: what this table reads from the value store. */
  valueBytes: number;
  /** Bytes of rows only this table refers to: what collecting this version alone would free. */
  uniqueValueBytes: number;
  /** Bytes of rows this table shares with at least one other table. */
  sharedValueBytes: number;
  /** Bytes of this table's index. */
  indexBytes: number;
}

export interface StorageReport {
  bytesPerRow: number;
  tables: TableStorage[];
  totals: {
    tables: number;
    entries: number;
    /** Σ tables' valueBytes: the bytes the tables would take if nothing were shared. */
    referencedValueBytes: number;
    /** Distinct rows referred to by any table × bytesPerRow: the bytes actually stored. */
    storedValueBytes: number;
    /** Σ tables' uniqueValueBytes. */
    uniqueValueBytes: number;
    /** Distinct shared rows × bytesPerRow (storedValueBytes = uniqueValueBytes + sharedStoredBytes). */
    sharedStoredBytes: number;
    /** referencedValueBytes − storedValueBytes: what sharing saves. */
    savedBySharingBytes: number;
    /** Σ tables' indexBytes. */
    indexBytes: number;
    /** The reserved zero row. */
    reservedBytes: number;
    /** storedValueBytes + indexBytes + reservedBytes. */
    totalBytes: number;
  };
}

/** Keys and their values, `values.length = keys.length × rowWidth` (fp32 to be rounded to fp16, or fp16 bits). */
export interface TableEntries {
  keys: BigUint64Array | readonly PlotKey[];
  values: Float32Array | Uint16Array;
}

export interface PlotVersionTreeOptions {
  codec: TrigramKeyCodec;
  values: PlotValueStore;
  /** A domain corpus smaller than this many tokens cannot create or update a branch (default 0; hmi.md §5 item 8). */
  minCorpusTokens?: number;
  /** The index each table uses (default: the reference {@link OpenAddressingPlotIndex}). */
  createIndex?: (expectedKeys: number) => PlotIndex;
}

export interface CreateBranchOptions {
  /** The domain's name: letters, digits, `.`, `_`, `-`; unique among domains that are not deleted. */
  domain: string;
  /** The parent version (default: the root). Must be live. */
  parent?: VersionId;
  /** The α-coverage selection over the domain corpus (A6): its keys are the table's keys, in order. */
  selection: CoverageSelection;
  /** The values of `selection.keys`, in the same order. */
  values: Float32Array | Uint16Array;
}

export interface UpdateBranchOptions {
  /** The selection over the cumulative domain corpus (A7 recounts over old + new corpus). */
  selection: CoverageSelection;
  /** The values of `selection.keys`, computed with the updated lower layers. */
  values: Float32Array | Uint16Array;
}

export interface DeriveOptions {
  /** Keys to add or overwrite, with their values. */
  upsert?: TableEntries;
  /** Keys to drop from the new version's own table (lookups then fall through to the ancestors). */
  remove?: BigUint64Array | readonly PlotKey[];
}

interface VersionNode {
  id: VersionId;
  domain: string;
  generation: number;
  parent: VersionNode | null;
  children: Set<VersionNode>;
  index: PlotIndex;
  state: VersionState;
  pins: number;
  coverage: CoverageRecord | null;
  /** [self, parent, …, root]: fixed at creation, since a version's parent never changes. */
  chain: VersionNode[];
}

const DOMAIN_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
/** Key bits kept by each back-off step: (PAD,c,r); encoder (PAD,c,PAD); causal (PAD,PAD,r). */
const BIGRAM_MASK = (1n << BigInt(2 * KEY_ID_BITS)) - 1n;
const ENCODER_UNIGRAM_MASK = ((1n << BigInt(KEY_ID_BITS)) - 1n) << BigInt(KEY_ID_BITS);
const CAUSAL_UNIGRAM_MASK = (1n << BigInt(KEY_ID_BITS)) - 1n;

export class PlotVersionTree {
  readonly codec: TrigramKeyCodec;
  readonly values: PlotValueStore;
  readonly minCorpusTokens: number;
  private readonly createIndex: (expectedKeys: number) => PlotIndex;
  private readonly nodes = new Map<VersionId, VersionNode>();
  /** Each domain's live version (the root included). */
  private readonly currentByDomain = new Map<string, VersionNode>();
  /** The highest generation each domain name reached, so a re-created domain never reuses an id. */
  private readonly generations = new Map<string, number>();

  constructor(options: PlotVersionTreeOptions) {
    const { codec, values, minCorpusTokens = 0, createIndex = (n) => new OpenAddressingPlotIndex({ expectedKeys: n }) } = options;
    if (!Number.isInteger(minCorpusTokens) || minCorpusTokens < 0) throw new PlotStoreArgumentError(`minCorpusTokens must be a non-negative integer, got ${minCorpusTokens}`);
    this.codec = codec;
    this.values = values;
    this.minCorpusTokens = minCorpusTokens;
    this.createIndex = createIndex;
  }

  /** A5: the root table. Called once, before any branch. */
  createRoot(entries: TableEntries): VersionInfo {
    if (this.nodes.has(ROOT_VERSION)) throw new VersionStateError(ROOT_VERSION, 'the root table exists already');
    const node = this.addNode(ROOT_VERSION, 0, null, null);
    this.fill(node, entries);
    return this.describe(node);
  }

  /** A6: a new domain version under `parent`, holding the keys of an α-coverage selection. */
  createBranch(options: CreateBranchOptions): VersionInfo {
    const { domain, parent = ROOT_VERSION, selection, values } = options;
    if (typeof domain !== 'string' || !DOMAIN_NAME.test(domain) || domain === ROOT_VERSION) {
      throw new PlotStoreArgumentError(`a domain name is letters, digits, '.', '_' or '-' (not "root"), got ${JSON.stringify(domain)}`);
    }
    if (this.currentByDomain.has(domain)) throw new VersionStateError(this.currentByDomain.get(domain)!.id, `domain "${domain}" exists already: update it instead`);
    const parentNode = this.node(parent);
    if (parentNode.state !== 'live') throw new VersionStateError(parent, `cannot branch from ${parent}: it is ${parentNode.state}`);
    this.checkCorpus(selection);
    const generation = (this.generations.get(domain) ?? 0) + 1;
    const node = this.addNode(`${domain}@${generation}`, generation, parentNode, coverageRecord(selection), domain);
    this.fill(node, { keys: selection.keys, values });
    return this.describe(node);
  }

  /**
   * A7: a new version of a live domain, under the same parent, whose table is rebuilt from a selection over the
   * cumulative corpus with values from the updated lower layers. The old version is superseded: tenants pinned to
   * it keep reading it until they unpin, and it is collected then.
   */
  updateBranch(version: VersionId, options: UpdateBranchOptions): VersionInfo {
    const old = this.liveBranch(version, 'update');
    this.checkCorpus(options.selection);
    const node = this.addNode(`${old.domain}@${old.generation + 1}`, old.generation + 1, old.parent, coverageRecord(options.selection), old.domain);
    this.fill(node, { keys: options.selection.keys, values: options.values });
    this.supersede(old);
    return this.describe(node);
  }

  /**
   * Copy-on-write edit: a new version of a live domain whose table is the old one's with `remove` dropped and
   * `upsert` written; every row it does not overwrite is shared with the old version, not copied. The old version
   * is superseded, as by {@link updateBranch}.
   */
  derive(version: VersionId, options: DeriveOptions): VersionInfo {
    const old = this.liveBranch(version, 'edit');
    const upsertKeys = options.upsert ? this.checkEntries(options.upsert) : [];
    const removeKeys = [...(options.remove ?? [])].map((key) => this.codec.checkStorable(key));
    const index = old.index.clone();
    // The clone refers to every row of the old table: one more reference each, so the old table's collection
    // leaves them in place.
    for (const row of index.rows()) this.values.retain(row);
    for (const key of removeKeys) {
      const row = index.delete(key);
      if (row !== MISSING_ROW) this.values.release(row);
    }
    if (options.upsert) {
      const rows = this.values.append(options.upsert.values);
      upsertKeys.forEach((key, i) => {
        const previous = index.set(key, rows[i]!);
        if (previous !== MISSING_ROW) this.values.release(previous);
      });
    }
    const node = this.addNode(`${old.domain}@${old.generation + 1}`, old.generation + 1, old.parent, old.coverage, old.domain, index);
    this.supersede(old);
    return this.describe(node);
  }

  /** Deletes a live domain version: it leaves the domain list and is collected once no pin or child holds it. */
  delete(version: VersionId): void {
    const node = this.liveBranch(version, 'delete');
    node.state = 'deleted';
    this.currentByDomain.delete(node.domain);
    this.collectIfUnreferenced(node);
  }

  /** A tenant (hPLM) is built on `version`: it stays readable until {@link unpin}. Only live versions take new pins. */
  pin(version: VersionId): void {
    const node = this.node(version);
    if (node.state !== 'live') throw new VersionStateError(version, `cannot pin ${version}: it is ${node.state}`);
    node.pins++;
  }

  /** The tenant is gone (or was retrained on a newer version); a superseded or deleted version may be collected. */
  unpin(version: VersionId): void {
    const node = this.node(version);
    if (node.pins === 0) throw new VersionStateError(version, `${version} has no pins`);
    node.pins--;
    this.collectIfUnreferenced(node);
  }

  /** The live version of a domain (`root` for the root). */
  current(domain: string): VersionId {
    const node = this.currentByDomain.get(domain);
    if (!node) throw new UnknownVersionError(domain);
    return node.id;
  }

  has(version: VersionId): boolean {
    return this.nodes.has(version);
  }

  info(version: VersionId): VersionInfo {
    return this.describe(this.node(version));
  }

  /** Every version not yet collected, in creation order. */
  versions(): VersionInfo[] {
    return [...this.nodes.values()].map((n) => this.describe(n));
  }

  /** The lookup chain of a version: itself, its parent, …, the root. */
  chain(version: VersionId): VersionId[] {
    return this.node(version).chain.map((n) => n.id);
  }

  /** A2 for one key, with where the row came from. */
  lookup(version: VersionId, key: PlotKey): LookupResult {
    const chain = this.node(version).chain;
    if (key === SEPARATOR_KEY) return { row: ZERO_ROW, key: null, version: null, step: 'separator' };
    for (const cand of this.codec.backoff(key)) {
      for (const node of chain) {
        const row = node.index.get(cand.key);
        if (row !== MISSING_ROW) return { row, key: cand.key, version: node.id, step: cand.step };
      }
    }
    return { row: ZERO_ROW, key: null, version: null, step: 'zero' };
  }

  /**
   * A2 for a batch of keys (e.g. from {@link TrigramKeyCodec.keys}): `out[i]` is key i's row, exactly as
   * {@link lookup} would answer. Done step by step over the whole batch: every key against the chain, then the
   * bi-gram of each key still missing, then its uni-gram.
   */
  lookupRows(version: VersionId, keys: BigUint64Array, out: Int32Array = new Int32Array(keys.length)): Int32Array {
    if (out.length < keys.length) throw new PlotStoreArgumentError(`out holds ${out.length} rows for ${keys.length} keys`);
    const chain = this.node(version).chain;
    this.codec.checkKeys(keys);
    out.fill(MISSING_ROW, 0, keys.length);
    // The separator is never stored, so the exact pass leaves it at the zero row and it is never pending after.
    let pending: Int32Array | null = null;
    let candidates = keys;
    for (const step of ['exact', 'bigram', 'unigram'] as const) {
      if (step !== 'exact') {
        const missing: number[] = [];
        for (let i = 0; i < (pending ?? keys).length; i++) {
          const at = pending === null ? i : pending[i]!;
          if (out[at] === MISSING_ROW && keys[at] !== SEPARATOR_KEY) missing.push(at);
        }
        if (missing.length === 0) break;
        pending = Int32Array.from(missing);
        candidates = new BigUint64Array(pending.length);
        for (let j = 0; j < pending.length; j++) candidates[j] = this.backoffKey(keys[pending[j]!]!, step);
      }
      const found = new Int32Array(candidates.length);
      const scratch = new Int32Array(candidates.length);
      for (const node of chain) {
        node.index.getBatch(candidates, scratch);
        for (let j = 0; j < found.length; j++) if (found[j] === MISSING_ROW) found[j] = scratch[j]!;
      }
      for (let j = 0; j < found.length; j++) if (found[j] !== MISSING_ROW) out[pending === null ? j : pending[j]!] = found[j]!;
    }
    return out;
  }

  /** The bi-gram (left slot dropped) or uni-gram back-off of a key, as {@link TrigramKeyCodec.backoff} lists them. */
  private backoffKey(key: PlotKey, step: 'bigram' | 'unigram'): PlotKey {
    if (step === 'bigram') return key & BIGRAM_MASK;
    return key & (this.codec.mode === 'encoder' ? ENCODER_UNIGRAM_MASK : CAUSAL_UNIGRAM_MASK);
  }

  /** A2 then gather: the fp16 rows of a batch of keys, `[keys.length, rowWidth]`. */
  gather(version: VersionId, keys: BigUint64Array): Uint16Array {
    const rows = this.lookupRows(version, keys);
    const out = new Uint16Array(keys.length * this.values.rowWidth);
    this.values.gather(rows, out);
    return out;
  }

  /** The rows of one version's own table (not its ancestors'), as (key, row). */
  tableEntries(version: VersionId): [PlotKey, number][] {
    return [...this.node(version).index.entries()];
  }

  /** The rows of one version's own table (what it holds references to). */
  tableRows(version: VersionId): Int32Array {
    return this.node(version).index.rows();
  }

  /** Bytes per table (shared vs unique) and in total, counted from the tables themselves. */
  storage(): StorageReport {
    const bytesPerRow = this.values.bytesPerRow;
    const tablesPerRow = new Map<number, number>();
    const rowsOf = new Map<VersionNode, Int32Array>();
    for (const node of this.nodes.values()) {
      const rows = node.index.rows();
      rowsOf.set(node, rows);
      for (const row of rows) tablesPerRow.set(row, (tablesPerRow.get(row) ?? 0) + 1);
    }
    const tables: TableStorage[] = [];
    for (const node of this.nodes.values()) {
      let unique = 0;
      for (const row of rowsOf.get(node)!) if (tablesPerRow.get(row) === 1) unique++;
      const entries = node.index.size;
      tables.push({
        version: node.id,
        state: node.state,
        entries,
        valueBytes: entries * bytesPerRow,
        uniqueValueBytes: unique * bytesPerRow,
        sharedValueBytes: (entries - unique) * bytesPerRow,
        indexBytes: node.index.byteLength,
      });
    }
    let sharedRows = 0;
    for (const n of tablesPerRow.values()) if (n > 1) sharedRows++;
    const sum = (f: (t: TableStorage) => number): number => tables.reduce((a, t) => a + f(t), 0);
    const storedValueBytes = tablesPerRow.size * bytesPerRow;
    const indexBytes = sum((t) => t.indexBytes);
    const referencedValueBytes = sum((t) => t.valueBytes);
    return {
      bytesPerRow,
      tables,
      totals: {
        tables: tables.length,
        entries: sum((t) => t.entries),
        referencedValueBytes,
        storedValueBytes,
        uniqueValueBytes: sum((t) => t.uniqueValueBytes),
        sharedStoredBytes: sharedRows * bytesPerRow,
        savedBySharingBytes: referencedValueBytes - storedValueBytes,
        indexBytes,
        reservedBytes: bytesPerRow,
        totalBytes: storedValueBytes + indexBytes + bytesPerRow,
      },
    };
  }

  private node(version: VersionId): VersionNode {
    const node = this.nodes.get(version);
    if (!node) throw new UnknownVersionError(version);
    return node;
  }

  private liveBranch(version: VersionId, what: string): VersionNode {
    const node = this.node(version);
    if (node.parent === null) throw new VersionStateError(version, `cannot ${what} the root table`);
    if (node.state !== 'live') throw new VersionStateError(version, `cannot ${what} ${version}: it is ${node.state}`);
    return node;
  }

  private checkCorpus(selection: CoverageSelection): void {
    if (selection.totalOccurrences < this.minCorpusTokens) throw new CorpusTooSmallError(selection.totalOccurrences, this.minCorpusTokens);
  }

  private addNode(
    id: VersionId,
    generation: number,
    parent: VersionNode | null,
    coverage: CoverageRecord | null,
    domain = ROOT_VERSION,
    index?: PlotIndex,
  ): VersionNode {
    if (parent === null && id !== ROOT_VERSION) throw new PlotStoreArgumentError(`only the root has no parent`);
    if (parent !== null && !this.nodes.has(ROOT_VERSION)) throw new VersionStateError(ROOT_VERSION, 'create the root table first');
    const node: VersionNode = {
      id,
      domain,
      generation,
      parent,
      children: new Set(),
      index: index ?? this.createIndex(0),
      state: 'live',
      pins: 0,
      coverage,
      chain: [],
    };
    node.chain = [node, ...(parent?.chain ?? [])];
    parent?.children.add(node);
    this.nodes.set(id, node);
    this.currentByDomain.set(domain, node);
    this.generations.set(domain, generation);
    return node;
  }

  /** Validates entries: storable keys, no key twice, one row of values per key. Returns the keys. */
  private checkEntries(entries: TableEntries): PlotKey[] {
    const keys = [...entries.keys];
    const seen = new Set<PlotKey>();
    for (const key of keys) {
      this.codec.checkStorable(key);
      if (seen.has(key)) throw new PlotStoreArgumentError(`key ${formatKey(key)} is listed twice`);
      seen.add(key);
    }
    if (entries.values.length !== keys.length * this.values.rowWidth) {
      throw new PlotStoreArgumentError(`${keys.length} keys need ${keys.length * this.values.rowWidth} values (rows of ${this.values.rowWidth}), got ${entries.values.length}`);
    }
    return keys;
  }

  private fill(node: VersionNode, entries: TableEntries): void {
    let keys: PlotKey[];
    try {
      keys = this.checkEntries(entries);
    } catch (err) {
      this.discard(node);
      throw err;
    }
    node.index = this.createIndex(keys.length);
    const rows = this.values.append(entries.values);
    keys.forEach((key, i) => node.index.set(key, rows[i]!));
  }

  /** Undoes an {@link addNode} whose table could not be filled (nothing was stored yet). */
  private discard(node: VersionNode): void {
    this.nodes.delete(node.id);
    node.parent?.children.delete(node);
    if (this.currentByDomain.get(node.domain) === node) {
      const previous = [...this.nodes.values()].reverse().find((n) => n.domain === node.domain && n.state === 'live');
      if (previous) this.currentByDomain.set(node.domain, previous);
      else this.currentByDomain.delete(node.domain);
    }
    this.generations.set(node.domain, node.generation - 1);
  }

  private supersede(old: VersionNode): void {
    old.state = 'superseded';
    this.collectIfUnreferenced(old);
  }

  private collectIfUnreferenced(node: VersionNode | null): void {
    while (node !== null && node.state !== 'live' && node.pins === 0 && node.children.size === 0) {
      for (const row of node.index.rows()) this.values.release(row);
      this.nodes.delete(node.id);
      const parent = node.parent;
      parent?.children.delete(node);
      node = parent;
    }
  }

  private describe(node: VersionNode): VersionInfo {
    return {
      id: node.id,
      domain: node.domain,
      generation: node.generation,
      parent: node.parent?.id ?? null,
      state: node.state,
      pins: node.pins,
      children: [...node.children].map((c) => c.id),
      entries: node.index.size,
      coverage: node.coverage === null ? null : { ...node.coverage },
    };
  }
}

function coverageRecord(selection: CoverageSelection): CoverageRecord {
  return {
    alpha: selection.alpha,
    boundary: selection.boundary,
    corpusTokens: selection.totalOccurrences,
    distinct: selection.distinct,
    kept: selection.keys.length,
    coveredOccurrences: selection.coveredOccurrences,
    coveredFraction: selection.coveredFraction,
    keptFraction: selection.keptFraction,
  };
}
