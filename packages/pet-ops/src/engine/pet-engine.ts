/**
 * The PET Inference Engine (PIE; PetS §3.4.3, pets.md §3.7–3.9): runs one macro-batch of queries for many tasks of
 * many PET types through the shared encoder in one forward.
 *
 * Data path of `run`:
 *   1. validate every query and resolve every task (typed errors, before any native work);
 *   2. lay the rows out grouped by mini-batch: 'padded' (PetS's dense batches: every query occupies L = the macro
 *      max length rows) or 'packed' (each query its own tokens); mini-batch k's PET ops touch only
 *      {start_k, seqs n_k, stride L, tokens l_k} (the artifact's minibatch_lens);
 *   3. Algorithm 2 once per macro-batch: each mini-batch gets a stream, reused at every site of every layer;
 *   4. one shared forward; at each hook site PetsDelta collects every mini-batch's ops (SpMM, bias, adapter, task
 *      LayerNorm) and runs them in ONE petSiteRun call (one barrier per site), LoRA segments in one SGMV pair, and
 *      the attention hook hands each prefix-tuned sequence its task's prefix;
 *   5. per mini-batch, its task head on its pooled [CLS] rows; logits and the argmax label per query.
 */
import { mulberry32 } from '@tessera/core';
import { type AttentionPrefix, type AttentionSiteCall, type EncoderConfig, type EncoderLinearSite, type EncoderNormSite, type EncoderSequence, type LinearSiteCall, type ModelDelta, type NormSiteCall, SegmentLayout, encoderLinearModules } from '@tessera/engine';
import { InvalidArgumentError, type PetOp, type PetRows, Tensor, attentionPrefill, deviceInfo, linear, petSiteRun } from '@tessera/native';
import { SgmvLoraDelta } from '@tessera/sgmv-kernel';
import { TaskStateError } from '../errors.js';
import type { TaskManager } from '../tasks/task-manager.js';
import type { LoadedPet, PetType, SharedModel } from '../types.js';
import type { OpCost } from '../operators/cost.js';
import { type SchedulingMode, SCHEDULING_MODES, type StreamThresholds, assignStreams, DEFAULT_STREAM_THRESHOLDS, dynamicStreamCount, medianOf } from './operator-scheduling.js';

export interface PetQuery {
  readonly taskId: string;
  /** Token ids, including [CLS]/[SEP]. */
  readonly ids: ArrayLike<number>;
  /** Token types (segment A = 0, B = 1); default all 0. */
  readonly tokenTypes?: ArrayLike<number>;
}

/** One PET segment: queries of one task, run by one PET operator invocation per site. */
export interface PetMiniBatchInput {
  readonly taskId: string;
  readonly queries: readonly PetQuery[];
}

/** One forward. A task may appear in two mini-batches (coordinated batching keeps each mini-batch a segment). */
export interface PetMacroBatchInput {
  readonly miniBatches: readonly PetMiniBatchInput[];
}

export interface PetQueryResult {
  readonly taskId: string;
  /** The task head's raw scores (no softmax), one per label. */
  readonly logits: Float32Array;
  /** The label of the largest logit (the first, on ties). */
  readonly label: string;
  readonly labelIndex: number;
}

/** Wall-clock split of one run (pets.md §8.5, Fig. 9): PET work vs the shared model. Milliseconds. */
export interface PetRunTiming {
  readonly totalMs: number;
  /** PET operators (petSiteRun calls, SGMV, prefix lookups) and task heads. */
  readonly petMs: number;
  /** totalMs − petMs: embeddings, shared GEMMs, attention, shared epilogues, the pooler. */
  readonly sharedMs: number;
  /** Mini-batches (PET segments) in the macro-batch. */
  readonly segments: number;
  /** Real tokens of all queries. */
  readonly rows: number;
  /** Rows the shared model ran: queries × macro max length when padded, `rows` when packed. */
  readonly paddedRows: number;
  /** Streams the PET ops ran on (1: sequential). */
  readonly streams: number;
}

