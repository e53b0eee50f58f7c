/**
 * The PLOT value file: round trips against the heap store as reference (random fp16 bits, ragged chunk sizes, row 0,
 * the empty table), both reader modes, and typed errors for damaged, truncated, unfinalized and misused files.
 */
import { mkdtempSync, readFileSync, rmSync, statSync, truncateSync, writeFileSync, appendFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mulberry32 } from '@tessera/core';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decodeHeader,
  PLOT_FILE_HEADER_BYTES,
  PlotFileFormatError,
  PlotFileSizeError,
  PlotFileStateError,
  PlotValueFile,
  type PlotValueFileMode,
  PlotValueFileWriter,
  type ReadonlyPlotValueStore,
} from '../src/file/index.js';
import { encodeF16, HeapPlotValueStore, PlotStoreArgumentError, UnknownRowError } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'plot-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const fresh = () => join(dir, `t${n++}.plot`);

/** Random finite fp16 bits (no NaN payloads, so bit equality is value equality). */
function randomBits(count: number, seed: number): Uint16Array {
  const rand = mulberry32(seed);
  const out = new Uint16Array(count);
  for (let i = 0; i < count; i++) {
    let h: number;
    do h = Math.floor(rand() * 0x10000);
    while ((h & 0x7c00) === 0x7c00);
    out[i] = h;
  }
  return out;
}

/** Writes chunks of the given row counts into a file and the same rows into a heap store (the reference). */
function build(path: string, slots: number, hidden: number, chunks: number[], seed: number): HeapPlotValueStore {
  const heap = new HeapPlotValueStore({ hidden, slots });
  const writer = PlotValueFileWriter.create(path, { slots, hidden });
  chunks.forEach((rows, c) => {
    const bits = randomBits(rows * slots * hidden, seed + c);
    const first = writer.append(bits);
    const ids = heap.append(bits);
    if (rows > 0) expect(first).toBe(ids[0]);
  });
  writer.finalize();
  return heap;
}

const MODES: PlotValueFileMode[] = ['load', 'read'];

describe('PLOT value file round trip', () => {
  for (const mode of MODES) {
    for (const [name, slots, hidden, chunks] of [
      ['encoder rows, ragged chunks', 3, 8, [5, 1, 0, 13, 2]],
      ['causal rows (1 slot), odd hidden', 1, 7, [3, 4]],
      ['one row', 3, 4, [1]],
      ['empty table (zero row only)', 3, 16, []],
    ] as const) {
      it(`${mode}: ${name}: every row, a shuffled gather and row 0 equal the heap store`, () => {
        const path = fresh();
        const heap = build(path, slots, hidden, [...chunks], 100 + n);
        const total = chunks.reduce((a: number, b: number) => a + b, 0);
        expect(statSync(path).size).toBe(PLOT_FILE_HEADER_BYTES + (total + 1) * slots * hidden * 2);
        const file = PlotValueFile.open(path, { mode });
        const store: ReadonlyPlotValueStore = file;
        expect([store.slots, store.hidden, store.rowWidth, store.bytesPerRow, store.liveRows]).toEqual([slots, hidden, slots * hidden, slots * hidden * 2, total]);
        expect(file.read(0)).toEqual(new Uint16Array(slots * hidden));
        for (let r = 1; r <= total; r++) expect(file.read(r)).toEqual(heap.read(r));
        // A gather with repeats, row 0, runs of consecutive rows and reversed order.
        const rand = mulberry32(7);
        const rows = Array.from({ length: 3 * total + 4 }, (_, i) => (i % 5 === 0 ? 0 : Math.floor(rand() * (total + 1))));
        for (let r = 1; r <= total; r++) rows.push(r);
        for (let r = total; r >= 1; r--) rows.push(r);
        const w = slots * hidden;
        const got = new Uint16Array(rows.length * w).fill(0xffff);
        const want = new Uint16Array(rows.length * w);
        file.gather(rows, got);
        heap.gather(rows, want);
        expect(got).toEqual(want);
        const acc = file.accounting();
        expect(acc).toMatchObject({ bytesPerRow: w * 2, liveRows: total, freeRows: 0, allocatedRows: total + 1, liveBytes: total * w * 2, reservedBytes: w * 2 });
        expect(acc.allocatedBytes).toBe(statSync(path).size);
        expect([file.refCount(0), file.refCount(1), file.refCount(total + 1)]).toEqual([0, total > 0 ? 1 : 0, 0]);
        file.close();
        expect(() => file.read(0)).toThrow(PlotFileStateError);
      });
    }
  }

  it('the reader is a ReadonlyPlotValueStore, not a PlotValueStore; every PlotValueStore is a ReadonlyPlotValueStore', () => {
    const path = fresh();
    build(path, 3, 2, [1], 3);
    const file = PlotValueFile.open(path);
    const heap: ReadonlyPlotValueStore = new HeapPlotValueStore({ hidden: 2 });
    // @ts-expect-error: a file's rows are immutable, so it has no append (nor retain / release)
    expect(file.append).toBeUndefined();
    expect(heap.read(0)).toEqual(file.read(0));
  });

  it('writeRows fills rows in any order; fp32 input is rounded to fp16 as the heap store rounds it', () => {
    const path = fresh();
    const hidden = 5;
    const w = 3 * hidden;
    const values = Float32Array.from({ length: 4 * w }, (_, i) => Math.sin(i) * 100);
    const writer = PlotValueFileWriter.create(path, { hidden });
    writer.writeRows(3, values.subarray(2 * w));
    writer.writeRows(1, values.subarray(0, 2 * w));
    expect(writer.rows).toBe(5);
    writer.finalize();
    const file = PlotValueFile.open(path);
    const got = new Uint16Array(4 * w);
    file.gather([1, 2, 3, 4], got);
    expect(got).toEqual(encodeF16(values));
  });

  it('finalize with more rows than written leaves zero rows; the data starts 64-byte aligned, little-endian', () => {
    const path = fresh();
    const writer = PlotValueFileWriter.create(path, { slots: 1, hidden: 2 });
    writer.append(new Uint16Array([0x3c00, 0xc000]));
    writer.finalize(4);
    const bytes = readFileSync(path);
    expect(decodeHeader(bytes, path)).toEqual({ slots: 1, hidden: 2, rows: 4 });
    expect(PLOT_FILE_HEADER_BYTES % 64).toBe(0);
    expect([...bytes.subarray(PLOT_FILE_HEADER_BYTES)]).toEqual([0, 0, 0, 0, 0x00, 0x3c, 0x00, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0]);
  });
});

