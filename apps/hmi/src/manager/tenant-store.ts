/**
 * The host adapter store (hmi.md §1.6–1.7, A8): every tenant's state in host memory, as vBERT keeps it — one flat
 * f32 vector per upper layer, `[W_down (m·d) | b_down (m) | W_up (d·m) | b_up (d)]`, plus its classification head
 * (`W [labels, d]`, `b [labels]`). Nothing of a tenant lives on the device between batches: the runner copies a
 * batch's vectors into its per-layer staging buffers (A12), so adding a tenant adds exactly these bytes and 0 device
 * bytes (§4.1 behaviour 8).
 *
 * Accounting is exact: a tenant's bytes are the byteLength of its arrays, and the store's total is kept as their
 * running sum (checked against a recount in the tests).
 */
import { adapterStackNumel } from '@tessera/pet-ops';

export interface TenantHead {
  /** f32 [labels, hidden], row-major. */
  weight: Float32Array;
  /** f32 [labels]. */
  bias: Float32Array;
}

export interface TenantState {
  readonly id: string;
  /** The domain the tenant was created on ('root' for the root model). */
  readonly domain: string;
  /** The PLOT version it was fine-tuned on and reads (pinned in the version tree). */
  readonly version: string;
  /** Its class names; the head's rows, in order. */
  readonly labels: readonly string[];
  /** One flat adapter vector per upper layer. */
  readonly adapters: readonly Float32Array[];
  readonly head: TenantHead;
  /** Training examples seen so far (create + updates). */
  readonly examples: number;
  /** Optimiser steps taken so far. */
  readonly steps: number;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface TenantShape {
  hidden: number;
  bottleneck: number;
  /** Upper layers (one adapter each). */
  layers: number;
}

export interface TenantBytes {
  adapters: number;
  head: number;
  total: number;
}

/** Bytes of one tenant's state: the byteLength of every array it holds. */
export function tenantBytes(t: Pick<TenantState, 'adapters' | 'head'>): TenantBytes {
  let adapters = 0;
  for (const a of t.adapters) adapters += a.byteLength;
  const head = t.head.weight.byteLength + t.head.bias.byteLength;
  return { adapters, head, total: adapters + head };
}

/** What a tenant of `labels` classes costs by the formula: L_up × (2dm + m + d) × 4 + (labels·d + labels) × 4. */
export function expectedTenantBytes(shape: TenantShape, labels: number): number {
  return 4 * (shape.layers * adapterStackNumel(shape) + labels * shape.hidden + labels);
}

export class TenantStore {
  readonly shape: TenantShape;
  readonly numel: number;
  private readonly tenants = new Map<string, TenantState>();
  private bytesTotal = 0;
  private adapterBytesTotal = 0;
  private headBytesTotal = 0;

  constructor(shape: TenantShape) {
    this.shape = shape;
    this.numel = adapterStackNumel(shape);
  }

  get size(): number {
    return this.tenants.size;
  }

  /** Σ tenants' bytes (adapters + heads). */
  get bytes(): number {
    return this.bytesTotal;
  }

  get adapterBytes(): number {
    return this.adapterBytesTotal;
  }

  get headBytes(): number {
    return this.headBytesTotal;
  }

  has(id: string): boolean {
    return this.tenants.has(id);
  }

  get(id: string): TenantState | undefined {
    return this.tenants.get(id);
  }

  values(): IterableIterator<TenantState> {
    return this.tenants.values();
  }

  /** Tenants on any version of `domain`. */
  countOnDomain(domain: string): number {
    let n = 0;
    for (const t of this.tenants.values()) if (t.domain === domain) n++;
    return n;
  }

  /** Adds or replaces a tenant (an update replaces the arrays as a whole); returns the state it replaced. */
  put(state: TenantState): TenantState | undefined {
    this.check(state);
    const old = this.tenants.get(state.id);
    if (old) this.account(old, -1);
    this.tenants.set(state.id, state);
    this.account(state, 1);
    return old;
  }

  delete(id: string): TenantState | undefined {
    const old = this.tenants.get(id);
    if (!old) return undefined;
    this.tenants.delete(id);
    this.account(old, -1);
    return old;
  }

  private account(t: TenantState, sign: 1 | -1): void {
    const b = tenantBytes(t);
    this.bytesTotal += sign * b.total;
    this.adapterBytesTotal += sign * b.adapters;
    this.headBytesTotal += sign * b.head;
  }

  private check(t: TenantState): void {
    const { layers, hidden } = this.shape;
    if (t.adapters.length !== layers) throw new RangeError(`tenant ${t.id}: ${t.adapters.length} adapter layers, want ${layers}`);
    for (const a of t.adapters) if (a.length !== this.numel) throw new RangeError(`tenant ${t.id}: an adapter of ${a.length} floats, want ${this.numel}`);
    const n = t.labels.length;
    if (t.head.weight.length !== n * hidden || t.head.bias.length !== n) {
      throw new RangeError(`tenant ${t.id}: head of ${t.head.weight.length} + ${t.head.bias.length} floats, want ${n * hidden} + ${n} for ${n} labels`);
    }
  }
}
