import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { DecoderConfig, EncoderConfig } from '../src/config.js';
import { ConfigError, PathOutsideModelError } from '../src/errors.js';
import { parseHfConfig, readHfConfig, toHfConfigJson } from '../src/formats/hf-config.js';

const P = '/models/tiny/config.json';

const seqCls: EncoderConfig = {
  family: 'encoder',
  architecture: 'BertForSequenceClassification',
  vocabSize: 120,
  hiddenSize: 32,
  numLayers: 2,
  numHeads: 4,
  intermediateSize: 64,
  maxPositions: 40,
  typeVocabSize: 2,
  layerNormEps: 1e-12,
  hiddenAct: 'gelu',
  padTokenId: 0,
  numLabels: 3,
  labels: ['negative', 'neutral', 'positive'],
};
const bare: EncoderConfig = { ...seqCls, architecture: 'BertModel', hiddenAct: 'gelu_pytorch_tanh', typeVocabSize: 1, padTokenId: 3, numLabels: 0, labels: [] };
const llama: DecoderConfig = {
  family: 'decoder',
  architecture: 'LlamaForCausalLM',
  vocabSize: 300,
  hiddenSize: 64,
  numLayers: 2,
  numHeads: 8,
  numKvHeads: 2,
  headDim: 16,
  intermediateSize: 96,
  maxPositions: 128,
  rmsNormEps: 1e-5,
  ropeTheta: 500000,
  tieWordEmbeddings: true,
  bosTokenId: 256,
  eosTokenIds: [257, 258],
};

function configError(json: unknown): ConfigError {
  try {
    parseHfConfig(json, P);
  } catch (e) {
    expect(e).toBeInstanceOf(ConfigError);
    expect((e as ConfigError).path).toBe(P);
    expect((e as Error).message.startsWith(`${P}: `)).toBe(true);
    return e as ConfigError;
  }
  throw new Error(`expected a ConfigError for ${JSON.stringify(json)}`);
}

describe('parseHfConfig: round trip with toHfConfigJson', () => {
  it('is the identity for both families', () => {
    for (const c of [seqCls, bare, llama, { ...llama, eosTokenIds: [2], tieWordEmbeddings: false, numKvHeads: 8 }]) {
      // Through JSON text, as on disk.
      expect(parseHfConfig(JSON.parse(JSON.stringify(toHfConfigJson(c))), P)).toEqual(c);
    }
  });
});