export interface PetSchedulingOptions {
  readonly mode: SchedulingMode;
  /** A fixed stream count, or 'dynamic' (pets.md §6.3; default). Capped at the mini-batches that run PET ops. */
  readonly streams?: number | 'dynamic';
  /** Thresholds of the dynamic count; default DEFAULT_STREAM_THRESHOLDS with `max` = the CPU pool's threads. */
  readonly thresholds?: Partial<StreamThresholds>;
}

export interface PetEngineOptions {
  /** 'padded' (default): PetS's dense batches, cost α(N, L); 'packed': each query only its own tokens. */
  readonly layout?: 'padded' | 'packed';
  /** Default { mode: 'intensity', streams: 'dynamic' }. */
  readonly scheduling?: PetSchedulingOptions;
  /** Run the PET kernels' scalar references (CPU; tests). */
  readonly reference?: boolean;
  /** Milliseconds clock for the timing; default performance.now. */
  readonly now?: () => number;
}


/** One mini-batch as planned: its task, its queries' rows and the rows its PET ops touch. */
interface PlannedMiniBatch {
  readonly index: number;
  readonly taskId: string;
  readonly type: PetType;
  readonly loaded: LoadedPet;
  readonly queries: readonly PetQuery[];
  /** Index of its first query in the macro-batch's row order. */
  readonly firstQuery: number;
  readonly rows: PetRows;
  /** Max query length of the mini-batch (l_k). */
  readonly maxLength: number;
  /** Tokens its PET ops touch: n_k · l_k. */
  readonly tokens: number;
  /** Its stream (Algorithm 2); 0 for mini-batches without site ops. */
  stream: number;
}

interface MacroPlan {
  readonly miniBatches: PlannedMiniBatch[];
  readonly sequences: EncoderSequence[];
  readonly padTo: number | undefined;
  readonly maxLength: number;
  readonly realRows: number;
  readonly totalRows: number;
  readonly numStreams: number;
}

const defaultNow = (): number => performance.now();

export class PetEngine {
  readonly sharedModelTag: string;
  readonly tasks: TaskManager;
  private readonly options: PetEngineOptions;
  /** Random scratch for runPetOnly, grown to the largest rows asked (β profiling). */
  private scratch: { rows: number; tensors: Map<string, Tensor> } | null = null;

  constructor(tasks: TaskManager, sharedModelTag: string, options: PetEngineOptions = {}) {
    if (typeof sharedModelTag !== 'string' || sharedModelTag.length === 0) throw new InvalidArgumentError('PetEngine: sharedModelTag must be a non-empty string');
    checkOptions(options, 'PetEngine');
    this.tasks = tasks;
    this.sharedModelTag = sharedModelTag;
    this.options = options;
  }

  /** The shared model (loaded; else the task manager's typed error). */
  get shared(): SharedModel {
    return this.tasks.sharedModel(this.sharedModelTag);
  }

  /** The PET types of the loaded tasks of this engine's shared model, in registration order. */
  loadedTypes(): PetType[] {
    return [...new Set(this.loadedTaskInfos().map((t) => t.type))];
  }

  private loadedTaskInfos() {
    return this.tasks.tasks().filter((t) => t.state === 'loaded' && t.sharedModelTag === this.sharedModelTag);
  }

  /** A task's device parameters: UnknownTaskError / TaskStateError from the manager, or one of another model. */
  private loadedTask(taskId: string): { type: PetType; loaded: LoadedPet } {
    const { info, pet } = this.tasks.loadedTask(taskId);
    if (info.sharedModelTag !== this.sharedModelTag) {
      throw new TaskStateError(`task ${taskId} derives from shared model ${JSON.stringify(info.sharedModelTag)}, not this engine's ${JSON.stringify(this.sharedModelTag)}`);
    }
    return { type: info.type, loaded: pet };
  }

