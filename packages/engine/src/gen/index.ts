/**
 * The tiny-model generator: seeded Hugging Face model directories (encoder and decoder, "tiny" for tests and
 * "mini" for benchmarks), their tokenizers, and PEFT LoRA adapters for them.
 */
export {
  DEFAULT_LORA_B_STD,
  DEFAULT_LORA_TARGETS,
  type GenerateLoraAdapterOptions,
  type GeneratedLoraAdapter,
  type GeneratedLoraModule,
  generateLoraAdapter,
  type LinearModule,
  loraCandidateModules,
} from './generate-adapter.js';
export {
  type GenerateDecoderOptions,
  type GenerateEncoderOptions,
  type GenerateModelOptions,
  type GeneratedDecoder,
  type GeneratedEncoder,
  type GeneratedModel,
  generateModel,
  INIT_STD,
  resolveDecoderConfig,
  resolveEncoderConfig,
} from './generate-model.js';
export {
  decoderPreset,
  ENCODER_LABELS,
  encoderPreset,
  MODEL_FAMILIES,
  MODEL_SIZES,
  type ModelFamily,
  type ModelSize,
  parameterCount,
  PRESET_VOCAB_SIZE,
  presetConfig,
  tensorShapes,
  WEIGHT_DTYPES,
  type WeightDtype,
  weightBytes,
} from './presets.js';
export { checkSeed, fillUniform, fnv1a32, SplitMix32, streamState, uniformWithStd } from './rng.js';
export {
  BOS_TOKEN,
  buildByteLevelBpeTokenizer,
  buildWordPieceTokenizer,
  BYTE_LEVEL_MIN_VOCAB,
  type ByteLevelBpeTokenizer,
  EOS_TOKEN,
  type GeneratedTokenizer,
  gpt2ByteSymbols,
  learnByteLevelMerges,
  type TokenizerFiles,
  type WordPieceTokenizer,
  WORDPIECE_MIN_VOCAB,
  WORDPIECE_SPECIAL_TOKENS,
  writeTokenizerFiles,
} from './tokenizer-builders.js';
export { ENGLISH_CORPUS } from './corpus.js';
