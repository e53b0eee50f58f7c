/**
 * The window-mode builder on a generated tiny encoder (vocab 128, hidden 64, 3 layers; 2 lower layers; keys over ids < 64): values equal
 * the engine run directly on each window's tokens at the window's positions, gated, with masked slots exactly
 * zero; the value file holds them at rows 1…n; a build stopped by a chunk limit, an abort or a damaged chunk resumes
 * to the same bytes as an uninterrupted build.
 *
 * Tolerance: the builder batches hundreds of windows per engine call and the direct runs are one window each, so
 * f32 sums may differ in the last bits before the fp16 rounding; a value must be within 2⁻¹⁰·|v| + 1e-6 of the
 * direct run's f32 value (fp16 rounding is ≤ 2⁻¹¹·|v|).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mulberry32 } from '@tessera/core';
import { type EncoderModel, generateModel, loadEncoder } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';
import { buildPlotTable, computePlotValues, formatProgress, type PlotBuildProgress, type PlotGate } from '../src/builder/index.js';
import { PlotFileStateError, PlotValueFile } from '../src/file/index.js';
import { decodeF16, f16BitsToF32, f32ToF16Bits, PAD, packKey, PlotStoreArgumentError, ReservedKeyError, rootKeys, TrigramCounts, TrigramKeyCodec } from '../src/index.js';
import { lookupAggregate, NativePlotIndex } from '../src/native/index.js';
import { getCpuBackend, Tensor } from '@tessera/native';

const root = mkdtempSync(join(tmpdir(), 'plot-build-'));
const modelDir = join(root, 'encoder');
const { config } = generateModel(modelDir, { family: 'encoder', size: 'tiny', seed: 21, overrides: { vocabSize: 128, numLayers: 3 } });
const model = loadEncoder(modelDir);
afterAll(() => {
  model.dispose();
  rmSync(root, { recursive: true, force: true });
});

const H = config.hiddenSize;
const LOWER = 2;
/** Keys over the first 64 ids keep the root table small (a codec may be narrower than the model). */
const codec = new TrigramKeyCodec({ vocabSize: 64 });
const rand = mulberry32(5);
/** A trained-looking gate: sigmoid(w·h + b) spread over (0, 1), not ≈ 1. */
const gate: PlotGate = { weight: Array.from({ length: H }, () => (rand() - 0.5) * 0.6), bias: 0.3 };

/** f32 [tokens, H]: embeddings and layers [0, LOWER) of one sequence, run alone. */
function direct(m: EncoderModel, ids: number[], positionOffset: number, lower = LOWER): Float32Array {
  const ctx = m.prepare([{ ids, positionOffset }]);
  const h = m.embed(ctx);
  m.layers(0, lower, h, ctx);
  const out = h.toArray() as Float32Array;
  h.dispose();
  ctx.dispose();
  return out;
}

const sigmoid = (z: number) => 1 / (1 + Math.exp(-z));
function gated(h: Float32Array, g: PlotGate): Float64Array {
  let z = g.bias;
  h.forEach((v, i) => (z += g.weight[i]! * v));
  return Float64Array.from(h, (v) => v * sigmoid(z));
}

function expectSlotClose(bits: Uint16Array, want: ArrayLike<number>): void {
  expect(bits.length).toBe(want.length);
  for (let i = 0; i < bits.length; i++) {
    const got = f16BitsToF32(bits[i]!);
    const w = want[i]!;
    if (Math.abs(got - w) > 2 ** -10 * Math.abs(w) + 1e-6) expect.fail(`element ${i}: ${got} vs ${w}`);
  }
}