  /**
   * Runs one macro-batch. Results are [miniBatch][query] in input order. Every input error (unknown or unloaded
   * task, a task of another shared model, an empty query, one longer than the model's positions, a token outside
   * the vocabulary) throws before any native work, and a failed run changes no state.
   */
  run(batch: PetMacroBatchInput, options: Partial<PetEngineOptions> = {}): { results: PetQueryResult[][]; timing: PetRunTiming } {
    checkOptions(options, 'PetEngine.run');
    const opts: PetEngineOptions = { ...this.options, ...options };
    const now = opts.now ?? defaultNow;
    const shared = this.shared;
    const plan = this.plan(batch, shared, opts);
    if (plan.miniBatches.length === 0) {
      return { results: [], timing: { totalMs: 0, petMs: 0, sharedMs: 0, segments: 0, rows: 0, paddedRows: 0, streams: 1 } };
    }
    const start = now();
    const timer = { petMs: 0 };
    const layout = SegmentLayout.fromCounts(plan.miniBatches.map((mb) => ({ key: String(mb.index), count: rowsOf(mb, plan) })));
    const delta = new PetsDelta(plan, layout, opts.reference ?? false, now, timer);
    let results: PetQueryResult[][];
    try {
      const out = shared.model.forward(plan.sequences, {
        deltas: [delta],
        layout,
        ...(plan.padTo === undefined ? {} : { padTo: plan.padTo }),
        outputs: { hidden: false, pooled: true, logits: false },
      });
      const pooled = out.pooled!;
      try {
        const t0 = now();
        results = plan.miniBatches.map((mb) => applyHead(mb, pooled));
        timer.petMs += now() - t0;
      } finally {
        pooled.dispose();
      }
    } finally {
      delta.dispose();
      layout.dispose();
    }
    const totalMs = now() - start;
    return {
      results,
      timing: { totalMs, petMs: timer.petMs, sharedMs: totalMs - timer.petMs, segments: plan.miniBatches.length, rows: plan.realRows, paddedRows: plan.totalRows, streams: plan.numStreams },
    };
  }

  /**
   * One macro-batch of arbitrary queries: one mini-batch per task (in order of first appearance); results in the
   * input order.
   */
  classify(queries: readonly PetQuery[], options: Partial<PetEngineOptions> = {}): PetQueryResult[] {
    if (!Array.isArray(queries)) throw new InvalidArgumentError('PetEngine.classify: queries must be an array');
    const groups = new Map<string, number[]>();
    queries.forEach((q, i) => {
      if (q === null || typeof q !== 'object') throw new InvalidArgumentError(`PetEngine.classify: query ${i} is not an object`);
      let g = groups.get(q.taskId);
      if (!g) groups.set(q.taskId, (g = []));
      g.push(i);
    });
    const order = [...groups.values()];
    const { results } = this.run({ miniBatches: [...groups].map(([taskId, idx]) => ({ taskId, queries: idx.map((i) => queries[i]!) })) }, options);
    const out = new Array<PetQueryResult>(queries.length);
    order.forEach((idx, k) => idx.forEach((i, j) => (out[i] = results[k]![j]!)));
    return out;
  }

  /** α profiling: the shared model alone (no PET op, no head) on N random queries of length L. */
  runSharedOnly(N: number, L: number): void {
    const shared = this.shared;
    const c = shared.config;
    checkCount(N, 'PetEngine.runSharedOnly: N');
    checkCount(L, 'PetEngine.runSharedOnly: L');
    if (L > c.maxPositions) throw new InvalidArgumentError(`PetEngine.runSharedOnly: L = ${L} exceeds the model's ${c.maxPositions} positions`);
    const rng = mulberry32(N * 131 + L);
    const sequences = Array.from({ length: N }, () => ({ ids: Int32Array.from({ length: L }, () => Math.floor(rng() * c.vocabSize)) }));
    const out = shared.model.forward(sequences, { padTo: L, outputs: { hidden: false, pooled: true, logits: false } });
    out.pooled?.dispose();
  }

