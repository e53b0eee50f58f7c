/**
 * Hugging Face config.json ↔ {@link ModelConfig}. Parsing applies the defaults transformers' BertConfig and
 * LlamaConfig apply, and rejects (with a {@link ConfigError} naming the file and the key) anything this engine
 * would otherwise compute differently from transformers.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { DecoderConfig, EncoderConfig, ModelConfig } from '../config.js';
import { ConfigError } from '../errors.js';
import { resolveInside } from './model-dir.js';

export const HF_CONFIG_FILE = 'config.json';

const ENCODER_ARCHITECTURES = ['BertModel', 'BertForSequenceClassification'] as const;
const DECODER_ARCHITECTURES = ['LlamaForCausalLM'] as const;
const SUPPORTED_ARCHITECTURES = [...ENCODER_ARCHITECTURES, ...DECODER_ARCHITECTURES];
const ENCODER_ACTIVATIONS = ['gelu', 'gelu_new', 'gelu_pytorch_tanh'] as const;

/** Reads `dir/config.json` and parses it with {@link parseHfConfig}. */
export function readHfConfig(dir: string): ModelConfig {
  const path = resolveInside(dir, HF_CONFIG_FILE);
  if (!existsSync(path)) throw new ConfigError(path, `${path}: not found (a Hugging Face model directory needs ${HF_CONFIG_FILE})`);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(path, 'utf8'));
  } catch (cause) {
    throw new ConfigError(path, `${path}: not readable JSON (${(cause as Error).message})`, { cause });
  }
  return parseHfConfig(json, path);
}

/** Validates a parsed config.json (`path` is only for messages) and returns our normalized view of it. */
export function parseHfConfig(json: unknown, path: string): ModelConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new ConfigError(path, `${path}: config must be a JSON object`);
  const f: ConfigFields = new ConfigFields(json as Record<string, unknown>, path);
  const architectures = f.raw('architectures');
  if (!Array.isArray(architectures) || architectures.length === 0 || typeof architectures[0] !== 'string') {
    f.fail('architectures', `must be a non-empty list of class names (supported: ${SUPPORTED_ARCHITECTURES.join(', ')}), got ${JSON.stringify(architectures)}`);
  }
  const architecture = architectures[0] as string;
  if ((ENCODER_ARCHITECTURES as readonly string[]).includes(architecture)) {
    f.expectModelType('bert', architecture);
    return parseEncoder(f, architecture as EncoderConfig['architecture']);
  }
  if ((DECODER_ARCHITECTURES as readonly string[]).includes(architecture)) {
    f.expectModelType('llama', architecture);
    return parseDecoder(f, architecture as DecoderConfig['architecture']);
  }
  return f.fail('architectures', `${architecture} is not supported (supported: ${SUPPORTED_ARCHITECTURES.join(', ')})`);
}

/** Typed access to config keys. A key with a default may be absent or null (transformers treats null as unset). */
class ConfigFields {
  constructor(
    private readonly json: Record<string, unknown>,
    readonly path: string,
  ) {}

  raw(key: string): unknown {
    return Object.hasOwn(this.json, key) ? this.json[key] : undefined;
  }

  fail(key: string, message: string): never {
    throw new ConfigError(this.path, `${this.path}: ${key} ${message}`);
  }

  private value(key: string, fallback: unknown): unknown {
    const v = this.raw(key);
    if (v === undefined || v === null) {
      if (fallback === undefined) this.fail(key, 'is required');
      return fallback;
    }
    return v;
  }

  positiveInt(key: string, fallback?: number): number {
    const v = this.value(key, fallback);
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v <= 0) this.fail(key, `must be a positive integer, got ${JSON.stringify(v)}`);
    return v;
  }

  nonNegativeInt(key: string, fallback?: number): number {
    const v = this.value(key, fallback);
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) this.fail(key, `must be a non-negative integer, got ${JSON.stringify(v)}`);
    return v;
  }

  positiveNumber(key: string, fallback?: number): number {
    const v = this.value(key, fallback);
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) this.fail(key, `must be a positive number, got ${JSON.stringify(v)}`);
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.value(key, fallback);
    if (typeof v !== 'boolean') this.fail(key, `must be true or false, got ${JSON.stringify(v)}`);
    return v;
  }

  oneOf<T extends string>(key: string, allowed: readonly T[], fallback: T): T {
    const v = this.value(key, fallback);
    if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) this.fail(key, `${JSON.stringify(v)} is not supported (supported: ${allowed.join(', ')})`);
    return v as T;
  }

  /** A boolean feature this engine does not implement: absent, null or false only. */
  mustBeOff(key: string, what: string): void {
    const v = this.raw(key);
    if (v !== undefined && v !== null && v !== false) this.fail(key, `is ${JSON.stringify(v)}, but ${what} is not supported`);
  }

  expectModelType(modelType: string, architecture: string): void {
    const v = this.raw('model_type');
    if (v !== undefined && v !== modelType) this.fail('model_type', `is ${JSON.stringify(v)}, but ${architecture} needs "${modelType}"`);
  }
}