describe('PLOT value file errors', () => {
  function finished(): string {
    const path = fresh();
    build(path, 3, 4, [3], 9);
    return path;
  }

  it('a damaged header byte, bad magic, a future version → PlotFileFormatError', () => {
    for (const [offset, value] of [[0, 0x58], [8, 2], [20, 5], [25, 1], [32, 2], [41, 0]] as const) {
      const path = finished();
      const bytes = readFileSync(path);
      bytes[offset] = bytes[offset] === value ? value + 1 : value;
      writeFileSync(path, bytes);
      for (const mode of MODES) expect(() => PlotValueFile.open(path, { mode })).toThrow(PlotFileFormatError);
    }
    const tiny = fresh();
    writeFileSync(tiny, 'TSPLOT');
    expect(() => PlotValueFile.open(tiny)).toThrow(/shorter than the 64-byte header/);
  });

  it('a truncated file or trailing bytes → PlotFileSizeError with both lengths', () => {
    const cut = finished();
    truncateSync(cut, statSync(cut).size - 1);
    for (const mode of MODES) expect(() => PlotValueFile.open(cut, { mode })).toThrow(PlotFileSizeError);
    expect(() => PlotValueFile.open(cut)).toThrow(/truncated: the header implies 160 bytes, the file has 159/);
    const long = finished();
    appendFileSync(long, new Uint8Array(2));
    expect(() => PlotValueFile.open(long)).toThrow(/trailing bytes/);
  });

  it('an unfinalized file is refused by the reader and can be reopened, but a finalized one cannot', () => {
    const path = fresh();
    const writer = PlotValueFileWriter.create(path, { hidden: 4 });
    writer.append(new Uint16Array(12).fill(0x3c00));
    writer.close();
    expect(() => PlotValueFile.open(path)).toThrow(PlotFileStateError);
    expect(() => PlotValueFileWriter.reopen(path, { hidden: 5 })).toThrow(PlotFileFormatError);
    const again = PlotValueFileWriter.reopen(path, { hidden: 4 });
    expect(again.rows).toBe(2);
    again.append(new Uint16Array(12).fill(0x4000));
    again.finalize();
    expect(() => writer.append(new Uint16Array(12))).toThrow(PlotFileStateError);
    expect(() => again.finalize()).toThrow(PlotFileStateError);
    expect(() => PlotValueFileWriter.reopen(path, { hidden: 4 })).toThrow(/already finalized/);
    const file = PlotValueFile.open(path);
    expect(file.read(2)[0]).toBe(0x4000);
  });

  it('bad rows and shapes → typed errors', () => {
    const file = PlotValueFile.open(finished(), { mode: 'read' });
    for (const row of [-1, 4, 1.5, Number.NaN]) expect(() => file.read(row)).toThrow(UnknownRowError);
    expect(() => file.gather([1, 2], new Uint16Array(23))).toThrow(PlotStoreArgumentError);
    const writer = PlotValueFileWriter.create(fresh(), { hidden: 4 });
    expect(() => writer.writeRows(0, new Uint16Array(12))).toThrow(PlotStoreArgumentError);
    expect(() => writer.append(new Uint16Array(11))).toThrow(/not a multiple of the row width 12/);
    writer.close();
    expect(() => PlotValueFileWriter.create(fresh(), { hidden: 0 })).toThrow(PlotStoreArgumentError);
    expect(() => PlotValueFileWriter.create(fresh(), { hidden: 4, slots: 1.5 })).toThrow(PlotStoreArgumentError);
    expect(() => PlotValueFile.open(fresh())).toThrow(/ENOENT/);
  });
});
