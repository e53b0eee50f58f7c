/**
 * Device residency as a ledger (pure: bytes and reference counts, no tensors). Blocks are loaded onto a device by
 * their manifests; a tensor that several resident blocks reference (a foundation FFN inside a LoRA model's chain
 * and the foundation's own) is held once, so residency is deduplicated at the tensor level as storage is
 * (design note A8). `@tessera/block-zoo/store`'s DevicePool materialises the same ledger as native tensors.
 */
import { ZooBudgetError, ZooConflictError, ZooInvalidError, ZooNotFoundError } from './errors.js';
import { type BlockId, type TensorId, tensorByteLength } from './ids.js';
import type { BlockManifest } from './manifest.js';

export interface ResidencyStats {
  budgetBytes: number;
  /** Bytes of the distinct resident tensors. */
  residentBytes: number;
  /** Σ paramBytes of the resident blocks: what the device would hold without tensor sharing. */
  logicalBytes: number;
  tensors: number;
  blocks: number;
}

/** What the ledger needs of a block. */
export type ResidentBlock = Pick<BlockManifest, 'blockId' | 'tensors'>;

export class DeviceResidency {
  private budget: number;
  private readonly refs = new Map<TensorId, { bytes: number; count: number }>();
  private readonly resident = new Map<BlockId, { tensors: TensorId[]; paramBytes: number; loads: number }>();
  private bytes = 0;
  private logical = 0;

  constructor(budgetBytes: number) {
    this.budget = checkBudget(budgetBytes);
  }

  get budgetBytes(): number {
    return this.budget;
  }

  /** Changes the budget; lowering it below what is resident leaves the blocks loaded but makes new loads fail. */
  setBudget(bytes: number): void {
    this.budget = checkBudget(bytes);
  }

  /** Bytes loading `block` would add (its tensors not already resident). */
  costOf(block: ResidentBlock): number {
    let add = 0;
    const seen = new Set<TensorId>();
    for (const t of block.tensors) {
      if (seen.has(t.id) || this.refs.has(t.id)) continue;
      seen.add(t.id);
      add += tensorByteLength(t);
    }
    return add;
  }

  /**
   * Loads a block (or counts one more load of a resident one). Returns the tensor ids that became resident now,
   * which a materialiser must bring in; throws ZooBudgetError (nothing changes) when they do not fit.
   */
  load(block: ResidentBlock): TensorId[] {
    const prior = this.resident.get(block.blockId);
    if (prior) {
      prior.loads++;
      return [];
    }
    const add = this.costOf(block);
    if (this.bytes + add > this.budget) {
      throw new ZooBudgetError(add, this.budget - this.bytes, `block ${block.blockId} needs ${add} more bytes but only ${this.budget - this.bytes} of ${this.budget} are free`);
    }
    const ids: TensorId[] = [];
    const fresh: TensorId[] = [];
    let paramBytes = 0;
    for (const t of block.tensors) {
      if (ids.includes(t.id)) continue;
      ids.push(t.id);
      const bytes = tensorByteLength(t);
      paramBytes += bytes;
      const r = this.refs.get(t.id);
      if (r) r.count++;
      else {
        this.refs.set(t.id, { bytes, count: 1 });
        fresh.push(t.id);
      }
    }
    this.bytes += add;
    this.logical += paramBytes;
    this.resident.set(block.blockId, { tensors: ids, paramBytes, loads: 1 });
    return fresh;
  }

  /** Undoes one load; at the last, the block's references drop. Returns the tensor ids no longer resident. */
  unload(blockId: BlockId): TensorId[] {
    const r = this.resident.get(blockId);
    if (!r) throw new ZooNotFoundError('block', blockId, `block ${blockId} is not resident`);
    if (--r.loads > 0) return [];
    this.resident.delete(blockId);
    this.logical -= r.paramBytes;
    const freed: TensorId[] = [];
    for (const id of r.tensors) {
      const t = this.refs.get(id)!;
      if (--t.count === 0) {
        this.refs.delete(id);
        this.bytes -= t.bytes;
        freed.push(id);
      }
    }
    return freed;
  }

  isResident(blockId: BlockId): boolean {
    return this.resident.has(blockId);
  }

  /** How many resident blocks reference the tensor (0 when it is not resident). */
  refCount(id: TensorId): number {
    return this.refs.get(id)?.count ?? 0;
  }

  residentBlocks(): BlockId[] {
    return [...this.resident.keys()];
  }

  stats(): ResidencyStats {
    return { budgetBytes: this.budget, residentBytes: this.bytes, logicalBytes: this.logical, tensors: this.refs.size, blocks: this.resident.size };
  }

  /** Throws unless nothing is resident (a device being retired). */
  assertEmpty(): void {
    if (this.resident.size > 0) throw new ZooConflictError('device', `${this.resident.size} block(s) are still resident`);
  }
}

function checkBudget(bytes: number): number {
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new ZooInvalidError(`a byte budget must be a non-negative integer, got ${bytes}`);
  return bytes;
}