describe('computePlotValues (A4 in window mode)', () => {
  const [a, b, c2] = [7, 19, 33];
  const cases: [string, bigint, number[], number, number[]][] = [
    // name, key, the tokens run, their first position, the slots they fill
    ['tri-gram (l,c,r)', packKey(a, b, c2), [a, b, c2], 0, [0, 1, 2]],
    ['bi-gram back-off (PAD,c,r)', packKey(PAD, b, c2), [b, c2], 1, [1, 2]],
    ['last token (l,c,PAD)', packKey(a, b, PAD), [a, b], 0, [0, 1]],
    ['uni-gram (PAD,c,PAD)', packKey(PAD, b, PAD), [b], 1, [1]],
  ];
  // Many filler windows in the same batch, so batching is exercised (and cases land mid-batch).
  const filler = Array.from({ length: 37 }, (_, i) => packKey(1 + ((i * 5) % 63), 1 + ((i * 11) % 63), i % 3 === 0 ? PAD : 1 + ((i * 17) % 63)));
  const keys = [...filler.slice(0, 20), ...cases.map((k) => k[1]), ...filler.slice(20)];
  const values = computePlotValues(model, keys, { codec, lowerLayers: LOWER, gate, batchSize: 16 });
  const W = 3 * H;

  for (const [name, key, tokens, offset, slots] of cases) {
    it(`${name}: each filled slot = gate(engine on ${JSON.stringify(tokens.length)} tokens from position ${offset}), masked slots +0`, () => {
      const at = keys.indexOf(key) * W;
      const h = direct(model, tokens, offset);
      for (let s = 0; s < 3; s++) {
        const bits = values.subarray(at + s * H, at + (s + 1) * H);
        const t = slots.indexOf(s);
        if (t < 0) expect(bits).toEqual(new Uint16Array(H));
        else expectSlotClose(bits, gated(h.subarray(t * H, (t + 1) * H), gate));
      }
    });
  }

  it('a full tri-gram needs no offset: it equals the plain forward of [l,c,r] (positions 0,1,2) through the lower layers', () => {
    const at = keys.indexOf(cases[0]![1]) * W;
    const h = direct(model, [a, b, c2], 0);
    for (let s = 0; s < 3; s++) expectSlotClose(values.subarray(at + s * H, at + (s + 1) * H), gated(h.subarray(s * H, (s + 1) * H), gate));
  });

  it('the gate is applied: w = 0, b = 0 halves every value; and the gated values differ from the raw states', () => {
    const half = computePlotValues(model, [cases[0]![1]], { codec, lowerLayers: LOWER, gate: { weight: new Float64Array(H), bias: 0 } });
    const h = direct(model, [a, b, c2], 0);
    expectSlotClose(half, Float64Array.from(h, (v) => v / 2));
    const at = keys.indexOf(cases[0]![1]) * W;
    const raw = decodeF16(values.subarray(at, at + W));
    let differs = 0;
    raw.forEach((v, i) => (differs += Math.abs(v - h[i]!) > 1e-2 * Math.abs(h[i]!) + 1e-4 ? 1 : 0));
    expect(differs).toBeGreaterThan(W / 2);
  });

  it('lowerLayers 0 stores gated embeddings; lowerLayers is honoured (2 ≠ 3)', () => {
    const key = cases[3]![1];
    const zero = computePlotValues(model, [key], { codec, lowerLayers: 0, gate });
    expectSlotClose(zero.subarray(H, 2 * H), gated(direct(model, [b], 1, 0), gate));
    const three = computePlotValues(model, [key], { codec, lowerLayers: 3, gate });
    expect(three).not.toEqual(values.subarray(keys.indexOf(key) * W, (keys.indexOf(key) + 1) * W));
  });

  it('no keys → no values', () => {
    expect(computePlotValues(model, [], { codec, lowerLayers: LOWER, gate })).toEqual(new Uint16Array(0));
  });

  it('bad input → typed errors', () => {
    const opts = { codec, lowerLayers: LOWER, gate };
    expect(() => computePlotValues(model, [0n], opts)).toThrow(ReservedKeyError);
    expect(() => computePlotValues(model, [packKey(3, PAD, 4)], opts)).toThrow(ReservedKeyError);
    expect(() => computePlotValues(model, [packKey(3, 64, 4)], opts)).toThrow(/outside the vocabulary/);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, codec: new TrigramKeyCodec({ vocabSize: 64, mode: 'causal' }) })).toThrow(PlotStoreArgumentError);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, codec: new TrigramKeyCodec({ vocabSize: 129 }) })).toThrow(/larger than the model's/);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, lowerLayers: 4 })).toThrow(/lowerLayers must be an integer in \[0, 3\]/);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, gate: { weight: [1, 2], bias: 0 } })).toThrow(/gate weight has 2 entries/);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, gate: { ...gate, bias: Number.NaN } })).toThrow(PlotStoreArgumentError);
    expect(() => computePlotValues(model, [packKey(3, 4, 5)], { ...opts, batchSize: 0 })).toThrow(PlotStoreArgumentError);
  });
});

