/** The seeded PET generator: determinism, the paper's sparsities and sizes, options, and task mixes. */
import { type EncoderConfig, encoderLinearModules, encoderNormModules } from '@tessera/engine';
import { describe, expect, it } from 'vitest';
import {
  PAPER_PET_TYPES,
  PET_TYPES,
  PetConfigError,
  defaultPetRegistry,
  diffTensorNames,
  generatePetParams,
  generatePetTasks,
  isConfigValidating,
  loraTensorNames,
  maskTensorName,
  samplePositions,
  writePetParams,
} from '../src/index.js';

const config: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 40,
  hiddenSize: 48,
  numLayers: 2,
  numHeads: 4,
  intermediateSize: 96,
  maxPositions: 16,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 3,
  labels: ['x', 'y', 'z'],
};
const registry = defaultPetRegistry();

function popcount(mask: Uint8Array): number {
  let n = 0;
  for (const b of mask) for (let v = b; v; v &= v - 1) n++;
  return n;
}

describe('generatePetParams', () => {
  it('is deterministic per seed and differs across seeds; every type validates', () => {
    for (const type of PET_TYPES) {
      const a = generatePetParams(type, config, { seed: 9 });
      expect(Buffer.from(writePetParams(a)).equals(Buffer.from(writePetParams(generatePetParams(type, config, { seed: 9 }))))).toBe(true);
      expect(Buffer.from(writePetParams(a)).equals(Buffer.from(writePetParams(generatePetParams(type, config, { seed: 10 }))))).toBe(false);
      const op = registry.get(type);
      if (!isConfigValidating(op)) throw new Error('unreachable');
      expect(() => op.validateForConfig(config, a), type).not.toThrow();
      expect(a.config.labels).toEqual(['x', 'y', 'z']);
    }
  });

  it('MaskBert masks exactly 5% of each weight matrix', () => {
    const p = generatePetParams('maskbert', config, { seed: 1 });
    for (let l = 0; l < 2; l++) {
      const lin = encoderLinearModules(config, l);
      const q = p.tensors.get(maskTensorName(lin.query))!.data as Uint8Array;
      expect(48 * 48 - popcount(q)).toBe(Math.round(0.05 * 48 * 48));
      const f = p.tensors.get(maskTensorName(lin.ffn_out))!.data as Uint8Array;
      expect(48 * 96 - popcount(f)).toBe(Math.round(0.05 * 48 * 96));
    }
    const custom = generatePetParams('maskbert', config, { seed: 1, maskZeros: 0.5 });
    const q = custom.tensors.get(maskTensorName(encoderLinearModules(config, 0).query))!.data as Uint8Array;
    expect(48 * 48 - popcount(q)).toBe(1152);
  });

  it('Diff-Pruning has 0.5% non-zeros by default, `density` otherwise, with larger values when sparser', () => {
    const std = (v: Float32Array) => Math.sqrt(v.reduce((a, x) => a + x * x, 0) / v.length);
    const sparse = generatePetParams('diff', config, { seed: 2 });
    const dense = generatePetParams('diff', config, { seed: 2, density: 0.1 });
    const m = encoderLinearModules(config, 1).ffn_in;
    const n = diffTensorNames(m);
    expect(sparse.tensors.get(n.indices)!.shape).toEqual([Math.round(0.005 * 96 * 48)]);
    expect(dense.tensors.get(n.indices)!.shape).toEqual([Math.round(0.1 * 96 * 48)]);
    expect(std(sparse.tensors.get(n.values)!.data as Float32Array)).toBeGreaterThan(2 * std(dense.tensors.get(n.values)!.data as Float32Array));
    expect(() => generatePetParams('diff', config, { seed: 2, density: 1.5 })).toThrow(PetConfigError);
  });

  it('defaults: adapter bottleneck hidden/12, LoRA rank 8 alpha 16 on query/value, prefix 8, task LayerNorms', () => {
    expect(generatePetParams('adapter', config, { seed: 1 }).config.bottleneck).toBe(4);
    expect(generatePetParams('adapter', { ...config, hiddenSize: 768, numHeads: 12 }, { seed: 1, taskLayerNorm: false }).config.bottleneck).toBe(64);
    const lora = generatePetParams('lora', config, { seed: 1 });
    expect(lora.config).toEqual({ labels: ['x', 'y', 'z'], rank: 8, alpha: 16, targetModules: ['query', 'value'] });
    const l0 = encoderLinearModules(config, 0);
    expect(lora.tensors.has(loraTensorNames(l0.value).a)).toBe(true);
    expect(lora.tensors.has(loraTensorNames(l0.key).a)).toBe(false);
    expect(generatePetParams('prefix', config, { seed: 1 }).config.prefixLength).toBe(8);
    const ln = `${encoderNormModules(config, 0).attn_ln}.weight`;
    for (const t of ['diff', 'bitfit', 'adapter'] as const) {
      expect(generatePetParams(t, config, { seed: 1 }).tensors.has(ln), t).toBe(true);
      expect(generatePetParams(t, config, { seed: 1, taskLayerNorm: false }).tensors.has(ln), t).toBe(false);
    }
    for (const t of ['maskbert', 'lora', 'prefix', 'standard'] as const) expect(generatePetParams(t, config, { seed: 1 }).tensors.has(ln), t).toBe(false);
    expect(generatePetParams('standard', { ...config, labels: [], numLabels: 0 }, { seed: 1 }).config.labels).toEqual(['LABEL_0', 'LABEL_1']);
    expect(generatePetParams('standard', config, { seed: 1, labels: ['p', 'q', 'r', 's'] }).tensors.get('classifier.weight')!.shape).toEqual([4, 48]);
  });

  it('BitFit biases sit around the shared ones when given', () => {
    const module = encoderLinearModules(config, 1).value;
    const sharedBias = Float32Array.from({ length: 48 }, (_, i) => 0.5 + i);
    const p = generatePetParams('bitfit', config, { seed: 3, shared: (name) => (name.endsWith('.weight') ? new Float32Array(48).fill(1) : name === `${module}.bias` ? sharedBias : new Float32Array(name.includes('intermediate') ? 96 : 48)) });
    const b = p.tensors.get(`${module}.bias`)!.data as Float32Array;
    let moved = 0;
    b.forEach((v, i) => {
      expect(Math.abs(v - sharedBias[i]!)).toBeLessThanOrEqual(0.05 * Math.sqrt(3) + 1e-6);
      moved = Math.max(moved, Math.abs(v - sharedBias[i]!));
    });
    expect(moved).toBeGreaterThan(0.01);
  });

  it('samplePositions draws k distinct sorted positions', () => {
    const p = samplePositions(1000, 137, 5, 'x');
    expect(p.length).toBe(137);
    for (let i = 1; i < p.length; i++) expect(p[i]!).toBeGreaterThan(p[i - 1]!);
    expect(p[p.length - 1]!).toBeLessThan(1000);
    expect([...samplePositions(10, 10, 1, 'all')]).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(() => samplePositions(3, 4, 1, 'x')).toThrow(RangeError);
  });
});

