/**
 * Chain execution (design note §4.1–4.2): every application is its chain of blocks, every block runs on the
 * staged engine with its own KV pages, and one step walks the chains block by block. Sequences of different
 * applications whose next block is the same block (a shared embedding, a shared FFN, a shared run of layers, the
 * head) run in one batch through it: one `layers(a, b)` call over the rows of all of them, against the shared
 * block's cache. The hidden state is one tensor handed from block to block: a group that is a contiguous run of
 * rows of the tensor it came from runs on a view of it (no copy), so a single application's chain — or several
 * applications whose rows stay in the same order — never copies; rows are gathered into a new tensor only where
 * the grouping really changes.
 */
import { argmax, KvCacheExhaustedError, type SequenceId } from '@tessera/engine';
import { cast, Tensor } from '@tessera/native';

import { ZooInvalidError, ZooNotFoundError } from '../planner/errors.js';
import type { BlockId } from '../planner/ids.js';
import type { BlockManifest } from '../planner/manifest.js';
import type { BlockZoo } from '../planner/zoo.js';
import type { DevicePool } from '../store/device-pool.js';
import { BlockRuntime, type LoraMode } from './block.js';

export interface ChainExecutorOptions {
  /** KV pages of each block's own cache (16 tokens of the block's attention layers per page). Default 64. */
  kvPages?: number;
  /** How fused LoRA blocks run: 'delta' (default; the engine's LoraDelta at the hook sites) or 'merged'. */
  lora?: LoraMode;
  /** The position limit the blocks' engine config checks (default 2^20: the zoo records none). */
  maxPositions?: number;
  /** Called after each block run of a step (instrumentation: per-block batching, copies). */
  onBlockRun?: (run: BlockRun) => void;
}

/** One block's run within a step. */
export interface BlockRun {
  block: BlockManifest;
  /** The applications whose rows were in the batch, in order of first row. */
  apps: string[];
  sequences: SequenceId[];
  rows: number;
  /** Rows gathered into a new tensor before the block (0: the block ran on the previous block's tensor or a view of it). */
  copiedRows: number;
}

export interface ChainSequence {
  /** The application (a zoo model id) whose chain runs the sequence. */
  app: string;
  /** Unique across applications: every block's cache keys its pages by it. */
  id: SequenceId;
  /** New tokens: the prompt for a prefill, the last sampled token for a decode step. */
  tokens: ArrayLike<number>;
}

export interface ChainStepOptions {
  /** 'last' (default): [vocab] per sequence, its last new token's; 'all': [tokens × vocab] per sequence. */
  logits?: 'last' | 'all';
}

export interface ChainGenerateRequest {
  app: string;
  prompt: readonly number[];
  /** Generated tokens at most. */
  maxTokens: number;
  /** Token ids that end the generation (included in the output). Default: none. */
  stopTokens?: readonly number[];
}

export interface ChainGenerateResult {
  tokens: number[];
  finishReason: 'stop' | 'length';
}

/** Where a sequence's hidden rows are: a base tensor (refcounted by the sequences in it) and a row offset. */
interface Base {
  tensor: Tensor;
  refs: number;
}

interface Walker {
  /** Index of the sequence in the caller's list. */
  index: number;
  seq: ChainSequence;
  chain: readonly BlockRuntime[];
  cursor: number;
  base: Base | null;
  row: number;
  rows: number;
}

let nextGeneration = 0;

export class ChainExecutor {
  readonly zoo: BlockZoo;
  readonly pool: DevicePool;
  private readonly kvPages: number;
  private readonly lora: LoraMode;
  private readonly maxPositions: number;
  private readonly onBlockRun: ((run: BlockRun) => void) | undefined;
  private readonly runtimes = new Map<BlockId, BlockRuntime>();
  private readonly chains = new Map<string, readonly BlockRuntime[]>();
  /** Each live sequence's application. */
  private readonly sequenceApps = new Map<SequenceId, string>();
  private disposed = false;

  constructor(zoo: BlockZoo, pool: DevicePool, options: ChainExecutorOptions = {}) {
    this.zoo = zoo;
    this.pool = pool;
    this.kvPages = options.kvPages ?? 64;
    if (!Number.isSafeInteger(this.kvPages) || this.kvPages < 1) throw new ZooInvalidError(`kvPages must be a positive integer, got ${options.kvPages}`);
    this.lora = options.lora ?? 'delta';
    if (this.lora !== 'delta' && this.lora !== 'merged') throw new ZooInvalidError(`lora must be 'delta' or 'merged', got ${JSON.stringify(options.lora)}`);
    this.maxPositions = options.maxPositions ?? 1 << 20;
    this.onBlockRun = options.onBlockRun;
  }

