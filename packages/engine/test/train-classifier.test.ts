import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SplitMix32 } from '@tessera/core';
import { afterAll, describe, expect, it } from 'vitest';
import { loadLoraAdapter, readLoraAdapterConfig } from '../src/formats/peft.js';
import { SafetensorsFile } from '../src/formats/safetensors.js';
import { TextTokenizer } from '../src/formats/tokenizer.js';
import { generateModel } from '../src/gen/index.js';
import { LoraDelta } from '../src/hooks/lora-delta.js';
import type { EncoderModel } from '../src/models/encoder.js';
import { loadEncoder } from '../src/models/load.js';
import { classificationBatch } from '../src/train/data.js';
import { TrainDataError } from '../src/train/errors.js';
import { trainClassifier } from '../src/train/trainer.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-train-cls-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const modelDir = join(root, 'model');
generateModel(modelDir, { family: 'encoder', seed: 1 });

// Three classes, each marked by one keyword among filler words (labels by name and by index).
const FILLER = ['the', 'a', 'river', 'storm', 'quiet', 'library', 'morning', 'train', 'coast', 'city', 'house', 'green', 'old', 'new'];
const KEYS = ['terrible', 'okay', 'wonderful'];
const NAMES = ['negative', 'neutral', 'positive'];
const rng = new SplitMix32(5);
const records = Array.from({ length: 48 }, (_, i) => {
  const label = rng.nextInt(3);
  const words = Array.from({ length: 5 }, () => FILLER[rng.nextInt(FILLER.length)]!);
  words.splice(rng.nextInt(6), 0, KEYS[label]!);
  return { text: words.join(' '), label: i % 2 === 0 ? label : NAMES[label]! };
});
const labelOf = (r: (typeof records)[number]) => (typeof r.label === 'number' ? r.label : NAMES.indexOf(r.label));

function servedLogits(model: EncoderModel, ids: number[][], delta?: LoraDelta): Float32Array {
  const out = model.forward(ids.map((x) => ({ ids: x, key: delta ? 't' : null })), { deltas: delta ? [delta] : [], outputs: { logits: true } });
  const a = out.logits!.toArray() as Float32Array;
  out.logits!.dispose();
  return a;
}

describe('trainClassifier', () => {
  it('full fine-tuning learns the keyword task; the written model directory serves the same logits', () => {
    const out = join(root, 'full');
    const run = trainClassifier({ model: modelDir, data: records, steps: 60, lr: 3e-3, warmupSteps: 5, batchSize: 16, seed: 2, trainable: { kind: 'full' }, out });
    try {
      expect(run.loss).toBeLessThan(0.2);
      const ids = records.map((r) => run.tokenizer.encode(r.text));
      const trained = run.trainable.logits(classificationBatch(ids.map((x, i) => ({ ids: x, label: labelOf(records[i]!), line: i + 1 })), 0));
      let correct = 0;
      records.forEach((r, b) => {
        const z = Array.from(trained.subarray(b * 3, b * 3 + 3));
        if (z.indexOf(Math.max(...z)) === labelOf(r)) correct++;
      });
      expect(correct / records.length).toBe(1);
      // The serving forward of the same (updated in place) model, and of the directory written to `out`.
      const reloaded = loadEncoder(out);
      try {
        for (const model of [run.model, reloaded]) {
          const served = servedLogits(model, ids);
          served.forEach((v, i) => expect(Math.abs(v - trained[i]!)).toBeLessThan(1e-4));
        }
      } finally {
        reloaded.dispose();
      }
    } finally {
      run.dispose();
    }
  });

  it('LoRA writes a SEQ_CLS PEFT adapter that LoraDelta serves with the trained logits', () => {
    const out = join(root, 'lora');
    const run = trainClassifier({ model: modelDir, data: records, steps: 20, lr: 1e-2, batchSize: 16, seed: 2, out });
    try {
      const config = readLoraAdapterConfig(out);
      expect(config).toMatchObject({ taskType: 'SEQ_CLS', targetModules: ['query', 'value'], r: 8, loraAlpha: 16 });
      const ids = records.slice(0, 8).map((r) => run.tokenizer.encode(r.text));
      const trained = run.trainable.logits(classificationBatch(ids.map((x) => ({ ids: x, label: 0, line: 0 })), 0));
      const adapter = loadLoraAdapter(out, { base: run.model.config });
      const delta = new LoraDelta(new Map([['t', adapter]]));
      try {
        const served = servedLogits(run.model, ids, delta);
        served.forEach((v, i) => expect(Math.abs(v - trained[i]!)).toBeLessThan(1e-4));
        const base = servedLogits(run.model, ids);
        expect(base.some((v, i) => Math.abs(v - trained[i]!) > 1e-3)).toBe(true);
      } finally {
        delta.dispose();
        adapter.dispose();
      }
    } finally {
      run.dispose();
    }
  });

  it('adapters write a PetS PET file (pet_type adapter) and leave the shared model untouched', () => {
    const out = join(root, 'adapter');
    const shared = loadEncoder(modelDir);
    const before = new Map([...shared.weights.tensors.keys()].map((n) => [n, shared.weights.hostF32(n)]));
    const losses: number[] = [];
    const run = trainClassifier({
      model: { model: shared, tokenizer: TextTokenizer.fromDir(modelDir), dir: modelDir }, data: records, steps: 60, lr: 0.1, batchSize: 16, seed: 2,
      trainable: { kind: 'adapter', bottleneck: 16 }, out, onProgress: (p) => losses.push(p.loss),
    });
    try {
      // (The frozen random encoder carries the keyword to [CLS] only weakly: head-only training does not learn this
      // task at all, adapters do.)
      expect(losses[59]!).toBeLessThan(0.6);
      for (const [n, v] of before) expect(shared.weights.hostF32(n)).toEqual(v);
      const file = SafetensorsFile.open(join(out, 'pet.safetensors'));
      try {
        expect(file.metadata).toMatchObject({ format: 'tessera-pet', format_version: '1', pet_type: 'adapter' });
        expect(JSON.parse(file.metadata.pet_config!)).toEqual({ labels: NAMES, bottleneck: 16, activation: 'gelu' });
        expect(file.names().sort()).toEqual(run.trainable.params.map((p) => p.name).sort());
        for (const p of run.trainable.params) expect(file.readHost(p.name)).toEqual(p.value.toArray());
      } finally {
        file.close();
      }
    } finally {
      run.dispose();
      shared.dispose();
    }
  });

  it('an unknown label fails naming its line before any step', () => {
    let steps = 0;
    const bad = [...records.slice(0, 3), { text: 'the river', label: 'angry' }];
    try {
      trainClassifier({ model: modelDir, data: bad, steps: 3, onProgress: () => steps++ });
      throw new Error('did not throw');
    } catch (err) {
      expect(err).toBeInstanceOf(TrainDataError);
      expect((err as TrainDataError).line).toBe(4);
      expect((err as Error).message).toMatch(/label "angry" is not one of the model's labels/);
    }
    expect(steps).toBe(0);
  });
});
