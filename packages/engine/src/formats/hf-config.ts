/**
 * Hugging Face config.json ↔ {@link ModelConfig}.
 */
import type { DecoderConfig, EncoderConfig, ModelConfig } from '../config.js';

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
