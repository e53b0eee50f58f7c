/**
 * SgmvLoraDelta: LoRA at the engine's hook sites with Punica's SGMV (punica.md §3.1, §5.4). Per site output,
 * one shrink of the whole batch into a zeroed [rows, rMax] intermediate and one expand into the site's output,
 * however many adapters the batch mixes; base-model segments (key null) are skipped by the kernels.
 *
 * The per-segment weight lists depend only on the layout and the slice, so they are built once per layout (the
 * batcher builds one layout per step) and reused by all L layers: 7 lists per step for a Llama, not 7·L.
 */
import type { LinearSiteCall, ModelDelta, SegmentLayout } from '@tessera/engine';
import { type Backend, type SgmvOptions, Tensor, sgmvExpand, sgmvShrink } from '@tessera/native';
import { UnknownAdapterError } from './errors.js';
import { zeroFill } from './ops.js';
import type { LoraWeightSet } from './weights.js';

export interface SgmvLoraDeltaOptions {
  /** Run the scalar reference kernels (CPU; for tests). */
  reference?: boolean;
}

/** The weights of one slice for every segment of a layout (null: base model, or the adapter skips the slice). */
interface SliceWeights {
  a: (Tensor | null)[];
  b: (Tensor | null)[];
  /** Largest rank among them; 0 when no segment adapts this slice. */
  rMax: number;
  /** [rows, rMax] view of the scratch buffer, made on first use. */
  v: Tensor | null;
}

interface LayoutEntry {
  layout: SegmentLayout;
  /** The resolved set of each segment (null for base-model segments). */
  sets: (LoraWeightSet | null)[];
  slices: Map<string, SliceWeights>;
}

export class SgmvLoraDelta implements ModelDelta {
  private readonly resolve: (key: string) => LoraWeightSet | undefined;
  private readonly kernel: SgmvOptions;
  private entry: LayoutEntry | null = null;
  /** Flat f32 scratch, grown to the largest rows · rMax seen; the intermediates are views of it. */
  private scratch: Tensor | null = null;
  private builds = 0;

  /**
   * @param resolve the device weights of a SegmentLayout key, or undefined when the key is unknown (which throws
   *   UnknownAdapterError at the first site: a tenant's request never silently runs on the base model).
   */
  constructor(resolve: (key: string) => LoraWeightSet | undefined, options: SgmvLoraDeltaOptions = {}) {
    this.resolve = resolve;
    this.kernel = options.reference === undefined ? {} : { reference: options.reference };
  }

  /** How many per-slice weight lists were built so far (one per layout and slice, not per layer). */
  get weightListBuilds(): number {
    return this.builds;
  }

  linear(call: LinearSiteCall): void {
    const { layout } = call;
    if (layout.rows === 0) return;
    const entry = this.entryFor(layout);
    const backend = call.x.backend;
    const indptr = layout.indptrTensor(backend);
    for (const out of call.outputs) {
      const w = this.sliceWeights(entry, out.slice);
      if (w.rMax === 0) continue;
      const v = this.intermediate(w, layout.rows, backend);
      zeroFill(v);
      sgmvShrink(v, call.x, w.a, indptr, call.layer, this.kernel);
      sgmvExpand(out.y, v, w.b, indptr, call.layer, this.kernel);
    }
  }

  /**
   * Resolves every key of `layout` now (throwing UnknownAdapterError for an unknown one) and keeps the result for
   * the forward that uses this layout. A batcher calls it before the forward, so a bad key fails before the model
   * reserves KV cache room or computes anything.
   */
  prepare(layout: SegmentLayout): void {
    this.entryFor(layout);
  }

  /** The current layout's entry: reused while the layout and its resolved sets stay live, else rebuilt. */
  private entryFor(layout: SegmentLayout): LayoutEntry {
    const e = this.entry;
    if (e && e.layout === layout && e.sets.every((s) => s === null || !s.disposed)) return e;
    const resolved = new Map<string, LoraWeightSet>();
    const sets = layout.segments.map((seg) => {
      if (seg.key === null) return null;
      let set = resolved.get(seg.key);
      if (!set) {
        set = this.resolve(seg.key);
        if (!set) throw new UnknownAdapterError(seg.key, `SgmvLoraDelta: no LoRA adapter is loaded for key ${JSON.stringify(seg.key)} (segment of ${seg.count} rows at row ${seg.start})`);
        resolved.set(seg.key, set);
      }
      return set;
    });
    this.dropEntry();
    this.entry = { layout, sets, slices: new Map() };
    return this.entry;
  }

  private sliceWeights(entry: LayoutEntry, slice: string): SliceWeights {
    let w = entry.slices.get(slice);
    if (w) return w;
    const a: (Tensor | null)[] = [];
    const b: (Tensor | null)[] = [];
    let rMax = 0;
    entry.sets.forEach((set, i) => {
      // An empty segment contributes nothing; skipping it spares the kernel a weight it would not read.
      const p = set && entry.layout.segments[i]!.count > 0 ? set.projections.get(slice) : undefined;
      a.push(p ? p.a : null);
      b.push(p ? p.b : null);
      if (p) rMax = Math.max(rMax, p.r);
    });
    w = { a, b, rMax, v: null };
    entry.slices.set(slice, w);
    this.builds++;
    return w;
  }

  private intermediate(w: SliceWeights, rows: number, backend: Backend): Tensor {
    if (w.v && w.v.backend.binding === backend.binding && !w.v.disposed) return w.v;
    const need = rows * w.rMax;
    if (!this.scratch || this.scratch.backend.binding !== backend.binding || this.scratch.numel < need) {
      // Growing invalidates every view of the old buffer.
      for (const s of this.entry?.slices.values() ?? []) {
        s.v?.dispose();
        s.v = null;
      }
      const had = this.scratch?.numel ?? 0;
      this.scratch?.dispose();
      this.scratch = null;
      this.scratch = Tensor.empty([Math.max(need, 2 * had)], 'f32', backend);
    }
    const flat = this.scratch.rows(0, need);
    try {
      w.v = flat.reshape([rows, w.rMax]);
    } finally {
      flat.dispose();
    }
    return w.v;
  }

  private dropEntry(): void {
    for (const s of this.entry?.slices.values() ?? []) s.v?.dispose();
    this.entry = null;
  }

  /** Frees the scratch buffer and the cached lists (the delta stays usable: they are rebuilt on demand). */
  dispose(): void {
    this.dropEntry();
    this.scratch?.dispose();
    this.scratch = null;
  }
}
