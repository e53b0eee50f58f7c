/**
 * HMI's batched adapter (hmi.md A9–A10): one upper layer's bottleneck adapters for a batch of many tenants, staged
 * as vBERT lays them out — one flat f32 vector per tenant and layer, `[W_down (m·d) | b_down (m) | W_up (d·m) |
 * b_up (d)]` — and applied to the batch in ONE native call. The kernel is PetS's adapter op (`petSiteRun` with
 * one `adapter` op per tenant segment; A(a) = W_up·act(W_down·a + b_down) + b_up + a, the skip included), so HMI
 * and PetS share one adapter kernel on the CPU and on CUDA. The activation is the caller's: ReLU as in the HMI paper,
 * or GELU (erf or tanh) as vBERT and PetS use; the default is GELU (erf), as PetS's.
 *
 * `AdapterStackBuffer` is one layer's device buffer D_j[B_max] of A12: `slots` rows of `numel` floats, with views
 * onto each slot's four parts made once. The copy stage writes a tenant's vector into a slot (`write`); the compute
 * stage applies the slots to their rows (`apply`).
 */
import { type AdapterActivation, type Backend, type PetOp, type PetRows, Tensor, petSiteRun } from '@tessera/native';

import { PetConfigError, PetShapeError } from '../errors.js';

export interface AdapterStackShape {
  /** Hidden size d. */
  hidden: number;
  /** Bottleneck m. */
  bottleneck: number;
}

/** Floats of one tenant's adapter for one layer: 2·d·m + m + d (vBERT's flat layout). */
export function adapterStackNumel({ hidden, bottleneck }: AdapterStackShape): number {
  return 2 * hidden * bottleneck + bottleneck + hidden;
}

/** The rows of the batch one slot's adapter applies to. */
export interface AdapterStackSegment {
  slot: number;
  rows: PetRows;
}

export interface AdapterStackApplyOptions {
  /** Default 'gelu' (erf); HMI's paper uses 'relu'. */
  act?: AdapterActivation;
  /** The plain double-accumulating kernel (tests' oracle). */
  reference?: boolean;
}

interface SlotViews {
  row: Tensor;
  down: Tensor;
  downBias: Tensor;
  up: Tensor;
  upBias: Tensor;
}

export class AdapterStackBuffer {
  readonly hidden: number;
  readonly bottleneck: number;
  readonly slots: number;
  readonly numel: number;
  /** f32 [slots, numel]. */
  readonly tensor: Tensor;
  private readonly views: SlotViews[] = [];
  private disposed = false;

  constructor(shape: AdapterStackShape & { slots: number }, backend?: Backend) {
    const { hidden, bottleneck, slots } = shape;
    for (const [name, v] of [['hidden', hidden], ['bottleneck', bottleneck], ['slots', slots]] as const) {
      if (!(Number.isInteger(v) && v >= 1)) throw new PetConfigError(`AdapterStackBuffer: ${name} must be an integer >= 1, got ${v}`);
    }
    this.hidden = hidden;
    this.bottleneck = bottleneck;
    this.slots = slots;
    this.numel = adapterStackNumel(shape);
    this.tensor = Tensor.zeros([slots, this.numel], 'f32', backend);
    const d = hidden, m = bottleneck;
    try {
      for (let s = 0; s < slots; s++) {
        const row = this.tensor.rows(s, 1).reshape([this.numel]);
        const part = (offset: number, length: number, shape: number[]) => row.rows(offset, length).reshape(shape);
        this.views.push({ row, down: part(0, m * d, [m, d]), downBias: part(m * d, m, [m]), up: part(m * d + m, d * m, [d, m]), upBias: part(2 * m * d + m, d, [d]) });
      }
    } catch (err) {
      this.dispose();
      throw err;
    }
  }

  /** Copies one tenant's flat adapter vector (f32 [numel]) into a slot: A12's copy stage for this layer. */
  write(slot: number, vector: Float32Array): void {
    this.live();
    this.checkSlot(slot);
    if (vector.length !== this.numel) {
      throw new PetShapeError(`adapter stack slot ${slot}`, `${this.numel} floats (2·${this.hidden}·${this.bottleneck} + ${this.bottleneck} + ${this.hidden})`, `${vector.length}`);
    }
    this.views[slot]!.row.write(vector);
  }

  /**
   * y (f32 [rows, hidden]) += each segment's slot adapter applied to its rows (the skip included), all segments in
   * one native call. Segments must not overlap; a row outside every segment is left as it is.
   */
  apply(y: Tensor, segments: readonly AdapterStackSegment[], options: AdapterStackApplyOptions = {}): void {
    this.live();
    if (y.shape.length !== 2 || y.shape[1] !== this.hidden || y.dtype !== 'f32') {
      throw new PetShapeError('adapter stack input', `f32 [rows, ${this.hidden}]`, `${y.dtype} [${y.shape.join(', ')}]`);
    }
    const ops: PetOp[] = segments.map(({ slot, rows }) => {
      this.checkSlot(slot);
      const v = this.views[slot]!;
      return { kind: 'adapter', rows, y, down: v.down, downBias: v.downBias, up: v.up, upBias: v.upBias, act: options.act ?? 'gelu' };
    });
    if (ops.length === 0) return;
    petSiteRun(ops, options.reference ? { reference: true } : {});
  }

  /** Frees the buffer and its views. Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const v of this.views) for (const t of Object.values(v)) t.dispose();
    this.views.length = 0;
    this.tensor.dispose();
  }

  private checkSlot(slot: number): void {
    if (!(Number.isInteger(slot) && slot >= 0 && slot < this.slots)) throw new PetConfigError(`adapter stack: slot ${slot} is not in [0, ${this.slots})`);
  }

  private live(): void {
    if (this.disposed) throw new PetConfigError('adapter stack: the buffer was disposed');
  }
}