describe('buildPlotTable', () => {
  // A5's root over a small corpus: every uni-gram, the corpus's bi-gram back-offs and tri-grams (ragged sentences).
  const corpus = Array.from({ length: 12 }, (_, s) => Array.from({ length: 3 + ((s * 7) % 9) }, () => 1 + Math.floor(rand() * 63)));
  const keys = rootKeys(codec, new TrigramCounts().addBatch(codec.keys(corpus)));
  const chunkKeys = 23; // keys.length is not a multiple of it: a ragged last chunk
  const base = { model, codec, keys, lowerLayers: LOWER, gate, chunkKeys, batchSize: 40, modelId: 'tiny-21' };
  let n = 0;
  const out = () => join(root, `table-${n++}.plot`);

  const reference = out();
  const progress: PlotBuildProgress[] = [];
  const lines: string[] = [];
  const whole = buildPlotTable({ ...base, out: reference, onProgress: (p) => progress.push(p), progressLine: { write: (s: string) => lines.push(s) } as unknown as NodeJS.WritableStream });

  it('writes row i + 1 = computePlotValues(keys[i]) and row 0 = zeros; reports progress per chunk', async () => {
    const result = await whole;
    const chunks = Math.ceil(keys.length / chunkKeys);
    expect(keys.length % chunkKeys).not.toBe(0);
    expect(result).toMatchObject({ path: reference, complete: true, keys: keys.length, rows: keys.length + 1, computedChunks: chunks, skippedChunks: 0 });
    const file = PlotValueFile.open(reference);
    expect([file.rows, file.slots, file.hidden]).toEqual([keys.length + 1, 3, H]);
    const all = new Uint16Array(keys.length * 3 * H);
    file.gather(Int32Array.from(keys, (_, i) => i + 1), all);
    expect(all).toEqual(computePlotValues(model, keys, { codec, lowerLayers: LOWER, gate }));
    expect(file.read(0)).toEqual(new Uint16Array(3 * H));
    expect(existsSync(`${reference}.partial`)).toBe(false);
    expect(progress.map((p) => p.doneKeys)).toEqual(Array.from({ length: chunks }, (_, i) => Math.min((i + 1) * chunkKeys, keys.length)));
    expect(progress.at(-1)).toMatchObject({ totalKeys: keys.length, chunksDone: chunks, chunks, resumedKeys: 0, etaSeconds: 0 });
    expect(progress.every((p) => p.keysPerSecond > 0)).toBe(true);
    expect(lines).toHaveLength(chunks);
    expect(lines[0]).toMatch(/^plot-build: 23\/\d+ keys \(\d+\.\d%\), chunk 1\/\d+, \d+ keys\/s, ETA \d+(s|m\d\ds)\n$/);
    expect(formatProgress({ doneKeys: 5, totalKeys: 10, resumedKeys: 0, keysPerSecond: 0.5, etaSeconds: 3725, chunksDone: 1, chunks: 2 })).toBe(
      'plot-build: 5/10 keys (50.0%), chunk 1/2, 1 keys/s, ETA 1h02m',
    );
  });

  it('a finished build run again does nothing', async () => {
    await whole;
    const again = await buildPlotTable({ ...base, out: reference });
    expect(again).toMatchObject({ complete: true, computedChunks: 0 });
  });

  it('stopped by a chunk limit, then by an abort, then resumed: byte-identical to the uninterrupted build', async () => {
    await whole;
    const path = out();
    const first = await buildPlotTable({ ...base, out: path, maxChunks: 2 });
    expect(first).toMatchObject({ complete: false, stopped: 'chunk-limit', computedChunks: 2, path: undefined });
    expect(existsSync(path)).toBe(false);
    expect(() => PlotValueFile.open(`${path}.partial`)).toThrow(PlotFileStateError); // not finalized
    const abort = new AbortController();
    const seen: PlotBuildProgress[] = [];
    const second = await buildPlotTable({ ...base, out: path, signal: abort.signal, onProgress: (p) => (seen.push(p), abort.abort()) });
    expect(second).toMatchObject({ complete: false, stopped: 'aborted', computedChunks: 1, skippedChunks: 2 });
    expect(seen[0]).toMatchObject({ resumedKeys: 2 * chunkKeys, doneKeys: 3 * chunkKeys });
    const third = await buildPlotTable({ ...base, out: path });
    expect(third).toMatchObject({ complete: true, skippedChunks: 3, recomputedChunks: 0 });
    expect(third.computedChunks).toBe(Math.ceil(keys.length / chunkKeys) - 3);
    expect(readFileSync(path)).toEqual(readFileSync(reference));
  });

  it('resume verifies each recorded chunk: a damaged one, a cut-short one and one the manifest never recorded are recomputed', async () => {
    await whole;
    const path = out();
    await buildPlotTable({ ...base, out: path, maxChunks: 4 });
    const rowBytes = 3 * H * 2;
    const chunkStart = (c: number) => 64 + rowBytes * (1 + c * chunkKeys);
    const partial = readFileSync(`${path}.partial`);
    partial[chunkStart(1) + 5]! ^= 0x40; // a flipped bit inside chunk 1
    // Cut the file inside chunk 2 (a copy cut short), and drop chunk 3 from the manifest (killed before recording it).
    writeFileSync(`${path}.partial`, partial.subarray(0, chunkStart(2) + rowBytes));
    const manifest = JSON.parse(readFileSync(`${path}.build.json`, 'utf8'));
    delete manifest.chunks['3'];
    writeFileSync(`${path}.build.json`, JSON.stringify(manifest));
    const result = await buildPlotTable({ ...base, out: path });
    expect(result).toMatchObject({ complete: true, skippedChunks: 1, recomputedChunks: 2 });
    expect(result.computedChunks).toBe(Math.ceil(keys.length / chunkKeys) - 1);
    expect(readFileSync(path)).toEqual(readFileSync(reference));
  });

  it('killed after the rename but before the manifest said complete: the finished file is verified and kept', async () => {
    await whole;
    const manifestPath = `${reference}.build.json`;
    const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
    writeFileSync(manifestPath, JSON.stringify({ ...manifest, complete: false }));
    const before = readFileSync(reference);
    const result = await buildPlotTable({ ...base, out: reference });
    expect(result).toMatchObject({ complete: true, computedChunks: 0, skippedChunks: Math.ceil(keys.length / chunkKeys) });
    expect(JSON.parse(readFileSync(manifestPath, 'utf8')).complete).toBe(true);
    expect(readFileSync(reference)).toEqual(before);
  });

  it('an unreadable manifest → PlotFileStateError', async () => {
    const path = out();
    writeFileSync(`${path}.build.json`, '{ not json');
    await expect(buildPlotTable({ ...base, out: path })).rejects.toThrow(/not a readable build manifest/);
  });

  it('a manifest of other inputs is refused (naming what differs) unless restart', async () => {
    await whole;
    const path = out();
    await buildPlotTable({ ...base, out: path, maxChunks: 1 });
    await expect(buildPlotTable({ ...base, out: path, lowerLayers: 1 })).rejects.toThrow(/another build \(lowerLayers differ\); pass restart: true/);
    await expect(buildPlotTable({ ...base, out: path, modelId: 'other' })).rejects.toThrow(PlotFileStateError);
    await expect(buildPlotTable({ ...base, out: path, keys: keys.subarray(1) })).rejects.toThrow(/\(keys, keysSha256 differ\)/);
    await expect(buildPlotTable({ ...base, out: path, gate: { ...gate, bias: 0.31 } })).rejects.toThrow(/gateSha256/);
    // restart discards the other build; with the same inputs it resumes as usual.
    const other = await buildPlotTable({ ...base, out: path, lowerLayers: 1, restart: true });
    expect(other).toMatchObject({ complete: true, skippedChunks: 0 });
    expect(readFileSync(path)).not.toEqual(readFileSync(reference));
    const restarted = await buildPlotTable({ ...base, out: path, restart: true });
    expect(restarted).toMatchObject({ complete: true, skippedChunks: 0 });
    expect(existsSync(`${path}.partial`)).toBe(false);
    expect(readFileSync(path)).toEqual(readFileSync(reference));
  });

  it('loads the model from modelDir; an empty key list gives a file of the zero row', async () => {
    const path = out();
    const result = await buildPlotTable({ modelDir, keys: new BigUint64Array(0), out: path, lowerLayers: LOWER, gate });
    expect(result).toMatchObject({ complete: true, rows: 1, computedChunks: 0 });
    const file = PlotValueFile.open(path);
    expect([file.rows, file.liveRows]).toEqual([1, 0]);
  });

  it('bad options → typed errors before anything is written', async () => {
    const path = out();
    await expect(buildPlotTable({ ...base, out: path, keys: [packKey(1, 2, 3), 0n] })).rejects.toThrow(ReservedKeyError);
    await expect(buildPlotTable({ ...base, modelDir, out: path })).rejects.toThrow(/exactly one of model and modelDir/);
    await expect(buildPlotTable({ ...base, out: path, chunkKeys: 0 })).rejects.toThrow(PlotStoreArgumentError);
    await expect(buildPlotTable({ ...base, out: path, maxChunks: -1 })).rejects.toThrow(PlotStoreArgumentError);
    expect(existsSync(`${path}.partial`) || existsSync(`${path}.build.json`)).toBe(false);
  });
});