describe('parseHfConfig: defaults as transformers applies them', () => {
  const minimalBert = {
    architectures: ['BertForSequenceClassification'],
    vocab_size: 100,
    hidden_size: 12,
    num_hidden_layers: 1,
    num_attention_heads: 3,
    intermediate_size: 24,
    max_position_embeddings: 16,
  };
  const minimalLlama = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    vocab_size: 100,
    hidden_size: 48,
    num_hidden_layers: 1,
    num_attention_heads: 6,
    intermediate_size: 64,
    max_position_embeddings: 32,
  };

  it('fills encoder defaults (BertConfig)', () => {
    expect(parseHfConfig(minimalBert, P)).toEqual({
      family: 'encoder',
      architecture: 'BertForSequenceClassification',
      vocabSize: 100,
      hiddenSize: 12,
      numLayers: 1,
      numHeads: 3,
      intermediateSize: 24,
      maxPositions: 16,
      typeVocabSize: 2,
      layerNormEps: 1e-12,
      hiddenAct: 'gelu',
      padTokenId: 0,
      numLabels: 2,
      labels: ['LABEL_0', 'LABEL_1'],
    });
    // null means unset, as in transformers.
    expect(parseHfConfig({ ...minimalBert, pad_token_id: null, layer_norm_eps: null }, P)).toMatchObject({ padTokenId: 0, layerNormEps: 1e-12 });
  });

  it('takes labels from id2label, else num_labels', () => {
    expect(parseHfConfig({ ...minimalBert, num_labels: 4 }, P)).toMatchObject({ numLabels: 4, labels: ['LABEL_0', 'LABEL_1', 'LABEL_2', 'LABEL_3'] });
    // id2label wins over a disagreeing num_labels (transformers warns and uses id2label); key order does not matter.
    expect(parseHfConfig({ ...minimalBert, num_labels: 5, id2label: { '1': 'yes', '0': 'no' } }, P)).toMatchObject({ numLabels: 2, labels: ['no', 'yes'] });
    // A bare BertModel has no head, whatever id2label says (PretrainedConfig always writes one).
    expect(parseHfConfig({ ...minimalBert, architectures: ['BertModel'], id2label: { '0': 'LABEL_0', '1': 'LABEL_1' } }, P)).toMatchObject({ numLabels: 0, labels: [] });
  });

  it('fills decoder defaults (LlamaConfig)', () => {
    expect(parseHfConfig(minimalLlama, P)).toEqual({
      family: 'decoder',
      architecture: 'LlamaForCausalLM',
      vocabSize: 100,
      hiddenSize: 48,
      numLayers: 1,
      numHeads: 6,
      numKvHeads: 6,
      headDim: 8,
      intermediateSize: 64,
      maxPositions: 32,
      rmsNormEps: 1e-6,
      ropeTheta: 10000,
      tieWordEmbeddings: false,
      bosTokenId: 1,
      eosTokenIds: [2],
    });
    expect(parseHfConfig({ ...minimalLlama, eos_token_id: 7 }, P)).toMatchObject({ eosTokenIds: [7] });
    expect(parseHfConfig({ ...minimalLlama, eos_token_id: [7, 9] }, P)).toMatchObject({ eosTokenIds: [7, 9] });
    expect(parseHfConfig({ ...minimalLlama, num_key_value_heads: null, head_dim: null }, P)).toMatchObject({ numKvHeads: 6, headDim: 8 });
    // An explicit head_dim may differ from hidden / heads (as in Gemma-style configs).
    expect(parseHfConfig({ ...minimalLlama, head_dim: 4 }, P)).toMatchObject({ headDim: 4 });
    // transformers ≥ 4.56 rope_parameters with the default rope type.
    expect(parseHfConfig({ ...minimalLlama, rope_parameters: { rope_type: 'default', rope_theta: 1234 } }, P)).toMatchObject({ ropeTheta: 1234 });
  });

  it('reads a real TinyLlama-1.1B config.json', () => {
    const tinyLlama = {
      architectures: ['LlamaForCausalLM'],
      attention_bias: false,
      bos_token_id: 1,
      eos_token_id: 2,
      hidden_act: 'silu',
      hidden_size: 2048,
      initializer_range: 0.02,
      intermediate_size: 5632,
      max_position_embeddings: 2048,
      model_type: 'llama',
      num_attention_heads: 32,
      num_hidden_layers: 22,
      num_key_value_heads: 4,
      pretraining_tp: 1,
      rms_norm_eps: 1e-5,
      rope_scaling: null,
      rope_theta: 10000.0,
      tie_word_embeddings: false,
      torch_dtype: 'bfloat16',
      transformers_version: '4.35.0',
      use_cache: true,
      vocab_size: 32000,
    };
    expect(parseHfConfig(tinyLlama, P)).toMatchObject({ numKvHeads: 4, headDim: 64, rmsNormEps: 1e-5, eosTokenIds: [2] });
  });

  it('reads a real bert-base-uncased config.json', () => {
    const bertBase = {
      architectures: ['BertForMaskedLM'],
      attention_probs_dropout_prob: 0.1,
      gradient_checkpointing: false,
      hidden_act: 'gelu',
      hidden_dropout_prob: 0.1,
      hidden_size: 768,
      initializer_range: 0.02,
      intermediate_size: 3072,
      layer_norm_eps: 1e-12,
      max_position_embeddings: 512,
      model_type: 'bert',
      num_attention_heads: 12,
      num_hidden_layers: 12,
      pad_token_id: 0,
      position_embedding_type: 'absolute',
      transformers_version: '4.6.0.dev0',
      type_vocab_size: 2,
      use_cache: true,
      vocab_size: 30522,
    };
    // Its head (masked LM) is not one we run, and the error says which are.
    expect(configError(bertBase).message).toContain('BertForMaskedLM is not supported (supported: BertModel, BertForSequenceClassification, LlamaForCausalLM)');
    expect(parseHfConfig({ ...bertBase, architectures: ['BertModel'] }, P)).toMatchObject({ hiddenSize: 768, numLayers: 12, vocabSize: 30522 });
  });
});

