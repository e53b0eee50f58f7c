/**
 * Blocks materialised as native tensors under a byte budget. The planner's DeviceResidency ledger decides what is
 * resident; this pool brings each newly resident tensor in once (Tensor.from over the stored bytes) and frees it
 * when the last block referencing it is released, so a foundation tensor shared by a LoRA chain's fused block and
 * the foundation's own block occupies device memory once. The budget is the native allocator's (setBudget), capped
 * by `budgetBytes` when given; an allocation the allocator refuses leaves the pool as it was.
 */
import { allocatorStats, type Backend, BudgetExceededError, type DType, getBackend, Tensor } from '@tessera/native';

import { ZooBudgetError, ZooInvalidError, ZooNotFoundError } from '../planner/errors.js';
import type { BlockId, TensorId } from '../planner/ids.js';
import type { BlockManifest } from '../planner/manifest.js';
import { DeviceResidency, type ResidencyStats } from '../planner/residency.js';
import type { TensorReader } from './disk-store.js';

const NATIVE_DTYPES: ReadonlySet<string> = new Set(['f32', 'f16', 'bf16', 'i32', 'i64', 'u8']);

export interface DevicePoolOptions {
  backend?: Backend;
  /** Cap below the allocator's budget (default: the allocator's budget at construction). */
  budgetBytes?: number;
}

export class DevicePool {
  readonly backend: Backend;
  private readonly source: TensorReader;
  private readonly ledger: DeviceResidency;
  private readonly live = new Map<TensorId, Tensor>();
  private readonly names = new Map<BlockId, Map<string, TensorId>>();

  constructor(source: TensorReader, options: DevicePoolOptions = {}) {
    this.backend = options.backend ?? getBackend();
    this.source = source;
    const allocator = allocatorStats(this.backend).budget;
    const cap = options.budgetBytes ?? allocator;
    if (!Number.isSafeInteger(cap) || cap < 0) throw new ZooInvalidError(`budgetBytes must be a non-negative integer, got ${cap}`);
    this.ledger = new DeviceResidency(Math.min(cap, Number.isSafeInteger(allocator) ? allocator : cap));
  }

  /**
   * Makes the block resident and returns its tensors by name (shared tensors are the same Tensor objects across
   * blocks; the pool owns them: do not dispose). A block acquired twice must be released twice.
   */
  acquire(block: BlockManifest): Map<string, Tensor> {
    for (const t of block.tensors) {
      if (!NATIVE_DTYPES.has(t.dtype)) throw new ZooInvalidError(`block ${block.blockId}: tensor ${t.name} is ${t.dtype}, which the native backend does not hold`);
    }
    const fresh = this.ledger.load(block);
    const made: TensorId[] = [];
    try {
      for (const id of fresh) {
        const { dtype, shape, bytes } = this.source.read(id);
        this.live.set(id, Tensor.from(bytes, shape, { dtype: dtype as DType, backend: this.backend }));
        made.push(id);
      }
    } catch (err) {
      for (const id of made) {
        this.live.get(id)!.dispose();
        this.live.delete(id);
      }
      this.ledger.unload(block.blockId);
      if (err instanceof BudgetExceededError) {
        const stats = allocatorStats(this.backend);
        throw new ZooBudgetError(this.ledger.costOf(block), stats.budget - stats.inUse, `block ${block.blockId} does not fit the native allocator's budget: ${err.message}`);
      }
      throw err;
    }
    const byName = new Map(block.tensors.map((t) => [t.name, t.id] as const));
    this.names.set(block.blockId, byName);
    return this.tensorsOf(block.blockId);
  }

  /** The resident block's tensors by name. */
  tensorsOf(blockId: BlockId): Map<string, Tensor> {
    const byName = this.names.get(blockId);
    if (!byName || !this.ledger.isResident(blockId)) throw new ZooNotFoundError('block', blockId, `block ${blockId} is not resident in this pool`);
    return new Map([...byName].map(([name, id]) => [name, this.live.get(id)!] as const));
  }

  /** Whether the block is resident in this pool now (acquired and not released as often). */
  isResident(blockId: BlockId): boolean {
    return this.ledger.isResident(blockId);
  }

  /** Undoes one acquire; tensors no resident block references any more are freed. */
  release(blockId: BlockId): void {
    const freed = this.ledger.unload(blockId);
    for (const id of freed) {
      this.live.get(id)!.dispose();
      this.live.delete(id);
    }
    if (!this.ledger.isResident(blockId)) this.names.delete(blockId);
  }

  /** The ledger's accounting plus the native bytes the pool's tensors hold now. */
  stats(): ResidencyStats & { nativeBytes: number } {
    let nativeBytes = 0;
    for (const t of this.live.values()) nativeBytes += t.nbytes;
    return { ...this.ledger.stats(), nativeBytes };
  }

  /** Frees everything (blocks still acquired included). */
  dispose(): void {
    for (const t of this.live.values()) t.dispose();
    this.live.clear();
    for (const id of this.ledger.residentBlocks()) while (this.ledger.isResident(id)) this.ledger.unload(id);
    this.names.clear();
  }
}
