/**
 * The Request Scheduler (arlo.md §7, Algorithm 1): a multi-level queue with one level per runtime, in ascending
 * max length, each level a min-heap of that runtime's active instances keyed by outstanding requests (queued plus
 * executing; ties to the instance added first). A request walks up from its ideal runtime over at most `maxPeek`
 * non-empty levels and stops at the first whose head has congestion outstanding/capacity < λ, where λ starts at
 * λ0 for every request and is multiplied by α at each level passed (demotion gets harder the further it goes).
 * When every candidate is congested it goes to the head of its ideal (first non-empty) level. A request never runs
 * on a runtime shorter than itself.
 *
 * One dispatch costs O(L) plus one heap update, O(log n); a completion one heap update. The baselines of §9-J are
 * other policies of the same object: ILB ('ideal'), IG ('greedy', raw or normalised busyness) and INFaaS-like
 * bin-packing ('bin-packing'); ST and DT are a single level ('ideal' with one runtime).
 *
 * The dispatcher only counts: the caller enqueues the request on the instance it returns and calls `complete`
 * when that request finishes (or is cancelled). Instances leave the heaps while draining or loading (replacement).
 */
import { InstanceStateError, LengthSchedulerArgumentError, NoServingInstanceError, RequestTooLongError, UnknownInstanceError } from './errors.js';
import { checkRuntimeLengths, idealRuntimeIndex } from './lengths.js';

export type InstanceState = 'active' | 'draining' | 'loading';

/** What the caller sees of an instance (live: fields change as requests are dispatched and completed). */
export interface InstanceView {
  readonly id: string;
  /** Index of the runtime it runs (its level). */
  readonly runtime: number;
  /** Requests dispatched to it and not yet completed. */
  readonly outstanding: number;
  /** M of its runtime. */
  readonly capacity: number;
  readonly state: InstanceState;
}

export type DispatchPolicy =
  /** Algorithm 1. */
  | { kind: 'arlo'; lambda?: number; alpha?: number; maxPeek?: number }
  /** ILB: the ideal runtime only (the first non-empty level from it), its least-loaded instance. */
  | { kind: 'ideal' }
  /** IG: the least busy instance over all candidate levels; busyness raw outstanding (Fig. 4) or outstanding/capacity. */
  | { kind: 'greedy'; normalized?: boolean }
  /** INFaaS-like bin-packing: ascending levels, the most loaded instance still under capacity; else the least loaded of the longest level. */
  | { kind: 'bin-packing' };

export interface DispatcherOptions {
  /** ℓ_i, ascending. */
  lengths: readonly number[];
  /** M_i per runtime (the congestion denominator). */
  capacities: readonly number[];
  /** Default: Algorithm 1 with λ0 = 0.85, α = 0.9, L = 6 (§5). */
  policy?: DispatchPolicy;
  /** Requests longer than the longest runtime: 'truncate' (dispatch as the longest, default) or 'reject' (RequestTooLongError). */
  oversize?: 'truncate' | 'reject';
}

export interface DispatcherStats {
  dispatched: number;
  /** Dispatched to a level above the ideal runtime's. */
  demoted: number;
  /** Algorithm 1 found every candidate congested and sent the request to its ideal level. */
  congestedFallback: number;
}

class Slot implements InstanceView {
  heapPos = -1;
  constructor(
    readonly id: string,
    readonly ord: number,
    public runtime: number,
    public outstanding: number,
    public capacity: number,
    public state: InstanceState,
  ) {}
}

/** (outstanding, ord) order: fewer outstanding first, then the instance added first. */
function before(a: Slot, b: Slot): boolean {
  return a.outstanding < b.outstanding || (a.outstanding === b.outstanding && a.ord < b.ord);
}

export class MultiLevelDispatcher {
  readonly lengths: readonly number[];
  private readonly capacities: number[];
  private readonly levels: Slot[][];
  /** Per level, for bin-packing only: active instances under capacity, most loaded first. */
  private readonly underCapacity: OpenHeap[] | null;
  private readonly byId = new Map<string, Slot>();
  private readonly policy: DispatchPolicy['kind'];
  private readonly lambda0: number;
  private readonly alpha: number;
  private readonly maxPeek: number;
  private readonly normalized: boolean;
  private readonly rejectOversize: boolean;
  private nextOrd = 0;
  readonly stats: DispatcherStats = { dispatched: 0, demoted: 0, congestedFallback: 0 };