describe('parseHfConfig: rejects what the engine would get wrong', () => {
  const bert = toHfConfigJson(seqCls);
  const dec = toHfConfigJson(llama);

  it('rejects a non-object, a missing or unsupported architecture, and a mismatched model_type', () => {
    expect(configError([1]).message).toContain('must be a JSON object');
    expect(configError({ ...bert, architectures: undefined }).message).toContain('architectures must be a non-empty list');
    expect(configError({ ...bert, architectures: [] }).message).toContain('architectures');
    expect(configError({ ...dec, architectures: ['MistralForCausalLM'] }).message).toContain('MistralForCausalLM is not supported');
    expect(configError({ ...dec, model_type: 'mistral' }).message).toContain('model_type is "mistral", but LlamaForCausalLM needs "llama"');
  });

  it('rejects missing and wrong-typed required keys, naming the key', () => {
    for (const key of ['vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'intermediate_size', 'max_position_embeddings']) {
      expect(configError({ ...bert, [key]: undefined }).message, key).toContain(`${key} is required`);
      expect(configError({ ...dec, [key]: '64' }).message, key).toContain(`${key} must be a positive integer, got "64"`);
      expect(configError({ ...dec, [key]: 2.5 }).message, key).toContain(`${key} must be a positive integer`);
    }
    expect(configError({ ...dec, tie_word_embeddings: 'yes' }).message).toContain('tie_word_embeddings must be true or false');
    expect(configError({ ...dec, rms_norm_eps: '1e-5' }).message).toContain('rms_norm_eps must be a positive number');
    expect(configError({ ...dec, eos_token_id: [] }).message).toContain('eos_token_id must be');
    expect(configError({ ...dec, eos_token_id: [1, -1] }).message).toContain('eos_token_id must be');
    expect(configError({ ...dec, bos_token_id: -1 }).message).toContain('bos_token_id must be a non-negative integer');
  });

  it('rejects non-positive sizes', () => {
    expect(configError({ ...bert, hidden_size: 0 }).message).toContain('hidden_size must be a positive integer, got 0');
    expect(configError({ ...dec, num_key_value_heads: -2 }).message).toContain('num_key_value_heads must be a positive integer');
    expect(configError({ ...bert, layer_norm_eps: 0 }).message).toContain('layer_norm_eps must be a positive number');
    expect(configError({ ...dec, rope_theta: -1 }).message).toContain('rope_theta must be a positive number');
  });

  it('rejects head arithmetic that does not divide', () => {
    expect(configError({ ...bert, hidden_size: 30 }).message).toContain('hidden_size 30 is not a multiple of num_attention_heads 4');
    expect(configError({ ...dec, num_key_value_heads: 3 }).message).toContain('num_attention_heads 8 is not a multiple of num_key_value_heads 3');
    expect(configError({ ...dec, head_dim: 7 }).message).toContain('head_dim 7 is odd');
  });

  it('rejects RoPE scaling, biases and other activations in Llama', () => {
    const llama32 = { ...dec, rope_scaling: { factor: 32.0, high_freq_factor: 4.0, low_freq_factor: 1.0, original_max_position_embeddings: 8192, rope_type: 'llama3' } };
    expect(configError(llama32).message).toContain('RoPE scaling is not supported');
    expect(configError({ ...dec, rope_parameters: { rope_type: 'yarn', factor: 4 } }).message).toContain('rope_parameters.rope_type is "yarn"');
    expect(configError({ ...dec, attention_bias: true }).message).toContain('attention_bias is true, but a bias on the attention projections is not supported');
    expect(configError({ ...dec, mlp_bias: true }).message).toContain('mlp_bias is true');
    expect(configError({ ...dec, hidden_act: 'gelu' }).message).toContain('hidden_act "gelu" is not supported (supported: silu)');
  });

  it('rejects encoder settings it does not implement', () => {
    expect(configError({ ...bert, hidden_act: 'relu' }).message).toContain('hidden_act "relu" is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh)');
    expect(configError({ ...bert, position_embedding_type: 'relative_key' }).message).toContain('position_embedding_type "relative_key" is not supported');
    expect(configError({ ...bert, is_decoder: true }).message).toContain('is_decoder');
    expect(configError({ ...bert, pad_token_id: 120 }).message).toContain('pad_token_id 120 is not below vocab_size 120');
    expect(configError({ ...bert, id2label: { '0': 'a', '2': 'b' } }).message).toContain('id2label keys must be 0 … 1, got "2"');
    expect(configError({ ...bert, id2label: { '0': 'a', '1': 7 } }).message).toContain('id2label.1 must be a string');
    expect(configError({ ...bert, id2label: {} }).message).toContain('id2label must name at least one label');
    expect(configError({ ...bert, id2label: undefined, num_labels: 0 }).message).toContain('num_labels must be a positive integer');
  });
});

describe('readHfConfig', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-hf-config-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads dir/config.json', () => {
    writeFileSync(join(dir, 'config.json'), JSON.stringify(toHfConfigJson(llama), null, 2));
    expect(readHfConfig(dir)).toEqual(llama);
  });

  it('names the file when it is missing, unreadable JSON, or a symlink out of the directory', () => {
    const missing = join(dir, 'missing');
    expect(() => readHfConfig(missing)).toThrow(ConfigError);
    expect(() => readHfConfig(missing)).toThrow(`${join(missing, 'config.json')}: not found`);
    const bad = mkdtempSync(join(dir, 'bad-'));
    writeFileSync(join(bad, 'config.json'), '{"architectures": [');
    expect(() => readHfConfig(bad)).toThrow(/config\.json: not readable JSON/);
    const linked = mkdtempSync(join(dir, 'linked-'));
    const outside = mkdtempSync(join(tmpdir(), 'tessera-hf-outside-'));
    try {
      writeFileSync(join(outside, 'config.json'), JSON.stringify(toHfConfigJson(llama)));
      symlinkSync(join(outside, 'config.json'), join(linked, 'config.json'));
      expect(() => readHfConfig(linked)).toThrow(PathOutsideModelError);
    } finally {
      rmSync(outside, { recursive: true, force: true });
    }
  });
});