function parseEncoder(f: ConfigFields, architecture: EncoderConfig['architecture']): EncoderConfig {
  const vocabSize = f.positiveInt('vocab_size');
  const hiddenSize = f.positiveInt('hidden_size');
  const numLayers = f.positiveInt('num_hidden_layers');
  const numHeads = f.positiveInt('num_attention_heads');
  const intermediateSize = f.positiveInt('intermediate_size');
  const maxPositions = f.positiveInt('max_position_embeddings');
  const typeVocabSize = f.positiveInt('type_vocab_size', 2);
  const layerNormEps = f.positiveNumber('layer_norm_eps', 1e-12);
  const hiddenAct = f.oneOf('hidden_act', ENCODER_ACTIVATIONS, 'gelu');
  const padTokenId = f.nonNegativeInt('pad_token_id', 0);
  if (hiddenSize % numHeads !== 0) f.fail('hidden_size', `${hiddenSize} is not a multiple of num_attention_heads ${numHeads}`);
  if (padTokenId >= vocabSize) f.fail('pad_token_id', `${padTokenId} is not below vocab_size ${vocabSize}`);
  const positions = f.raw('position_embedding_type');
  if (positions !== undefined && positions !== null && positions !== 'absolute') {
    f.fail('position_embedding_type', `${JSON.stringify(positions)} is not supported (only "absolute")`);
  }
  f.mustBeOff('is_decoder', 'a causal (decoder) BERT');
  f.mustBeOff('add_cross_attention', 'cross-attention');
  const labels = architecture === 'BertForSequenceClassification' ? parseLabels(f) : [];
  return {
    family: 'encoder',
    architecture,
    vocabSize,
    hiddenSize,
    numLayers,
    numHeads,
    intermediateSize,
    maxPositions,
    typeVocabSize,
    layerNormEps,
    hiddenAct,
    padTokenId,
    numLabels: labels.length,
    labels,
  };
}

/** As transformers' PretrainedConfig: id2label wins; without it, num_labels (default 2) names LABEL_0, LABEL_1, …. */
function parseLabels(f: ConfigFields): string[] {
  const id2label = f.raw('id2label');
  if (id2label === undefined || id2label === null) {
    const n = f.positiveInt('num_labels', 2);
    return Array.from({ length: n }, (_, i) => `LABEL_${i}`);
  }
  if (typeof id2label !== 'object' || Array.isArray(id2label)) f.fail('id2label', `must be an object mapping "0", "1", … to label names`);
  const entries = Object.entries(id2label as Record<string, unknown>);
  if (entries.length === 0) f.fail('id2label', 'must name at least one label');
  const labels: string[] = new Array<string>(entries.length);
  for (const [key, name] of entries) {
    const index = /^(0|[1-9]\d*)$/.test(key) ? Number(key) : -1;
    if (index < 0 || index >= entries.length) f.fail('id2label', `keys must be 0 … ${entries.length - 1}, got "${key}"`);
    if (typeof name !== 'string') f.fail(`id2label.${key}`, `must be a string, got ${JSON.stringify(name)}`);
    labels[index] = name;
  }
  return labels;
}

