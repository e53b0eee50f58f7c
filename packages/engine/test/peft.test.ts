import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BudgetExceededError, allocatorStats, fromHalfBits, setBudget, toHalfBits } from '@tessera/native';
import { randomFloats } from '@tessera/test-utils';
import type { DecoderConfig, EncoderConfig } from '../src/config.js';
import { ConfigError, MissingTensorError, ModelFormatError, TensorShapeError, UnknownDtypeError } from '../src/errors.js';
import {
  type LoraAdapterConfig,
  loadLoraAdapter,
  loadLoraAdapterAsync,
  matchesTargetModules,
  parseLoraAdapterConfig,
  readLoraAdapterConfig,
  resolveLoraParams,
  toPeftConfigJson,
} from '../src/formats/peft.js';
import { type SafetensorsEntry, writeSafetensors } from '../src/formats/safetensors.js';
import { PEFT_PREFIX, decoderLinearModules, encoderLinearModules, peftLoraTensorNames } from '../src/models/names.js';

const P = '/adapters/a/adapter_config.json';
const root = mkdtempSync(join(tmpdir(), 'tessera-peft-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirCounter = 0;

const baseConfig: LoraAdapterConfig = {
  r: 4,
  loraAlpha: 8,
  targetModules: ['q_proj', 'v_proj'],
  fanInFanOut: false,
  bias: 'none',
  rankPattern: {},
  alphaPattern: {},
  useRslora: false,
  baseModelNameOrPath: 'tiny-llama',
  taskType: 'CAUSAL_LM',
  modulesToSave: null,
};

const llama: DecoderConfig = {
  family: 'decoder',
  architecture: 'LlamaForCausalLM',
  vocabSize: 32,
  hiddenSize: 16,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  headDim: 4,
  intermediateSize: 24,
  maxPositions: 64,
  rmsNormEps: 1e-6,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  bosTokenId: 1,
  eosTokenIds: [2],
};
const bert: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 40,
  hiddenSize: 8,
  numLayers: 1,
  numHeads: 2,
  intermediateSize: 12,
  maxPositions: 16,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 3,
  labels: ['a', 'b', 'c'],
};

function caught(fn: () => unknown): Error {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  throw new Error('expected a throw');
}

let seed = 100;
/** LoRA A [r, in] and B [out, r] entries for one module, f32 unless told. */
function loraEntries(module: string, r: number, inF: number, outF: number, dtype: 'f32' | 'bf16' = 'f32'): [string, SafetensorsEntry][] {
  const names = peftLoraTensorNames(module);
  const data = (n: number) => (dtype === 'f32' ? randomFloats(n, seed++) : toHalfBits(randomFloats(n, seed++), 'bf16'));
  return [
    [names.a, { dtype, shape: [r, inF], data: data(r * inF) }],
    [names.b, { dtype, shape: [outF, r], data: data(outF * r) }],
  ];
}

/** Writes an adapter directory the way PEFT's save_pretrained lays it out. */
function writeAdapter(config: LoraAdapterConfig | Record<string, unknown>, tensors: [string, SafetensorsEntry][] | null): string {
  const dir = join(root, `adapter-${dirCounter++}`);
  mkdirSync(dir);
  const json = 'peft_type' in config ? config : toPeftConfigJson(config as LoraAdapterConfig);
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify(json, null, 2));
  if (tensors) writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors, { format: 'pt' });
  return dir;
}

/** A valid adapter on `llama`: q_proj with r = 4, v_proj with r = 2 (rank_pattern), every layer. */
function llamaAdapterTensors(): [string, SafetensorsEntry][] {
  const out: [string, SafetensorsEntry][] = [];
  for (let i = 0; i < llama.numLayers; i++) {
    const m = decoderLinearModules(i);
    out.push(...loraEntries(m.q, 4, 16, 16), ...loraEntries(m.v, 2, 16, 8, 'bf16'));
  }
  return out;
}
const llamaAdapterConfig: LoraAdapterConfig = { ...baseConfig, rankPattern: { v_proj: 2 }, alphaPattern: { 'layers.1.self_attn.q_proj': 2 } };

