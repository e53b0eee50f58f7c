/**
 * A real AdapterSource for tests: PEFT directories read with the engine's loadLoraAdapterAsync (validated against
 * the base model), host values are Float32Array copies of every tensor, device values native tensors under the
 * native allocator's budget. It records what it was asked to do, and can hold a finished read back until the test
 * releases it (the read itself is real: the hold only delays handing the result to the cache).
 */
import { type LoadLoraAdapterOptions, type ModelConfig, loadLoraAdapterAsync } from '@tessera/engine';
import { type Backend, Tensor, allocatorStats } from '@tessera/native';

import type { AdapterSource } from '../../src/index.js';
import type { ManualClock } from './manual-clock.js';

export interface HostTensor {
  /** e.g. 'model.layers.0.self_attn.q_proj.lora_A' */
  key: string;
  shape: number[];
  data: Float32Array;
}

export interface HostLora {
  name: string;
  rank: number;
  tensors: HostTensor[];
}

export interface DeviceLora {
  name: string;
  tensors: Map<string, Tensor>;
}

export interface PeftTestSourceOptions {
  backend?: Backend;
  /** Advanced by `readMs` at the end of each read and `uploadMs` during each upload, so load times are exact. */
  clock?: ManualClock;
  readMs?: number;
  uploadMs?: number;
}

interface Hold {
  arrived: Promise<void>;
  arrive(): void;
  released: Promise<void>;
  release(): void;
}

function deferred(): { promise: Promise<void>; resolve(): void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

export class PeftTestSource implements AdapterSource<HostLora, DeviceLora> {
  /** Names passed to readHost, in call order. */
  readonly reads: string[] = [];
  /** Names uploaded, in order. */
  readonly uploads: string[] = [];
  /** Names whose device value was disposed, in order. */
  readonly disposals: string[] = [];
  /** allocatorStats().inUse right after each successful upload. */
  readonly inUseAfterUpload: number[] = [];
  private readonly holds = new Map<string, Hold>();

  constructor(
    readonly base: ModelConfig,
    private readonly options: PeftTestSourceOptions = {},
  ) {}

  /**
   * Holds the next read of `name` once its disk read has finished. `arrived` resolves when the read is done and
   * held; `release()` hands the result to the cache.
   */
  hold(name: string): { arrived: Promise<void>; release(): void } {
    const arrived = deferred();
    const released = deferred();
    const hold: Hold = { arrived: arrived.promise, arrive: arrived.resolve, released: released.promise, release: released.resolve };
    this.holds.set(name, hold);
    return { arrived: hold.arrived, release: hold.release };
  }

  async readHost(name: string, dir: string): Promise<HostLora> {
    this.reads.push(name);
    const options: LoadLoraAdapterOptions = { name, base: this.base };
    if (this.options.backend) options.backend = this.options.backend;
    const adapter = await loadLoraAdapterAsync(dir, options);
    let host: HostLora;
    try {
      const tensors: HostTensor[] = [];
      let rank = 0;
      for (const m of adapter.modules.values()) {
        rank = Math.max(rank, m.r);
        tensors.push({ key: `${m.module}.lora_A`, shape: m.a.shape, data: m.a.toArray() as Float32Array });
        tensors.push({ key: `${m.module}.lora_B`, shape: m.b.shape, data: m.b.toArray() as Float32Array });
      }
      for (const [key, t] of [...adapter.biases, ...adapter.savedModules]) tensors.push({ key, shape: t.shape, data: t.toArray() as Float32Array });
      host = { name, rank, tensors };
    } finally {
      adapter.dispose(); // the engine's native copies were only the way in
    }
    if (this.options.clock && this.options.readMs) this.options.clock.advance(this.options.readMs);
    const hold = this.holds.get(name);
    if (hold) {
      this.holds.delete(name);
      hold.arrive();
      await hold.released;
    }
    return host;
  }

  hostBytes(h: HostLora): number {
    return h.tensors.reduce((sum, t) => sum + t.data.byteLength, 0);
  }

  upload(h: HostLora): DeviceLora {
    const tensors = new Map<string, Tensor>();
    try {
      for (const t of h.tensors) tensors.set(t.key, Tensor.from(t.data, t.shape, this.options.backend ? { backend: this.options.backend } : {}));
    } catch (err) {
      for (const t of tensors.values()) t.dispose();
      throw err;
    }
    if (this.options.clock && this.options.uploadMs) this.options.clock.advance(this.options.uploadMs);
    this.uploads.push(h.name);
    this.inUseAfterUpload.push(allocatorStats(this.options.backend).inUse);
    return { name: h.name, tensors };
  }

  deviceBytes(d: DeviceLora): number {
    let bytes = 0;
    for (const t of d.tensors.values()) bytes += t.nbytes;
    return bytes;
  }

  disposeDevice(d: DeviceLora): void {
    for (const t of d.tensors.values()) t.dispose();
    this.disposals.push(d.name);
  }
}