  /**
   * β profiling: every PET op of one mini-batch of n queries of length l (all sites of all layers, the attention
   * prefix, the head) of a loaded task of `type`, on random scratch activations. STANDARD runs its head only. For
   * prefix-tuning the prefixed attention of each sequence is timed whole (the kernel cannot separate the p extra
   * keys), so its β includes the plain attention the shared model also does.
   */
  runPetOnly(type: PetType, n: number, l: number, options: Partial<PetEngineOptions> & { segments?: number } = {}): void {
    const { segments = 1, ...engineOptions } = options;
    checkOptions(engineOptions, 'PetEngine.runPetOnly');
    const opts: PetEngineOptions = { ...this.options, ...engineOptions };
    checkCount(n, 'PetEngine.runPetOnly: n');
    checkCount(l, 'PetEngine.runPetOnly: l');
    checkCount(segments, 'PetEngine.runPetOnly: segments');
    const shared = this.shared;
    const info = this.loadedTaskInfos().find((t) => t.type === type);
    if (!info) throw new InvalidArgumentError(`PetEngine.runPetOnly: no loaded task of type ${JSON.stringify(type)} on shared model ${JSON.stringify(this.sharedModelTag)}`);
    const loaded = this.loadedTask(info.id).loaded;
    const c = shared.config;
    const T = n * l * segments;
    let prefixRows = 0;
    for (let layer = 0; layer < c.numLayers; layer++) prefixRows = Math.max(prefixRows, loaded.attentionPrefix(layer)?.key.shape[0] ?? 0);
    const scratch = this.scratchFor(c, Math.max(T, prefixRows + l), shared);
    const view = (name: string, rows: number) => scratch.get(name)!.rows(0, rows);
    const views: Tensor[] = [];
    const keep = (t: Tensor) => (views.push(t), t);
    // `segments` identical mini-batches side by side, every site's ops in one call as run() does (one stream each,
    // round-robin over the engine's stream count), so a segment's share of the call's fixed cost is what run() pays.
    const blocks: PetRows[] = Array.from({ length: segments }, (_, k) => ({ start: k * n * l, seqs: n, stride: l, tokens: l }));
    const numStreams = Math.max(1, Math.min(segments, this.defaultMaxStreams()));
    const reference = opts.reference ?? false;
    const runOps = (build: (rows: PetRows) => PetOp[]) => {
      const ops: PetOp[] = [];
      const streams: number[] = [];
      blocks.forEach((rows, k) => {
        for (const op of build(rows)) {
          ops.push(op);
          streams.push(k % numStreams);
        }
      });
      if (ops.length > 0) petSiteRun(ops, { reference, streams, numStreams });
    };
    const lora = loaded.lora ? new SgmvLoraDelta((key) => (key === 'task' ? loaded.lora! : undefined), { reference }) : null;
    const loraLayout = lora ? SegmentLayout.uniform(T, 'task') : null;
    try {
      const x = keep(view('x', T));
      const xi = keep(view('xi', T));
      const outs = { query: keep(view('q', T)), key: keep(view('k', T)), value: keep(view('v', T)), attn_out: keep(view('o', T)), ffn_in: keep(view('i', T)), ffn_out: keep(view('f', T)) };
      const normX = keep(view('nx', T));
      for (let layer = 0; layer < c.numLayers; layer++) {
        const lin = encoderLinearModules(c, layer);
        const sites: { site: EncoderLinearSite; x: Tensor; outputs: { slice: string; module: string; y: Tensor }[] }[] = [
          { site: 'qkv', x, outputs: (['query', 'key', 'value'] as const).map((s) => ({ slice: s, module: lin[s], y: outs[s] })) },
          { site: 'attn_out', x, outputs: [{ slice: 'attn_out', module: lin.attn_out, y: outs.attn_out }] },
          { site: 'ffn_in', x, outputs: [{ slice: 'ffn_in', module: lin.ffn_in, y: outs.ffn_in }] },
          { site: 'ffn_out', x: xi, outputs: [{ slice: 'ffn_out', module: lin.ffn_out, y: outs.ffn_out }] },
        ];
        for (const s of sites) {
          if (lora) lora.linear({ family: 'encoder', site: s.site, layer, x: s.x, outputs: s.outputs, layout: loraLayout! });
          runOps((rows) => loaded.linearOps({ layer, site: s.site, x: s.x, outputs: s.outputs, rows }));
        }
        const prefix = loaded.attentionPrefix(layer);
        if (prefix) for (let q = 0; q < n * segments; q++) this.prefixedAttentionScratch(prefix, l, c);
        for (const [site, y] of [['attn_ln', outs.attn_out], ['ffn_ln', outs.ffn_out]] as const) {
          runOps((rows) => loaded.normOps({ layer, site, x: normX, y, rows }));
        }
      }
      for (let k = 0; k < segments; k++) {
        const pooled = keep(scratch.get('pooled')!.rows(k * n, n));
        linear(pooled, loaded.head.weight, loaded.head.bias).dispose();
      }
    } finally {
      for (const v of views) v.dispose();
      lora?.dispose();
      loraLayout?.dispose();
    }
  }

