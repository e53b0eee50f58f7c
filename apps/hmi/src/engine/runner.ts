/**
 * The scheduler's runner (hmi.md §1.8, A12): it executes batches the dispatcher hands it, stage by stage, in the
 * order `LayerwisePipeline` (@tessera/adapter-swap) allows — the policy lives there; this file owns the buffers and
 * does the work:
 *
 *   cpu      retrieve(b): PLOT lookup + aggregation of the batch (one native call, A2 + A3) → h0
 *            gather(b):   the batch's tenant adapters, per upper layer, into host staging slot b mod K
 *   copy     copy(b, j):  staging slot → layer j's device buffer (an `AdapterStackBuffer`, pet-ops, A10)
 *   compute  layer j of b: the engine's `layersAsync(N, L)` on h0; its `beforeLayer(N + j)` waits until the
 *            pipeline hands out layer j (i.e. copy(b, j) landed), and the attention-output hook applies the whole
 *            mixed-tenant batch's adapters of layer j in one native call
 *
 * so PLOT retrieval for batch i+1 and adapter copies for layer j+1 are issued while batch i computes layer j, under
 * the rule that makes one device buffer per layer enough (§7.8: b's copy into layer j's buffer waits for b−1 to
 * finish layer j). `runSequential` is the same work in straight-line order, one batch at a time (the test's oracle:
 * the two give the same logits bit for bit).
 *
 * On the CPU backend every stage runs on this thread, so stages interleave rather than overlap in time; each stage
 * is its own event-loop turn, which also keeps the HTTP server responsive while batches run. The stage clocks
 * (`times`) are what /metrics reports.
 */
import { DeviceSlotCache, LayerwisePipeline, type PipelineAction, type PipelineMode } from '@tessera/adapter-swap';
import type { EncoderBatchContext, EncoderModel, ModelDelta } from '@tessera/engine';
import type { Tensor } from '@tessera/native';
import { AdapterStackBuffer, type AdapterStackSegment } from '@tessera/pet-ops';

import type { TenantState } from '../manager/tenant-store.js';
import type { PlotService, PlotSnapshot } from './plot.js';

export interface RunRequest {
  /** Token ids ([CLS] … [SEP]). */
  ids: readonly number[];
  tenant: TenantState;
}

export interface RunBatch {
  /** The PLOT version every request reads (held by the caller until the batch resolves). */
  snapshot: PlotSnapshot;
  requests: readonly RunRequest[];
}

/** Cumulative stage clocks (ms) and counts. */
export interface StageTimes {
  retrieveMs: number;
  gatherMs: number;
  copyMs: number;
  computeMs: number;
  headMs: number;
  batches: number;
  requests: number;
  /** Adapter-layer copies made (|batch| × L_up per batch without a device cache, the paper's default). */
  adapterCopies: number;
  /** Requests whose tenant was resident in the device cache (their copies skipped). */
  deviceHits: number;
  /** Adapter layers written into the device cache after a batch (its misses, for the next batches). */
  deviceCacheWrites: number;
}

export interface RunnerOptions {
  model: EncoderModel;
  plot: PlotService;
  bottleneck: number;
  /** Most requests in one batch (the device buffers' slots). */
  maxBatch: number;
  /** In-flight batches K (host staging slots). */
  slots: number;
  /** LayerwisePipeline's mode (default 'fine'). */
  mode?: PipelineMode;
  /** Called as each batch's retrieve stage starts: the engine prefetches the next batch's tenants (disk → host). */
  onRetrieve?: (() => void) | undefined;
  /**
   * Tenants kept on the device between batches (the optional device LRU; default 0, the paper's: every batch copies
   * its adapters). A pipelined request whose tenant is resident skips its copies and reads the cached slot.
   */
  deviceCache?: number | undefined;
}

interface Work {
  batch: RunBatch;
  slot: number;
  seqLen: number;
  segments: AdapterStackSegment[];
  /** Per request: the device-cache slot it reads (pinned until the batch is done), or null (copied this batch). */
  hits: (number | null)[];
  h0: Tensor | null;
  ctx: EncoderBatchContext | null;
  /** The compute is waiting in beforeLayer for layer `layer` to be handed out. */
  waiter: { layer: number; resolve: () => void } | null;
  /** Layers the pipeline handed out to the compute. */
  issued: number;
  failed: unknown;
  layerStart: number;
  resolve: (logits: Float32Array[]) => void;
  reject: (err: unknown) => void;
}

