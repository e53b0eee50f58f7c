/**
 * Reads a finalized PLOT value file. Node has no mmap, so there are two modes: 'load' reads the data into one
 * Uint16Array (lookups are array copies), 'read' keeps the file open and reads each gather's rows with positioned
 * reads into the caller's buffer (runs of consecutive rows in one read), for tables larger than memory.
 *
 * The file's rows never change, so the reader implements {@link ReadonlyPlotValueStore}, the read half of
 * PlotValueStore, rather than PlotValueStore with append/retain/release that throw: code that mutates a store (the
 * version tree's copy-on-write updates) then cannot be handed a file by mistake, a type error instead of a run-time
 * one, while code that only reads takes either.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';

import { PlotStoreArgumentError, UnknownRowError } from '../policy/errors.js';
import { type PlotValueStore, type ValueStoreAccounting, ZERO_ROW } from '../policy/value-store.js';
import { PlotFileSizeError, PlotFileStateError } from './errors.js';
import { decodeHeader, PLOT_FILE_HEADER_BYTES, plotFileBytes, plotFileRowBytes } from './format.js';

/** The read surface of a value store: what a lookup needs. Every PlotValueStore is one. */
export type ReadonlyPlotValueStore = Pick<PlotValueStore, 'slots' | 'hidden' | 'rowWidth' | 'bytesPerRow' | 'liveRows' | 'refCount' | 'read' | 'gather' | 'accounting'>;

export type PlotValueFileMode = 'load' | 'read';

export interface OpenPlotValueFileOptions {
  /** 'load' (default): the whole data in memory; 'read': positioned reads per gather. */
  mode?: PlotValueFileMode;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

export class PlotValueFile implements ReadonlyPlotValueStore {
  readonly path: string;
  readonly mode: PlotValueFileMode;
  readonly slots: number;
  readonly hidden: number;
  readonly rowWidth: number;
  readonly bytesPerRow: number;
  /** Rows in the file, row 0 included. */
  readonly rows: number;
  /** 'load' mode: every row. */
  private data: Uint16Array | undefined;
  /** 'read' mode: the open file. */
  private fd: number | undefined;
  private closed = false;

  private constructor(init: { path: string; mode: PlotValueFileMode; slots: number; hidden: number; rows: number; data?: Uint16Array; fd?: number }) {
    this.path = init.path;
    this.mode = init.mode;
    this.slots = init.slots;
    this.hidden = init.hidden;
    this.rowWidth = init.slots * init.hidden;
    this.bytesPerRow = plotFileRowBytes(init.slots, init.hidden);
    this.rows = init.rows;
    this.data = init.data;
    this.fd = init.fd;
  }

  /**
   * Opens a finalized file, checking the header (PlotFileFormatError), that it was finalized (PlotFileStateError)
   * and that its length is exactly what the header implies (PlotFileSizeError).
   */
  static open(path: string, options: OpenPlotValueFileOptions = {}): PlotValueFile {
    const mode = options.mode ?? 'load';
    if (mode !== 'load' && mode !== 'read') throw new PlotStoreArgumentError(`mode must be 'load' or 'read', got ${String(mode)}`);
    const fd = openSync(path, 'r');
    try {
      const head = new Uint8Array(PLOT_FILE_HEADER_BYTES);
      const got = readSync(fd, head, 0, head.length, 0);
      const header = decodeHeader(head.subarray(0, got), path);
      if (header.rows === 0) throw new PlotFileStateError(path, 'was never finalized (a build that stopped early: resume it, or rebuild)');
      const expected = plotFileBytes(header);
      const actual = fstatSync(fd).size;
      if (actual !== expected) throw new PlotFileSizeError(path, expected, actual);
      if (mode === 'read') return new PlotValueFile({ path, mode, ...header, fd });
      const data = new Uint16Array(header.rows * header.slots * header.hidden);
      readExactly(fd, new Uint8Array(data.buffer), PLOT_FILE_HEADER_BYTES, path);
      if (!LITTLE_ENDIAN) swapBytes(data);
      closeSync(fd);
      return new PlotValueFile({ path, mode, ...header, data });
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Every row but row 0 is live (the file holds exactly the rows it was built with). */
  get liveRows(): number {
    return this.rows - 1;
  }

  /** 1 for a row of the file, 0 for row 0 and ids outside it: a file holds one reference to each of its rows. */
  refCount(row: number): number {
    return Number.isInteger(row) && row > ZERO_ROW && row < this.rows ? 1 : 0;
  }

  read(row: number): Uint16Array {
    const out = new Uint16Array(this.rowWidth);
    this.gather([row], out);
    return out;
  }

  gather(rows: ArrayLike<number>, out: Uint16Array): void {
    const w = this.rowWidth;
    if (out.length < rows.length * w) throw new PlotStoreArgumentError(`out holds ${out.length} elements for ${rows.length} rows of ${w}`);
    this.checkOpen();
    for (let i = 0; i < rows.length; i++) this.checkRow(rows[i]!);
    if (this.data !== undefined) {
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i]!;
        out.set(this.data.subarray(row * w, (row + 1) * w), i * w);
      }
      return;
    }
    const bytes = new Uint8Array(out.buffer, out.byteOffset, rows.length * w * 2);
    for (let i = 0; i < rows.length; ) {
      const row = rows[i]!;
      if (row === ZERO_ROW) {
        out.fill(0, i * w, (i + 1) * w);
        i++;
        continue;
      }
      // One read for a run of consecutive rows (a sorted or sequential gather is one syscall).
      let run = 1;
      while (i + run < rows.length && rows[i + run] === row + run) run++;
      readExactly(this.fd!, bytes.subarray(i * this.bytesPerRow, (i + run) * this.bytesPerRow), PLOT_FILE_HEADER_BYTES + row * this.bytesPerRow, this.path);
      if (!LITTLE_ENDIAN) swapBytes(out.subarray(i * w, (i + run) * w));
      i += run;
    }
  }

  accounting(): ValueStoreAccounting {
    return {
      bytesPerRow: this.bytesPerRow,
      liveRows: this.liveRows,
      freeRows: 0,
      allocatedRows: this.rows,
      liveBytes: this.liveRows * this.bytesPerRow,
      reservedBytes: this.bytesPerRow,
      // The file's bytes (header included); in 'load' mode the same bytes, less the header, are in memory.
      allocatedBytes: plotFileBytes({ slots: this.slots, hidden: this.hidden, rows: this.rows }),
    };
  }

  /** Releases the data or the file descriptor. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
    this.data = undefined;
  }

  private checkOpen(): void {
    if (this.closed) throw new PlotFileStateError(this.path, 'is closed');
  }

  private checkRow(row: number): void {
    if (!Number.isInteger(row) || row < 0 || row >= this.rows) throw new UnknownRowError(row);
  }
}

function readExactly(fd: number, into: Uint8Array, position: number, path: string): void {
  let done = 0;
  while (done < into.length) {
    const got = readSync(fd, into, done, into.length - done, position + done);
    if (got === 0) throw new PlotFileSizeError(path, position + into.length, position + done);
    done += got;
  }
}

function swapBytes(bits: Uint16Array): void {
  for (let i = 0; i < bits.length; i++) bits[i] = ((bits[i]! & 0xff) << 8) | (bits[i]! >>> 8);
}
