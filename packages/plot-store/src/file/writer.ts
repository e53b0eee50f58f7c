/**
 * Writes a PLOT value file: `create` lays down the header (rows = 0: not finalized) and the zero row; rows are then
 * appended or written at their row ids (the builder writes chunks at fixed offsets so a resumed build can fill
 * them in any order); `finalize` records the row count, syncs and closes. A reader refuses a file until then.
 */
import { closeSync, fstatSync, fsyncSync, ftruncateSync, openSync, readSync, writeSync } from 'node:fs';

import { PlotStoreArgumentError } from '../policy/errors.js';
import { encodeF16 } from '../policy/f16.js';
import { ZERO_ROW } from '../policy/value-store.js';
import { PlotFileFormatError, PlotFileStateError } from './errors.js';
import { checkShape, decodeHeader, encodeHeader, PLOT_FILE_HEADER_BYTES, plotFileRowBytes } from './format.js';

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The bytes of fp16 bits as the file stores them (little-endian), without a copy where the platform already is. */
export function littleEndianBytes(bits: Uint16Array): Uint8Array {
  if (LITTLE_ENDIAN) return new Uint8Array(bits.buffer, bits.byteOffset, bits.byteLength);
  const out = new Uint8Array(bits.byteLength);
  const view = new DataView(out.buffer);
  for (let i = 0; i < bits.length; i++) view.setUint16(2 * i, bits[i]!, true);
  return out;
}

export interface PlotValueFileShape {
  /** 3 (default) for encoder values, 1 for last-slot causal values. */
  slots?: number;
  hidden: number;
}

export class PlotValueFileWriter {
  readonly path: string;
  readonly slots: number;
  readonly hidden: number;
  readonly rowWidth: number;
  readonly bytesPerRow: number;
  private fd: number | undefined;
  /** One past the highest row written (row 0 counts as written). */
  private end = 1;

  private constructor(path: string, fd: number, slots: number, hidden: number, end: number) {
    this.path = path;
    this.fd = fd;
    this.slots = slots;
    this.hidden = hidden;
    this.rowWidth = slots * hidden;
    this.bytesPerRow = plotFileRowBytes(slots, hidden);
    this.end = end;
  }

  /** Creates (or truncates) `path` with the header and the zero row. */
  static create(path: string, shape: PlotValueFileShape): PlotValueFileWriter {
    const slots = shape.slots ?? 3;
    checkShape(slots, shape.hidden);
    const fd = openSync(path, 'w+');
    try {
      writeAll(fd, encodeHeader({ slots, hidden: shape.hidden, rows: 0 }), 0);
      writeAll(fd, new Uint8Array(plotFileRowBytes(slots, shape.hidden)), PLOT_FILE_HEADER_BYTES);
      return new PlotValueFileWriter(path, fd, slots, shape.hidden, 1);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /**
   * Reopens a file that `create` made and nobody finalized (a killed build), checking its shape. Rows already on
   * disk stay; the caller decides which of them it trusts (the builder verifies each finished chunk).
   */
  static reopen(path: string, shape: PlotValueFileShape): PlotValueFileWriter {
    const slots = shape.slots ?? 3;
    checkShape(slots, shape.hidden);
    const fd = openSync(path, 'r+');
    try {
      const bytes = new Uint8Array(PLOT_FILE_HEADER_BYTES);
      const got = readSync(fd, bytes, 0, bytes.length, 0);
      const header = decodeHeader(bytes.subarray(0, got), path);
      if (header.rows !== 0) throw new PlotFileStateError(path, `is already finalized with ${header.rows} rows; it cannot be reopened for writing`);
      if (header.slots !== slots || header.hidden !== shape.hidden) {
        throw new PlotFileFormatError(path, `shape ${header.slots} × ${header.hidden} on disk, ${slots} × ${shape.hidden} asked for`);
      }
      const rowBytes = plotFileRowBytes(slots, shape.hidden);
      const end = Math.max(1, Math.floor((fstatSync(fd).size - PLOT_FILE_HEADER_BYTES) / rowBytes));
      return new PlotValueFileWriter(path, fd, slots, shape.hidden, end);
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Rows the file will hold if finalized now (row 0 included). */
  get rows(): number {
    return this.end;
  }

  /** Appends rows after the highest row written; fp32 values are rounded to fp16. Returns the first new row id. */
  append(values: Float32Array | Uint16Array): number {
    const first = this.end;
    this.writeRows(first, values);
    return first;
  }

  /** Writes rows `firstRow …` (row 0 is reserved); fp32 values are rounded to fp16, fp16 bits are taken as they are. */
  writeRows(firstRow: number, values: Float32Array | Uint16Array): void {
    const fd = this.open('write rows');
    if (!Number.isInteger(firstRow) || firstRow <= ZERO_ROW) {
      throw new PlotStoreArgumentError(`rows are written from row 1 on (row 0 is the reserved zero row), got first row ${firstRow}`);
    }
    if (values.length % this.rowWidth !== 0) {
      throw new PlotStoreArgumentError(`values hold ${values.length} elements, not a multiple of the row width ${this.rowWidth} (${this.slots} × ${this.hidden})`);
    }
    const bits = values instanceof Uint16Array ? values : encodeF16(values);
    writeAll(fd, littleEndianBytes(bits), PLOT_FILE_HEADER_BYTES + firstRow * this.bytesPerRow);
    this.end = Math.max(this.end, firstRow + values.length / this.rowWidth);
  }

  /** Forces the rows written so far to disk (the builder does this before it records a chunk as done). */
  sync(): void {
    fsyncSync(this.open('sync'));
  }

  /**
   * Records the row count (rows 0 … rows−1; default: one past the highest row written), trims anything past it,
   * syncs and closes. Rows never written read as zeros.
   */
  finalize(rows: number = this.end): void {
    const fd = this.open('finalize');
    if (!Number.isInteger(rows) || rows < this.end) throw new PlotStoreArgumentError(`finalize: ${rows} rows, but rows up to ${this.end - 1} were written`);
    const bytes = PLOT_FILE_HEADER_BYTES + rows * this.bytesPerRow;
    // Exact length (a reopened file may hold rows past `rows`); the header goes last, so a crash leaves it unfinalized.
    ftruncateSync(fd, bytes);
    fsyncSync(fd);
    writeAll(fd, encodeHeader({ slots: this.slots, hidden: this.hidden, rows }), 0);
    fsyncSync(fd);
    this.close();
  }

  /** Closes without finalizing (the file stays resumable). Idempotent. */
  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }

  private open(what: string): number {
    if (this.fd === undefined) throw new PlotFileStateError(this.path, `cannot ${what}: the writer is closed or finalized`);
    return this.fd;
  }
}

function writeAll(fd: number, bytes: Uint8Array, position: number): void {
  let done = 0;
  while (done < bytes.length) done += writeSync(fd, bytes, done, bytes.length - done, position + done);
}