describe('E1: lookup + aggregation over a built table equals the lower layers run on each window', () => {
  // hmi.md §4.1 behaviour 1–4 end to end: a table built by computePlotValues from the sequences' own tri-grams (so
  // every key is covered), looked up and aggregated in one native call, against the engine run directly on every
  // window (direct()), gated, rounded to fp16 as stored, merged as A3 says (centre slot of token i's window + left
  // slot of window i+1 + right slot of window i−1) and normalised with position and type embeddings in double.
  // Tolerance: the builder's batched f32 sums may differ from the direct runs in the last bits, which can move an
  // fp16 rounding by one step (2⁻¹¹ relative); after the LayerNorm that stays far below 1e-3.
  it('for sequences of length 1, 2 and 7 (every boundary case), within 1e-3', () => {
    const seqs = [[12], [5, 40], [3, 9, 27, 9, 3, 50, 61]];
    const batch = codec.keys(seqs);
    const keys = [...new Set(Array.from(batch.keys).filter((k) => k !== 0n))];
    const values = computePlotValues(model, keys, { codec, lowerLayers: LOWER, gate });
    const table = new Uint16Array((keys.length + 1) * 3 * H);
    table.set(values, 3 * H);
    const backend = getCpuBackend();
    const index = new NativePlotIndex({ expectedKeys: keys.length });
    keys.forEach((k, i) => index.set(k, i + 1));
    const T = 7;
    const rnd = mulberry32(9);
    const posEmb = Float32Array.from({ length: T * H }, () => rnd() - 0.5);
    const typeEmb = Float32Array.from({ length: 2 * H }, () => rnd() - 0.5);
    const gamma = Float32Array.from({ length: H }, () => 1 + (rnd() - 0.5) * 0.2);
    const beta = Float32Array.from({ length: H }, () => (rnd() - 0.5) * 0.2);
    const t = (data: Float32Array, shape: number[]) => Tensor.from(data, shape, { backend });
    const params = { values: Tensor.from(table, [keys.length + 1, 3, H], { dtype: 'f16', backend }), posEmb: t(posEmb, [T, H]), typeEmb: t(typeEmb, [2, H]), gamma: t(gamma, [H]), beta: t(beta, [H]), eps: 1e-12 };
    const out = lookupAggregate([index], batch, params, { seqLen: T });
    const got = out.toArray() as Float32Array;
    out.dispose();
    for (const p of Object.values(params)) if (p instanceof Tensor) p.dispose();
    index.dispose();

    // The stored value of one slot of the window centred on token i: the engine on the window's tokens, gated, fp16.
    const f16 = (x: number) => f16BitsToF32(f32ToF16Bits(x));
    const slotOf = (seq: number[], i: number, slot: 0 | 1 | 2): Float64Array => {
      const l = i > 0 ? seq[i - 1]! : PAD, r = i + 1 < seq.length ? seq[i + 1]! : PAD;
      const tokens = [...(l !== PAD ? [l] : []), seq[i]!, ...(r !== PAD ? [r] : [])];
      const offset = l === PAD ? 1 : 0;
      const slots = [...(l !== PAD ? [0] : []), 1, ...(r !== PAD ? [2] : [])];
      const at = slots.indexOf(slot);
      if (at < 0) return new Float64Array(H);
      const h = direct(model, tokens, offset);
      return Float64Array.from(gated(h.subarray(at * H, (at + 1) * H), gate), f16);
    };
    let worst = 0;
    seqs.forEach((seq, b) => {
      for (let i = 0; i < T; i++) {
        const row = got.subarray((b * T + i) * H, (b * T + i + 1) * H);
        if (i >= seq.length) {
          expect(Array.from(row)).toEqual(new Array(H).fill(0));
          continue;
        }
        const z = slotOf(seq, i, 1);
        if (i + 1 < seq.length) slotOf(seq, i + 1, 0).forEach((v, k) => (z[k]! += v));
        if (i > 0) slotOf(seq, i - 1, 2).forEach((v, k) => (z[k]! += v));
        for (let k = 0; k < H; k++) z[k]! += posEmb[i * H + k]! + typeEmb[k]!;
        const mean = z.reduce((a, v) => a + v, 0) / H;
        const variance = z.reduce((a, v) => a + (v - mean) ** 2, 0) / H;
        for (let k = 0; k < H; k++) {
          const want = ((z[k]! - mean) / Math.sqrt(variance + 1e-12)) * gamma[k]! + beta[k]!;
          worst = Math.max(worst, Math.abs(row[k]! - want));
        }
      }
    });
    expect(worst).toBeLessThan(1e-3);
  });
});
