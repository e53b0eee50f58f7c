/**
 * Layer-wise adapter staging, as HMI schedules it (design note hmi.md §1.7–1.8, A12; the structure is vBERT's):
 * which stage of which batch may run next on each of three serial resources.
 *
 *   - `cpu`: a batch's retrieval (PLOT lookups + aggregation → h0) and then the gather of its tenants' adapters
 *     into the host staging slot `b mod K` (one pinned buffer per slot and upper layer);
 *   - `copy`: the copy of layer j's staged adapters into the device's one buffer for layer j;
 *   - `compute`: upper layer j of a batch (layer 0 also takes h0), in batch order.
 *
 * The rule that makes fine-grained pipelining safe (§7.8): batch b's adapters for layer j may be copied into
 * layer j's device buffer only after batch b−1 finished layer j (`comp_done[b−1][j]`), and layer j of b computes
 * only after that copy landed (`copy_done[b][j]`). A host slot is reused only after its previous batch finished
 * every layer. The ablations of Table 6 are switches of the same object:
 *
 *   - `fine` (default): both pipelines on;
 *   - `coarse`: b's copies are issued once b−1 finished its last layer (double-buffered whole batches);
 *   - `pipelineRetrieval: false`: b's CPU stage starts only after b−1 finished its last layer;
 *   - `pipelineAdapters: false`: the copy of layer j is issued only when the compute is ready for b's layer j
 *     (a synchronous copy before each layer);
 *   - `synchronized`: both switches off.
 *
 * Pure bookkeeping on integers: the runner asks `next(resource)` when a resource is idle, runs what it gets, and
 * reports `complete(action)`. The same object runs a real server's stages and `simulateLayerwisePipeline`'s
 * virtual ones.
 */
import { InvalidArgumentError, registerErrors, TesseraError, type ErrorKind } from '@tessera/core';

export type PipelineResource = 'cpu' | 'copy' | 'compute';

export type PipelineAction =
  | { kind: 'retrieve'; batch: number; slot: number }
  | { kind: 'gather'; batch: number; slot: number }
  | { kind: 'copy'; batch: number; slot: number; layer: number }
  | { kind: 'compute'; batch: number; layer: number };

export type PipelineMode = 'fine' | 'coarse' | 'synchronized';

export interface LayerwisePipelineOptions {
  /** Upper layers with an adapter (L_up). */
  layers: number;
  /** Host staging slots K: batches in flight at once (vBERT: 4). */
  slots: number;
  /** Default 'fine'. */
  mode?: PipelineMode;
  /** Overrides the mode's retrieval pipelining (Table 6's ablation). */
  pipelineRetrieval?: boolean;
  /** Overrides the mode's per-layer adapter prefetching (Table 6's ablation). */
  pipelineAdapters?: boolean;
}

/** An action reported complete that was never handed out, or twice: the runner's bug, never bad input. */
export class PipelineStateError extends TesseraError {
  static override readonly kind: ErrorKind = 'internal';
  constructor(message: string) {
    super('TESSERA_PIPELINE_STATE', message);
  }
}
registerErrors(PipelineStateError);

interface BatchState {
  slot: number;
  retrieveIssued: boolean;
  retrieved: boolean;
  gatherIssued: boolean;
  gathered: boolean;
  /** Copies issued / landed and layers issued / computed, as counts: both go in layer order. */
  copiesIssued: number;
  copiesDone: number;
  layersIssued: number;
  layersDone: number;
}

export class LayerwisePipeline {
  readonly layers: number;
  readonly slots: number;
  readonly pipelineRetrieval: boolean;
  readonly pipelineAdapters: boolean;
  readonly coarse: boolean;
  private readonly batches: BatchState[] = [];
  /** First batch that has not finished every layer (all before it are done and forgotten by the rules). */
  private oldestUnfinished = 0;
  private readonly busy: Record<PipelineResource, PipelineAction | null> = { cpu: null, copy: null, compute: null };

  constructor(options: LayerwisePipelineOptions) {
    const { layers, slots } = options;
    if (!(Number.isInteger(layers) && layers >= 1)) throw new InvalidArgumentError(`layers must be an integer >= 1, got ${layers}`);
    if (!(Number.isInteger(slots) && slots >= 1)) throw new InvalidArgumentError(`slots must be an integer >= 1, got ${slots}`);
    const mode = options.mode ?? 'fine';
    if (mode !== 'fine' && mode !== 'coarse' && mode !== 'synchronized') throw new InvalidArgumentError(`mode must be fine, coarse or synchronized, got ${String(mode)}`);
    this.layers = layers;
    this.slots = slots;
    this.coarse = mode === 'coarse';
    this.pipelineRetrieval = options.pipelineRetrieval ?? mode !== 'synchronized';
    this.pipelineAdapters = options.pipelineAdapters ?? mode !== 'synchronized';
  }

  /** A new batch arrives (full: Fig. 10 starts a batch's retrieval only then); returns its id 0, 1, 2, … */
  submit(): number {
    const b = this.batches.length;
    this.batches.push({ slot: b % this.slots, retrieveIssued: false, retrieved: false, gatherIssued: false, gathered: false, copiesIssued: 0, copiesDone: 0, layersIssued: 0, layersDone: 0 });
    return b;
  }

