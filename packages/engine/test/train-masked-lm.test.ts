import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SplitMix32 } from '@tessera/core';
import { randomFloats } from '@tessera/test-utils';
import { afterAll, describe, expect, it } from 'vitest';
import { SafetensorsFile } from '../src/formats/safetensors.js';
import { generateModel } from '../src/gen/index.js';
import { EncoderModel } from '../src/models/encoder.js';
import { encoderTensorShapes } from '../src/models/names.js';
import { ModelWeights } from '../src/models/weights.js';
import { IGNORE_INDEX, type MaskedLmExample, maskedLmBatch } from '../src/train/data.js';
import { TrainableEncoder } from '../src/train/encoder.js';
import { Trainer } from '../src/train/trainer.js';
import { trainMaskedLm } from '../src/train/trainer.js';
import { randomHostWeights, randomIds, tinyEncoderConfig } from './support/random-models.js';
import { type F64Weights, centralDiffAt, referenceMaskedLmLoss } from './support/train-reference.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-train-mlm-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const MASK = 4;
const SPECIAL = [0, 1, 2, 3, 4]; // [PAD] [UNK] [CLS] [SEP] [MASK]

describe('masked LM', () => {
  it('masking follows HF: 15 % of real non-special tokens, of which 80 % [MASK], 10 % random, 10 % kept', () => {
    const examples: MaskedLmExample[] = Array.from({ length: 64 }, (_, i) => ({ ids: [2, ...randomIds(30 + (i % 20), 500, i, 5), 3], line: i + 1 }));
    const b = maskedLmBatch(examples, { padId: 0, maskTokenId: MASK, specialTokenIds: SPECIAL, vocabSize: 500, probability: 0.15, rng: new SplitMix32(9) });
    let real = 0;
    let selected = 0;
    let masked = 0;
    let kept = 0;
    for (let i = 0; i < b.tokens.length; i++) {
      const original = examples[Math.floor(i / b.seq)]!.ids[i % b.seq];
      if (original === undefined) {
        expect([b.tokens[i], b.mask[i], b.targets[i]]).toEqual([0, 0, IGNORE_INDEX]);
        continue;
      }
      if (SPECIAL.includes(original)) {
        expect(b.targets[i]).toBe(IGNORE_INDEX);
        expect(b.tokens[i]).toBe(original);
        continue;
      }
      real++;
      if (b.targets[i] === IGNORE_INDEX) {
        expect(b.tokens[i]).toBe(original);
        continue;
      }
      expect(b.targets[i]).toBe(original);
      selected++;
      if (b.tokens[i] === MASK) masked++;
      else if (b.tokens[i] === original) kept++;
    }
    expect(selected / real).toBeGreaterThan(0.13);
    expect(selected / real).toBeLessThan(0.17);
    expect(masked / selected).toBeGreaterThan(0.74);
    expect(masked / selected).toBeLessThan(0.86);
    expect(kept / selected).toBeGreaterThan(0.06);
    expect(kept / selected).toBeLessThan(0.15);
  });

  it('gradients of the body and the MLM head (tied decoder) against float64 central differences', () => {
    const config = tinyEncoderConfig({ architecture: 'BertModel', numLabels: 0, labels: [] });
    const host = randomHostWeights(encoderTensorShapes(config), 12);
    const model = new EncoderModel(config, ModelWeights.fromHost(host));
    const t = new TrainableEncoder(model, { kind: 'full' }, { seed: 4, task: 'masked-lm', maskedLm: { maskTokenId: MASK, specialTokenIds: SPECIAL, probability: 0.4 } });
    try {
      expect(t.params.map((p) => p.name)).toContain('cls.predictions.bias');
      expect(t.params.some((p) => p.name.includes('pooler') || p.name.includes('classifier'))).toBe(false);
      // Give the head's fresh zeros and ones some values, so every gradient is exercised.
      let seed = 500;
      for (const p of t.headParams()) if (p.value.rank === 1) p.value.write(randomFloats(p.value.numel, seed++, p.name.includes('LayerNorm.weight') ? 0.8 : -0.1, p.name.includes('LayerNorm.weight') ? 1.2 : 0.1));
      const examples = [9, 6, 8].map((n, i) => ({ ids: [2, ...randomIds(n - 2, config.vocabSize, 80 + i, 5), 3], line: i + 1 }));
      const batch = t.collate(examples, 'train');
      expect(t.maskDraws).toBe(1);
      expect(t.countTargets(batch)).toBeGreaterThan(3);
      t.zeroGrad();
      const { lossSum, count } = t.accumulateGradients(batch, 1);
      const w: F64Weights = new Map([...host].map(([n, { data }]) => [n, Float64Array.from(data)]));
      for (const p of t.headParams()) w.set(p.name, Float64Array.from(p.value.toArray() as Float32Array));
      const ref = { ...batch, lengths: examples.map((e) => e.ids.length) } as const;
      if (!('targets' in batch)) throw new Error('not an MLM batch');
      const loss = () => referenceMaskedLmLoss(config, w, { ...ref, targets: batch.targets });
      expect(count).toBe(t.countTargets(batch));
      expect(Math.abs(lossSum / loss() - 1)).toBeLessThan(1e-5);
      let worst = 0;
      let probes = 0;
      let s = 900;
      for (const p of t.params) {
        const g = p.grad.toArray() as Float32Array;
        let best = 0;
        for (let i = 1; i < g.length; i++) if (Math.abs(g[i]!) > Math.abs(g[best]!)) best = i;
        for (const i of [best, Math.floor(randomFloats(1, s++, 0, 1)[0]! * g.length)]) {
          const fd = centralDiffAt(loss, w.get(p.name)!, i);
          const ratio = Math.abs(g[i]! - fd) / (5e-6 + 2e-4 * Math.abs(fd));
          if (ratio > 1) console.log(`${p.name}[${i}]: native ${g[i]} vs fd ${fd}`);
          worst = Math.max(worst, ratio);
          probes++;
        }
      }
      console.log(`masked LM: ${probes} probes, worst ratio ${worst.toFixed(3)}`);
      expect(worst).toBeLessThanOrEqual(1);
    } finally {
      t.dispose();
      model.dispose();
    }
  });

  it('resumes with the same masks: 2 steps + checkpoint + 2 steps = 4 steps, bit for bit', () => {
    const config = tinyEncoderConfig({ architecture: 'BertModel', numLabels: 0, labels: [] });
    const host = randomHostWeights(encoderTensorShapes(config), 13);
    const examples = Array.from({ length: 6 }, (_, i) => ({ ids: [2, ...randomIds(6, config.vocabSize, 90 + i, 5), 3], line: i + 1 }));
    const build = () => {
      const model = new EncoderModel(config, ModelWeights.fromHost(host));
      const t = new TrainableEncoder(model, { kind: 'lora', r: 2 }, { seed: 4, task: 'masked-lm', maskedLm: { maskTokenId: MASK, specialTokenIds: SPECIAL } });
      const trainer = new Trainer(t, examples, { steps: 4, batchSize: 4, lr: 1e-2, seed: 4 });
      return { t, trainer, dispose: () => { trainer.dispose(); t.dispose(); model.dispose(); } };
    };
    const a = build();
    a.trainer.run();
    const want = a.t.params.map((p) => Buffer.from((p.value.toArray() as Float32Array).buffer));
    a.dispose();
    const b = build();
    b.trainer.trainStep();
    b.trainer.trainStep();
    const path = join(root, 'mlm.safetensors');
    b.trainer.saveCheckpoint(path);
    b.dispose();
    const c = build();
    try {
      c.trainer.resume(path);
      expect(c.t.maskDraws).toBe(2);
      c.trainer.run();
      c.t.params.forEach((p, i) => expect(Buffer.from((p.value.toArray() as Float32Array).buffer).equals(want[i]!)).toBe(true));
    } finally {
      c.dispose();
    }
  });

  it('trainMaskedLm on JSONL-style text records lowers the loss and writes the body with the head', () => {
    const dir = join(root, 'bert');
    generateModel(dir, { family: 'encoder', seed: 3 });
    const rng = new SplitMix32(1);
    const words = ['the', 'river', 'runs', 'to', 'the', 'sea', 'and', 'the', 'storm', 'comes', 'from', 'the', 'north'];
    const records = Array.from({ length: 32 }, () => ({ text: Array.from({ length: 8 }, () => words[rng.nextInt(words.length)]).join(' ') }));
    const losses: number[] = [];
    const out = join(root, 'mlm-out');
    const run = trainMaskedLm({ model: dir, data: records, evalData: records.slice(0, 8), steps: 40, lr: 3e-3, batchSize: 16, seed: 1, out, onProgress: (p) => losses.push(p.loss) });
    try {
      const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
      expect(mean(losses.slice(-10))).toBeLessThan(mean(losses.slice(0, 5)) * 0.6);
      expect(run.evalLoss).toBeDefined();
      const file = SafetensorsFile.open(join(out, 'model.safetensors'));
      try {
        expect(file.names()).toContain('cls.predictions.transform.dense.weight');
        expect(file.names()).toContain('bert.encoder.layer.0.attention.self.query.weight');
      } finally {
        file.close();
      }
    } finally {
      run.dispose();
    }
  });
});