describe('adapter_config.json', () => {
  it('round-trips through toPeftConfigJson, with a list or a regex', () => {
    for (const c of [
      baseConfig,
      { ...baseConfig, targetModules: '.*\\.(q_proj|v_proj)', useRslora: true, bias: 'lora_only' as const, fanInFanOut: true },
      { ...baseConfig, rankPattern: { q_proj: 16 }, alphaPattern: { v_proj: 3.5 }, modulesToSave: ['classifier', 'score'], taskType: null, baseModelNameOrPath: null },
    ]) {
      expect(parseLoraAdapterConfig(JSON.parse(JSON.stringify(toPeftConfigJson(c))), P)).toEqual(c);
    }
  });

  it("applies PEFT's LoraConfig defaults", () => {
    expect(parseLoraAdapterConfig({ peft_type: 'LORA', target_modules: ['query', 'value'] }, P)).toEqual({
      r: 8,
      loraAlpha: 8,
      targetModules: ['query', 'value'],
      fanInFanOut: false,
      bias: 'none',
      rankPattern: {},
      alphaPattern: {},
      useRslora: false,
      baseModelNameOrPath: null,
      taskType: null,
      modulesToSave: null,
    });
  });

  it('rejects what it cannot honour, naming the file and the key', () => {
    const good = toPeftConfigJson(baseConfig);
    const cases: [Record<string, unknown>, string][] = [
      [{ ...good, peft_type: 'IA3' }, 'peft_type is "IA3", but only "LORA"'],
      [{ ...good, peft_type: undefined }, 'peft_type is undefined'],
      [{ ...good, target_modules: null }, 'target_modules must be a non-empty list'],
      [{ ...good, target_modules: [] }, 'target_modules must be a non-empty list'],
      [{ ...good, target_modules: '(unclosed' }, 'target_modules is not a valid regular expression'],
      [{ ...good, use_dora: true }, 'use_dora is true, but DoRA adapters are not supported'],
      [{ ...good, lora_bias: true }, 'lora_bias is true'],
      [{ ...good, layers_to_transform: [0, 1] }, 'layers_to_transform is [0,1], but only null is supported'],
      [{ ...good, layer_replication: [[0, 2]] }, 'layer_replication'],
      [{ ...good, exclude_modules: ['lm_head'] }, 'exclude_modules'],
      [{ ...good, r: 0 }, 'r must be a positive integer'],
      [{ ...good, lora_alpha: '16' }, 'lora_alpha must be a number'],
      [{ ...good, bias: 'some' }, 'bias must be "none", "all" or "lora_only"'],
      [{ ...good, rank_pattern: { q_proj: 2.5 } }, 'rank_pattern.q_proj must be a positive integer'],
      [{ ...good, rank_pattern: { '(q': 2 } }, 'rank_pattern.(q is not a valid regular expression'],
      [{ ...good, fan_in_fan_out: 'no' }, 'fan_in_fan_out must be true or false'],
      [{ ...good, modules_to_save: 'classifier' }, 'modules_to_save must be a list'],
    ];
    for (const [json, message] of cases) {
      const e = caught(() => parseLoraAdapterConfig(json, P));
      expect(e, message).toBeInstanceOf(ConfigError);
      expect(e.message, message).toContain(`${P}: ${message}`);
    }
    expect(caught(() => parseLoraAdapterConfig([], P))).toBeInstanceOf(ConfigError);
  });

  it('reads dir/adapter_config.json and names it when missing or malformed', () => {
    const dir = writeAdapter(baseConfig, null);
    expect(readLoraAdapterConfig(dir)).toEqual(baseConfig);
    const empty = join(root, `empty-${dirCounter++}`);
    mkdirSync(empty);
    expect(() => readLoraAdapterConfig(empty)).toThrow(`${join(empty, 'adapter_config.json')}: not found`);
    writeFileSync(join(empty, 'adapter_config.json'), '{"peft_type": "LORA",');
    expect(() => readLoraAdapterConfig(empty)).toThrow(ConfigError);
  });
});