  /** Frees the profiling scratch (the engine stays usable). */
  dispose(): void {
    for (const t of this.scratch?.tensors.values() ?? []) t.dispose();
    this.scratch = null;
  }

  private prefixedAttentionScratch(prefix: AttentionPrefix, l: number, c: EncoderConfig): void {
    const p = prefix.key.shape[0]!;
    const m = p + l;
    const nh = c.numHeads;
    const shape = [1, m, nh, c.hiddenSize / nh];
    const scratch = this.scratch!.tensors;
    const views = ['q', 'k', 'v', 'o'].map((name) => {
      const rows = scratch.get(name)!.rows(0, m);
      const v = rows.reshape(shape);
      rows.dispose();
      return v;
    });
    try {
      attentionPrefill(views[0]!, views[1]!, views[2]!, { out: views[3]! });
    } finally {
      for (const v of views) v.dispose();
    }
  }

  /** Scratch activations of at least `rows` rows, random so the kernels do real work. */
  private scratchFor(c: EncoderConfig, rows: number, shared: SharedModel): Map<string, Tensor> {
    const need = rows;
    if (this.scratch && this.scratch.rows >= need) return this.scratch.tensors;
    this.dispose();
    const H = c.hiddenSize;
    const I = c.intermediateSize;
    const widths: Record<string, number> = { x: H, xi: I, q: H, k: H, v: H, o: H, i: I, f: H, nx: H, pooled: H };
    const rng = mulberry32(need);
    const backend = shared.model.backend;
    const tensors = new Map<string, Tensor>();
    for (const [name, w] of Object.entries(widths)) {
      tensors.set(name, Tensor.from(Float32Array.from({ length: need * w }, () => rng() * 2 - 1), [need, w], { backend }));
    }
    this.scratch = { rows: need, tensors };
    return tensors;
  }

  /** Validates the batch, resolves tasks, lays rows out and assigns streams. No native work. */
  private plan(batch: PetMacroBatchInput, shared: SharedModel, opts: PetEngineOptions): MacroPlan {
    const what = 'PetEngine.run';
    if (batch === null || typeof batch !== 'object' || !Array.isArray(batch.miniBatches)) {
      throw new InvalidArgumentError(`${what}: batch.miniBatches must be an array`);
    }
    const c = shared.config;
    const layoutKind = opts.layout ?? 'padded';
    // Check every query and task first.
    const resolved = batch.miniBatches.map((mb, k) => {
      if (mb === null || typeof mb !== 'object' || typeof mb.taskId !== 'string') throw new InvalidArgumentError(`${what}: mini-batch ${k} has no taskId`);
      const queries: readonly PetQuery[] = mb.queries;
      if (!isArray(queries) || queries.length === 0) throw new InvalidArgumentError(`${what}: mini-batch ${k} (task ${JSON.stringify(mb.taskId)}) has no queries`);
      const task = this.loadedTask(mb.taskId);
      let maxLength = 0;
      queries.forEach((q, j) => {
        const where = `${what}: mini-batch ${k} query ${j}`;
        if (q === null || typeof q !== 'object') throw new InvalidArgumentError(`${where} is not an object`);
        if (q.taskId !== mb.taskId) throw new InvalidArgumentError(`${where} is for task ${JSON.stringify(q.taskId)}, not the mini-batch's ${JSON.stringify(mb.taskId)}`);
        checkQuery(q, c, where);
        maxLength = Math.max(maxLength, q.ids.length);
      });
      return { mb, k, task, maxLength };
    });
    const L = resolved.reduce((m, r) => Math.max(m, r.maxLength), 0);
    const padTo = layoutKind === 'padded' && resolved.length > 0 ? L : undefined;
    const miniBatches: PlannedMiniBatch[] = [];
    const sequences: EncoderSequence[] = [];
    let row = 0;
    let realRows = 0;
    for (const { mb, k, task, maxLength } of resolved) {
      const n = mb.queries.length;
      const firstQuery = sequences.length;
      let count = 0;
      for (const q of mb.queries) {
        sequences.push(q.tokenTypes === undefined ? { ids: q.ids } : { ids: q.ids, tokenTypes: q.tokenTypes });
        count += q.ids.length;
      }
      realRows += count;
      const rows: PetRows = padTo === undefined ? { start: row, seqs: 1, stride: count, tokens: count } : { start: row, seqs: n, stride: padTo, tokens: maxLength };
      miniBatches.push({ index: k, taskId: mb.taskId, type: task.type, loaded: task.loaded, queries: mb.queries, firstQuery, rows, maxLength, tokens: rows.seqs * rows.tokens, stream: 0 });
      row += padTo === undefined ? count : n * padTo;
    }
    const numStreams = this.assign(miniBatches, L, opts);
    return { miniBatches, sequences, padTo, maxLength: L, realRows, totalRows: row, numStreams };
  }

