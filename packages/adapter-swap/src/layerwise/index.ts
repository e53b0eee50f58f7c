/** Layer-wise adapter staging (HMI's A12): the pipeline's rules, and the same rules under virtual time. */
export {
  LayerwisePipeline,
  type LayerwisePipelineOptions,
  type PipelineAction,
  type PipelineMode,
  type PipelineResource,
  PipelineStateError,
  resourceOf,
} from './pipeline.js';
export { type PipelineSimulationOptions, type PipelineSimulationResult, type PipelineSpan, simulateLayerwisePipeline } from './simulate.js';
export {
  type AdapterStoreEntry,
  LayerwiseAdapterStore,
  type LayerwiseAdapterStoreOptions,
  type LayerwiseAdapterStoreStats,
  type StagedAdapterWrite,
  type StoredAdapterSet,
} from './adapter-store.js';
export {
  ADAPTER_FILE_EXTENSION,
  ADAPTER_FILE_HEADER_BYTES,
  ADAPTER_FILE_MAGIC,
  ADAPTER_FILE_VERSION,
  type AdapterFileHeader,
  adapterFileBytes,
  adapterSetBytes,
  decodeAdapterFile,
  encodeAdapterFile,
  type LayerwiseAdapterSet,
  type LayerwiseAdapterShape,
  layerNumel,
  MAX_ADAPTER_METADATA_BYTES,
} from './adapter-file.js';
export { AdapterFileError, type AdapterFileProblem, AdapterShapeError } from './store-errors.js';
export { DeviceSlotCache, type DeviceSlotStats } from './device-slots.js';