  constructor(options: DispatcherOptions) {
    checkRuntimeLengths(options.lengths);
    checkCapacities(options.capacities, options.lengths.length);
    this.lengths = [...options.lengths];
    this.capacities = [...options.capacities];
    this.levels = this.lengths.map(() => []);
    const policy = options.policy ?? { kind: 'arlo' };
    this.policy = policy.kind;
    this.lambda0 = policy.kind === 'arlo' ? (policy.lambda ?? 0.85) : 0.85;
    this.alpha = policy.kind === 'arlo' ? (policy.alpha ?? 0.9) : 0.9;
    this.maxPeek = policy.kind === 'arlo' ? (policy.maxPeek ?? 6) : 6;
    this.normalized = policy.kind === 'greedy' ? (policy.normalized ?? false) : false;
    if (!(this.lambda0 > 0)) throw new LengthSchedulerArgumentError(`lambda must be > 0, got ${this.lambda0}`);
    if (!(this.alpha > 0 && this.alpha <= 1)) throw new LengthSchedulerArgumentError(`alpha must be in (0, 1], got ${this.alpha}`);
    if (!Number.isInteger(this.maxPeek) || this.maxPeek < 1) throw new LengthSchedulerArgumentError(`maxPeek must be a positive integer, got ${this.maxPeek}`);
    this.underCapacity = this.policy === 'bin-packing' ? this.lengths.map(() => new OpenHeap()) : null;
    this.rejectOversize = options.oversize === 'reject';
  }

  // ── Instances ────────────────────────────────────────────────────────────────────────────────────────────

  /** Registers an instance of `runtime` (active unless `state` says otherwise) with `outstanding` requests (default 0). */
  add(id: string, runtime: number, options: { outstanding?: number; state?: InstanceState } = {}): InstanceView {
    if (this.byId.has(id)) throw new InstanceStateError(id, `instance "${id}" is already registered`);
    this.checkRuntime(runtime);
    const outstanding = options.outstanding ?? 0;
    if (!Number.isInteger(outstanding) || outstanding < 0) throw new LengthSchedulerArgumentError(`outstanding must be a non-negative integer, got ${outstanding}`);
    const slot = new Slot(id, this.nextOrd++, runtime, outstanding, this.capacities[runtime]!, options.state ?? 'active');
    this.byId.set(id, slot);
    if (slot.state === 'active') this.insert(slot);
    return slot;
  }

  /**
   * New per-runtime capacities m_i (a fresh profile): every instance takes its runtime's new capacity at once, and the
   * congestion tests of the next dispatch use it. Outstanding counts and levels are untouched.
   */
  setCapacities(capacities: readonly number[]): void {
    checkCapacities(capacities, this.lengths.length);
    for (const [i, m] of capacities.entries()) this.capacities[i] = m;
    for (const slot of this.byId.values()) {
      const active = slot.state === 'active';
      // Bin-packing keeps a per-level heap of instances under capacity: re-enter each one under its new capacity.
      if (active && this.underCapacity !== null) this.extract(slot);
      slot.capacity = this.capacities[slot.runtime]!;
      if (active && this.underCapacity !== null) this.insert(slot);
    }
  }

  /** Unregisters an instance (scale-in); returns its outstanding count, whose requests the caller still owns. */
  remove(id: string): number {
    const slot = this.slot(id);
    if (slot.state === 'active') this.extract(slot);
    this.byId.delete(id);
    return slot.outstanding;
  }

  /** Stops new dispatches to an instance (replacement or scale-in); its outstanding requests still complete. */
  drain(id: string): void {
    const slot = this.slot(id);
    if (slot.state === 'active') this.extract(slot);
    slot.state = 'draining';
  }

  /** Points a drained instance at another runtime; it stays out of the heaps ('loading') until `activate`. */
  retarget(id: string, runtime: number): void {
    const slot = this.slot(id);
    this.checkRuntime(runtime);
    if (slot.state === 'active') throw new InstanceStateError(id, `instance "${id}" must be drained before it changes runtime`);
    slot.runtime = runtime;
    slot.capacity = this.capacities[runtime]!;
    slot.state = 'loading';
  }

  /** Returns a draining or loading instance to service, at the head of its runtime's level if it is the least loaded. */
  activate(id: string): void {
    const slot = this.slot(id);
    if (slot.state === 'active') return;
    slot.state = 'active';
    this.insert(slot);
  }

  instance(id: string): InstanceView {
    return this.slot(id);
  }