  /**
   * The application's chain as runtimes, loading its blocks into the pool on first use (a block shared with an
   * application already served is the same runtime: one set of tensors, one KV cache). The chain is resolved
   * from the zoo once: a later re-partition of the zoo needs a new executor.
   */
  load(app: string): readonly BlockRuntime[] {
    this.checkLive();
    const known = this.chains.get(app);
    if (known) return known;
    const chain = this.zoo.chain(app);
    const made: BlockRuntime[] = [];
    try {
      const runtimes = chain.blocks.map((b) => {
        let rt = this.runtimes.get(b.blockId);
        if (!rt) {
          rt = new BlockRuntime(b, this.pool, { kvPages: this.kvPages, lora: this.lora, maxPositions: this.maxPositions });
          made.push(rt);
          this.runtimes.set(b.blockId, rt);
        }
        return rt;
      });
      checkChain(app, runtimes);
      this.chains.set(app, runtimes);
      return runtimes;
    } catch (err) {
      for (const rt of made) {
        this.runtimes.delete(rt.manifest.blockId);
        rt.dispose();
      }
      throw err;
    }
  }

  /** The blocks serving `app`, in chain order. */
  blocksOf(app: string): BlockManifest[] {
    return this.load(app).map((rt) => rt.manifest);
  }

  /**
   * One step over sequences of any applications: each walks its chain; sequences whose next block is the same
   * block run through it in one batch. Returns each sequence's logits (host copies), in the order given. The step
   * is all or nothing: on any error every block's cache is left as it was.
   */
  step(sequences: readonly ChainSequence[], options: ChainStepOptions = {}): Float32Array[] {
    this.checkLive();
    const mode = options.logits ?? 'last';
    const ids = new Set<SequenceId>();
    const pagesWanted = new Map<BlockRuntime, number>();
    const walkers: Walker[] = sequences.map((seq, index) => {
      if (ids.has(seq.id)) throw new ZooInvalidError(`sequence ${String(seq.id)} appears twice in one step`);
      ids.add(seq.id);
      const owner = this.sequenceApps.get(seq.id);
      if (owner !== undefined && owner !== seq.app) throw new ZooInvalidError(`sequence ${String(seq.id)} belongs to ${owner}, not ${seq.app}`);
      if (seq.tokens.length === 0) throw new ZooInvalidError(`sequence ${String(seq.id)} has no new tokens`);
      const chain = this.load(seq.app);
      checkPositions(seq, chain, pagesWanted);
      return { index, seq, chain, cursor: 0, base: null, row: 0, rows: seq.tokens.length };
    });
    // Rows of one application next to each other (first appearance order): its own blocks then run on views.
    const appOrder = [...new Set(sequences.map((s) => s.app))];
    const order = [...walkers].sort((a, b) => appOrder.indexOf(a.seq.app) - appOrder.indexOf(b.seq.app) || a.index - b.index);

    const results: Float32Array[] = new Array<Float32Array>(sequences.length);
    const contexts: { commit(): void; dispose(): void }[] = [];
    const prefixed: { rt: BlockRuntime; id: SequenceId }[] = [];
    const bases = new Set<Base>();
    const release = (w: Walker) => {
      if (w.base && --w.base.refs === 0) {
        w.base.tensor.dispose();
        bases.delete(w.base);
      }
      w.base = null;
    };
    let committed = false;
    try {
      for (;;) {
        const pending = order.filter((w) => w.cursor < w.chain.length);
        if (pending.length === 0) break;
        const start = Math.min(...pending.map((w) => w.chain[w.cursor]!.manifest.span!.start));
        const groups = new Map<BlockRuntime, Walker[]>();
        for (const w of pending) {
          const rt = w.chain[w.cursor]!;
          if (rt.manifest.span!.start !== start) continue;
          groups.set(rt, [...(groups.get(rt) ?? []), w]);
        }
        for (const [rt, group] of groups) {
          for (const w of group) if (rt.admitPrefix(w.seq.id)) prefixed.push({ rt, id: w.seq.id });
          const ctx = rt.prepare(group.map((w) => w.seq));
          contexts.push(ctx);
          const { input, copiedRows, view } = rt.startsAtTokens ? { input: null, copiedRows: 0, view: null } : gather(group, bases);
          try {
            const out = rt.run(input, ctx, mode);
            if (out.logits) {
              const vocab = out.logits.shape[1]!;
              const host = out.logits.toArray() as Float32Array;
              out.logits.dispose();
              let r = 0;
              for (const w of group) {
                const n = mode === 'last' ? 1 : w.rows;
                results[w.index] = host.slice(r * vocab, (r + n) * vocab);
                r += n;
              }
            }
            // Where the group's rows live now.
            const outBase = rt.startsAtTokens ? { tensor: out.hidden!, refs: 0 } : null;
            if (outBase) bases.add(outBase);
            let row = 0;
            for (const w of group) {
              if (outBase) {
                w.base = outBase;
                outBase.refs++;
                w.row = row;
              }
              row += w.rows;
              w.cursor++;
            }
          } finally {
            view?.dispose();
          }
          this.onBlockRun?.({
            block: rt.manifest,
            apps: [...new Set(group.map((w) => w.seq.app))],
            sequences: group.map((w) => w.seq.id),
            rows: ctx.rows,
            copiedRows,
          });
          for (const w of group) if (w.cursor === w.chain.length) release(w);
        }
      }
      for (const ctx of contexts) ctx.commit();
      committed = true;
      for (const w of walkers) this.sequenceApps.set(w.seq.id, w.seq.app);
      return results;
    } finally {
      for (const ctx of contexts) ctx.dispose();
      for (const b of bases) b.tensor.dispose();
      if (!committed) for (const { rt, id } of prefixed) rt.release(id);
    }
  }

