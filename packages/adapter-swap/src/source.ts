/**
 * Where adapters come from and how they reach the device. The cache is generic over the adapter kind: a LoRA
 * source (`loraAdapterSource` in @tessera/sgmv-kernel) reads PEFT directories into packed host arrays and uploads
 * them as SGMV weight sets; a bottleneck-adapter source (HMI) or a PET source (PetS) plugs in the same way.
 */
export interface AdapterSource<H, D> {
  /** Reads the adapter in `dir` into host memory, asynchronously. Rejects with a typed error on a bad directory. */
  readHost(name: string, dir: string): Promise<H>;
  /** Host bytes of a value from readHost (charged to the host budget). */
  hostBytes(h: H): number;
  /** Copies a host value to the device (synchronous: on CUDA it enqueues the copy on the stream). */
  upload(h: H): D;
  /** Device bytes of an uploaded value (charged to the device budget). */
  deviceBytes(d: D): number;
  /** Frees an uploaded value. Must not throw. */
  disposeDevice(d: D): void;
  /**
   * Optional: the device bytes `upload(h)` will take, so the cache can make room before it allocates. Without it
   * the cache assumes `hostBytes(h)` (exact for f32 host arrays uploaded as f32 tensors). When an upload turns out
   * larger than predicted, the cache evicts more or frees the upload and waits for room for its true size.
   */
  estimateDeviceBytes?(h: H): number;
}