function parseDecoder(f: ConfigFields, architecture: DecoderConfig['architecture']): DecoderConfig {
  const vocabSize = f.positiveInt('vocab_size');
  const hiddenSize = f.positiveInt('hidden_size');
  const numLayers = f.positiveInt('num_hidden_layers');
  const numHeads = f.positiveInt('num_attention_heads');
  const intermediateSize = f.positiveInt('intermediate_size');
  const maxPositions = f.positiveInt('max_position_embeddings');
  const numKvHeads = f.positiveInt('num_key_value_heads', numHeads);
  // LlamaConfig: head_dim = hidden_size // num_attention_heads when unset (q/o projections use heads × head_dim).
  const headDim = f.positiveInt('head_dim', Math.floor(hiddenSize / numHeads));
  if (numHeads % numKvHeads !== 0) f.fail('num_attention_heads', `${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  if (headDim % 2 !== 0) f.fail('head_dim', `${headDim} is odd; RoPE rotates pairs of dimensions`);
  f.oneOf('hidden_act', ['silu'] as const, 'silu');
  f.mustBeOff('attention_bias', 'a bias on the attention projections');
  f.mustBeOff('mlp_bias', 'a bias on the MLP projections');
  const ropeScaling = f.raw('rope_scaling');
  if (ropeScaling !== undefined && ropeScaling !== null) {
    f.fail('rope_scaling', `is ${JSON.stringify(ropeScaling)}, but RoPE scaling is not supported (only rope_scaling: null)`);
  }
  let ropeTheta = f.positiveNumber('rope_theta', 10000);
  // transformers ≥ 4.56 may write rope_parameters { rope_type, rope_theta } instead of rope_theta/rope_scaling.
  const ropeParameters = f.raw('rope_parameters');
  if (ropeParameters !== undefined && ropeParameters !== null) {
    if (typeof ropeParameters !== 'object' || Array.isArray(ropeParameters)) f.fail('rope_parameters', 'must be an object');
    const p = ropeParameters as Record<string, unknown>;
    if (p.rope_type !== undefined && p.rope_type !== 'default') {
      f.fail('rope_parameters.rope_type', `is ${JSON.stringify(p.rope_type)}, but RoPE scaling is not supported (only "default")`);
    }
    if (p.rope_theta !== undefined) {
      if (typeof p.rope_theta !== 'number' || !Number.isFinite(p.rope_theta) || p.rope_theta <= 0) {
        f.fail('rope_parameters.rope_theta', `must be a positive number, got ${JSON.stringify(p.rope_theta)}`);
      }
      ropeTheta = p.rope_theta;
    }
  }
  const rmsNormEps = f.positiveNumber('rms_norm_eps', 1e-6);
  const tieWordEmbeddings = f.bool('tie_word_embeddings', false);
  const bosTokenId = f.nonNegativeInt('bos_token_id', 1);
  return {
    family: 'decoder',
    architecture,
    vocabSize,
    hiddenSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize,
    maxPositions,
    rmsNormEps,
    ropeTheta,
    tieWordEmbeddings,
    bosTokenId,
    eosTokenIds: parseEosTokenIds(f),
  };
}

/** eos_token_id: one id or a non-empty list (Llama 3 instruct models list several). LlamaConfig's default is 2. */
function parseEosTokenIds(f: ConfigFields): number[] {
  const v = f.raw('eos_token_id');
  if (v === undefined || v === null) return [2];
  const ids = Array.isArray(v) ? v : [v];
  if (ids.length === 0 || !ids.every((id) => typeof id === 'number' && Number.isSafeInteger(id) && id >= 0)) {
    f.fail('eos_token_id', `must be a non-negative integer or a non-empty list of them, got ${JSON.stringify(v)}`);
  }
  return ids as number[];
}

/** The config.json object Hugging Face transformers writes for this config (keys as HF spells them). */
export function toHfConfigJson(config: ModelConfig): Record<string, unknown> {
  if (config.family === 'encoder') return encoderJson(config);
  return decoderJson(config);
}

function encoderJson(c: EncoderConfig): Record<string, unknown> {
  const json: Record<string, unknown> = {
    architectures: [c.architecture],
    model_type: 'bert',
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    intermediate_size: c.intermediateSize,
    hidden_act: c.hiddenAct,
    hidden_dropout_prob: 0.1,
    attention_probs_dropout_prob: 0.1,
    max_position_embeddings: c.maxPositions,
    type_vocab_size: c.typeVocabSize,
    initializer_range: 0.02,
    layer_norm_eps: c.layerNormEps,
    pad_token_id: c.padTokenId,
    position_embedding_type: 'absolute',
    torch_dtype: 'float32',
  };
  if (c.architecture === 'BertForSequenceClassification') {
    json.id2label = Object.fromEntries(c.labels.map((l, i) => [String(i), l]));
    json.label2id = Object.fromEntries(c.labels.map((l, i) => [l, i]));
  }
  return json;
}

function decoderJson(c: DecoderConfig): Record<string, unknown> {
  return {
    architectures: [c.architecture],
    model_type: 'llama',
    vocab_size: c.vocabSize,
    hidden_size: c.hiddenSize,
    num_hidden_layers: c.numLayers,
    num_attention_heads: c.numHeads,
    num_key_value_heads: c.numKvHeads,
    head_dim: c.headDim,
    intermediate_size: c.intermediateSize,
    hidden_act: 'silu',
    max_position_embeddings: c.maxPositions,
    rms_norm_eps: c.rmsNormEps,
    rope_theta: c.ropeTheta,
    rope_scaling: null,
    attention_bias: false,
    mlp_bias: false,
    tie_word_embeddings: c.tieWordEmbeddings,
    bos_token_id: c.bosTokenId,
    eos_token_id: c.eosTokenIds.length === 1 ? c.eosTokenIds[0] : c.eosTokenIds,
    initializer_range: 0.02,
    torch_dtype: 'float32',
  };
}
