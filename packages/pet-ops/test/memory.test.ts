/**
 * Memory accounting and max supported tasks (pets.md §8.2 Table 5, §9 behaviour 4): measured sizes agree with the
 * native allocator, PetS = γ + Σ η_t + activations vs SeqS = T·γ + activations, and the PetS/SeqS ratio has
 * Table 5's shape: larger for smaller models and larger budgets, small when the shared model nearly fills memory.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EncoderConfig, generateModel } from '@tessera/engine';
import { allocatorStats, getBackend, setBudget } from '@tessera/native';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceBudgetError, type Footprint, PAPER_PET_TYPES, TABLE5_STEP, TaskManager, countTasks, generatePetParams, loadUntilFull, maxTasks, measureFootprint } from '../src/index.js';

const base: Omit<EncoderConfig, 'hiddenSize' | 'numLayers' | 'numHeads' | 'intermediateSize'> = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 512,
  maxPositions: 128,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 2,
  labels: ['a', 'b'],
};
/**
 * Three sizes standing in for DistilBERT / BERT-base / BERT-large (pets.md §10): like those, the first two differ
 * only in depth (2× the layers), the third is wider and deeper again.
 */
const small: EncoderConfig = { ...base, hiddenSize: 96, numLayers: 2, numHeads: 4, intermediateSize: 384 };
const medium: EncoderConfig = { ...base, hiddenSize: 96, numLayers: 4, numHeads: 4, intermediateSize: 384 };
const large: EncoderConfig = { ...base, hiddenSize: 128, numLayers: 8, numHeads: 4, intermediateSize: 512 };
const MB = 1 << 20;

describe('maxTasks', () => {
  let footprints: Map<EncoderConfig, Footprint>;

  beforeAll(() => {
    // A smaller batch than Table 5's 32 × 128 keeps the test fast; the default is exercised below.
    footprints = new Map([small, medium, large].map((c) => [c, measureFootprint({ config: c, batch: { batch: 4, seq: 64 }, seed: 3 })]));
  });

  it('measures γ, activations and η; the paper four are a few percent of γ each', () => {
    for (const [c, f] of footprints) {
      expect(f.activationBytes).toBeGreaterThan(0);
      // γ: every tensor of the config, f32, rounded to 64-byte allocations.
      expect(f.sharedBytes).toBeGreaterThanOrEqual(4 * (c.vocabSize + c.maxPositions + 2) * c.hiddenSize);
      for (const t of PAPER_PET_TYPES) {
        expect(f.perTypeBytes[t], t).toBeGreaterThan(0);
        expect(f.perTypeBytes[t]!, t).toBeLessThan(0.2 * f.sharedBytes);
      }
      // MaskBert's executable CSR (5% nnz, 8 bytes each) outweighs Diff's (0.5%) and BitFit's biases.
      expect(f.perTypeBytes.maskbert!).toBeGreaterThan(f.perTypeBytes.diff!);
      expect(f.perTypeBytes.diff!).toBeGreaterThan(f.perTypeBytes.bitfit!);
    }
  });

  it('counts SeqS copies and PetS tasks exactly as the accounting says', () => {
    const f = footprints.get(medium)!;
    const budget = 64 * MB;
    const r = countTasks({ budgetBytes: budget, footprint: f });
    expect(r.seqs).toBe(Math.floor((budget - f.activationBytes) / f.sharedBytes));
    expect(r.pets % TABLE5_STEP).toBe(0);
    const sizes = PAPER_PET_TYPES.map((t) => f.perTypeBytes[t]!);
    const bytesOf = (T: number) => Array.from({ length: T }, (_, i) => sizes[i % 4]!).reduce((a, b) => a + b, 0);
    const room = budget - f.activationBytes - f.sharedBytes;
    expect(bytesOf(r.pets)).toBeLessThanOrEqual(room);
    expect(bytesOf(r.pets + TABLE5_STEP)).toBeGreaterThan(room);
    expect(r.ratio).toBeCloseTo(r.pets / r.seqs, 12);
    expect(r.meanPetBytes).toBeCloseTo(sizes.reduce((a, b) => a + b, 0) / 4, 9);
    expect(countTasks({ budgetBytes: budget, footprint: f, step: 1 }).pets).toBeGreaterThanOrEqual(r.pets);
    expect(countTasks({ budgetBytes: f.activationBytes, footprint: f })).toMatchObject({ pets: 0, seqs: 0, ratio: 0 });
  });

  it("has Table 5's shape: the ratio grows with the budget and shrinks with the model", () => {
    const ratio = (c: EncoderConfig, budget: number) => countTasks({ budgetBytes: budget, footprint: footprints.get(c)! }).ratio;
    for (const c of [small, medium, large]) {
      expect(ratio(c, 256 * MB)).toBeGreaterThan(ratio(c, 48 * MB));
    }
    for (const budget of [48 * MB, 256 * MB]) {
      expect(ratio(small, budget)).toBeGreaterThan(ratio(medium, budget));
      expect(ratio(medium, budget)).toBeGreaterThan(ratio(large, budget));
    }
    // Ratios in the paper's range (4×–26×) at a roomy budget.
    expect(ratio(large, 256 * MB)).toBeGreaterThan(4);
    // The shared model nearly fills the budget (BERT-large on TX2): one SeqS copy, and PetS's room for tasks is
    // what is left of the second copy's worth: a ratio well below the roomy one.
    const f = footprints.get(large)!;
    const tight = countTasks({ budgetBytes: f.activationBytes + 1.5 * f.sharedBytes, footprint: f });
    expect(tight.seqs).toBe(1);
    expect(tight.pets).toBeGreaterThanOrEqual(TABLE5_STEP);
    expect(tight.ratio).toBeLessThan(ratio(large, 256 * MB) / 2);
  });

  it('runs end to end with the default 32 × 128 batch', () => {
    const r = maxTasks({ config: small, budgetBytes: 32 * MB, seed: 1 });
    const again = maxTasks({ config: small, budgetBytes: 64 * MB, seed: 1, batch: { batch: 4, seq: 64 } });
    expect(r.activationBytes).toBeGreaterThan(again.activationBytes);
    expect(r.sharedBytes).toBe(again.sharedBytes);
    expect(r.pets).toBeGreaterThan(r.seqs);
    expect(() => maxTasks({ config: small, budgetBytes: MB, batch: { batch: 1, seq: 129 } })).toThrow(RangeError);
  });
});