/** Tenant head on the pooled row, in double, rounded once to f32. */
export function headLogits(pooled: Float32Array, offset: number, tenant: TenantState, hidden: number): Float32Array {
  const { weight, bias } = tenant.head;
  const n = bias.length;
  const out = new Float32Array(n);
  for (let c = 0; c < n; c++) {
    let s = bias[c]!;
    for (let k = 0; k < hidden; k++) s += weight[c * hidden + k]! * pooled[offset + k]!;
    out[c] = s;
  }
  return out;
}

export class HmiRunner {
  readonly model: EncoderModel;
  readonly plot: PlotService;
  readonly lowerLayers: number;
  readonly upperLayers: number;
  readonly maxBatch: number;
  readonly slots: number;
  readonly mode: PipelineMode;
  private readonly onRetrieve: (() => void) | undefined;
  readonly times: StageTimes = { retrieveMs: 0, gatherMs: 0, copyMs: 0, computeMs: 0, headMs: 0, batches: 0, requests: 0, adapterCopies: 0, deviceHits: 0, deviceCacheWrites: 0 };
  /** The device LRU (pure policy): which of the device buffers' cache slots holds which tenant. */
  readonly deviceCache: DeviceSlotCache;
  /** Stage trace of the pipelined path (kind, batch, layer), when `trace` is on: the tests read the order. */
  readonly trace: { kind: PipelineAction['kind'] | 'computed'; batch: number; layer: number }[] = [];
  traceOn = false;
  private readonly numel: number;
  /** D_j: one device buffer per upper layer. */
  private readonly device: AdapterStackBuffer[];
  /** P_s,j: host staging, one per slot and upper layer. */
  private readonly staging: Float32Array[][];
  private readonly pipeline: LayerwisePipeline;
  private readonly work = new Map<number, Work>();
  private pumping = false;
  private closed = false;

  constructor(o: RunnerOptions) {
    const c = o.model.config;
    this.model = o.model;
    this.plot = o.plot;
    this.lowerLayers = o.plot.lowerLayers;
    this.upperLayers = c.numLayers - this.lowerLayers;
    this.maxBatch = o.maxBatch;
    this.slots = o.slots;
    this.mode = o.mode ?? 'fine';
    this.onRetrieve = o.onRetrieve;
    this.deviceCache = new DeviceSlotCache(o.deviceCache ?? 0);
    // Slots [0, maxBatch) take each batch's copies; [maxBatch, maxBatch + deviceCache) hold the cached tenants.
    const deviceSlots = o.maxBatch + this.deviceCache.capacity;
    this.device = Array.from({ length: this.upperLayers }, () => new AdapterStackBuffer({ hidden: c.hiddenSize, bottleneck: o.bottleneck, slots: deviceSlots }, o.model.backend));
    this.numel = this.device[0]!.numel;
    this.staging = Array.from({ length: o.slots }, () => Array.from({ length: this.upperLayers }, () => new Float32Array(o.maxBatch * this.numel)));
    this.pipeline = new LayerwisePipeline({ layers: this.upperLayers, slots: o.slots, mode: this.mode });
  }

  /** Batches submitted and not yet through their last layer. */
  get inFlight(): number {
    return this.pipeline.inFlight;
  }

  /** Runs a batch through the pipeline; resolves with each request's logits (its tenant's labels). */
  run(batch: RunBatch): Promise<Float32Array[]> {
    this.check(batch);
    return new Promise((resolve, reject) => {
      const b = this.pipeline.submit();
      this.work.set(b, {
        batch, slot: b % this.slots, seqLen: Math.max(...batch.requests.map((r) => r.ids.length)), segments: [], hits: [], h0: null, ctx: null,
        waiter: null, issued: 0, failed: undefined, layerStart: 0, resolve, reject,
      });
      this.pump();
    });
  }

  /** The same stages in straight-line order, one batch: the oracle of the pipelined path. */
  runSequential(batch: RunBatch): Float32Array[] {
    this.check(batch);
    const seqLen = Math.max(...batch.requests.map((r) => r.ids.length));
    const h0 = this.retrieve(batch, seqLen);
    try {
      this.gather(batch, 0);
      for (let j = 0; j < this.upperLayers; j++) this.copy(batch, 0, j);
      const segments = this.segmentsOf(batch, seqLen);
      const ctx = this.prepare(batch, seqLen, [this.adapterDelta(segments)]);
      try {
        const t0 = performance.now();
        this.model.layers(this.lowerLayers, this.model.config.numLayers, h0, ctx);
        this.times.computeMs += performance.now() - t0;
        return this.head(batch, h0, ctx);
      } finally {
        ctx.dispose();
      }
    } finally {
      h0.dispose();
      this.times.batches++;
      this.times.requests += batch.requests.length;
    }
  }

  close(): void {
    this.closed = true;
    for (const d of this.device) d.dispose();
  }