describe('generatePetTasks', () => {
  it('draws types uniformly from the paper four by default, deterministically', () => {
    const tasks = generatePetTasks(config, { count: 400, seed: 1 });
    expect(tasks).toHaveLength(400);
    const counts = new Map<string, number>();
    for (const t of tasks) counts.set(t.type, (counts.get(t.type) ?? 0) + 1);
    expect([...counts.keys()].sort()).toEqual([...PAPER_PET_TYPES].sort());
    for (const c of counts.values()) expect(c).toBeGreaterThan(60);
    const again = generatePetTasks(config, { count: 400, seed: 1 });
    expect(again.map((t) => t.type)).toEqual(tasks.map((t) => t.type));
    expect(again.map((t) => t.seed)).toEqual(tasks.map((t) => t.seed));
    expect(new Set(tasks.map((t) => t.seed)).size).toBeGreaterThan(390);
    expect(generatePetTasks(config, { count: 50, seed: 2 }).map((t) => t.type)).not.toEqual(tasks.slice(0, 50).map((t) => t.type));
  });

  it('honours `types` and passes options through', () => {
    const tasks = generatePetTasks(config, { count: 12, seed: 3, types: ['lora', 'prefix'], rank: 2, prefixLength: 3 });
    for (const t of tasks) {
      expect(['lora', 'prefix']).toContain(t.type);
      if (t.type === 'lora') expect(t.params.config.rank).toBe(2);
      else expect(t.params.config.prefixLength).toBe(3);
    }
    expect(() => generatePetTasks(config, { count: 1, seed: 1, types: [] })).toThrow(RangeError);
  });
});
