/**
 * @tessera/engine: the layer every Tessera app runs its models through.
 *
 *   formats/   safetensors, HF config.json, tokenizer.json, PEFT adapters (read and write)
 *   models/    the encoder and decoder families on @tessera/native (stages: prepare, embed, layers, head), weights, loading
 *   hooks/     SegmentLayout and the hook-site interface multi-tenant deltas implement (LoRA included)
 *   kv/        the paged KV cache (tensors per layer on @tessera/core's page allocator)
 *   runner/    the StepRunner: executes a scheduler's StepPlan (layout, forward, sampling, stop checks)
 *   sampling/  samplers and stop conditions; generate.ts runs a batch of requests to completion
 *   gen/       the seeded tiny/mini model and adapter generator (`tessera gen`)
 *   onnx/      ONNX export of both families and the onnxruntime-node runner
 *   train/     training on the native backward kernels: trainable sets, explicit backward, AdamW, data, trainLora
 */
export * from './errors.js';
export { type Clock, systemClock } from './clock.js';
export type { DecoderConfig, EncoderConfig, ModelConfig } from './config.js';
export * from './models/names.js';

// formats
export {
  SAFETENSORS_DTYPES,
  SafetensorsFile,
  type SafetensorsEntry,
  type SafetensorsReadOptions,
  type SafetensorsTensorInfo,
  writeSafetensors,
} from './formats/safetensors.js';
export { MODEL_SAFETENSORS, MODEL_SAFETENSORS_INDEX, ModelTensors, type ModelTensorInfo, resolveInside } from './formats/model-dir.js';
export { parseHfConfig, readHfConfig, toHfConfigJson } from './formats/hf-config.js';
export {
  type LoadLoraAdapterOptions,
  type LoraAdapter,
  type LoraAdapterConfig,
  type LoraModule,
  loadLoraAdapter,
  loadLoraAdapterAsync,
  matchesTargetModules,
  parseLoraAdapterConfig,
  readLoraAdapterConfig,
  resolveLoraParams,
  toPeftConfigJson,
} from './formats/peft.js';
export { type DecodeOptions, type EncodeOptions, type SpecialTokenIds, TextTokenizer } from './formats/tokenizer.js';
export { type LoraModuleWeights, loraAlphaFor, loraRankFor, loraScaling, writeLoraAdapter } from './formats/peft-writer.js';

// models
export {
  type DecoderForwardOptions,
  DecoderModel,
  type DecoderOutput,
  type DecoderSequence,
  DecoderStepContext,
  type DecoderStepOptions,
  type SequenceId,
} from './models/decoder.js';
export {
  EncoderBatchContext,
  type EncoderBatchOptions,
  type EncoderForwardOptions,
  type EncoderHeadOutput,
  EncoderModel,
  type EncoderOutput,
  type EncoderSequence,
  unpadBatch,
} from './models/encoder.js';
export { ModelWeights, type TensorSource } from './models/weights.js';
export { type LoadOptions, loadDecoder, loadEncoder, loadModel } from './models/load.js';
export { decoderInt8WeightNames, type WeightFormat } from './models/quantized.js';

// hooks
export { type Segment, SegmentLayout } from './hooks/segment-layout.js';
export type {
  AttentionPrefix,
  AttentionSiteCall,
  DecoderLinearSite,
  DecoderNormSite,
  EncoderLinearSite,
  EncoderNormSite,
  LayerBoundaryCall,
  LinearSiteCall,
  ModelDelta,
  NormSiteCall,
  SiteOutput,
} from './hooks/sites.js';
export { LoraDelta, type LoraWeights, mergeLoraIntoWeights } from './hooks/lora-delta.js';

