/**
 * The oracles themselves: erf, the float64 BERT forward against the engine, the merged model (dense recomputation
 * of the unified form on a 1-layer toy, in float64), and the host PetOp interpreter against hand computation.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EncoderConfig, encoderLinearModules, encoderNormModules, encoderTensorShapes, generateModel, loadEncoder } from '@tessera/engine';
import { Tensor, getBackend } from '@tessera/native';
import { describe, expect, it } from 'vitest';
import {
  PetShapeError,
  adapterKey,
  diffTensorNames,
  erf,
  generatePetParams,
  loraScale,
  loraTensorNames,
  maskTensorName,
  maskedOutCsr,
  mergePetIntoWeights,
  petRowIndices,
  referenceEncoderForward,
  referencePetSiteRun,
  seededSharedWeights,
} from '../src/index.js';

const toy: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 30,
  hiddenSize: 12,
  numLayers: 1,
  numHeads: 3,
  intermediateSize: 20,
  maxPositions: 8,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 2,
  labels: ['a', 'b'],
};

function sharedHost(config: EncoderConfig, seed = 1): Map<string, Float32Array> {
  return new Map([...seededSharedWeights(config, seed)].map(([n, t]) => [n, t.data]));
}

/** y [n, out] = x [n, in] · Wᵀ in float64. */
function matmulT(x: Float64Array, n: number, inF: number, w: ArrayLike<number>, outF: number): Float64Array {
  const y = new Float64Array(n * outF);
  for (let r = 0; r < n; r++) for (let o = 0; o < outF; o++) {
    let acc = 0;
    for (let i = 0; i < inF; i++) acc += x[r * inF + i]! * w[o * inF + i]!;
    y[r * outF + o] = acc;
  }
  return y;
}

function csrMatmulT(x: Float64Array, n: number, inF: number, csr: { indptr: Int32Array; indices: Int32Array; values: Float32Array }, outF: number): Float64Array {
  const y = new Float64Array(n * outF);
  for (let r = 0; r < n; r++) for (let o = 0; o < outF; o++) {
    let acc = 0;
    for (let e = csr.indptr[o]!; e < csr.indptr[o + 1]!; e++) acc += csr.values[e]! * x[r * inF + csr.indices[e]!]!;
    y[r * outF + o] = acc;
  }
  return y;
}

function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

const x = Float64Array.from({ length: 5 * 20 }, (_, i) => Math.sin(i * 1.7) * 0.9);

describe('erf', () => {
  it('matches tabulated values to 1e-13', () => {
    const table: [number, number][] = [[0, 0], [0.1, 0.1124629160182849], [0.5, 0.5204998778130465], [1, 0.8427007929497149], [2, 0.9953222650189527], [2.9, 0.9999589021219005], [3.5, 0.9999992569016276], [5, 0.9999999999984626]];
    for (const [v, want] of table) {
      expect(Math.abs(erf(v) - want), String(v)).toBeLessThan(1e-13);
      expect(Math.abs(erf(-v) + want), String(-v)).toBeLessThan(1e-13);
    }
  });
});