describe("PEFT's matching rules", () => {
  it('target_modules list: an exact name or a "." + entry suffix', () => {
    const c = { targetModules: ['q_proj', 'self_attn.v_proj'] };
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.q_proj')).toBe(true);
    expect(matchesTargetModules(c, 'q_proj')).toBe(true);
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.v_proj')).toBe(true);
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.xq_proj')).toBe(false);
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.q_proj.base_layer')).toBe(false);
    expect(matchesTargetModules(c, 'model.layers.0.cross_attn.v_proj')).toBe(false);
    // BERT's generic names: 'dense' selects every dense layer, 'output.dense' only the FFN and attention outputs.
    const layer = encoderLinearModules(bert, 0);
    expect([layer.attn_out, layer.ffn_in, layer.ffn_out, 'bert.pooler.dense'].map((m) => matchesTargetModules({ targetModules: ['output.dense'] }, m))).toEqual([
      true,
      false,
      true,
      false,
    ]);
  });

  it('target_modules string: a regex that must match the whole name (re.fullmatch)', () => {
    const c = { targetModules: '.*\\.layers\\.[01]\\.self_attn\\.(q|v)_proj' };
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.q_proj')).toBe(true);
    expect(matchesTargetModules(c, 'model.layers.1.self_attn.v_proj')).toBe(true);
    expect(matchesTargetModules(c, 'model.layers.2.self_attn.q_proj')).toBe(false);
    expect(matchesTargetModules(c, 'model.layers.0.self_attn.q_proj_extra')).toBe(false);
    // A bare suffix is not a regex match of the full name.
    expect(matchesTargetModules({ targetModules: 'q_proj' }, 'model.layers.0.self_attn.q_proj')).toBe(false);
    // Top-level alternation is still anchored on both ends.
    const alt = { targetModules: '.*q_proj|.*v_proj' };
    expect(matchesTargetModules(alt, 'model.layers.0.self_attn.v_proj')).toBe(true);
    expect(matchesTargetModules(alt, 'model.layers.0.self_attn.q_proj.x')).toBe(false);
    // Python named groups.
    expect(matchesTargetModules({ targetModules: '.*(?P<kind>q|v)_proj' }, 'a.q_proj')).toBe(true);
    expect(matchesTargetModules({ targetModules: '(?P<x>a)\\.(?P=x)' }, 'a.a')).toBe(true);
    expect(matchesTargetModules({ targetModules: '\\Aq_proj\\Z' }, 'q_proj')).toBe(true);
  });

  it('rank_pattern / alpha_pattern: the first key matching (^|.*\\.)key$ wins; scale = alpha / r or alpha / √r', () => {
    const c = {
      r: 8,
      loraAlpha: 16,
      useRslora: false,
      rankPattern: { q_proj: 4, 'model.layers.1.self_attn.v_proj': 2, 'layers.0.self_attn.q_proj': 32 },
      alphaPattern: { 'layers\\.1\\..*': 4 },
    };
    expect(resolveLoraParams(c, 'model.layers.0.self_attn.q_proj')).toEqual({ r: 4, alpha: 16, scale: 4 });
    expect(resolveLoraParams(c, 'q_proj')).toEqual({ r: 4, alpha: 16, scale: 4 });
    expect(resolveLoraParams(c, 'model.layers.1.self_attn.v_proj')).toEqual({ r: 2, alpha: 4, scale: 2 });
    // A full-name key does not leak onto layer 11 (PEFT 0.14's fix), nor does a key that is only a name suffix.
    expect(resolveLoraParams(c, 'model.layers.11.self_attn.v_proj')).toEqual({ r: 8, alpha: 16, scale: 2 });
    expect(resolveLoraParams({ ...c, rankPattern: { proj: 3 } }, 'model.layers.0.self_attn.q_proj').r).toBe(8);
    expect(resolveLoraParams({ ...c, useRslora: true }, 'model.layers.0.mlp.up_proj')).toEqual({ r: 8, alpha: 16, scale: 16 / Math.sqrt(8) });
  });
});