  /** Algorithm 2 over the mini-batches that run site ops; returns the stream count. */
  private assign(miniBatches: PlannedMiniBatch[], maxLength: number, opts: PetEngineOptions): number {
    const scheduling = opts.scheduling ?? { mode: 'intensity', streams: 'dynamic' };
    const participants = miniBatches.filter((mb) => this.runsSiteOps(mb));
    if (participants.length === 0 || scheduling.mode === 'sequential') return 1;
    let S: number;
    if (scheduling.streams === undefined || scheduling.streams === 'dynamic') {
      const max = scheduling.thresholds?.max ?? this.defaultMaxStreams();
      const few = Math.min(scheduling.thresholds?.few ?? DEFAULT_STREAM_THRESHOLDS.few, max);
      S = dynamicStreamCount({ rowsPerTask: medianOf(participants.map((mb) => mb.queries.length)), maxLength }, { ...scheduling.thresholds, few, max });
    } else {
      S = scheduling.streams;
    }
    S = Math.max(1, Math.min(S, participants.length));
    const costs: { cost: OpCost }[] = participants.map((mb) => ({ cost: mb.loaded.cost(mb.tokens) }));
    const streams = assignStreams(costs, S, scheduling.mode);
    participants.forEach((mb, i) => (mb.stream = streams[i]!));
    return S;
  }

  /**
   * Whether a mini-batch's task runs PET ops through petSiteRun: its type hooks a linear or norm site (input, output
   * or epilogue) and it is not LoRA (whose input-side term runs in SGMV). Only these take part in Algorithm 2; the
   * others (STANDARD, prefix-tuning, LoRA) would only occupy streams.
   */
  private runsSiteOps(mb: PlannedMiniBatch): boolean {
    if (mb.loaded.lora !== null) return false;
    const hooks = this.tasks.registry.get(mb.type).hooks;
    return hooks.input.length + hooks.output.length + hooks.epilogue.length > 0;
  }

  /** CPU: the native pool's threads (a stream is a worker group; more groups than workers only serialize). */
  private defaultMaxStreams(): number {
    const backend = this.shared.model.backend;
    if (backend.device !== 'cpu') return DEFAULT_STREAM_THRESHOLDS.max;
    return Math.max(1, deviceInfo(backend).threads ?? 1);
  }
}

/** The rows a mini-batch occupies in the forward (its segment of the layout). */
function rowsOf(mb: PlannedMiniBatch, plan: MacroPlan): number {
  return plan.padTo === undefined ? mb.rows.tokens : mb.queries.length * plan.padTo;
}

/**
 * The engine's ModelDelta for one macro-batch: at each linear and norm site, every mini-batch's PET ops in one
 * petSiteRun (streams from Algorithm 2); LoRA segments through one SgmvLoraDelta (an SGMV pair per slice for all
 * of them); prefixes per sequence. Time spent here counts as PET time.
 */
class PetsDelta implements ModelDelta {
  private readonly lora: SgmvLoraDelta | null;
  private readonly loraLayout: SegmentLayout | null;
  private readonly siteBatches: PlannedMiniBatch[];
  private readonly hasPrefix: boolean;