  /** Frees a sequence's pages in every block of its chain. Unknown ids are ignored. */
  release(id: SequenceId): void {
    const app = this.sequenceApps.get(id);
    if (app === undefined) return;
    for (const rt of this.chains.get(app) ?? []) rt.release(id);
    this.sequenceApps.delete(id);
  }

  /** Tokens of the sequence so far (prompt and generated, prefix excluded), or null for an unknown sequence. */
  length(id: SequenceId): number | null {
    const app = this.sequenceApps.get(id);
    if (app === undefined) return null;
    return positionOf(id, this.chains.get(app)!);
  }

  /**
   * Greedy generation for requests of any applications, in one batch: the first step prefills every prompt,
   * each later step decodes one token for every unfinished request (per-block batching across applications at
   * every step); a request leaves, freeing its pages in every block, when it stops.
   */
  generate(requests: readonly ChainGenerateRequest[]): ChainGenerateResult[] {
    const run = nextGeneration++;
    const states = requests.map((r, i) => {
      if (r.prompt.length === 0) throw new ZooInvalidError(`generate: request ${i} (${r.app}) has an empty prompt`);
      if (!Number.isInteger(r.maxTokens) || r.maxTokens < 1) throw new ZooInvalidError(`generate: request ${i} (${r.app}) has maxTokens ${r.maxTokens}, not a positive integer`);
      return { id: `chain-${run}-${i}`, request: r, stop: new Set(r.stopTokens ?? []), next: [...r.prompt], tokens: [] as number[], done: false, reason: 'length' as 'stop' | 'length' };
    });
    try {
      let active = states;
      while (active.length > 0) {
        const logits = this.step(active.map((s) => ({ app: s.request.app, id: s.id, tokens: s.next })));
        active.forEach((s, b) => {
          const token = argmax(logits[b]!);
          s.tokens.push(token);
          s.next = [token];
          if (s.stop.has(token)) (s.done = true), (s.reason = 'stop');
          else if (s.tokens.length >= s.request.maxTokens) s.done = true;
          if (s.done) this.release(s.id);
        });
        active = active.filter((s) => !s.done);
      }
    } finally {
      for (const s of states) this.release(s.id);
    }
    return states.map((s) => ({ tokens: s.tokens, finishReason: s.reason }));
  }