describe('loadLoraAdapter', () => {
  it('loads every module as f32 A [r, in] and B [out, r] with its own rank, alpha and scale', async () => {
    const tensors = llamaAdapterTensors();
    const dir = writeAdapter(llamaAdapterConfig, tensors);
    const before = allocatorStats().inUse;
    for (const load of [() => loadLoraAdapter(dir, { base: llama, name: 'sql' }), () => loadLoraAdapterAsync(dir, { base: llama, name: 'sql' })]) {
      const adapter = await load();
      try {
        expect(adapter.name).toBe('sql');
        expect(adapter.dir).toBe(dir);
        expect(adapter.config).toEqual(llamaAdapterConfig);
        expect(adapter.effectiveFanInFanOut).toBe(false);
        expect([...adapter.modules.keys()].sort()).toEqual(
          [0, 1].flatMap((i) => [decoderLinearModules(i).q, decoderLinearModules(i).v]).sort(),
        );
        const q0 = adapter.modules.get(decoderLinearModules(0).q)!;
        expect([q0.r, q0.alpha, q0.scale]).toEqual([4, 8, 2]);
        const q1 = adapter.modules.get(decoderLinearModules(1).q)!;
        expect([q1.r, q1.alpha, q1.scale]).toEqual([4, 2, 0.5]);
        const v1 = adapter.modules.get(decoderLinearModules(1).v)!;
        expect([v1.r, v1.alpha, v1.scale]).toEqual([2, 8, 4]);
        expect(v1.a.dtype).toBe('f32');
        expect(v1.a.shape).toEqual([2, 16]);
        expect(v1.b.shape).toEqual([8, 2]);
        const byName = new Map(tensors);
        expect(Array.from(q0.a.toArray() as Float32Array)).toEqual(Array.from(byName.get(peftLoraTensorNames(decoderLinearModules(0).q).a)!.data as Float32Array));
        // bf16 on disk → exact f32 widening.
        const vBits = byName.get(peftLoraTensorNames(decoderLinearModules(1).v).b)!.data as Uint16Array;
        expect(Array.from(v1.b.toArray() as Float32Array)).toEqual(Array.from(fromHalfBits(vBits, 'bf16')));
        const expectedBytes = tensors.reduce((sum, [, e]) => sum + e.shape.reduce((a, b) => a * b, 1) * 4, 0);
        expect(adapter.nbytes).toBe(expectedBytes);
        expect(adapter.biases.size).toBe(0);
        expect(adapter.savedModules.size).toBe(0);
      } finally {
        adapter.dispose();
        adapter.dispose();
      }
      expect(allocatorStats().inUse).toBe(before);
    }
    // Without a base, shapes are only checked for consistency with r; the directory name is the default name.
    const unchecked = loadLoraAdapter(dir);
    expect(unchecked.name).toBe(`adapter-${dirCounter - 1}`);
    expect(unchecked.modules.size).toBe(4);
    unchecked.dispose();
  });

  it('loads trained biases and modules_to_save of a sequence-classification adapter', () => {
    const layer = encoderLinearModules(bert, 0);
    const config: LoraAdapterConfig = { ...baseConfig, targetModules: ['query', 'value'], bias: 'all', modulesToSave: ['classifier', 'score'], taskType: 'SEQ_CLS' };
    const tensors: [string, SafetensorsEntry][] = [
      ...loraEntries(layer.query, 4, 8, 8),
      ...loraEntries(layer.value, 4, 8, 8),
      [`${PEFT_PREFIX}${layer.query}.bias`, { dtype: 'f32', shape: [8], data: randomFloats(8, 1) }],
      [`${PEFT_PREFIX}bert.encoder.layer.0.output.LayerNorm.bias`, { dtype: 'f16', shape: [8], data: toHalfBits(randomFloats(8, 2), 'f16') }],
      [`${PEFT_PREFIX}classifier.weight`, { dtype: 'f32', shape: [3, 8], data: randomFloats(24, 3) }],
      [`${PEFT_PREFIX}classifier.bias`, { dtype: 'f32', shape: [3], data: randomFloats(3, 4) }],
    ];
    const adapter = loadLoraAdapter(writeAdapter(config, tensors), { base: bert });
    try {
      expect([...adapter.biases.keys()].sort()).toEqual(['bert.encoder.layer.0.attention.self.query.bias', 'bert.encoder.layer.0.output.LayerNorm.bias']);
      expect(adapter.biases.get('bert.encoder.layer.0.output.LayerNorm.bias')!.dtype).toBe('f32');
      expect([...adapter.savedModules.keys()].sort()).toEqual(['classifier.bias', 'classifier.weight']);
      expect(adapter.savedModules.get('classifier.weight')!.shape).toEqual([3, 8]);
      expect(adapter.modules.size).toBe(2);
    } finally {
      adapter.dispose();
    }
    // The same head against a base with another label count is a shape error.
    const e = caught(() => loadLoraAdapter(writeAdapter(config, tensors), { base: { ...bert, numLabels: 2, labels: ['x', 'y'] } }));
    expect(e).toBeInstanceOf(TensorShapeError);
    expect(e.message).toContain("classifier.bias has shape [3] but the base model's classifier.bias is [2]");
    // Biases are only read when the config says they were trained.
    expect(() => loadLoraAdapter(writeAdapter({ ...config, bias: 'none' }, tensors))).toThrow(/neither a LoRA weight, a trained bias \(bias is "none"\)/);
  });

  it('validates against the base before reading anything, and leaves the budget as it was', () => {
    const m0 = decoderLinearModules(0);
    const before = allocatorStats().inUse;
    const expectFailure = (tensors: [string, SafetensorsEntry][], kind: new (...args: never[]) => Error, message: string | RegExp, config = baseConfig) => {
      const dir = writeAdapter(config, tensors);
      const e = caught(() => loadLoraAdapter(dir, { base: llama }));
      expect(e, String(message)).toBeInstanceOf(kind);
      expect(e.message).toMatch(message);
      expect((e as ModelFormatError).path).toBe(join(dir, 'adapter_model.safetensors'));
      expect(allocatorStats().inUse).toBe(before);
    };
    // A wrong rank: A must be [r, in].
    const wrongRank = [...loraEntries(m0.q, 3, 16, 16)];
    expectFailure(wrongRank, TensorShapeError, /lora_A\.weight has shape \[3, 16\] but should be \[r, in\] = \[4, 16\] \(r = 4\)/);
    // v_proj's output is numKvHeads × headDim = 8, not hidden.
    expectFailure([...loraEntries(m0.q, 4, 16, 16), ...loraEntries(m0.v, 4, 16, 16)], TensorShapeError, /v_proj\.lora_B\.weight has shape \[16, 4\] but should be \[out, r\] = \[8, 4\]/);
    expectFailure(loraEntries(m0.q, 4, 12, 16), TensorShapeError, /\[4, 12\] but should be \[r, in\] = \[4, 16\]/);
    // An A without its B, and a B without its A.
    expectFailure([loraEntries(m0.q, 4, 16, 16)[0]!], MissingTensorError, /lora_A\.weight has no partner .*lora_B\.weight/);
    expectFailure([loraEntries(m0.q, 4, 16, 16)[1]!], MissingTensorError, /lora_B\.weight has no partner .*lora_A\.weight/);
    // A module the base does not have (layer 5 of a 2-layer model), and one target_modules does not select.
    expectFailure(loraEntries(decoderLinearModules(5).q, 4, 16, 16), ConfigError, /model\.layers\.5\.self_attn\.q_proj has LoRA weights but is not a Linear layer of the base model/);
    expectFailure(loraEntries(m0.up, 4, 16, 24), ConfigError, /module model\.layers\.0\.mlp\.up_proj has LoRA weights but target_modules \["q_proj","v_proj"\] does not select it/);
    // An embedding is not a Linear even though its weight is 2-D.
    expectFailure(loraEntries('model.embed_tokens', 4, 16, 32), ConfigError, /does not select it/);
    expectFailure(loraEntries('model.embed_tokens', 4, 16, 32), ConfigError, /is not a Linear layer/, { ...baseConfig, targetModules: ['embed_tokens'] });
    // Integer tensors, files that are not PEFT's, LoRA flavours we do not run, and no LoRA at all.
    const ints: [string, SafetensorsEntry][] = [[peftLoraTensorNames(m0.q).a, { dtype: 'i32', shape: [4, 16], data: new Int32Array(64) }], loraEntries(m0.q, 4, 16, 16)[1]!];
    expectFailure(ints, UnknownDtypeError, /lora_A\.weight is i32; adapter tensors must be f32, f16 or bf16/);
    expectFailure([['model.layers.0.self_attn.q_proj.lora_A.weight', { dtype: 'f32', shape: [4, 16], data: new Float32Array(64) }]], ConfigError, /does not start with base_model\.model\./);
    expectFailure([[`${PEFT_PREFIX}model.embed_tokens.lora_embedding_A`, { dtype: 'f32', shape: [4, 32], data: new Float32Array(128) }]], ConfigError, /LoRA on embeddings/);
    expectFailure([], MissingTensorError, /holds no LoRA weights/);
  });

  it('frees what it read when a later read fails', async () => {
    const dir = writeAdapter(llamaAdapterConfig, llamaAdapterTensors());
    const saved = allocatorStats().budget;
    const inUse = allocatorStats().inUse;
    try {
      // Room for a few of the eight tensors (each ≤ 256 B as f32), not all.
      setBudget(inUse + 700);
      expect(() => loadLoraAdapter(dir, { base: llama })).toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(inUse);
      await expect(loadLoraAdapterAsync(dir, { base: llama })).rejects.toThrow(BudgetExceededError);
      expect(allocatorStats().inUse).toBe(inUse);
    } finally {
      setBudget(saved);
    }
  });

  it('says which file is missing', () => {
    const noWeights = writeAdapter(baseConfig, null);
    const e = caught(() => loadLoraAdapter(noWeights));
    expect(e).toBeInstanceOf(MissingTensorError);
    expect(e.message).toContain(`${join(noWeights, 'adapter_model.safetensors')}: not found`);
    writeFileSync(join(noWeights, 'adapter_model.bin'), 'pickle');
    expect(() => loadLoraAdapter(noWeights)).toThrow(/PyTorch pickles are not read/);
    const noConfig = join(root, `no-config-${dirCounter++}`);
    mkdirSync(noConfig);
    writeSafetensors(join(noConfig, 'adapter_model.safetensors'), llamaAdapterTensors());
    expect(() => loadLoraAdapter(noConfig)).toThrow(ConfigError);
    expect(() => loadLoraAdapter(noConfig)).toThrow(/adapter_config\.json: not found/);
  });
});