// KV cache, sampling, generation
export { type KvBlockTable, type KvCacheShape, type KvCacheStats, type KvLayerTensors, type KvSequenceSnapshot, PagedKvCache, type PagedKvCacheOptions, pagesForLength } from './kv/paged-kv-cache.js';
export { argmax, createSampler, type Sampler, type SamplingParams } from './sampling/sampler.js';
export { type StopReason, StopChecker, type StopCheckerOptions, type StopStep } from './sampling/stop.js';
export { logSumExp, MAX_TOP_LOGPROBS, tokenLogprobs, validateTopLogprobs } from './sampling/logprobs.js';
export { type GenerateOptions, type GenerateRequest, type GenerateResult, generateBatch } from './generate.js';
export { StepRunner, type StepRunnerModel, type StepRunnerOptions } from './runner/step-runner.js';

// generator
export {
  DEFAULT_LORA_TARGETS,
  type GenerateLoraAdapterOptions,
  type GenerateModelOptions,
  type GeneratedLoraAdapter,
  type GeneratedModel,
  type ModelFamily,
  type ModelSize,
  type WeightDtype,
  buildByteLevelBpeTokenizer,
  decoderPreset,
  encoderPreset,
  generateLoraAdapter,
  generateModel,
  parameterCount,
  presetConfig,
  weightBytes,
  writeTokenizerFiles,
} from './gen/index.js';

// onnx
export {
  type EncoderOnnxAdapter,
  type EncoderOnnxAdapterSite,
  type EncoderOnnxExtensions,
  type EncoderOnnxPrefix,
  type EncoderOrtResult,
  type HostWeights,
  ONNX_IR_VERSION,
  ONNX_OPSET,
  type OnnxExportShape,
  type OrtFeed,
  OrtModel,
  type OrtModelOptions,
  type OrtOutput,
  exportDecoderOnnx,
  exportEncoderOnnx,
  runDecoderBatchOrt,
  runDecoderOrt,
  runEncoderOrt,
} from './onnx/index.js';

// training
export { TrainConfigError, TrainDataError } from './train/errors.js';
export {
  type AdapterSpec,
  type BaseTensorSpec,
  DECODER_LINEAR_SITES,
  DEFAULT_DECODER_LORA_TARGETS,
  DEFAULT_ENCODER_LORA_TARGETS,
  ENCODER_LINEAR_SITES,
  type LoraParams,
  type LoraSpec,
  type TrainParam,
  type TrainableSpec,
  decoderTrainableNames,
  encoderTrainableNames,
  loraAdapterConfig,
} from './train/params.js';
export type { LossResult, TrainableModel } from './train/trainable.js';
export { type LmBatch, TrainableDecoder, type TrainableDecoderOptions } from './train/decoder.js';
export {
  type AdapterParams,
  type EncoderBatch,
  type EncoderExample,
  type MaskedLmOptions,
  TrainableEncoder,
  type TrainableEncoderOptions,
  adapterTensorNames,
  mlmHeadNames,
} from './train/encoder.js';
export {
  BatchSampler,
  type CausalLmTokenizeOptions,
  type ClassificationBatch,
  type ClassificationExample,
  IGNORE_INDEX,
  type MaskedLmBatch,
  type MaskedLmExample,
  type MaskingOptions,
  type LabeledRecord,
  type LmExample,
  type PromptCompletionRecord,
  type RecordKind,
  type TextRecord,
  type TrainDataset,
  type TrainRecord,
  causalLmBatch,
  classificationBatch,
  countTargets,
  datasetFromRecords,
  maskedLmBatch,
  readJsonl,
  shuffledOrder,
  tokenizeCausalLm,
  tokenizeClassification,
  tokenizeMaskedLm,
} from './train/data.js';
export { AdamW, type AdamWConfig, type OptimizerStepOptions, type ScheduleOptions, learningRate } from './train/optim.js';
export { CHECKPOINT_METADATA_KEY, type CheckpointState, loadCheckpoint, saveCheckpoint } from './train/checkpoint.js';
export {
  type TrainLoraOptions,
  type TrainMaskedLmOptions,
  type TrainOptions,
  type TrainProgress,
  type TrainResult,
  type TrainRun,
  Trainer,
  type TrainerOptions,
  ADAPTERS_FILE,
  PET_FILE,
  train,
  trainClassifier,
  trainLora,
  trainMaskedLm,
} from './train/trainer.js';