  constructor(
    private readonly plan: MacroPlan,
    layout: SegmentLayout,
    private readonly reference: boolean,
    private readonly now: () => number,
    private readonly timer: { petMs: number },
  ) {
    const loraBatches = plan.miniBatches.filter((mb) => mb.loaded.lora !== null);
    if (loraBatches.length > 0) {
      // SGMV skips segments keyed null: only LoRA mini-batches keep their key.
      this.loraLayout = SegmentLayout.fromCounts(layout.segments.map((s, i) => ({ key: plan.miniBatches[i]!.loaded.lora ? s.key : null, count: s.count })));
      this.lora = new SgmvLoraDelta((key) => plan.miniBatches[Number(key)]?.loaded.lora ?? undefined, { reference });
    } else {
      this.lora = null;
      this.loraLayout = null;
    }
    this.siteBatches = plan.miniBatches;
    this.hasPrefix = plan.miniBatches.some((mb) => mb.type === 'prefix');
  }

  linear(call: LinearSiteCall): void {
    const t0 = this.now();
    try {
      if (this.lora) this.lora.linear({ ...call, layout: this.loraLayout! });
      const ops: PetOp[] = [];
      const streams: number[] = [];
      const site = call.site as EncoderLinearSite;
      for (const mb of this.siteBatches) {
        const mine = mb.loaded.linearOps({ layer: call.layer, site, x: call.x, outputs: call.outputs, rows: mb.rows });
        for (const op of mine) {
          ops.push(op);
          streams.push(mb.stream);
        }
      }
      this.runSite(ops, streams);
    } finally {
      this.timer.petMs += this.now() - t0;
    }
  }

  norm(call: NormSiteCall): void {
    const t0 = this.now();
    try {
      const ops: PetOp[] = [];
      const streams: number[] = [];
      const site = call.site as EncoderNormSite;
      for (const mb of this.siteBatches) {
        const mine = mb.loaded.normOps({ layer: call.layer, site, x: call.x, y: call.y, rows: mb.rows });
        for (const op of mine) {
          ops.push(op);
          streams.push(mb.stream);
        }
      }
      this.runSite(ops, streams);
    } finally {
      this.timer.petMs += this.now() - t0;
    }
  }

  attentionPrefix(call: AttentionSiteCall): AttentionPrefix | null {
    if (!this.hasPrefix || call.key === null) return null;
    return this.plan.miniBatches[Number(call.key)]?.loaded.attentionPrefix(call.layer) ?? null;
  }

  private runSite(ops: PetOp[], streams: number[]): void {
    if (ops.length === 0) return;
    petSiteRun(ops, { streams, numStreams: this.plan.numStreams, reference: this.reference });
  }

  dispose(): void {
    this.lora?.dispose();
    this.loraLayout?.dispose();
  }
}

/** The task head on a mini-batch's pooled rows: logits and argmax label per query. */
function applyHead(mb: PlannedMiniBatch, pooled: Tensor): PetQueryResult[] {
  const n = mb.queries.length;
  const view = pooled.rows(mb.firstQuery, n);
  let scores: Float32Array;
  try {
    const logits = linear(view, mb.loaded.head.weight, mb.loaded.head.bias);
    try {
      scores = logits.toArray() as Float32Array;
    } finally {
      logits.dispose();
    }
  } finally {
    view.dispose();
  }
  const labels = mb.loaded.config.labels;
  const width = scores.length / n;
  return mb.queries.map((_, j) => {
    const logits = scores.slice(j * width, (j + 1) * width);
    let best = 0;
    for (let i = 1; i < width; i++) if (logits[i]! > logits[best]!) best = i;
    return { taskId: mb.taskId, logits, label: labels[best] ?? String(best), labelIndex: best };
  });
}