describe('accounting against the allocator under a real budget', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'pet-memory-'));
    generateModel(dir, { family: 'encoder', size: 'tiny', seed: 8 });
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('shared bytes count once: N loaded tasks add exactly their PET bytes', () => {
    const m = new TaskManager();
    try {
      m.addSharedModel('t', { dir });
      const shared = m.loadSharedModel('t');
      const after = allocatorStats().inUse;
      const ids = Array.from({ length: 12 }, (_, i) => {
        const type = PAPER_PET_TYPES[i % 4]!;
        return m.registerTask(type, 't', generatePetParams(type, shared.config, { seed: i, shared: (n) => shared.hostWeight(n) }));
      });
      m.loadTasks(ids);
      const mem = m.memory();
      expect(allocatorStats().inUse - after).toBe(mem.petBytes);
      expect(mem.sharedBytes).toBe(shared.bytes);
      expect(mem.deviceInUseBytes).toBe(allocatorStats().inUse);
      // Each PET is a small fraction of the shared weights (pets.md §2.7: < 5% at BERT-base; the tiny model's
      // embeddings are a larger share of γ, so its PETs are smaller still in relative terms).
      expect(mem.petBytes / 12).toBeLessThan(0.1 * mem.sharedBytes);
    } finally {
      m.dispose();
    }
  });

  it('loadUntilFull stops where the accounting says the budget runs out', () => {
    const m = new TaskManager();
    const saved = allocatorStats().budget;
    try {
      m.addSharedModel('t', { dir });
      const shared = m.loadSharedModel('t');
      const f = measureFootprint({ config: shared.config, batch: { batch: 1, seq: 8 }, seed: 2 });
      expect(f.sharedBytes).toBe(shared.bytes);
      const room = 40 * f.perTypeBytes.maskbert!;
      const base = allocatorStats().inUse;
      setBudget(base + room);
      const step = 4;
      const { ids, stoppedBy } = loadUntilFull(m, { tag: 't', step, seed: 5 });
      expect(stoppedBy).toBeInstanceOf(DeviceBudgetError);
      const predicted = countTasks({ budgetBytes: room + f.sharedBytes, footprint: { ...f, activationBytes: 0 }, step }).pets;
      expect(ids.length).toBe(predicted);
      const mem = m.memory();
      expect(mem.loadedTasks).toBe(ids.length);
      expect(mem.registeredTasks).toBe(ids.length);
      const used = allocatorStats().inUse - base;
      expect(Math.abs(mem.petBytes - used)).toBeLessThanOrEqual(0.03 * used);
    } finally {
      setBudget(saved);
      m.dispose();
    }
  });
});
