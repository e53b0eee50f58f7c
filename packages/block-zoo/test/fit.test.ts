/**
 * The fits on §8.1 fixtures: the float64 reference against the engine; the logit-lens score with its peaky-fixture
 * and negative-control rules (behaviour 8); the stitch recovering Q on the exact cross-size sibling (behaviour 10);
 * surrogates by 50 % structured pruning with least-squares recovery (behaviour 11).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { loadDecoder, PagedKvCache } from '@tessera/engine';
import { afterAll, describe, expect, it } from 'vitest';

import {
  applyStitch,
  buildSurrogate,
  checkNegativeControl,
  fitStitch,
  groupScores,
  headLogits,
  hiddenStates,
  layerScores,
  logitStd,
  stitchedCosine,
  stitchTensor,
  vocabCosine,
} from '../src/fit/index.js';
import { BlockZoo, proportionalDepthGroups, tensorId, ZooInvalidError } from '../src/planner/index.js';
import { calibration, fullFineTune, generatePeaky, liftToWider, orthonormalColumns } from './support/fixtures.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-zoo-fit-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const F = generatePeaky(root, 'foundation', 1);
const unrelated = generatePeaky(root, 'unrelated', 2);
const data = calibration(4, 16, 512, 3);

describe('the float64 reference forward', () => {
  it('gives the engine decoder’s logits (f32 native kernels) within 2e-4', () => {
    const model = loadDecoder(F.dir);
    const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
    try {
      const tokens = data[0]!;
      const out = model.forward([{ id: 's', tokens }], { cache, logits: 'all' });
      const engine = out.logits!.toArray() as Float32Array;
      out.logits!.dispose();
      const ref = headLogits(F.weights, hiddenStates(F.weights, tokens)[F.config.numLayers]!);
      let maxErr = 0;
      for (let i = 0; i < ref.data.length; i++) maxErr = Math.max(maxErr, Math.abs(ref.data[i]! - engine[i]!));
      expect(engine.length).toBe(ref.data.length);
      expect(maxErr).toBeLessThan(2e-4);
    } finally {
      cache.dispose();
      model.dispose();
    }
  });
});

describe('logit-lens equivalence (§8.1 rules)', () => {
  it('the fixture is peaky: logit std within 3–6', () => {
    const std = logitStd(F.weights, data);
    expect(std).toBeGreaterThan(3);
    expect(std).toBeLessThan(6);
  });

  it('is exactly 1 for identical models and symmetric', () => {
    expect(vocabCosine(F.weights, F.weights, data)).toBeCloseTo(1, 12);
    const ff = fullFineTune(F.weights, [0.003, 0.003, 0.003, 0.003], 5);
    expect(vocabCosine(F.weights, ff, data)).toBeCloseTo(vocabCosine(ff, F.weights, data), 12);
    expect(vocabCosine(F.weights, ff, data, { layerA: 2, layerB: 2 })).toBeCloseTo(vocabCosine(ff, F.weights, data, { layerA: 2, layerB: 2 }), 12);
  });

  it('a small perturbation scores above 0.98; the unrelated negative control scores below', () => {
    const small = fullFineTune(F.weights, [0.001, 0.001, 0.001, 0.001], 6);
    expect(vocabCosine(F.weights, small, data)).toBeGreaterThan(0.98);
    const control = checkNegativeControl(F.weights, unrelated.weights, data);
    expect(control).toBeLessThan(0.98);
  });

  it('without a peaky fixture the lens cannot discriminate, and the negative-control rule says so', () => {
    const flatF = generatePeaky(root, 'flat-a', 1, {}).weights;
    const flatU = generatePeaky(root, 'flat-b', 2, {}).weights;
    for (const w of [flatF, flatU]) w.tensors.get('model.norm.weight')!.data.fill(1); // the generator's default gain
    expect(logitStd(flatF, data)).toBeLessThan(0.5);
    expect(() => checkNegativeControl(flatF, flatU, data)).toThrow(ZooInvalidError);
    expect(() => checkNegativeControl(flatF, flatU, data)).toThrow(/negative control scores 0\.98\d* ≥ 0\.98/);
  });

  it('per-layer scores cut exactly where the perturbation schedule crosses the threshold', () => {
    // Substitution mode scores each layer on its own: large δ early, small δ late (the note's Vicuna-like schedule).
    const vicuna = fullFineTune(F.weights, [0.02, 0.02, 0.001, 0.001], 5);
    const sub = layerScores(F.weights, vicuna, data, { mode: 'substitution' });
    expect(sub.map((s) => s >= 0.98)).toEqual([false, false, true, true]);
    // Cumulative mode (the paper's): drift carries forward, so small-early / large-late is the cut-able shape.
    const late = fullFineTune(F.weights, [0.001, 0.001, 0.02, 0.02], 5);
    const cum = layerScores(F.weights, late, data);
    expect(cum.map((s) => s >= 0.98)).toEqual([true, true, false, false]);
  });

  it('group scores compare proportional-depth groups of two models', () => {
    const g = groupScores(F.weights, F.weights, proportionalDepthGroups(4, 4, 2), data);
    expect(g.map((x) => x.score)).toEqual([expect.closeTo(1, 12), expect.closeTo(1, 12)]);
    expect(() => groupScores(F.weights, { ...F.weights, arch: { ...F.weights.arch, vocabSize: 7 } }, [], data)).toThrow(/shared vocabulary/);
  });
});

describe('stitching on the exact cross-size sibling (§8.1)', () => {
  const q = orthonormalColumns(48, 32, 9);
  const B = liftToWider(F.weights, q);

  it('the sibling is exact: B’s hidden state is Q times A’s after every layer, and its logits are A’s', () => {
    const ha = hiddenStates(F.weights, data[0]!);
    const hb = hiddenStates(B, data[0]!);
    for (const l of [0, 2, 4]) {
      for (let t = 0; t < 16; t += 5) {
        for (let r = 0; r < 48; r += 7) {
          let v = 0;
          for (let c = 0; c < 32; c++) v += q.data[r * 32 + c]! * ha[l]!.data[t * 32 + c]!;
          expect(hb[l]!.data[t * 48 + r]).toBeCloseTo(v, 9);
        }
      }
    }
    expect(vocabCosine(F.weights, B, data)).toBeCloseTo(1, 9);
  });

  it('the ridge fit recovers Q within 1e-6 (max abs) and the stitched chain’s LM-head cosine is 1 within 1e-9', () => {
    const points = [{ i: 1, j: 1 }, { i: 2, j: 2 }, { i: 3, j: 3 }];
    const stitch = fitStitch(F.weights, B, points, data);
    expect(stitch.weight.rows).toBe(33);
    expect(stitch.weight.cols).toBe(48);
    let maxErr = 0;
    for (let r = 0; r < 32; r++) for (let c = 0; c < 48; c++) maxErr = Math.max(maxErr, Math.abs(stitch.weight.data[r * 48 + c]! - q.data[c * 32 + r]!));
    expect(maxErr).toBeLessThan(1e-6);
    // The position feature carries nothing here (the lift is the same at every depth).
    for (let c = 0; c < 48; c++) expect(Math.abs(stitch.weight.data[32 * 48 + c]!)).toBeLessThan(1e-6);
    for (const p of points) expect(stitchedCosine(stitch, F.weights, B, p, data)).toBeGreaterThan(1 - 1e-9);
    // Held-out tokens too.
    expect(stitchedCosine(stitch, F.weights, B, { i: 2, j: 2 }, calibration(2, 12, 512, 77))).toBeGreaterThan(1 - 1e-9);
    const h = applyStitch(stitch, hiddenStates(F.weights, data[1]!)[2]!, { i: 2, j: 2 });
    const want = hiddenStates(B, data[1]!)[2]!;
    for (let i = 0; i < h.data.length; i += 11) expect(h.data[i]).toBeCloseTo(want.data[i]!, 8);
  });

  it('is registered in the zoo as a stitch block between the two families', () => {
    const stitch = fitStitch(F.weights, B, [{ i: 2, j: 2 }], data);
    const t = stitchTensor(stitch);
    expect(t.shape).toEqual([48, 33]);
    expect(t.data[5 * 33 + 7]).toBe(Math.fround(stitch.weight.data[7 * 48 + 5]!));
    const ref = { name: t.name, id: tensorId(t, t.data), dtype: t.dtype, shape: t.shape };
    const zoo = new BlockZoo();
    const describeWeights = (id: string, w: typeof F.weights) => ({
      id,
      archSig: w.arch,
      tensors: [...w.tensors].map(([name, m]) => {
        const shape = name.endsWith('norm.weight') ? [m.cols] : [m.rows, m.cols];
        const data = Float32Array.from(m.data);
        return { name, id: tensorId({ dtype: 'f32', shape }, data), dtype: 'f32', shape };
      }),
    });
    zoo.addFoundation(describeWeights('small', F.weights));
    zoo.addFoundation(describeWeights('wide', B));
    const edges = zoo.addSiblingEquivalence({ a: 'small', b: 'wide', groups: groupScores(F.weights, B, proportionalDepthGroups(4, 4, 2), data) });
    expect(edges.map((e) => e.requiresStitch)).toEqual([true, true]);
    const m = zoo.registerStitch({ fromFamily: 'small', toFamily: 'wide', tensors: [ref] });
    expect(m).toMatchObject({ kind: 'stitch', dIn: 32, dOut: 48, span: null, stitch: { fromFamily: 'small', toFamily: 'wide' } });
    expect(zoo.stitch('small', 'wide')!.blockId).toBe(m.blockId);
    expect(zoo.stitch('wide', 'small')).toBeNull();
    expect(zoo.blocks().some((b) => b.blockId === m.blockId)).toBe(true);
  });

  it('a stitch into an unrelated model of the same width scores clearly lower', () => {
    const other = liftToWider(unrelated.weights, q);
    const stitch = fitStitch(F.weights, other, [{ i: 2, j: 2 }], data);
    expect(stitchedCosine(stitch, F.weights, other, { i: 2, j: 2 }, data)).toBeLessThan(0.9);
  });

  it('refuses too few samples and out-of-range points', () => {
    expect(() => fitStitch(F.weights, B, [{ i: 2, j: 2 }], [[1, 2, 3]])).toThrow(/at least 33 samples/);
    expect(() => fitStitch(F.weights, B, [{ i: 5, j: 2 }], data)).toThrow(/i = 5/);
    expect(() => fitStitch(F.weights, B, [], data)).toThrow(ZooInvalidError);
  });
});

describe('surrogates: 50 % structured pruning with least-squares recovery (Table 4)', () => {
  const cal = calibration(24, 32, 512, 7);
  const held = calibration(4, 16, 512, 11);
  const recovered = buildSurrogate(F.weights, { from: 1, to: 3 }, cal, held);
  const plain = buildSurrogate(F.weights, { from: 1, to: 3 }, cal, held, { recover: false });

  it('removes about half of the parameters and halves heads and FFN channels', () => {
    expect(recovered.prunedFraction).toBeGreaterThan(0.45);
    expect(recovered.prunedFraction).toBeLessThan(0.55);
    expect(recovered.archSig).toMatchObject({ numHeads: 2, numKvHeads: 1, intermediateSize: 44, hiddenSize: 32 });
    expect(recovered.tensors.get('model.layers.1.mlp.down_proj.weight')).toMatchObject({ rows: 32, cols: 44 });
    expect(recovered.tensors.get('model.layers.2.self_attn.q_proj.weight')).toMatchObject({ rows: 16, cols: 32 });
    expect(recovered.tensors.has('model.layers.0.self_attn.q_proj.weight')).toBe(false);
  });

  it('recovery beats plain pruning on held-out tokens (the speed-up is a measurement: reported, not asserted)', () => {
    expect(recovered.cosine).toBeGreaterThan(plain.cosine);
    expect(recovered.cosine).toBeGreaterThan(0.95);
    expect(recovered.cosine).toBeLessThan(1);
    expect(recovered.speedup).toBeGreaterThan(0);
  });

  it('refuses bad ranges', () => {
    expect(() => buildSurrogate(F.weights, { from: 2, to: 2 }, cal, held)).toThrow(ZooInvalidError);
    expect(() => buildSurrogate(F.weights, { from: 0, to: 1 }, cal, held, { keep: 0 })).toThrow(/keep/);
  });
});
