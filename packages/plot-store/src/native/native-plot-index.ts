/**
 * {@link NativePlotIndex}: the {@link PlotIndex} whose slots live in native memory (@tessera/native's
 * NativePlotTable: open addressing, linear probing, backward-shift deletion, the hash and growth policy of
 * OpenAddressingPlotIndex, so both hold the same key in the same slot). Its getBatch is one native call, and
 * it is what {@link lookupAggregate} takes as a chain. Free it with {@link NativePlotIndex.dispose} when done (garbage
 * collection frees it otherwise).
 */
import { NativePlotTable } from '@tessera/native';
import { PlotStoreArgumentError } from '../policy/errors.js';
import { isPackedKey, type PlotKey } from '../policy/keys.js';
import { checkKeyRow, MISSING_ROW, type OpenAddressingIndexOptions, type PlotIndex } from '../policy/plot-index.js';

export class NativePlotIndex implements PlotIndex {
  /** The native table (for chains of the fused calls). */
  readonly table: NativePlotTable;

  constructor(options: OpenAddressingIndexOptions = {}, table?: NativePlotTable) {
    const expected = options.expectedKeys ?? 0;
    if (!Number.isInteger(expected) || expected < 0) throw new PlotStoreArgumentError(`expectedKeys must be a non-negative integer, got ${expected}`);
    this.table = table ?? NativePlotTable.create(expected);
  }

  get size(): number {
    return this.table.size;
  }

  /** Slots allocated (a power of two). */
  get capacity(): number {
    return this.table.capacity;
  }

  /** 12 bytes per slot (u64 key, i32 row), as the TS index. */
  get byteLength(): number {
    return this.table.byteLength;
  }

  get(key: PlotKey): number {
    return isPackedKey(key) ? this.table.get(key) : MISSING_ROW;
  }

  has(key: PlotKey): boolean {
    return this.get(key) !== MISSING_ROW;
  }

  set(key: PlotKey, row: number): number {
    checkKeyRow(key, row);
    return this.table.set(key, row);
  }

  delete(key: PlotKey): number {
    return isPackedKey(key) ? this.table.delete(key) : MISSING_ROW;
  }

  /** One native call. Keys above 63 bits are never stored, so they read {@link MISSING_ROW} as in the TS index. */
  getBatch(keys: BigUint64Array, out: Int32Array): void {
    if (out.length < keys.length) throw new PlotStoreArgumentError(`out holds ${out.length} rows for ${keys.length} keys`);
    this.table.getBatch(keys, out);
  }

  *entries(): IterableIterator<[PlotKey, number]> {
    const { keys, rows } = this.table.entries();
    for (let i = 0; i < rows.length; i++) yield [keys[i]!, rows[i]!];
  }

  rows(): Int32Array {
    return this.table.entries().rows;
  }

  clone(): NativePlotIndex {
    return new NativePlotIndex({}, this.table.clone());
  }

  /** Drops every key (capacity back to what the index was created with). */
  clear(): void {
    this.table.clear();
  }

  /** Frees the native slots now; any later call throws. Idempotent. */
  dispose(): void {
    this.table.dispose();
  }
}
