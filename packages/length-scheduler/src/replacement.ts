/**
 * Instance replacement (arlo.md §6.6): from the instances now serving to a new allocation N, moving as few as
 * possible (Σ max(0, cur_i − N_i)), in small batches so that enough instances keep serving. Donors are the
 * least-loaded instances of the runtimes that have too many (they drain first); a runtime that has no instance at
 * all is filled first (the longest one first: without it, long requests have nowhere to go), then the largest
 * deficits.
 *
 * A move drains its instance (no new dispatches; the requests it already holds finish), swaps its runtime and
 * returns it to service. `ReplacementRun` walks a plan batch by batch against a {@link MultiLevelDispatcher}; the
 * swap itself (loading another engine or session) is the caller's, so the same run works under a virtual clock.
 */
import type { MultiLevelDispatcher } from './dispatcher.js';
import { LengthSchedulerArgumentError, ReplacementFloorError } from './errors.js';

export interface ReplacementInstance {
  id: string;
  runtime: number;
  outstanding: number;
}

export interface ReplacementMove {
  id: string;
  from: number;
  to: number;
}

export interface ReplacementOptions {
  /** Moves per batch at most. Default max(1, ⌈0.05·G⌉). */
  batchSize?: number;
  /** Instances that must keep serving at every moment (all runtimes together). Default 1 (0 for a single instance, which cannot swap otherwise). */
  floor?: number;
}

export interface ReplacementPlan {
  moves: ReplacementMove[];
  /** The moves in execution order, each batch at most the batch size, and small enough to keep the floor serving. */
  batches: ReplacementMove[][];
}

/** The minimal plan from `instances` (every instance, each with its current runtime) to `target` (N per runtime). */
export function planReplacement(instances: readonly ReplacementInstance[], target: readonly number[], options: ReplacementOptions = {}): ReplacementPlan {
  const I = target.length;
  const G = instances.length;
  let total = 0;
  for (const [i, n] of target.entries()) {
    if (!Number.isInteger(n) || n < 0) throw new LengthSchedulerArgumentError(`target[${i}] must be a non-negative integer, got ${n}`);
    total += n;
  }
  if (total !== G) throw new LengthSchedulerArgumentError(`target allocates ${total} instances but ${G} are serving`);
  const batchSize = options.batchSize ?? Math.max(1, Math.ceil(0.05 * G));
  const floor = options.floor ?? (G > 1 ? 1 : 0);
  if (!Number.isInteger(batchSize) || batchSize < 1) throw new LengthSchedulerArgumentError(`batchSize must be a positive integer, got ${batchSize}`);
  if (!Number.isInteger(floor) || floor < 0) throw new LengthSchedulerArgumentError(`floor must be a non-negative integer, got ${floor}`);

  const current = new Array<number>(I).fill(0);
  const byRuntime: ReplacementInstance[][] = target.map(() => []);
  const seen = new Set<string>();
  for (const inst of instances) {
    if (seen.has(inst.id)) throw new LengthSchedulerArgumentError(`instance "${inst.id}" is listed twice`);
    seen.add(inst.id);
    if (!Number.isInteger(inst.runtime) || inst.runtime < 0 || inst.runtime >= I) {
      throw new LengthSchedulerArgumentError(`instance "${inst.id}" runs runtime ${inst.runtime}, outside [0, ${I - 1}]`);
    }
    current[inst.runtime]!++;
    byRuntime[inst.runtime]!.push(inst);
  }
  // Donors: the surplus of each runtime, least loaded first; then all donors least loaded first.
  const donors: ReplacementInstance[] = [];
  for (let i = 0; i < I; i++) {
    const surplus = current[i]! - target[i]!;
    if (surplus <= 0) continue;
    const sorted = byRuntime[i]!.map((inst, k) => ({ inst, k })).sort((a, b) => a.inst.outstanding - b.inst.outstanding || a.k - b.k);
    for (let k = 0; k < surplus; k++) donors.push(sorted[k]!.inst);
  }
  donors.sort((a, b) => a.outstanding - b.outstanding);
  // Receivers: empty runtimes first (longest first), then the largest remaining deficit (longer on ties).
  const deficit = target.map((n, i) => Math.max(0, n - current[i]!));
  const have = [...current];
  const moves: ReplacementMove[] = [];
  for (const donor of donors) {
    let to = -1;
    for (let j = I - 1; j >= 0; j--) {
      if (deficit[j]! <= 0) continue;
      if (to < 0) {
        to = j;
        continue;
      }
      const emptyJ = have[j] === 0;
      const emptyTo = have[to] === 0;
      if ((emptyJ && !emptyTo) || (emptyJ === emptyTo && deficit[j]! > deficit[to]!)) to = j;
    }
    deficit[to]!--;
    have[to]!++;
    moves.push({ id: donor.id, from: donor.runtime, to });
  }
  const perBatch = Math.min(batchSize, G - floor);
  if (moves.length > 0 && perBatch < 1) throw new ReplacementFloorError(G, floor);
  const batches: ReplacementMove[][] = [];
  for (let k = 0; k < moves.length; k += perBatch) batches.push(moves.slice(k, k + perBatch));
  return { moves, batches };
}

/**
 * Carries out a plan against a dispatcher, one batch at a time: `start` drains the first batch; `drained` hands
 * back the moves whose instance has finished its requests (now retargeted, 'loading'), for the caller to swap;
 * `swapped(id)` returns an instance to service and, when its batch is complete, drains the next batch.
 */
export class ReplacementRun {
  private batchIndex = -1;
  private readonly pending = new Map<string, ReplacementMove>();
  private readonly swapping = new Set<string>();

  constructor(
    private readonly dispatcher: MultiLevelDispatcher,
    readonly plan: ReplacementPlan,
  ) {}

  /** True when every batch has been swapped. */
  get done(): boolean {
    return this.batchIndex >= this.plan.batches.length && this.pending.size === 0 && this.swapping.size === 0;
  }

  /** Moves drained or swapping right now. */
  get inFlight(): number {
    return this.pending.size + this.swapping.size;
  }

  /** Drains the first batch; returns its moves. */
  start(): ReplacementMove[] {
    if (this.batchIndex >= 0) return [];
    return this.nextBatch();
  }

  /** Moves whose instance has no outstanding request: retargeted ('loading') and handed to the caller to swap. */
  drained(): ReplacementMove[] {
    const ready: ReplacementMove[] = [];
    for (const [id, move] of this.pending) {
      if (this.dispatcher.instance(id).outstanding > 0) continue;
      this.dispatcher.retarget(id, move.to);
      this.pending.delete(id);
      this.swapping.add(id);
      ready.push(move);
    }
    return ready;
  }

  /** The caller finished swapping `id`: it serves its new runtime; returns the next batch's moves when this one is done. */
  swapped(id: string): ReplacementMove[] {
    if (!this.swapping.delete(id)) throw new LengthSchedulerArgumentError(`instance "${id}" is not being swapped by this replacement`);
    this.dispatcher.activate(id);
    if (this.pending.size === 0 && this.swapping.size === 0) return this.nextBatch();
    return [];
  }

  private nextBatch(): ReplacementMove[] {
    this.batchIndex++;
    const batch = this.plan.batches[this.batchIndex];
    if (batch === undefined) return [];
    for (const move of batch) {
      this.dispatcher.drain(move.id);
      this.pending.set(move.id, move);
    }
    return batch;
  }
}
