/**
 * The adapter source for LoRA under SGMV: what an adapter cache (C3's AdapterCache in @tessera/adapter-swap)
 * needs to move a PEFT adapter from disk to host memory to the device. The interface is declared here
 * structurally so this package does not depend on the cache.
 */
import type { ModelConfig } from '@tessera/engine';
import { type Backend, getBackend } from '@tessera/native';
import { type HostLoraWeights, LoraWeightSet, readLoraForSgmv } from './weights.js';

/** Structurally C3's `AdapterSource<H, D>`: disk → host (async), host → device, and their byte counts. */
export interface AdapterSourceLike<H, D> {
  readHost(name: string, dir: string): Promise<H>;
  hostBytes(h: H): number;
  upload(h: H): D;
  deviceBytes(d: D): number;
  disposeDevice(d: D): void;
}

/**
 * LoRA adapters for `config`'s model: readHost = readLoraForSgmv (validated against the model, packed into
 * SGMV layout), upload = LoraWeightSet.upload onto `backend` (default: the process backend).
 */
export function loraAdapterSource(config: ModelConfig, backend: Backend = getBackend()): AdapterSourceLike<HostLoraWeights, LoraWeightSet> {
  return {
    readHost: (name, dir) => readLoraForSgmv(dir, config, { name }),
    hostBytes: (h) => h.nbytes,
    upload: (h) => LoraWeightSet.upload(h, backend),
    deviceBytes: (d) => d.nbytes,
    disposeDevice: (d) => d.dispose(),
  };
}
