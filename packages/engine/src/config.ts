/**
 * The engine's normalized view of a Hugging Face config.json. `formats/hf-config.ts` parses and validates the
 * HF JSON into these; the generator writes HF JSON from them. Field names are ours (camelCase); the HF key each
 * comes from is in its comment.
 */

/** A BERT-style encoder: post-LN blocks, GELU FFN, learned absolute positions, token types, pooler. */
export interface EncoderConfig {
  family: 'encoder';
  /** `architectures[0]`: BertModel (no head) or BertForSequenceClassification (pooler + classifier). */
  architecture: 'BertModel' | 'BertForSequenceClassification';
  /** vocab_size */
  vocabSize: number;
  /** hidden_size */
  hiddenSize: number;
  /** num_hidden_layers */
  numLayers: number;
  /** num_attention_heads */
  numHeads: number;
  /** intermediate_size */
  intermediateSize: number;
  /** max_position_embeddings */
  maxPositions: number;
  /** type_vocab_size */
  typeVocabSize: number;
  /** layer_norm_eps */
  layerNormEps: number;
  /** hidden_act: 'gelu' (erf) or 'gelu_new' / 'gelu_pytorch_tanh' (tanh approximation). */
  hiddenAct: 'gelu' | 'gelu_new' | 'gelu_pytorch_tanh';
  /** pad_token_id */
  padTokenId: number;
  /** num_labels (len(id2label)); 0 for BertModel. */
  numLabels: number;
  /** id2label, index → name ('LABEL_0', … when absent). */
  labels: string[];
}

/** A Llama-style decoder: pre-RMSNorm blocks, RoPE, SwiGLU, grouped-query attention, LM head. */
export interface DecoderConfig {
  family: 'decoder';
  architecture: 'LlamaForCausalLM';
  /** vocab_size */
  vocabSize: number;
  /** hidden_size */
  hiddenSize: number;
  /** num_hidden_layers */
  numLayers: number;
  /** num_attention_heads */
  numHeads: number;
  /** num_key_value_heads (defaults to num_attention_heads) */
  numKvHeads: number;
  /** head_dim (defaults to hidden_size / num_attention_heads) */
  headDim: number;
  /** intermediate_size */
  intermediateSize: number;
  /** max_position_embeddings */
  maxPositions: number;
  /** rms_norm_eps */
  rmsNormEps: number;
  /** rope_theta */
  ropeTheta: number;
  /** tie_word_embeddings: the LM head reuses model.embed_tokens.weight. */
  tieWordEmbeddings: boolean;
  /** bos_token_id */
  bosTokenId: number;
  /** eos_token_id (HF allows a number or a list). */
  eosTokenIds: number[];
  /** attention_bias / mlp_bias must be false (as in Llama); kept so a parser can reject true explicitly. */
}

export type ModelConfig = EncoderConfig | DecoderConfig;