  /** Batches submitted and not yet through their last layer. */
  get inFlight(): number {
    return this.batches.length - this.oldestUnfinished;
  }

  /** True once batch b finished its last layer. */
  finished(b: number): boolean {
    return this.batch(b).layersDone === this.layers;
  }

  /** What `resource` is running (null: idle). */
  running(resource: PipelineResource): PipelineAction | null {
    return this.busy[resource];
  }

  /**
   * The next action for an idle resource, marked as running there, or null when nothing may run on it yet.
   * Each resource serves batches in order; the CPU does a batch's retrieval before its gather.
   */
  next(resource: PipelineResource): PipelineAction | null {
    if (this.busy[resource] !== null) return null;
    const action = resource === 'cpu' ? this.nextCpu() : resource === 'copy' ? this.nextCopy() : this.nextCompute();
    if (action === null) return null;
    const s = this.batches[action.batch]!;
    if (action.kind === 'retrieve') s.retrieveIssued = true;
    else if (action.kind === 'gather') s.gatherIssued = true;
    else if (action.kind === 'copy') s.copiesIssued++;
    else s.layersIssued++;
    this.busy[resource] = action;
    return action;
  }

  /** Reports the resource's running action finished. */
  complete(action: PipelineAction): void {
    const resource = resourceOf(action);
    const running = this.busy[resource];
    if (running === null || !sameAction(running, action)) {
      throw new PipelineStateError(`complete(${describe(action)}): ${resource} is running ${running === null ? 'nothing' : describe(running)}`);
    }
    this.busy[resource] = null;
    const s = this.batches[action.batch]!;
    if (action.kind === 'retrieve') s.retrieved = true;
    else if (action.kind === 'gather') s.gathered = true;
    else if (action.kind === 'copy') s.copiesDone++;
    else {
      s.layersDone++;
      while (this.oldestUnfinished < this.batches.length && this.batches[this.oldestUnfinished]!.layersDone === this.layers) this.oldestUnfinished++;
    }
  }

  private batch(b: number): BatchState {
    const s = this.batches[b];
    if (s === undefined) throw new InvalidArgumentError(`batch ${b} was never submitted`);
    return s;
  }

  /** Batch b may use its host slot: the slot's previous batch (b − K) finished every layer. */
  private slotFree(b: number): boolean {
    return b < this.slots || this.batches[b - this.slots]!.layersDone === this.layers;
  }

  /** Layers batch b − 1 finished (all of them when b is the first batch). */
  private previousDone(b: number): number {
    return b === 0 ? this.layers : this.batches[b - 1]!.layersDone;
  }

  private nextCpu(): PipelineAction | null {
    for (let b = this.oldestUnfinished; b < this.batches.length; b++) {
      const s = this.batches[b]!;
      if (s.gatherIssued) continue;
      if (!s.retrieveIssued) {
        if (!this.slotFree(b)) return null;
        if (!this.pipelineRetrieval && this.previousDone(b) < this.layers) return null;
        return { kind: 'retrieve', batch: b, slot: s.slot };
      }
      return { kind: 'gather', batch: b, slot: s.slot };
    }
    return null;
  }

  private nextCopy(): PipelineAction | null {
    for (let b = this.oldestUnfinished; b < this.batches.length; b++) {
      const s = this.batches[b]!;
      if (s.copiesIssued === this.layers) continue;
      if (!s.gathered) return null; // copies go in batch order
      const j = s.copiesIssued;
      // Layer j's device buffer still holds b − 1's adapters until b − 1 finished layer j.
      if (this.previousDone(b) < (this.coarse ? this.layers : j + 1)) return null;
      // A synchronous copy: only when the compute is about to run layer j of b.
      if (!this.pipelineAdapters && !this.computeWaitsFor(b, j)) return null;
      return { kind: 'copy', batch: b, slot: s.slot, layer: j };
    }
    return null;
  }

  /** The compute has nothing left before layer j of b but that layer's copy. */
  private computeWaitsFor(b: number, j: number): boolean {
    const s = this.batches[b]!;
    if (s.layersDone !== j || s.layersIssued !== j) return false;
    return j > 0 || (s.retrieved && this.previousDone(b) === this.layers);
  }

  private nextCompute(): PipelineAction | null {
    const b = this.oldestUnfinished;
    if (b >= this.batches.length) return null;
    const s = this.batches[b]!;
    const j = s.layersIssued;
    if (j !== s.layersDone) return null; // a layer of this batch is running (the compute is serial)
    if (j === 0 && !s.retrieved) return null;
    if (s.copiesDone <= j) return null;
    return { kind: 'compute', batch: b, layer: j };
  }
}

export function resourceOf(action: PipelineAction): PipelineResource {
  return action.kind === 'copy' ? 'copy' : action.kind === 'compute' ? 'compute' : 'cpu';
}

function sameAction(a: PipelineAction, b: PipelineAction): boolean {
  return a.kind === b.kind && a.batch === b.batch && ('layer' in a ? a.layer : -1) === ('layer' in b ? b.layer : -1);
}

function describe(a: PipelineAction): string {
  return `${a.kind} of batch ${a.batch}${'layer' in a ? `, layer ${a.layer}` : ''}`;
}
