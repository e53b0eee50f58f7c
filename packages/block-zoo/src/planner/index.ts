/**
 * @tessera/block-zoo — the planner (this entry): BlockLLM's block zoo as pure data over tensor descriptors and
 * content hashes. Content-addressed tensor and block ids, block manifests, chains, lazy partitioning of
 * parameter-efficient and full fine-tunes (design note §3.2, algorithm 5.1), equivalence edges, the stitch and
 * surrogate registries, device residency as a byte ledger, and Table 1's analytic shared-parameter fraction.
 *
 * No run-time path to @tessera/native or @tessera/engine (tooling/layers polices this file). Reading checkpoints,
 * the on-disk store and native residency, and the numerical fits live in the `./store`, `./ingest` and `./fit`
 * entries.
 */
export * from './errors.js';
export {
  type BlockId,
  canonicalJson,
  contentBlockId,
  DTYPE_BYTES,
  isBlockId,
  isTensorId,
  jsonHash,
  type TensorDescriptor,
  type TensorId,
  tensorByteLength,
  tensorId,
} from './ids.js';
export {
  type ArchSig,
  attentionIndex,
  checkSpan,
  type Component,
  type ComponentKind,
  componentAt,
  componentCount,
  componentOfTensor,
  type EngineStage,
  engineStages,
  ffnIndex,
  layerRunSpan,
  proportionalDepthGroups,
  type Span,
} from './arch.js';
export {
  type BlockKind,
  type BlockManifest,
  type FusedPe,
  formatBlock,
  namedSize,
  normaliseTensors,
  PE_METHODS,
  type PeMethod,
  spanManifest,
  stitchManifest,
  surrogateManifest,
  type TensorRef,
  uniqueSize,
  verifyManifest,
} from './manifest.js';
export {
  BlockZoo,
  type Chain,
  DEFAULT_EQUIVALENCE_THRESHOLD,
  type EquivalenceEdge,
  type ModelDescription,
  type ModelInfo,
  type ModelKind,
  type PeDescription,
  type Segment,
  type StitchEntry,
  type StorageStats,
  type SurrogateLink,
  type ZooSnapshot,
} from './zoo.js';
export { DeviceResidency, type ResidencyStats, type ResidentBlock } from './residency.js';
export {
  baseParamCount,
  LLAMA_7B,
  LLAMA_13B,
  type LinearTarget,
  NEOX_20B,
  type PeConfig,
  peParamCount,
  sharedParamFraction,
  type TransformerShape,
} from './shared-fraction.js';
export * from './serving/index.js';
