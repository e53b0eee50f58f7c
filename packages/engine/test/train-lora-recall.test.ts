import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SplitMix32 } from '@tessera/core';
import { SafetensorsFile } from '../src/formats/safetensors.js';
import { afterAll, describe, expect, it } from 'vitest';
import { loadLoraAdapter, readLoraAdapterConfig } from '../src/formats/peft.js';
import { generateBatch } from '../src/generate.js';
import { generateModel } from '../src/gen/index.js';
import { LoraDelta, type LoraWeights } from '../src/hooks/lora-delta.js';
import { PagedKvCache } from '../src/kv/paged-kv-cache.js';
import type { TrainProgress } from '../src/train/trainer.js';
import { trainLora } from '../src/train/trainer.js';

const root = mkdtempSync(join(tmpdir(), 'tessera-train-recall-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const WORDS = ['apple', 'river', 'stone', 'cloud', 'maple', 'tiger', 'ocean', 'ember', 'frost', 'lunar', 'cedar', 'piano', 'raven', 'amber',
  'delta', 'sigma', 'quartz', 'willow', 'harbor', 'canyon', 'meadow', 'falcon', 'copper', 'violet'];

describe('trainLora: key → value recall on the tiny decoder', () => {
  it('reaches ≥ 99 % exact greedy match, and the PEFT adapter it writes serves the same answers', () => {
    const started = Date.now();
    // sharpen 10: the generated model's final-norm gain, so logits can be confident (at 1 they stay near uniform).
    const modelDir = join(root, 'model');
    generateModel(modelDir, { family: 'decoder', seed: 1, sharpen: 10 });
    const rng = new SplitMix32(7);
    const records = Array.from({ length: 32 }, (_, i) => ({ prompt: `key ${i} ->`, completion: ` ${WORDS[rng.nextInt(WORDS.length)]}` }));
    const data = join(root, 'recall.jsonl');
    writeFileSync(data, `${records.map((r) => JSON.stringify(r)).join('\n')}\n`);
    const out = join(root, 'adapter');

    const progress: TrainProgress[] = [];
    const run = trainLora({
      model: modelDir, data, evalData: data, out, steps: 120, lr: 1e-2, warmupSteps: 12, batchSize: 16, seed: 3, evalEvery: 60,
      lora: { r: 8, alpha: 16 }, onProgress: (p) => progress.push(p),
    });
    try {
      const trainMs = Date.now() - started;
      expect(progress.map((p) => p.step)).toEqual(Array.from({ length: 120 }, (_, i) => i + 1));
      expect(progress.filter((p) => p.evalLoss !== undefined).map((p) => p.step)).toEqual([60, 120]);
      expect(run.loss).toBeLessThan(progress[0]!.loss / 10);
      expect(run.evalLoss!).toBeLessThan(0.2);

      // The adapter directory, as PEFT writes it.
      const config = readLoraAdapterConfig(out);
      expect(config).toMatchObject({ r: 8, loraAlpha: 16, taskType: 'CAUSAL_LM', useRslora: false, baseModelNameOrPath: modelDir });
      expect(JSON.parse(readFileSync(join(out, 'adapter_config.json'), 'utf8')).peft_type).toBe('LORA');
      const file = SafetensorsFile.open(join(out, 'adapter_model.safetensors'));
      try {
        expect(file.names()).toContain('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight');
        expect(file.names()).toContain('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight');
        expect(file.names().length).toBe(2 * 7 * 2);
      } finally {
        file.close();
      }

      // Served from the written directory through LoraDelta + generateBatch, greedy.
      const tok = run.tokenizer;
      const eos = tok.specialTokenIds.eos!;
      const wanted = records.map((r) => [...tok.encode(r.completion, { addSpecialTokens: false }), eos]);
      const answers = (lora: LoraWeights | null) => {
        const cache = PagedKvCache.create({ ...run.model.kvShape, numPages: 128 }, run.model.backend);
        const delta = lora ? new LoraDelta(new Map([['t', lora]])) : null;
        try {
          return generateBatch(run.model, records.map((r, i) => ({ prompt: tok.encode(r.prompt), maxTokens: wanted[i]!.length, key: lora ? 't' : null })),
            { cache, deltas: delta ? [delta] : [] }).map((g) => g.tokens);
        } finally {
          delta?.dispose();
          cache.dispose();
        }
      };
      const exact = (got: number[][]) => got.filter((t, i) => JSON.stringify(t) === JSON.stringify(wanted[i])).length / records.length;
      const adapter = loadLoraAdapter(out, { base: run.model.config });
      try {
        const served = answers(adapter);
        const hit = exact(served);
        console.log(`recall: ${(hit * 100).toFixed(1)} % exact, train ${trainMs} ms, final loss ${run.loss.toFixed(4)}, eval ${run.evalLoss!.toFixed(4)}`);
        expect(hit).toBeGreaterThanOrEqual(0.99);
        // The live (in-memory) factors give the same tokens; the base model alone does not know the answers.
        expect(answers(run.trainable.loraWeights())).toEqual(served);
        expect(exact(answers(null))).toBeLessThan(0.2);
      } finally {
        adapter.dispose();
      }
      expect(Date.now() - started).toBeLessThan(60_000);
    } finally {
      run.dispose();
    }
  });
});
