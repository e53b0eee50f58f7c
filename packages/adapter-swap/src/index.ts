/**
 * @tessera/adapter-swap: adapters on disk → a host cache → a device-resident set under a byte budget, with LRU
 * eviction, pinning, asynchronous loads shared by concurrent callers, events and counters. Generic over the
 * adapter kind through {@link AdapterSource}.
 */
export {
  AdapterCache,
  type AdapterCacheEvent,
  type AdapterCacheEvents,
  type AdapterCacheListener,
  type AdapterCacheOptions,
  type AdapterCacheStats,
  type AdapterInfo,
  type AdapterTier,
  type EnsureResidentOptions,
  type EvictionReason,
  type LoadOrigin,
} from './adapter-cache.js';
export type { AdapterSource } from './source.js';
export { type Clock, systemClock } from './clock.js';
export { MAX_ADAPTER_NAME_LENGTH, checkAdapterName } from './adapter-name.js';
export {
  AdapterCacheDisposedError,
  AdapterExistsError,
  AdapterInUseError,
  AdapterLoadError,
  AdapterNotPinnedError,
  AdapterNotResidentError,
  AdapterTooLargeError,
  InvalidAdapterNameError,
  UnknownAdapterError,
} from './errors.js';
export * from './layerwise/index.js';