  private check(batch: RunBatch): void {
    if (this.closed) throw new Error('the runner is closed');
    if (batch.requests.length === 0 || batch.requests.length > this.maxBatch) throw new RangeError(`a batch of ${batch.requests.length} requests; the runner takes 1 … ${this.maxBatch}`);
  }

  // ------------------------------------------------------------------ the stages

  private retrieve(batch: RunBatch, seqLen: number): Tensor {
    this.onRetrieve?.();
    const t0 = performance.now();
    const out = this.plot.lookup(batch.snapshot, batch.requests.map((r) => r.ids), seqLen);
    const h = out.reshape([batch.requests.length * seqLen, this.model.config.hiddenSize]);
    if (h !== out) out.dispose();
    this.times.retrieveMs += performance.now() - t0;
    return h;
  }

  /** Host staging of the requests not served from the device cache (hits: null for every request = no cache). */
  private gather(batch: RunBatch, slot: number, hits: readonly (number | null)[] = []): void {
    const t0 = performance.now();
    const staging = this.staging[slot]!;
    batch.requests.forEach((r, i) => {
      if ((hits[i] ?? null) !== null) return;
      for (let j = 0; j < this.upperLayers; j++) staging[j]!.set(r.tenant.adapters[j]!, i * this.numel);
    });
    this.times.gatherMs += performance.now() - t0;
  }

  private copy(batch: RunBatch, slot: number, layer: number, hits: readonly (number | null)[] = []): void {
    const t0 = performance.now();
    const src = this.staging[slot]![layer]!;
    const dst = this.device[layer]!;
    for (let i = 0; i < batch.requests.length; i++) {
      if ((hits[i] ?? null) !== null) continue;
      dst.write(i, src.subarray(i * this.numel, (i + 1) * this.numel));
      this.times.adapterCopies++;
    }
    this.times.copyMs += performance.now() - t0;
  }

  /** Each request's rows and the device slot it reads: its cached slot on a hit, else its own copy slot. */
  private segmentsOf(batch: RunBatch, seqLen: number, hits: readonly (number | null)[] = []): AdapterStackSegment[] {
    return batch.requests.map((r, i) => {
      const hit = hits[i] ?? null;
      return { slot: hit === null ? i : this.maxBatch + hit, rows: { start: i * seqLen, seqs: 1, stride: 0, tokens: r.ids.length } };
    });
  }

  /** The batch's tenants resident in the device cache, pinned until the batch is done (no cache: all null). */
  private lookupDevice(batch: RunBatch): (number | null)[] {
    if (this.deviceCache.capacity === 0) return batch.requests.map(() => null);
    const hits = batch.requests.map((r) => this.deviceCache.lookup(r.tenant.id, r.tenant.adapters));
    for (const h of hits) if (h !== null) this.times.deviceHits++;
    return hits;
  }

  /**
   * After a batch: unpin its hits, and write its misses' adapters (still in its host staging slot, which the next
   * batch on that slot may only overwrite once this one has finished) into the device cache for the batches after.
   */
  private settleDevice(w: Work): void {
    const hits = w.hits;
    w.hits = [];
    if (this.deviceCache.capacity === 0 || hits.length === 0) return;
    for (const h of hits) if (h !== null) this.deviceCache.unpin(h);
    if (w.failed !== undefined) return;
    const written = new Set<string>();
    w.batch.requests.forEach((r, i) => {
      if (hits[i] !== null || written.has(r.tenant.id)) return;
      const c = this.deviceCache.insert(r.tenant.id, r.tenant.adapters);
      if (c === null) return;
      written.add(r.tenant.id);
      for (let j = 0; j < this.upperLayers; j++) {
        this.device[j]!.write(this.maxBatch + c, this.staging[w.slot]![j]!.subarray(i * this.numel, (i + 1) * this.numel));
        this.times.deviceCacheWrites++;
      }
    });
  }

  /** Layer N + j's attention output gets the batch's adapters of layer j (device buffer D_j), one native call. */
  private adapterDelta(segments: AdapterStackSegment[]): ModelDelta {
    const N = this.lowerLayers;
    return {
      linear: (call) => {
        if (call.site === 'attn_out' && call.layer >= N) this.device[call.layer - N]!.apply(call.outputs[0]!.y, segments, { act: 'gelu' });
      },
    };
  }

  private prepare(batch: RunBatch, seqLen: number, deltas: ModelDelta[]): EncoderBatchContext {
    return this.model.prepare(batch.requests.map((r) => ({ ids: r.ids })), { padTo: seqLen, deltas });
  }