  /** Frees every block's cache and tensors (the pool releases what no other holder uses). Idempotent. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const rt of this.runtimes.values()) rt.dispose();
    this.runtimes.clear();
    this.chains.clear();
    this.sequenceApps.clear();
  }

  private checkLive(): void {
    if (this.disposed) throw new ZooInvalidError('ChainExecutor: the executor was disposed');
  }
}

/** A chain must cover the model from the token ids to the logits without gaps. */
function checkChain(app: string, chain: readonly BlockRuntime[]): void {
  let at = 0;
  for (const rt of chain) {
    if (rt.manifest.span!.start !== at) throw new ZooNotFoundError('segment', `${app}@${at}`, `the chain of ${app} has a gap: a block starts at component ${rt.manifest.span!.start}, expected ${at}`);
    at = rt.manifest.span!.end;
  }
  const a = chain[0]?.manifest.archSig;
  if (!chain[0]?.startsAtTokens || !chain.at(-1)?.endsAtLogits || (a && at !== 2 * a.numLayers + 2)) {
    throw new ZooInvalidError(`the chain of ${app} does not run from the embedding to the head`);
  }
  // Prefix-tuning shifts the sequence's positions by its length in every attention layer: all of them need it.
  const prefixed = chain.filter((rt) => rt.prefix !== null).length;
  const withKv = chain.filter((rt) => rt.cache !== null).length;
  if (prefixed > 0 && prefixed !== withKv) {
    throw new ZooInvalidError(`the chain of ${app} has a prefix in ${prefixed} of its ${withKv} attention blocks; a prefix must cover every attention layer`);
  }
}

/** The sequence's position (tokens so far, prefix excluded) as the chain's attention blocks agree on it. */
function positionOf(id: SequenceId, chain: readonly BlockRuntime[]): number | null {
  let position: number | null = null;
  for (const rt of chain) {
    const len = rt.length(id);
    if (len === null) continue;
    const p = len - (rt.prefix ? rt.prefix.values().next().value!.key.shape[0]! : 0);
    if (position !== null && p !== position) {
      throw new ZooInvalidError(`sequence ${String(id)} is at position ${position} in one block of its chain but ${p} in block ${rt.manifest.blockId}`);
    }
    position = p;
  }
  return position;
}

/**
 * Refuses a step that would exceed a block's KV pages before any block runs (`wanted` sums the step's sequences
 * so far per block). The engine checks again in each block; a failure there rolls the whole step back.
 */
function checkPositions(seq: ChainSequence, chain: readonly BlockRuntime[], wanted: Map<BlockRuntime, number>): void {
  positionOf(seq.id, chain);
  for (const rt of chain) {
    if (!rt.cache) continue;
    const prefix = rt.prefix && !rt.cache.hasSequence(seq.id) ? rt.prefix.values().next().value!.key.shape[0]! : 0;
    const have = rt.cache.hasSequence(seq.id) ? rt.cache.length(seq.id) : 0;
    const need = (wanted.get(rt) ?? 0) + rt.cache.pagesNeeded([[seq.id, have + prefix + seq.tokens.length]]);
    if (need > rt.cache.freePages) {
      throw new KvCacheExhaustedError(
        `KV cache of block ${rt.manifest.blockId} exhausted: this step needs ${need} new pages there (sequence ${String(seq.id)} included) but ${rt.cache.freePages} of ${rt.cache.numPages} are free`);
    }
    wanted.set(rt, need);
  }
}

/**
 * The group's input hidden state: the base tensor itself when the group is exactly its rows, a view when the group
 * is a contiguous run of one base's rows in order, else a new tensor with each sequence's rows copied in (which
 * becomes the group's base).
 */
function gather(group: Walker[], bases: Set<Base>): { input: Tensor; copiedRows: number; view: Tensor | null } {
  const first = group[0]!.base!;
  const rows = group.reduce((n, w) => n + w.rows, 0);
  let contiguous = true;
  let next = group[0]!.row;
  for (const w of group) {
    if (w.base !== first || w.row !== next) contiguous = false;
    next += w.rows;
  }
  if (contiguous) {
    if (group[0]!.row === 0 && rows === first.tensor.shape[0]) return { input: first.tensor, copiedRows: 0, view: null };
    const view = first.tensor.rows(group[0]!.row, rows);
    return { input: view, copiedRows: 0, view };
  }
  const hidden = first.tensor.shape[1]!;
  const tensor = Tensor.empty([rows, hidden], 'f32', first.tensor.backend);
  const base: Base = { tensor, refs: 0 };
  bases.add(base);
  let row = 0;
  for (const w of group) {
    const src = w.base!.tensor.rows(w.row, w.rows);
    const dst = tensor.rows(row, w.rows);
    try {
      cast(src, 'f32', { out: dst });
    } finally {
      src.dispose();
      dst.dispose();
    }
    if (--w.base!.refs === 0) {
      w.base!.tensor.dispose();
      bases.delete(w.base!);
    }
    w.base = base;
    base.refs++;
    w.row = row;
    row += w.rows;
  }
  return { input: tensor, copiedRows: rows, view: null };
}