  has(id: string): boolean {
    return this.byId.has(id);
  }

  /** Every registered instance, in the order they were added. */
  instances(): InstanceView[] {
    return [...this.byId.values()].sort((a, b) => a.ord - b.ord);
  }

  /** Active instances of a runtime. */
  levelSize(runtime: number): number {
    return this.levels[runtime]?.length ?? 0;
  }

  /** The least-loaded active instance of a runtime, or undefined when it has none. */
  head(runtime: number): InstanceView | undefined {
    return this.levels[runtime]?.[0];
  }

  /** Active instances per runtime (the allocation now being served). */
  activeCounts(): number[] {
    return this.levels.map((l) => l.length);
  }

  // ── Requests ─────────────────────────────────────────────────────────────────────────────────────────────

  /** Picks the instance for a request of `length` tokens and counts it as outstanding there. */
  dispatch(length: number): InstanceView {
    if (!(length >= 1)) throw new LengthSchedulerArgumentError(`request length must be >= 1, got ${length}`);
    let ideal = idealRuntimeIndex(this.lengths, length);
    if (ideal === this.lengths.length) {
      if (this.rejectOversize) throw new RequestTooLongError(length, this.lengths[this.lengths.length - 1]!);
      ideal = this.lengths.length - 1;
    }
    const levels = this.levels;
    const I = levels.length;
    let first = ideal;
    while (first < I && levels[first]!.length === 0) first++;
    if (first === I) throw new NoServingInstanceError(length);

    let chosen: Slot;
    switch (this.policy) {
      case 'arlo':
        chosen = this.pickArlo(first);
        break;
      case 'ideal':
        chosen = levels[first]![0]!;
        break;
      case 'greedy':
        chosen = this.pickGreedy(first);
        break;
      case 'bin-packing':
        chosen = this.pickBinPacking(first);
        break;
    }
    this.stats.dispatched++;
    if (chosen.runtime !== ideal) this.stats.demoted++;
    chosen.outstanding++;
    this.siftDown(levels[chosen.runtime]!, chosen.heapPos);
    if (this.underCapacity !== null) {
      if (chosen.outstanding >= chosen.capacity) this.underCapacity[chosen.runtime]!.remove(chosen);
      else this.underCapacity[chosen.runtime]!.update(chosen);
    }
    return chosen;
  }

  /** One request on `id` finished (or was cancelled): its outstanding count falls and its level is re-ordered. */
  complete(id: string): void {
    const slot = this.slot(id);
    if (slot.outstanding === 0) throw new InstanceStateError(id, `instance "${id}" has no outstanding request to complete`);
    slot.outstanding--;
    if (slot.state !== 'active') return;
    this.siftUp(this.levels[slot.runtime]!, slot.heapPos);
    if (this.underCapacity !== null && slot.outstanding < slot.capacity) this.underCapacity[slot.runtime]!.update(slot);
  }

  /** Algorithm 1 from the first non-empty candidate level. */
  private pickArlo(first: number): Slot {
    const levels = this.levels;
    const I = levels.length;
    let lambda = this.lambda0;
    let peeked = 0;
    for (let i = first; i < I && peeked < this.maxPeek; i++) {
      const level = levels[i]!;
      if (level.length === 0) continue;
      peeked++;
      const head = level[0]!;
      if (head.outstanding / head.capacity < lambda) return head;
      lambda *= this.alpha;
    }
    this.stats.congestedFallback++;
    return levels[first]![0]!;
  }

  private pickGreedy(first: number): Slot {
    const levels = this.levels;
    let best: Slot | undefined;
    let bestKey = Infinity;
    for (let i = first; i < levels.length; i++) {
      const head = levels[i]![0];
      if (head === undefined) continue;
      const key = this.normalized ? head.outstanding / head.capacity : head.outstanding;
      if (key < bestKey) {
        bestKey = key;
        best = head;
      }
    }
    return best!;
  }

  private pickBinPacking(first: number): Slot {
    const under = this.underCapacity!;
    for (let i = first; i < this.levels.length; i++) {
      const best = under[i]!.top();
      if (best !== undefined) return best;
    }
    for (let i = this.levels.length - 1; i >= first; i--) {
      const head = this.levels[i]![0];
      if (head !== undefined) return head;
    }
    return this.levels[first]![0]!;
  }

  // ── Heaps ────────────────────────────────────────────────────────────────────────────────────────────────

