/**
 * @tessera/block-zoo/store — the zoo's bytes: a content-addressed, deduplicating tensor store on disk with the
 * block manifests and the zoo snapshot beside it, and a pool that materialises blocks as native tensors under the
 * allocator's byte budget, each shared tensor once.
 */
export { type DiskStoreStats, DiskTensorStore, type TensorReader } from './disk-store.js';
export { DevicePool, type DevicePoolOptions } from './device-pool.js';
