/**
 * The policy half of @tessera/plot-store: keys, the index and value-store interfaces with their reference
 * implementations, α-coverage selection and the version tree. Pure TypeScript on @tessera/core: nothing here may
 * reach the native addon or the engine (tooling/layers checks it).
 */
export {
  type PlotKey,
  type KeyMode,
  type BackoffStep,
  type TrigramKeyBatch,
  type TrigramKeyCodecOptions,
  PAD,
  KEY_ID_BITS,
  MAX_VOCAB_SIZE,
  SEPARATOR_KEY,
  packKey,
  unpackKey,
  formatKey,
  isPackedKey,
  TrigramKeyCodec,
} from './keys.js';
export { type PlotIndex, type OpenAddressingIndexOptions, MISSING_ROW, OpenAddressingPlotIndex } from './plot-index.js';
export { f32ToF16Bits, f16BitsToF32, encodeF16, decodeF16 } from './f16.js';
export {
  type PlotValueStore,
  type ValueStoreAccounting,
  type HeapPlotValueStoreOptions,
  ZERO_ROW,
  F16_BYTES,
  HeapPlotValueStore,
} from './value-store.js';
export {
  type CoverageBoundary,
  type CoverageOptions,
  type CoverageSelection,
  type RootKeyOptions,
  TrigramCounts,
  selectByCoverage,
  rootKeys,
} from './coverage.js';
export {
  type VersionId,
  type VersionState,
  type CoverageRecord,
  type VersionInfo,
  type LookupResult,
  type TableStorage,
  type StorageReport,
  type TableEntries,
  type PlotVersionTreeOptions,
  type CreateBranchOptions,
  type UpdateBranchOptions,
  type DeriveOptions,
  ROOT_VERSION,
  PlotVersionTree,
} from './version-tree.js';
export {
  PlotStoreArgumentError,
  TokenIdOutOfRangeError,
  ReservedKeyError,
  ReservedRowError,
  UnknownRowError,
  UnknownVersionError,
  VersionStateError,
  CorpusTooSmallError,
} from './errors.js';