function checkQuery(q: PetQuery, c: EncoderConfig, where: string): void {
  const ids = q.ids;
  if (ids === null || typeof ids !== 'object' || typeof ids.length !== 'number') throw new InvalidArgumentError(`${where}: ids must be an array of token ids`);
  if (ids.length === 0) throw new InvalidArgumentError(`${where} is empty`);
  if (ids.length > c.maxPositions) throw new InvalidArgumentError(`${where} has ${ids.length} tokens, more than the model's ${c.maxPositions} positions`);
  for (let t = 0; t < ids.length; t++) {
    const id = ids[t]!;
    if (!Number.isInteger(id) || id < 0 || id >= c.vocabSize) throw new InvalidArgumentError(`${where} position ${t} has token id ${id}, outside the vocabulary [0, ${c.vocabSize})`);
  }
  if (q.tokenTypes !== undefined) {
    const types = q.tokenTypes;
    if (types === null || typeof types !== 'object' || types.length !== ids.length) {
      throw new InvalidArgumentError(`${where} has ${ids.length} ids but ${types?.length} token types`);
    }
    for (let t = 0; t < types.length; t++) {
      const v = types[t]!;
      if (!Number.isInteger(v) || v < 0 || v >= c.typeVocabSize) throw new InvalidArgumentError(`${where} position ${t} has token type ${v}, outside [0, ${c.typeVocabSize})`);
    }
  }
}

/** Array.isArray without narrowing a readonly array to any[]. */
function isArray(v: unknown): boolean {
  return Array.isArray(v);
}

function checkCount(v: number, what: string): void {
  if (!Number.isInteger(v) || v < 1) throw new InvalidArgumentError(`${what} must be a positive integer, got ${v}`);
}

function checkOptions(o: Partial<PetEngineOptions>, what: string): void {
  if (o === null || typeof o !== 'object') throw new InvalidArgumentError(`${what}: options must be an object`);
  if (o.layout !== undefined && o.layout !== 'padded' && o.layout !== 'packed') throw new InvalidArgumentError(`${what}: layout must be 'padded' or 'packed', got ${String(o.layout)}`);
  const s = o.scheduling;
  if (s !== undefined) {
    if (s === null || typeof s !== 'object' || !SCHEDULING_MODES.includes(s.mode)) {
      throw new InvalidArgumentError(`${what}: scheduling.mode must be one of ${SCHEDULING_MODES.join(', ')}, got ${String(s?.mode)}`);
    }
    if (s.streams !== undefined && s.streams !== 'dynamic' && !(Number.isInteger(s.streams) && s.streams >= 1)) {
      throw new InvalidArgumentError(`${what}: scheduling.streams must be a positive integer or 'dynamic', got ${String(s.streams)}`);
    }
  }
  if (o.now !== undefined && typeof o.now !== 'function') throw new InvalidArgumentError(`${what}: now must be a function returning milliseconds`);
}

/**
 * Adapts an engine to @tessera/batcher's CostProfilerTarget (structurally: pet-ops sits below the batcher):
 * runShared(N, L) times α, runPet(type, n, l) times β of `types` (default: every type with a loaded task).
 */
/** β profiling times up to this many segments per run, while their rows stay under PROFILE_SEGMENT_ROWS. */
const PROFILE_MAX_SEGMENTS = 8;
const PROFILE_SEGMENT_ROWS = 2048;

export function petsCostProfilerTarget(
  engine: PetEngine,
  types?: readonly PetType[],
): { runShared(N: number, L: number): void; runPet(petType: string, n: number, l: number): number; readonly petTypes: readonly string[] } {
  const petTypes = types ? [...types] : engine.loadedTypes();
  return {
    runShared: (N, L) => engine.runSharedOnly(N, L),
    runPet: (petType, n, l) => {
      if (!petTypes.includes(petType as PetType)) throw new InvalidArgumentError(`petsCostProfilerTarget: type ${JSON.stringify(petType)} is not profiled (types: ${petTypes.join(', ')})`);
      // run() executes every segment of a site in one native call, so a segment's β is its marginal cost there:
      // time several identical segments together (fewer as they grow: large ones amortize the call themselves).
      const segments = Math.max(1, Math.min(PROFILE_MAX_SEGMENTS, Math.floor(PROFILE_SEGMENT_ROWS / (n * l))));
      engine.runPetOnly(petType as PetType, n, l, { segments });
      return segments;
    },
    petTypes,
  };
}
