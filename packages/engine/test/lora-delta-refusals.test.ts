/**
 * A delta applies every module of an adapter or refuses it by name (ARCHITECTURE decision 4): LoRA on a module with
 * no hook site (the pooler, the LM head) or a trained bias of one would otherwise be dropped without a word, and the
 * adapter would answer with logits off by up to several units.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tensor } from '@tessera/native';
import { afterAll, describe, expect, it } from 'vitest';
import {
  LoraDelta,
  UnsupportedAdapterError,
  decoderLinearModules,
  decoderNormModules,
  encoderLinearModules,
  encoderNormModules,
  generateModel,
  hookSiteOfModule,
  loadLoraAdapter,
  type LoraAdapterConfig,
  type LoraWeights,
  type ModelConfig,
  writeLoraAdapter,
} from '../src/index.js';
import { randomFloats } from '@tessera/test-utils';

const root = mkdtempSync(join(tmpdir(), 'tessera-lora-refusals-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('hookSiteOfModule', () => {
  it('agrees with the module spellings of both families, for both encoder architectures', () => {
    for (const layer of [0, 3, 11]) {
      for (const architecture of ['BertModel', 'BertForSequenceClassification'] as const) {
        for (const m of Object.values(encoderLinearModules({ architecture }, layer))) expect(hookSiteOfModule(m)).toEqual({ family: 'encoder', kind: 'linear', layer });
        for (const m of Object.values(encoderNormModules({ architecture }, layer))) expect(hookSiteOfModule(m)).toEqual({ family: 'encoder', kind: 'norm', layer });
      }
      for (const m of Object.values(decoderLinearModules(layer))) expect(hookSiteOfModule(m)).toEqual({ family: 'decoder', kind: 'linear', layer });
      for (const m of Object.values(decoderNormModules(layer))) expect(hookSiteOfModule(m)).toEqual({ family: 'decoder', kind: 'norm', layer });
    }
  });

  it('has no hook site for the pooler, the LM head, the embeddings or a classifier', () => {
    for (const m of ['bert.pooler.dense', 'pooler.dense', 'lm_head', 'model.embed_tokens', 'bert.embeddings.LayerNorm', 'classifier', 'model.norm', 'model.layers.0.self_attn.q_proj.extra', 'xmodel.layers.0.self_attn.q_proj']) {
      expect(hookSiteOfModule(m), m).toBeNull();
    }
  });
});

describe('LoraDelta refuses what it cannot apply', () => {
  /** A PEFT adapter on `modules` (each [rank, in] / [out, rank], small seeded values), loaded against `base`. */
  const adapterOn = (name: string, base: ModelConfig, modules: { module: string; inFeatures: number; outFeatures: number }[]) => {
    const rank = 4;
    const config: LoraAdapterConfig = {
      r: rank, loraAlpha: 8, targetModules: modules.map((m) => m.module), fanInFanOut: false, bias: 'none', rankPattern: {},
      alphaPattern: {}, useRslora: false, baseModelNameOrPath: null, taskType: null, modulesToSave: null,
    };
    writeLoraAdapter(join(root, name), config, modules.map((m, i) => ({
      ...m, rank, a: randomFloats(rank * m.inFeatures, 10 + i, -0.1, 0.1), b: randomFloats(m.outFeatures * rank, 20 + i, -0.1, 0.1),
    })));
    return loadLoraAdapter(join(root, name), { base });
  };

  it('refuses LoRA on the pooler (a `dense` target also matches bert.pooler.dense), naming the module', () => {
    const { config } = generateModel(join(root, 'bert'), { family: 'encoder', size: 'tiny', seed: 0 }); // BertForSequenceClassification: pooler + classifier
    const h = config.hiddenSize;
    const adapter = adapterOn('pooled', config, [
      { module: encoderLinearModules(config, 0).attn_out, inFeatures: h, outFeatures: h },
      { module: 'bert.pooler.dense', inFeatures: h, outFeatures: h },
    ]);
    try {
      let caught: unknown;
      try {
        new LoraDelta(new Map([['t', adapter]]));
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(UnsupportedAdapterError);
      expect((caught as Error).message).toMatch(/LoRA on bert\.pooler\.dense, which is not a per-layer hook site/);
      expect((caught as UnsupportedAdapterError).path).toBe(adapter.dir);
      expect((caught as UnsupportedAdapterError).kind).toBe('invalid');
    } finally {
      adapter.dispose();
    }
  });

  it('refuses LoRA on the LM head', () => {
    const { config } = generateModel(join(root, 'llama'), { family: 'decoder', size: 'tiny', seed: 0 });
    const h = config.hiddenSize;
    const adapter = adapterOn('head', config, [
      { module: decoderLinearModules(0).q, inFeatures: h, outFeatures: h },
      { module: 'lm_head', inFeatures: h, outFeatures: config.vocabSize },
    ]);
    try {
      expect(() => new LoraDelta(new Map([['t', adapter]]))).toThrow(/LoRA on lm_head, which is not a per-layer hook site/);
    } finally {
      adapter.dispose();
    }
  });

  it('refuses a trained bias of a module without a hook site, and accepts every hook-site module', () => {
    const zero = (n: number): Tensor => Tensor.from(new Float32Array(n), [n]);
    const a = Tensor.from(new Float32Array(4 * 8), [4, 8]);
    const b = Tensor.from(new Float32Array(8 * 4), [8, 4]);
    const bias = zero(8);
    try {
      const ok: LoraWeights = { name: 'ok', modules: new Map([[decoderLinearModules(1).down, { a, b, scale: 1 }]]) };
      expect(() => new LoraDelta(new Map([['ok', ok]]))).not.toThrow();
      const pooled: LoraWeights = { name: 'pooled', modules: new Map(), biases: new Map([['bert.pooler.dense.bias', bias]]) };
      expect(() => new LoraDelta(new Map([['p', pooled]]))).toThrow(/trained bias bert\.pooler\.dense\.bias belongs to bert\.pooler\.dense/);
    } finally {
      for (const t of [a, b, bias]) t.dispose();
    }
  });
});
