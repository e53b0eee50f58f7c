import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BudgetExceededError, DTypeMismatchError, Tensor, allocatorStats, fromHalfBits, setBudget, toHalfBits } from '@tessera/native';
import { randomFloats, randomInts } from '@tessera/test-utils';
import {
  BadHeaderError,
  MissingTensorError,
  ModelFormatError,
  TruncatedFileError,
  UnknownDtypeError,
} from '../src/errors.js';
import { SAFETENSORS_MAX_HEADER_BYTES, SafetensorsFile, type SafetensorsEntry, writeSafetensors } from '../src/formats/safetensors.js';

const dir = mkdtempSync(join(tmpdir(), 'tessera-safetensors-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let fileCounter = 0;
const tmpFile = (name: string) => join(dir, `${fileCounter++}-${name}`);

/** A file with a hand-written header (for malformed cases the writer refuses to produce). */
function writeRaw(path: string, header: unknown, data: Uint8Array = new Uint8Array(0), headerText?: string): void {
  const json = Buffer.from(headerText ?? JSON.stringify(header), 'utf8');
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(path, Buffer.concat([prefix, json, data]));
}

function bytesOf(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

const f32 = randomFloats(6 * 5, 11);
const entries: Record<string, SafetensorsEntry> = {
  'w.f32': { dtype: 'f32', shape: [6, 5], data: f32 },
  'w.f16': { dtype: 'f16', shape: [3, 7], data: toHalfBits(randomFloats(21, 12), 'f16') },
  'w.bf16': { dtype: 'bf16', shape: [2, 2, 3], data: toHalfBits(randomFloats(12, 13), 'bf16') },
  'ids.i32': { dtype: 'i32', shape: [9], data: randomInts(9, 14, -1000, 1000) },
  'ids.i64': { dtype: 'i64', shape: [2, 2], data: BigInt64Array.from([1n, -2n, 2n ** 40n, -(2n ** 62n)]) },
  'mask.u8': { dtype: 'u8', shape: [7], data: Uint8Array.from([0, 1, 255, 3, 4, 5, 6]) },
  'empty.f32': { dtype: 'f32', shape: [0, 4], data: new Float32Array(0) },
  scalar: { dtype: 'f32', shape: [], data: Float32Array.of(3.5) },
};

describe('SafetensorsFile: round trip with writeSafetensors', () => {
  const path = tmpFile('all.safetensors');
  writeSafetensors(path, entries, { format: 'pt', note: 'ünïcode ✓' });

  it('lists every tensor with its dtype, shape and absolute byte range', () => {
    const file = SafetensorsFile.open(path);
    try {
      expect(new Set(file.names())).toEqual(new Set(Object.keys(entries)));
      expect(file.metadata).toEqual({ format: 'pt', note: 'ünïcode ✓' });
      const raw = readFileSync(path);
      for (const [name, entry] of Object.entries(entries)) {
        expect(file.has(name)).toBe(true);
        const info = file.info(name);
        expect(info.dtype).toBe(entry.dtype);
        expect(info.shape).toEqual(entry.shape);
        const bytes = bytesOf(entry.data as ArrayBufferView);
        expect(info.byteLength).toBe(bytes.length);
        // byteOffset is absolute in the file: the raw bytes there are the tensor's.
        expect(raw.subarray(info.byteOffset, info.byteOffset + info.byteLength).equals(bytes)).toBe(true);
      }
      // names() is in file order.
      const offsets = file.names().map((n) => file.info(n).byteOffset);
      expect([...offsets].sort((a, b) => a - b)).toEqual(offsets);
      expect(file.has('nope')).toBe(false);
    } finally {
      file.close();
    }
  });

  it('reads every dtype back bitwise, as tensors (sync and async) and as host arrays', async () => {
    const file = SafetensorsFile.open(path);
    try {
      for (const [name, entry] of Object.entries(entries)) {
        const expected = bytesOf(entry.data as ArrayBufferView);
        const t = file.read(name);
        try {
          expect(t.dtype).toBe(entry.dtype);
          expect(t.shape).toEqual(entry.shape);
          expect(bytesOf(t.toArray()).equals(expected)).toBe(true);
        } finally {
          t.dispose();
        }
        const ta = await file.readAsync(name);
        try {
          expect(ta.shape).toEqual(entry.shape);
          expect(bytesOf(ta.toArray()).equals(expected)).toBe(true);
        } finally {
          ta.dispose();
        }
        const host = file.readHost(name);
        expect(host.constructor).toBe((entry.data as ArrayBufferView).constructor);
        expect(bytesOf(host).equals(expected)).toBe(true);
      }
    } finally {
      file.close();
    }
  });

  it('converts between f32, f16 and bf16 with the native cast, and refuses other conversions', async () => {
    const file = SafetensorsFile.open(path);
    try {
      const asF16 = file.read('w.f32', { dtype: 'f16' });
      expect(asF16.dtype).toBe('f16');
      expect(Array.from(asF16.toArray() as Uint16Array)).toEqual(Array.from(toHalfBits(f32, 'f16')));
      asF16.dispose();
      const bf16Bits = entries['w.bf16']!.data as Uint16Array;
      const asF32 = await file.readAsync('w.bf16', { dtype: 'f32' });
      expect(Array.from(asF32.toArray() as Float32Array)).toEqual(Array.from(fromHalfBits(bf16Bits, 'bf16')));
      asF32.dispose();
      const before = allocatorStats().inUse;
      expect(() => file.read('ids.i32', { dtype: 'f32' })).toThrow(DTypeMismatchError);
      expect(() => file.read('w.f32', { dtype: 'i32' })).toThrow(/w\.f32 is f32 and cannot be read as i32/);
      expect(allocatorStats().inUse).toBe(before);
    } finally {
      file.close();
    }
  });

  it('reads a file with zero tensors', () => {
    const p = tmpFile('zero.safetensors');
    writeSafetensors(p, {});
    const file = SafetensorsFile.open(p);
    expect(file.names()).toEqual([]);
    expect(file.metadata).toEqual({});
    file.close();
    const q = tmpFile('zero-meta.safetensors');
    writeSafetensors(q, [], { only: 'metadata' });
    const withMeta = SafetensorsFile.open(q);
    expect(withMeta.names()).toEqual([]);
    expect(withMeta.metadata).toEqual({ only: 'metadata' });
    withMeta.close();
  });
});

describe('SafetensorsFile: bad files are typed errors at open', () => {
  const good = tmpFile('good.safetensors');
  writeSafetensors(good, {
    a: { dtype: 'f32', shape: [4, 3], data: randomFloats(12, 1) },
    b: { dtype: 'bf16', shape: [5], data: toHalfBits(randomFloats(5, 2), 'bf16') },
    c: { dtype: 'u8', shape: [3], data: Uint8Array.of(1, 2, 3) },
  });
  const full = readFileSync(good);

  it('reports a truncated file at every cut point', () => {
    const p = tmpFile('cut.safetensors');
    for (let cut = 0; cut < full.length; cut++) {
      writeFileSync(p, full.subarray(0, cut));
      let caught: unknown;
      try {
        SafetensorsFile.open(p).close();
      } catch (e) {
        caught = e;
      }
      expect(caught, `cut at ${cut} of ${full.length}`).toBeInstanceOf(TruncatedFileError);
      expect((caught as TruncatedFileError).path).toBe(p);
    }
    // The messages say where: the length prefix, the header, or the tensor that runs past the end.
    writeFileSync(p, full.subarray(0, 5));
    expect(() => SafetensorsFile.open(p)).toThrow(/5 bytes is shorter than the 8-byte/);
    writeFileSync(p, full.subarray(0, 20));
    expect(() => SafetensorsFile.open(p)).toThrow(/header length \d+ runs past the end/);
    writeFileSync(p, full.subarray(0, full.length - 1));
    expect(() => SafetensorsFile.open(p)).toThrow(/tensor c ends at data byte/);
  });

  it('rejects an absurd header length', () => {
    const p = tmpFile('huge-len.safetensors');
    const buf = Buffer.alloc(64);
    buf.writeBigUInt64LE(BigInt(SAFETENSORS_MAX_HEADER_BYTES) + 1n);
    writeFileSync(p, buf);
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
    buf.writeBigUInt64LE(2n ** 64n - 1n);
    writeFileSync(p, buf);
    expect(() => SafetensorsFile.open(p)).toThrow(/exceeds the 100000000-byte limit/);
  });

  it('rejects a header that is not a UTF-8 JSON object', () => {
    const p = tmpFile('bad-json.safetensors');
    for (const text of ['{"a": {"dtype": "F32",', '', '[1, 2]', 'null', '"x"']) {
      writeRaw(p, null, undefined, text);
      expect(() => SafetensorsFile.open(p), text).toThrow(BadHeaderError);
    }
    const bytes = Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]); // {"\xff":1}
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(bytes.length));
    writeFileSync(p, Buffer.concat([prefix, bytes]));
    expect(() => SafetensorsFile.open(p)).toThrow(/not valid UTF-8 JSON/);
  });

  it('skips tensors of dtypes it does not read, and refuses them by name when asked for', () => {
    const p = tmpFile('f64.safetensors');
    writeRaw(
      p,
      {
        'mask.bool': { dtype: 'BOOL', shape: [3], data_offsets: [0, 3] },
        'scale.f64': { dtype: 'F64', shape: [2], data_offsets: [8, 24] },
        'q.i8': { dtype: 'I8', shape: [2, 2], data_offsets: [24, 28] },
        'layer.weight': { dtype: 'F32', shape: [2], data_offsets: [28, 36] },
      },
      new Uint8Array(36),
    );
    const file = SafetensorsFile.open(p);
    try {
      expect(file.names()).toEqual(['mask.bool', 'scale.f64', 'q.i8', 'layer.weight']);
      expect(file.has('scale.f64')).toBe(true);
      const read = file.read('layer.weight');
      expect(read.toArray()).toEqual(new Float32Array(2));
      read.dispose(); // freed now, not by a finalizer in the middle of another test's budget check
      let caught: unknown;
      try {
        file.read('scale.f64');
      } catch (e) {
        caught = e;
      }
      expect(caught).toBeInstanceOf(UnknownDtypeError);
      expect((caught as Error).message).toMatch(/scale\.f64 has dtype F64, which this engine does not read/);
      expect(() => file.info('q.i8')).toThrow(/q\.i8 has dtype I8/);
      expect(() => file.readHost('mask.bool')).toThrow(UnknownDtypeError);
    } finally {
      file.close();
    }
    // They are validated all the same: a size that disagrees with the dtype, an overlap, a run past the end.
    writeRaw(p, { x: { dtype: 'F64', shape: [2], data_offsets: [0, 12] } }, new Uint8Array(16));
    expect(() => SafetensorsFile.open(p)).toThrow(/x: data_offsets \[0, 12\] span 12 bytes but \[2\] F64 needs 16/);
    writeRaw(p, { x: { dtype: 'I8', shape: [8], data_offsets: [0, 8] }, y: { dtype: 'F32', shape: [2], data_offsets: [4, 12] } }, new Uint8Array(16));
    expect(() => SafetensorsFile.open(p)).toThrow(/overlap/);
    writeRaw(p, { x: { dtype: 'F4', shape: [8], data_offsets: [0, 64] } }, new Uint8Array(16));
    expect(() => SafetensorsFile.open(p)).toThrow(TruncatedFileError);
    writeRaw(p, { t: { dtype: 7, shape: [2], data_offsets: [0, 16] } }, new Uint8Array(16));
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
  });

  it('refuses a path that is not a regular file before opening it (a FIFO would block forever)', () => {
    const fifo = tmpFile('model.fifo');
    execFileSync('mkfifo', [fifo]);
    expect(() => SafetensorsFile.open(fifo)).toThrow(/not a regular file/);
    expect(() => SafetensorsFile.open(dirname(fifo))).toThrow(/not a regular file/);
  });

  it('rejects offsets that disagree with shape × dtype size, naming the tensor', () => {
    const p = tmpFile('offsets.safetensors');
    writeRaw(p, { 'x.weight': { dtype: 'F32', shape: [2, 3], data_offsets: [0, 20] } }, new Uint8Array(24));
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
    expect(() => SafetensorsFile.open(p)).toThrow(/x\.weight: data_offsets \[0, 20\] span 20 bytes but \[2, 3\] F32 needs 24/);
    writeRaw(p, { t: { dtype: 'F32', shape: [1], data_offsets: [8, 4] } }, new Uint8Array(24));
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
    for (const offsets of [[0], [0, 4, 8], [-4, 0], [0.5, 4.5], '0,4', null]) {
      writeRaw(p, { t: { dtype: 'F32', shape: [1], data_offsets: offsets } }, new Uint8Array(8));
      expect(() => SafetensorsFile.open(p), JSON.stringify(offsets)).toThrow(BadHeaderError);
    }
    for (const shape of [[-1], [1.5], ['2'], 2, null]) {
      writeRaw(p, { t: { dtype: 'F32', shape, data_offsets: [0, 8] } }, new Uint8Array(8));
      expect(() => SafetensorsFile.open(p), JSON.stringify(shape)).toThrow(BadHeaderError);
    }
    writeRaw(p, { t: [1, 2] }, new Uint8Array(8));
    expect(() => SafetensorsFile.open(p)).toThrow(/tensor t: header entry must be an object/);
  });

  it('rejects overlapping tensors but allows empty tensors anywhere', () => {
    const p = tmpFile('overlap.safetensors');
    writeRaw(
      p,
      {
        first: { dtype: 'F32', shape: [4], data_offsets: [0, 16] },
        second: { dtype: 'F32', shape: [2], data_offsets: [12, 20] },
      },
      new Uint8Array(20),
    );
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
    expect(() => SafetensorsFile.open(p)).toThrow(/first \[0, 16\) and second \[12, 20\) overlap/);
    writeRaw(
      p,
      {
        first: { dtype: 'F32', shape: [4], data_offsets: [0, 16] },
        hollow: { dtype: 'F32', shape: [0], data_offsets: [8, 8] },
        second: { dtype: 'U8', shape: [2], data_offsets: [16, 18] },
      },
      new Uint8Array(18),
    );
    const file = SafetensorsFile.open(p);
    expect(file.info('hollow').shape).toEqual([0]);
    file.close();
  });

  it('requires __metadata__ to map strings to strings', () => {
    const p = tmpFile('meta.safetensors');
    writeRaw(p, { __metadata__: { format: 1 } });
    expect(() => SafetensorsFile.open(p)).toThrow(/__metadata__\.format must be a string/);
    writeRaw(p, { __metadata__: ['x'] });
    expect(() => SafetensorsFile.open(p)).toThrow(BadHeaderError);
  });

  it('turns an unopenable path into a ModelFormatError naming it', () => {
    const p = join(dir, 'does-not-exist.safetensors');
    let caught: unknown;
    try {
      SafetensorsFile.open(p);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(ModelFormatError);
    expect((caught as ModelFormatError).code).toBe('TESSERA_FILE_UNREADABLE');
    expect((caught as ModelFormatError).path).toBe(p);
    expect(() => SafetensorsFile.open(dir)).toThrow(ModelFormatError);
  });
});

describe('SafetensorsFile: reads', () => {
  it('names the file and the tensor when a tensor is missing', async () => {
    const p = tmpFile('one.safetensors');
    writeSafetensors(p, { present: { dtype: 'f32', shape: [1], data: Float32Array.of(1) } });
    const file = SafetensorsFile.open(p);
    try {
      for (const attempt of [() => file.read('absent'), () => file.info('absent'), () => file.readHost('absent')]) {
        let caught: unknown;
        try {
          attempt();
        } catch (e) {
          caught = e;
        }
        expect(caught).toBeInstanceOf(MissingTensorError);
        expect((caught as Error).message).toContain(p);
        expect((caught as Error).message).toContain('absent');
      }
      await expect(file.readAsync('absent')).rejects.toThrow(MissingTensorError);
    } finally {
      file.close();
    }
  });

  it('reports a file truncated after it was opened, without leaking budget', async () => {
    const p = tmpFile('shrinks.safetensors');
    writeSafetensors(p, {
      a: { dtype: 'f32', shape: [16], data: randomFloats(16, 3) },
      b: { dtype: 'f32', shape: [16], data: randomFloats(16, 4) },
    });
    const file = SafetensorsFile.open(p);
    try {
      const last = file.names().at(-1)!;
      truncateSync(p, file.info(last).byteOffset + 10);
      const before = allocatorStats().inUse;
      expect(() => file.read(last)).toThrow(TruncatedFileError);
      expect(() => file.read(last)).toThrow(/ended after 10/);
      await expect(file.readAsync(last)).rejects.toThrow(TruncatedFileError);
      expect(allocatorStats().inUse).toBe(before);
    } finally {
      file.close();
    }
  });

  it('does not leak budget when the allocation or the conversion fails', () => {
    const p = tmpFile('budget.safetensors');
    writeSafetensors(p, { big: { dtype: 'f32', shape: [256, 64], data: randomFloats(256 * 64, 5) } }); // 64 KiB
    const file = SafetensorsFile.open(p);
    const saved = allocatorStats().budget;
    try {
      const inUse = allocatorStats().inUse;
      setBudget(inUse + 1024);
      expect(() => file.read('big')).toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(inUse);
      // Room for the f32 source but not for the f16 copy: the source must be freed too.
      setBudget(inUse + 64 * 1024 + 4096);
      expect(() => file.read('big', { dtype: 'f16' })).toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(inUse);
    } finally {
      setBudget(saved);
      file.close();
    }
  });

  it('closes once, after asynchronous reads in flight, and refuses reads after close', async () => {
    const p = tmpFile('close.safetensors');
    writeSafetensors(p, { t: { dtype: 'f32', shape: [1024], data: randomFloats(1024, 6) } });
    const file = SafetensorsFile.open(p);
    const inFlight = file.readAsync('t');
    file.close();
    const t: Tensor = await inFlight;
    expect(t.shape).toEqual([1024]);
    t.dispose();
    expect(file.closed).toBe(true);
    expect(() => file.read('t')).toThrow(/is closed/);
    await expect(file.readAsync('t')).rejects.toThrow(ModelFormatError);
    expect(() => file.readHost('t')).toThrow(ModelFormatError);
    file.close();
    // Header facts stay available after close.
    expect(file.info('t').byteLength).toBe(4096);
  });
});
