/**
 * SegmentLayout: the rows of one forward grouped into runs that share a tenant/adapter key. Built once per
 * forward (per batcher step) and handed to every hook site, so multi-tenant operators (SGMV, PET ops) never
 * re-derive the grouping. Rows of one key should be adjacent (batchers sort their working set by adapter); a
 * key that appears in two separate runs simply gets two segments.
 */
import { type Backend, InvalidArgumentError, Tensor } from '@tessera/native';

/** A run of rows [start, start + count) that belong to one tenant/adapter (`key`; null = the base model). */
export interface Segment {
  readonly key: string | null;
  readonly start: number;
  readonly count: number;
}

export class SegmentLayout {
  readonly segments: readonly Segment[];
  /** Total rows covered. */
  readonly rows: number;
  /** CSR-style row pointers: segment s covers rows [indptr[s], indptr[s + 1]). Length segments + 1. */
  readonly indptr: Int32Array;
  private readonly indptrTensors = new Map<Backend, Tensor>();

  private constructor(segments: Segment[]) {
    this.segments = segments;
    this.indptr = new Int32Array(segments.length + 1);
    segments.forEach((s, i) => (this.indptr[i + 1] = s.start + s.count));
    this.rows = this.indptr[segments.length]!;
  }

  /** Groups runs of consecutive equal keys, one key per row. Empty input gives an empty layout. */
  static fromRowKeys(keys: readonly (string | null)[]): SegmentLayout {
    const segments: Segment[] = [];
    for (let r = 0; r < keys.length; r++) {
      const key = keys[r] ?? null;
      const last = segments[segments.length - 1];
      if (last && last.key === key) segments[segments.length - 1] = { ...last, count: last.count + 1 };
      else segments.push({ key, start: r, count: 1 });
    }
    return new SegmentLayout(segments);
  }

  /** One segment per entry, in order; zero-row entries are kept as empty segments (kernels must accept them). */
  static fromCounts(runs: readonly { key: string | null; count: number }[]): SegmentLayout {
    let start = 0;
    const segments = runs.map(({ key, count }) => {
      if (!Number.isInteger(count) || count < 0) throw new InvalidArgumentError(`SegmentLayout: segment ${key} has count ${count}`);
      const s = { key, start, count };
      start += count;
      return s;
    });
    return new SegmentLayout(segments);
  }

  /** A single segment covering `rows` rows with one key. */
  static uniform(rows: number, key: string | null = null): SegmentLayout {
    return SegmentLayout.fromCounts([{ key, count: rows }]);
  }

  /** The distinct keys, in first-appearance order. */
  keys(): (string | null)[] {
    return [...new Set(this.segments.map((s) => s.key))];
  }

  /** The key of a row (binary search over indptr). */
  keyOf(row: number): string | null {
    if (!Number.isInteger(row) || row < 0 || row >= this.rows) throw new InvalidArgumentError(`SegmentLayout: row ${row} outside [0, ${this.rows})`);
    let lo = 0;
    let hi = this.segments.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.indptr[mid]! <= row) lo = mid;
      else hi = mid - 1;
    }
    // Empty segments share their start with the next one; step forward to the segment that holds the row.
    while (this.segments[lo]!.count === 0) lo++;
    return this.segments[lo]!.key;
  }

  /** indptr as an i32 tensor on `backend`, made once per layout and backend (native kernels read it). */
  indptrTensor(backend: Backend): Tensor {
    let t = this.indptrTensors.get(backend);
    if (!t || t.disposed) {
      t = Tensor.from(this.indptr, [this.indptr.length], { backend });
      this.indptrTensors.set(backend, t);
    }
    return t;
  }

  /** Frees the cached indptr tensors. */
  dispose(): void {
    for (const t of this.indptrTensors.values()) t.dispose();
    this.indptrTensors.clear();
  }
}