describe('referenceEncoderForward', () => {
  it('agrees with the engine EncoderModel on a generated tiny model', () => {
    const dir = mkdtempSync(join(tmpdir(), 'pet-ref-'));
    try {
      const gen = generateModel(dir, { family: 'encoder', size: 'tiny', seed: 3, sharpen: 30 });
      const model = loadEncoder(dir);
      try {
        const seqs = [{ ids: [2, 17, 99, 400, 3] }, { ids: [2, 5, 3], tokenTypes: [0, 1, 1] }];
        const out = model.forward(seqs);
        const ref = referenceEncoderForward(gen.config, (name) => model.weights.hostF32(name), seqs);
        const logits = out.logits!.toArray() as Float32Array;
        ref.logits.forEach((l, b) => expect(maxDiff(logits.subarray(b * 3, b * 3 + 3), l)).toBeLessThan(1e-4));
        const hidden = out.hidden!.toArray() as Float32Array;
        expect(maxDiff(hidden.subarray(0, 5 * 64), ref.hidden[0]!)).toBeLessThan(1e-4);
        out.hidden!.dispose();
        out.pooled!.dispose();
        out.logits!.dispose();
      } finally {
        model.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('mergePetIntoWeights on a 1-layer toy, float64', () => {
  const host = sharedHost(toy);
  const lin = encoderLinearModules(toy, 0);
  const n = 5;

  it('Diff: X·Wᵀ + b + X·δᵀ + b_t equals X·(W + δ)ᵀ + (b + b_t)', () => {
    const params = generatePetParams('diff', toy, { seed: 4, density: 0.2 });
    const merged = mergePetIntoWeights(host, toy, params);
    for (const [module, inF, outF] of [[lin.query, 12, 12], [lin.ffn_in, 12, 20], [lin.ffn_out, 20, 12]] as const) {
      const names = diffTensorNames(module);
      const csr = { indptr: params.tensors.get(names.indptr)!.data as Int32Array, indices: params.tensors.get(names.indices)!.data as Int32Array, values: params.tensors.get(names.values)!.data as Float32Array };
      expect(csr.indices.length).toBe(Math.round(0.2 * inF * outF));
      const shared = matmulT(x, n, inF, host.get(`${module}.weight`)!, outF);
      const sparse = csrMatmulT(x, n, inF, csr, outF);
      const b = host.get(`${module}.bias`)!;
      const bt = params.tensors.get(names.biasDiff)!.data as Float32Array;
      const unified = shared.map((v, i) => v + sparse[i]! + b[i % outF]! + bt[i % outF]!);
      const dense = matmulT(x, n, inF, merged.weights.get(`${module}.weight`)!, outF).map((v, i) => v + merged.weights.get(`${module}.bias`)![i % outF]!);
      expect(maxDiff(unified, dense), module).toBeLessThan(1e-6);
      expect(maxDiff(sparse, new Float64Array(sparse.length)), module).toBeGreaterThan(1e-3);
    }
    const ln = encoderNormModules(toy, 0).ffn_ln;
    expect(merged.weights.get(`${ln}.weight`)).toEqual(params.tensors.get(`${ln}.weight`)!.data);
  });

  it('MaskBert: X·Wᵀ − X·(W ⊙ M̄)ᵀ equals X·(W ⊙ M)ᵀ', () => {
    const params = generatePetParams('maskbert', toy, { seed: 5, maskZeros: 0.3 });
    const merged = mergePetIntoWeights(host, toy, params);
    for (const [module, inF, outF] of [[lin.value, 12, 12], [lin.ffn_out, 20, 12]] as const) {
      const w = host.get(`${module}.weight`)!;
      const s = maskedOutCsr(params.tensors.get(maskTensorName(module))!.data as Uint8Array, w, outF, inF);
      expect(s.indices.length).toBe(Math.round(0.3 * inF * outF));
      const unified = matmulT(x, n, inF, w, outF).map((v, i) => v - csrMatmulT(x, n, inF, s, outF)[i]!);
      const dense = matmulT(x, n, inF, merged.weights.get(`${module}.weight`)!, outF);
      expect(maxDiff(unified, dense), module).toBeLessThan(1e-6);
      const zeros = merged.weights.get(`${module}.weight`)!.reduce((c, v) => c + (v === 0 ? 1 : 0), 0);
      expect(zeros).toBe(s.indices.length);
    }
    expect(merged.weights.get(`${lin.value}.bias`)).toEqual(host.get(`${lin.value}.bias`));
  });

  it('LoRA: W + s·B·A; BitFit: b_t; STANDARD: the shared weights; every type: the task head', () => {
    const lora = generatePetParams('lora', toy, { seed: 6, rank: 3, alpha: 9, labels: ['p', 'q', 'r'] });
    const m = mergePetIntoWeights(host, toy, lora);
    expect(m.config.numLabels).toBe(3);
    expect(m.config.labels).toEqual(['p', 'q', 'r']);
    expect(m.weights.get('classifier.weight')).toEqual(lora.tensors.get('classifier.weight')!.data);
    const a = lora.tensors.get(loraTensorNames(lin.query).a)!.data as Float32Array;
    const b = lora.tensors.get(loraTensorNames(lin.query).b)!.data as Float32Array;
    expect(loraScale(lora.config)).toBe(3);
    let acc = 0;
    for (let j = 0; j < 3; j++) acc += b[4 * 3 + j]! * a[j * 12 + 7]!;
    expect(m.weights.get(`${lin.query}.weight`)![4 * 12 + 7]).toBeCloseTo(host.get(`${lin.query}.weight`)![4 * 12 + 7]! + 3 * acc, 6);
    expect(m.weights.get(`${lin.key}.weight`)).toEqual(host.get(`${lin.key}.weight`));

    const bitfit = generatePetParams('bitfit', toy, { seed: 7 });
    expect(mergePetIntoWeights(host, toy, bitfit).weights.get(`${lin.ffn_in}.bias`)).toEqual(bitfit.tensors.get(`${lin.ffn_in}.bias`)!.data);

    const std = mergePetIntoWeights(host, toy, generatePetParams('standard', toy, { seed: 8 }));
    for (const [name] of encoderTensorShapes(toy)) if (!name.startsWith('classifier.')) expect(std.weights.get(name), name).toEqual(host.get(name));
    expect(std.extensions).toEqual({});
  });

  it('Adapter and prefix come back as extensions', () => {
    const adapter = mergePetIntoWeights(host, toy, generatePetParams('adapter', toy, { seed: 9, bottleneck: 2 }));
    expect([...adapter.extensions.adapters!.keys()].sort()).toEqual([adapterKey(0, 'attn_out'), adapterKey(0, 'ffn_out')].sort());
    expect(adapter.extensions.adapters!.get(adapterKey(0, 'ffn_out'))).toMatchObject({ m: 2, act: 'gelu' });
    const prefix = mergePetIntoWeights(host, toy, generatePetParams('prefix', toy, { seed: 9, prefixLength: 4 }));
    expect(prefix.extensions.prefixes!.get(0)!.length).toBe(4);
    expect(prefix.extensions.prefixes!.get(0)!.key.length).toBe(4 * 12);
  });

  it('rejects a shared map that lacks a tensor, and invalid parameters', () => {
    const partial = new Map(host);
    partial.delete(`${lin.key}.bias`);
    expect(() => mergePetIntoWeights(partial, toy, generatePetParams('standard', toy, { seed: 1 }))).toThrow(PetShapeError);
    expect(() => mergePetIntoWeights(host, toy, { ...generatePetParams('standard', toy, { seed: 1 }), config: { labels: [] } })).toThrow(/labels/);
  });
});

describe('referencePetSiteRun', () => {
  const backend = getBackend();
  it('applies each op kind to exactly the rows PetRows names', () => {
    const rows = { start: 1, seqs: 2, stride: 4, tokens: 2 }; // rows 1, 2, 5, 6 of 8
    expect(petRowIndices(rows)).toEqual([1, 2, 5, 6]);
    const xData = Float32Array.from({ length: 8 * 3 }, (_, i) => (i % 7) - 3);
    const yData = Float32Array.from({ length: 8 * 2 }, (_, i) => i / 10);
    const x = Tensor.from(xData, [8, 3], { backend });
    const y = Tensor.from(yData, [8, 2], { backend });
    const t = (d: number[], shape: number[], dtype: 'f32' | 'i32' = 'f32') => Tensor.from(dtype === 'i32' ? Int32Array.from(d) : Float32Array.from(d), shape, { backend });
    // matrix [2, 3]: row 0 = {0: 1.5, 2: -2}, row 1 = {1: 0.5}
    const indptr = t([0, 2, 3], [3], 'i32');
    const indices = t([0, 2, 1], [3], 'i32');
    const values = t([1.5, -2, 0.5], [3]);
    const bias = t([10, 20], [2]);
    const gamma = t([2, 3], [2]);
    const beta = t([0.5, -0.5], [2]);
    const xs = Tensor.from(Float32Array.from({ length: 16 }, (_, i) => i * i * 0.1), [8, 2], { backend });
    try {
      referencePetSiteRun([
        { kind: 'csr', rows, x, y, indptr, indices, values, scale: -2 },
        { kind: 'bias', rows, y, bias },
      ]);
      const got = y.toArray() as Float32Array;
      for (let r = 0; r < 8; r++) {
        const touched = [1, 2, 5, 6].includes(r);
        const o0 = 1.5 * xData[r * 3]! - 2 * xData[r * 3 + 2]!;
        const o1 = 0.5 * xData[r * 3 + 1]!;
        expect(got[r * 2]).toBeCloseTo(yData[r * 2]! + (touched ? -2 * o0 + 10 : 0), 5);
        expect(got[r * 2 + 1]).toBeCloseTo(yData[r * 2 + 1]! + (touched ? -2 * o1 + 20 : 0), 5);
      }
      referencePetSiteRun([{ kind: 'layernorm', rows: { start: 3, seqs: 1, stride: 1, tokens: 1 }, x: xs, y, gamma, beta, eps: 0 }]);
      const ln = y.toArray() as Float32Array;
      // x row 3 = [3.6, 4.9]: normalized [-1, 1]
      expect(ln[6]).toBeCloseTo(-2 + 0.5, 5);
      expect(ln[7]).toBeCloseTo(3 - 0.5, 5);
      expect(ln[8]).toBeCloseTo(got[8]!, 6);
    } finally {
      for (const a of [x, y, indptr, indices, values, bias, gamma, beta, xs]) a.dispose();
    }
  });

  it('adapter: y += gelu(y·downᵀ + bd)·upᵀ + bu, from the row before the update', () => {
    const y = Tensor.from(Float32Array.from([1, -1, 0.5, 2]), [2, 2], { backend });
    const down = Tensor.from(Float32Array.from([1, 1]), [1, 2], { backend });
    const bd = Tensor.from(Float32Array.from([0.25]), [1], { backend });
    const up = Tensor.from(Float32Array.from([2, -1]), [2, 1], { backend });
    const bu = Tensor.from(Float32Array.from([0, 1]), [2], { backend });
    try {
      referencePetSiteRun([{ kind: 'adapter', rows: { start: 1, seqs: 1, stride: 1, tokens: 1 }, y, down, downBias: bd, up, upBias: bu }]);
      const g = (v: number) => 0.5 * v * (1 + erf(v / Math.SQRT2));
      const z = g(0.5 + 2 + 0.25);
      const got = y.toArray() as Float32Array;
      expect([...got.subarray(0, 2)]).toEqual([1, -1]);
      expect(got[2]).toBeCloseTo(0.5 + 2 * z, 5);
      expect(got[3]).toBeCloseTo(2 - z + 1, 5);
    } finally {
      for (const a of [y, down, bd, up, bu]) a.dispose();
    }
  });
});
