/**
 * PLOT values: one fp16 row `[slots, hidden]` per stored key (hmi.md §1.3: `(3, d)` for an encoder, 4,608 B at
 * d = 768), with row 0 reserved as the all-zero row that OOV keys and separators read. Rows carry reference counts so
 * copy-on-write tables can share them (A7): a row is freed, zeroed and reused when its last table lets go.
 *
 * {@link HeapPlotValueStore} keeps the rows in one growable typed array; the mmap-able value file implements the
 * same interface later.
 */
import { PlotStoreArgumentError, ReservedRowError, UnknownRowError } from './errors.js';
import { encodeF16 } from './f16.js';

/** The reserved all-zero row. */
export const ZERO_ROW = 0;

/** Bytes per fp16 element. */
export const F16_BYTES = 2;

export interface ValueStoreAccounting {
  /** Bytes per row: slots × hidden × 2. */
  bytesPerRow: number;
  /** Rows in use (held by at least one reference), not counting row 0. */
  liveRows: number;
  /** Freed rows waiting for reuse. */
  freeRows: number;
  /** Rows the store has room for without growing, row 0 included. */
  allocatedRows: number;
  /** liveRows × bytesPerRow. */
  liveBytes: number;
  /** Bytes of the reserved zero row. */
  reservedBytes: number;
  /** allocatedRows × bytesPerRow plus the reference counts. */
  allocatedBytes: number;
}

/** Reference-counted fp16 rows with a reserved zero row 0. */
export interface PlotValueStore {
  /** Rows per value: 3 for encoder tri-grams (left, centre, right), 1 for a last-slot-only causal table. */
  readonly slots: number;
  /** Hidden size d. */
  readonly hidden: number;
  /** fp16 elements per row: slots × hidden. */
  readonly rowWidth: number;
  readonly bytesPerRow: number;
  /** Rows held by at least one reference (row 0 excluded). */
  readonly liveRows: number;
  /**
   * Stores `values.length / rowWidth` rows, fp32 values rounded to fp16 (or fp16 bits taken as they are), each with
   * reference count 1, and returns their row ids.
   */
  append(values: Float32Array | Uint16Array): Int32Array;
  /** One more reference to a live row. */
  retain(row: number): void;
  /** One reference fewer; returns true when that freed the row. */
  release(row: number): boolean;
  /** References to a row (0 for a free or never-used row; row 0 answers 0). */
  refCount(row: number): number;
  /** The fp16 bits of one row (a copy). */
  read(row: number): Uint16Array;
  /** Copies the rows `rows[i]` into `out[i·rowWidth …]` (row 0 reads zeros). */
  gather(rows: ArrayLike<number>, out: Uint16Array): void;
  accounting(): ValueStoreAccounting;
}

export interface HeapPlotValueStoreOptions {
  hidden: number;
  /** 3 (default) for encoder values, 1 for last-slot causal values. */
  slots?: number;
  /** Rows to allocate up front, row 0 included. */
  initialRows?: number;
}

/** Values in one growable Uint16Array; freed rows are zeroed and reused last-freed first. */
export class HeapPlotValueStore implements PlotValueStore {
  readonly slots: number;
  readonly hidden: number;
  readonly rowWidth: number;
  readonly bytesPerRow: number;
  private data: Uint16Array;
  private refs: Uint32Array;
  /** Rows handed out so far (row 0 included): the high-water mark. */
  private used = 1;
  private free: number[] = [];
  private live = 0;

  constructor(options: HeapPlotValueStoreOptions) {
    const { hidden, slots = 3, initialRows = 64 } = options;
    if (!Number.isInteger(hidden) || hidden < 1) throw new PlotStoreArgumentError(`hidden must be a positive integer, got ${hidden}`);
    if (!Number.isInteger(slots) || slots < 1) throw new PlotStoreArgumentError(`slots must be a positive integer, got ${slots}`);
    if (!Number.isInteger(initialRows) || initialRows < 1) throw new PlotStoreArgumentError(`initialRows must be a positive integer, got ${initialRows}`);
    this.slots = slots;
    this.hidden = hidden;
    this.rowWidth = slots * hidden;
    this.bytesPerRow = this.rowWidth * F16_BYTES;
    this.data = new Uint16Array(initialRows * this.rowWidth);
    this.refs = new Uint32Array(initialRows);
  }

  get liveRows(): number {
    return this.live;
  }

  append(values: Float32Array | Uint16Array): Int32Array {
    if (values.length % this.rowWidth !== 0) {
      throw new PlotStoreArgumentError(`values hold ${values.length} elements, not a multiple of the row width ${this.rowWidth} (${this.slots} × ${this.hidden})`);
    }
    const count = values.length / this.rowWidth;
    const rows = new Int32Array(count);
    const bits = values instanceof Uint16Array ? values : encodeF16(values);
    for (let i = 0; i < count; i++) {
      const row = this.allocate();
      this.data.set(bits.subarray(i * this.rowWidth, (i + 1) * this.rowWidth), row * this.rowWidth);
      this.refs[row] = 1;
      rows[i] = row;
    }
    this.live += count;
    return rows;
  }

  retain(row: number): void {
    this.checkLive(row, 'retained');
    this.refs[row]!++;
  }

  release(row: number): boolean {
    this.checkLive(row, 'released');
    if (--this.refs[row]! > 0) return false;
    this.data.fill(0, row * this.rowWidth, (row + 1) * this.rowWidth);
    this.free.push(row);
    this.live--;
    return true;
  }

  refCount(row: number): number {
    return Number.isInteger(row) && row > ZERO_ROW && row < this.used ? this.refs[row]! : 0;
  }

  read(row: number): Uint16Array {
    if (row !== ZERO_ROW) this.checkLive(row, 'read');
    return this.data.slice(row * this.rowWidth, (row + 1) * this.rowWidth);
  }

  gather(rows: ArrayLike<number>, out: Uint16Array): void {
    const w = this.rowWidth;
    if (out.length < rows.length * w) throw new PlotStoreArgumentError(`out holds ${out.length} elements for ${rows.length} rows of ${w}`);
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i]!;
      if (row !== ZERO_ROW) this.checkLive(row, 'gathered');
      out.set(this.data.subarray(row * w, (row + 1) * w), i * w);
    }
  }

  accounting(): ValueStoreAccounting {
    const allocatedRows = this.refs.length;
    return {
      bytesPerRow: this.bytesPerRow,
      liveRows: this.live,
      freeRows: this.free.length,
      allocatedRows,
      liveBytes: this.live * this.bytesPerRow,
      reservedBytes: this.bytesPerRow,
      allocatedBytes: allocatedRows * this.bytesPerRow + this.refs.byteLength,
    };
  }

  private allocate(): number {
    const reused = this.free.pop();
    if (reused !== undefined) return reused;
    if (this.used === this.refs.length) {
      const rows = this.refs.length * 2;
      const data = new Uint16Array(rows * this.rowWidth);
      data.set(this.data);
      const refs = new Uint32Array(rows);
      refs.set(this.refs);
      this.data = data;
      this.refs = refs;
    }
    return this.used++;
  }

  private checkLive(row: number, what: string): void {
    if (row === ZERO_ROW) throw new ReservedRowError(row, `the zero row cannot be ${what}`);
    if (!Number.isInteger(row) || row < 0 || row >= this.used || this.refs[row] === 0) throw new UnknownRowError(row);
  }
}