  private head(batch: RunBatch, h: Tensor, ctx: EncoderBatchContext): Float32Array[] {
    const t0 = performance.now();
    const { pooled } = this.model.head(h, ctx, { pooled: true, logits: false });
    try {
      const host = pooled!.toArray() as Float32Array;
      const H = this.model.config.hiddenSize;
      return batch.requests.map((r, i) => headLogits(host, i * H, r.tenant, H));
    } finally {
      pooled!.dispose();
      this.times.headMs += performance.now() - t0;
    }
  }

  // ------------------------------------------------------------------ the pipelined path

  /** Hands every idle resource its next action. Re-entrant calls fold into the running loop. */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (;;) {
        let progressed = false;
        for (const resource of ['compute', 'copy', 'cpu'] as const) {
          const action = this.pipeline.next(resource);
          if (action) {
            progressed = true;
            this.dispatch(action);
          }
        }
        if (!progressed) break;
      }
    } finally {
      this.pumping = false;
    }
  }

  private dispatch(action: PipelineAction): void {
    const w = this.work.get(action.batch)!;
    if (this.traceOn) this.trace.push({ kind: action.kind, batch: action.batch, layer: 'layer' in action ? action.layer : -1 });
    if (action.kind === 'compute') {
      w.issued = action.layer + 1;
      if (w.failed !== undefined) {
        setImmediate(() => this.finishLayer(action.batch, w, action.layer));
      } else if (action.layer === 0) {
        void this.compute(action.batch, w);
      } else if (w.waiter && w.waiter.layer === action.layer) {
        const { resolve } = w.waiter;
        w.waiter = null;
        w.layerStart = performance.now();
        resolve();
      }
      return;
    }
    // CPU and copy stages: one event-loop turn each.
    setImmediate(() => {
      if (w.failed === undefined) {
        try {
          if (action.kind === 'retrieve') {
            w.h0 = this.retrieve(w.batch, w.seqLen);
            w.segments = this.segmentsOf(w.batch, w.seqLen);
          } else if (action.kind === 'gather') {
            w.hits = this.lookupDevice(w.batch);
            w.segments = this.segmentsOf(w.batch, w.seqLen, w.hits);
            this.gather(w.batch, w.slot, w.hits);
          } else this.copy(w.batch, w.slot, action.layer, w.hits);
        } catch (err) {
          w.failed = err;
        }
      }
      this.pipeline.complete(action);
      this.pump();
    });
  }

  /** Layer 0 was handed out: run the upper layers, each boundary waiting for its layer to be handed out. */
  private async compute(b: number, w: Work): Promise<void> {
    const N = this.lowerLayers;
    const boundary: ModelDelta = {
      beforeLayer: (call) => {
        const j = call.layer - N;
        if (j === 0) {
          w.layerStart = performance.now();
          return;
        }
        // Layer j − 1 is done: report it, which may let b+1 copy into D_{j−1}, then wait for layer j.
        this.times.computeMs += performance.now() - w.layerStart;
        if (this.traceOn) this.trace.push({ kind: 'computed', batch: b, layer: j - 1 });
        this.pipeline.complete({ kind: 'compute', batch: b, layer: j - 1 });
        // The waiter first: the pump may hand out layer j at once (its copy already landed) and resolve it.
        const wait = new Promise<void>((resolve) => {
          w.waiter = { layer: j, resolve };
        });
        this.pump();
        return wait;
      },
    };
    try {
      w.ctx = this.prepare(w.batch, w.seqLen, [this.adapterDelta(w.segments), boundary]);
      await this.model.layersAsync(N, this.model.config.numLayers, w.h0!, w.ctx);
      this.times.computeMs += performance.now() - w.layerStart;
      const logits = this.head(w.batch, w.h0!, w.ctx);
      this.release(w);
      if (this.traceOn) this.trace.push({ kind: 'computed', batch: b, layer: this.upperLayers - 1 });
      this.pipeline.complete({ kind: 'compute', batch: b, layer: this.upperLayers - 1 });
      this.work.delete(b);
      this.times.batches++;
      this.times.requests += w.batch.requests.length;
      w.resolve(logits);
      this.pump();
    } catch (err) {
      // The compute stopped inside layer w.issued − 1: report it, and let the pipeline hand out the rest as no-ops.
      w.failed = err;
      w.waiter = null;
      this.finishLayer(b, w, w.issued - 1);
    }
  }

  /** A failed batch's layer, reported done; the last one rejects the batch. */
  private finishLayer(b: number, w: Work, layer: number): void {
    this.pipeline.complete({ kind: 'compute', batch: b, layer });
    if (layer === this.upperLayers - 1) {
      this.release(w);
      this.work.delete(b);
      w.reject(w.failed);
    }
    this.pump();
  }

  private release(w: Work): void {
    this.settleDevice(w);
    w.ctx?.dispose();
    w.ctx = null;
    w.h0?.dispose();
    w.h0 = null;
  }
}