  private insert(slot: Slot): void {
    const level = this.levels[slot.runtime]!;
    slot.heapPos = level.length;
    level.push(slot);
    this.siftUp(level, slot.heapPos);
    if (this.underCapacity !== null && slot.outstanding < slot.capacity) this.underCapacity[slot.runtime]!.update(slot);
  }

  private extract(slot: Slot): void {
    const level = this.levels[slot.runtime]!;
    const pos = slot.heapPos;
    const last = level.pop()!;
    if (last !== slot) {
      level[pos] = last;
      last.heapPos = pos;
      this.siftDown(level, pos);
      this.siftUp(level, last.heapPos);
    }
    slot.heapPos = -1;
    this.underCapacity?.[slot.runtime]!.remove(slot);
  }

  private siftUp(level: Slot[], pos: number): void {
    const slot = level[pos]!;
    while (pos > 0) {
      const parentPos = (pos - 1) >> 1;
      const parent = level[parentPos]!;
      if (!before(slot, parent)) break;
      level[pos] = parent;
      parent.heapPos = pos;
      pos = parentPos;
    }
    level[pos] = slot;
    slot.heapPos = pos;
  }

  private siftDown(level: Slot[], pos: number): void {
    const n = level.length;
    const slot = level[pos]!;
    for (;;) {
      const left = 2 * pos + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && before(level[right]!, level[left]!)) child = right;
      const c = level[child]!;
      if (!before(c, slot)) break;
      level[pos] = c;
      c.heapPos = pos;
      pos = child;
    }
    level[pos] = slot;
    slot.heapPos = pos;
  }

  private slot(id: string): Slot {
    const slot = this.byId.get(id);
    if (slot === undefined) throw new UnknownInstanceError(id);
    return slot;
  }

  private checkRuntime(runtime: number): void {
    if (!Number.isInteger(runtime) || runtime < 0 || runtime >= this.lengths.length) {
      throw new LengthSchedulerArgumentError(`runtime index must be an integer in [0, ${this.lengths.length - 1}], got ${runtime}`);
    }
  }
}

/**
 * Bin-packing's second order on a level: the instances under capacity, most loaded first (ties to the instance
 * added first), in an indexed max-heap so that the baseline is O(log n) per dispatch as well.
 */
class OpenHeap {
  private readonly items: Slot[] = [];
  private readonly pos = new Map<Slot, number>();

  top(): Slot | undefined {
    return this.items[0];
  }

  /** Inserts the slot, or re-orders it after its outstanding count changed. */
  update(slot: Slot): void {
    const at = this.pos.get(slot);
    if (at === undefined) {
      this.items.push(slot);
      this.up(this.items.length - 1);
    } else {
      this.up(at);
      this.down(this.pos.get(slot)!);
    }
  }

  remove(slot: Slot): void {
    const at = this.pos.get(slot);
    if (at === undefined) return;
    this.pos.delete(slot);
    const last = this.items.pop()!;
    if (last === slot) return;
    this.items[at] = last;
    this.pos.set(last, at);
    this.up(at);
    this.down(this.pos.get(last)!);
  }

  private higher(a: Slot, b: Slot): boolean {
    return a.outstanding > b.outstanding || (a.outstanding === b.outstanding && a.ord < b.ord);
  }

  private up(i: number): void {
    const items = this.items;
    const s = items[i]!;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.higher(s, items[p]!)) break;
      items[i] = items[p]!;
      this.pos.set(items[i]!, i);
      i = p;
    }
    items[i] = s;
    this.pos.set(s, i);
  }

  private down(i: number): void {
    const items = this.items;
    const n = items.length;
    const s = items[i]!;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      let c = l;
      if (l + 1 < n && this.higher(items[l + 1]!, items[l]!)) c = l + 1;
      if (!this.higher(items[c]!, s)) break;
      items[i] = items[c]!;
      this.pos.set(items[i]!, i);
      i = c;
    }
    items[i] = s;
    this.pos.set(s, i);
  }
}

function checkCapacities(capacities: readonly number[], runtimes: number): void {
  if (capacities.length !== runtimes) throw new LengthSchedulerArgumentError(`capacities has ${capacities.length} entries for ${runtimes} runtimes`);
  for (const [i, m] of capacities.entries()) {
    if (!(Number.isFinite(m) && m > 0)) throw new LengthSchedulerArgumentError(`capacity of runtime ${i} must be finite and > 0, got ${m}`);
  }
}
