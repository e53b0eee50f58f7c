import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { deviceInfo, getCpuBackend, setThreads } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import { DecoderModel } from '../src/models/decoder.js';
import { decoderTensorShapes } from '../src/models/names.js';
import { ModelWeights } from '../src/models/weights.js';
import type { LmExample } from '../src/train/data.js';
import { TrainableDecoder } from '../src/train/decoder.js';
import type { TrainableSpec } from '../src/train/params.js';
import { Trainer, type TrainerOptions } from '../src/train/trainer.js';
import { randomHostWeights, randomIds, tinyDecoderConfig } from './support/random-models.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-train-ckpt-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const config = tinyDecoderConfig();
const examples: LmExample[] = Array.from({ length: 8 }, (_, i) => {
  const ids = randomIds(4 + (i % 3), config.vocabSize, 50 + i, 3);
  return { ids, loss: Uint8Array.from(ids, (_, t) => (t >= 1 ? 1 : 0)), line: i + 1 };
});
const options: TrainerOptions = { steps: 6, batchSize: 3, gradAccum: 2, lr: 5e-3, warmupSteps: 2, seed: 11, weightDecay: 0.01 };

function build(spec: TrainableSpec) {
  const model = new DecoderModel(config, ModelWeights.fromHost(randomHostWeights(decoderTensorShapes(config), 21)));
  const trainable = new TrainableDecoder(model, spec, { seed: 11 });
  const trainer = new Trainer(trainable, examples, options);
  return {
    trainer,
    values: () => trainable.params.map((p) => Buffer.from((p.value.toArray() as Float32Array).buffer)),
    dispose: () => { trainer.dispose(); trainable.dispose(); model.dispose(); },
  };
}

describe('checkpoint and resume', () => {
  for (const spec of [{ kind: 'lora', r: 4, dropout: 0.1 }, { kind: 'full' }] as const) {
    it(`${spec.kind}: 3 steps, checkpoint, resume in a fresh trainer, 3 more = 6 steps uninterrupted, bit for bit`, () => {
      const straight = build(spec);
      const losses = straight.trainer.run().history.map((p) => p.loss);
      const want = straight.values();
      straight.dispose();

      const first = build(spec);
      for (let i = 0; i < 3; i++) first.trainer.trainStep();
      const path = join(root, `${spec.kind}.safetensors`);
      first.trainer.saveCheckpoint(path);
      first.dispose();

      const second = build(spec);
      try {
        second.trainer.resume(path);
        expect(second.trainer.step).toBe(3);
        const rest = second.trainer.run().history.map((p) => p.loss);
        expect(rest).toEqual(losses.slice(3));
        second.values().forEach((v, i) => expect(v.equals(want[i]!)).toBe(true));
      } finally {
        second.dispose();
      }
    });
  }

  it('a whole run (6 steps, LoRA with dropout) gives the same bits with 1 and 2 threads', () => {
    const cpu = getCpuBackend();
    const before = deviceInfo(cpu).threads ?? 1;
    const results: Buffer[][] = [];
    try {
      for (const threads of [1, 2]) {
        setThreads(threads, cpu);
        const r = build({ kind: 'lora', r: 4, dropout: 0.1 });
        r.trainer.run();
        results.push(r.values());
        r.dispose();
      }
    } finally {
      setThreads(before, cpu);
    }
    results[0]!.forEach((v, i) => expect(v.equals(results[1]![i]!)).toBe(true));
  });

  it('refuses a checkpoint of another trainable set', () => {
    const a = build({ kind: 'lora', r: 4 });
    const path = join(root, 'lora4.safetensors');
    a.trainer.saveCheckpoint(path);
    a.dispose();
    const b = build({ kind: 'lora', r: 2 });
    try {
      expect(() => b.trainer.resume(path)).toThrow(/saved for trainable set/);
    } finally {
      b.dispose();
    }
  });
});
