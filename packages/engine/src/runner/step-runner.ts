/**
 * StepRunner: the engine side of the scheduler / runner split (vLLM's model runner). A scheduler (pure, in
 * `@tessera/batcher`) decides which sequences run, with which tokens, in which adapter segments, and reserves
 * their KV pages on the cache's page allocator; the runner executes that {@link StepPlan}:
 *
 *   1. one SegmentLayout from the plan's segments (built once per step, handed to every hook site of every layer);
 *   2. deltas that can resolve a layout ahead of the forward (`SgmvLoraDelta.prepare`) are asked first: an
 *      UnknownAdapterError naming one of the step's adapters fails that adapter's rows only, and the layout is
 *      rebuilt without them; any other error fails the whole step;
 *   3. one `model.forward` over the rows (prefills first, then decodes), logits of each sequence's last row;
 *   4. each request's own seeded sampler picks its token; its StopChecker decides whether it ends (EOS, a stop
 *      string, maxTokens) and what text became safe to show; a request opened with `logprobs: k` also gets the
 *      token's log-probability and the k most likely tokens' (log-softmax of the raw logits row, sampling/logprobs.ts);
 *      one opened with `sampling.promptLogprobs` gets its prompt tokens' on its first token (`logprobs.prompt`): its
 *      prefill's forward asks for the logits of every row ('all', the step's other sequences' rows picked by offset).
 * It returns a {@link StepOutcome}: a token (and finish reason) per sampled row, or the rows that failed. It keeps
 * per request only what sampling needs across steps (sampler stream, stop state), from `open` to `close`.
 */
import {
  InvalidArgumentError,
  type ModelLimits,
  type PlannedSequence,
  type RowResult,
  type RunnerRequest,
  type StepExecutor,
  type StepOutcome,
  type StepPlan,
  type StepSegment,
  type TokenLogprobs,
  UnknownAdapterError,
} from '@tessera/core';
import { SegmentLayout } from '../hooks/segment-layout.js';
import type { ModelDelta } from '../hooks/sites.js';
import type { PagedKvCache } from '../kv/paged-kv-cache.js';
import type { DecoderModel, DecoderSequence } from '../models/decoder.js';
import { tokenLogprobs, validateTopLogprobs } from '../sampling/logprobs.js';
import { createSampler, type Sampler } from '../sampling/sampler.js';
import { StopChecker } from '../sampling/stop.js';

/** What the runner needs of a model: its config and a forward over the KV cache (DecoderModel). */
export type StepRunnerModel = Pick<DecoderModel, 'config' | 'forward'>;

export interface StepRunnerOptions {
  model: StepRunnerModel;
  /** The KV tensor pool; its `allocator` is the one the scheduler plans pages on. */
  cache: PagedKvCache;
  /** Multi-tenant deltas run at the hook sites (e.g. LoraDelta, SgmvLoraDelta); they read the step's SegmentLayout. */
  deltas?: readonly ModelDelta[];
  /** Token ids → text, for stop strings and streamed text (e.g. `(ids) => tokenizer.decode(ids)`). */
  decode?: (ids: number[]) => string;
}

/** A delta that can resolve a layout before the forward (SgmvLoraDelta has one). */
type PreparableDelta = ModelDelta & { prepare?: (layout: SegmentLayout) => void };

interface RequestState {
  readonly sampler: Sampler;
  readonly stop: StopChecker;
  /** Alternatives to report per token; null: no logprobs. */
  readonly logprobs: number | null;
  /** Alternatives to report per prompt token; null: no prompt logprobs, or already reported. */
  promptLogprobs: number | null;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** Adjacent rows of one adapter merged into one segment. */
function segmentsOf(sequences: readonly PlannedSequence[]): StepSegment[] {
  const out: StepSegment[] = [];
  let start = 0;
  for (const s of sequences) {
    const last = out[out.length - 1];
    if (last && last.key === s.adapter) last.count += s.tokens.length;
    else out.push({ key: s.adapter, start, count: s.tokens.length });
    start += s.tokens.length;
  }
  return out;
}

export class StepRunner implements StepExecutor {
  readonly limits: ModelLimits;
  readonly model: StepRunnerModel;
  readonly cache: PagedKvCache;
  private readonly deltas: readonly ModelDelta[];
  private readonly decode: ((ids: number[]) => string) | undefined;
  private readonly requests = new Map<string, RequestState>();
  /** SegmentLayouts built (one per step that reached the forward, plus one per rebuild after a failed adapter). */
  layoutBuilds = 0;
  /** Forwards run. */
  forwards = 0;

  constructor(options: StepRunnerOptions) {
    const { model, cache } = options;
    const c = model.config;
    if (cache.numLayers !== c.numLayers || cache.firstLayer !== 0 || cache.numKvHeads !== c.numKvHeads || cache.headDim !== c.headDim) {
      throw new InvalidArgumentError(
        `StepRunner: the KV cache (${cache.numLayers} layers from ${cache.firstLayer}, ${cache.numKvHeads} kv heads of ${cache.headDim}) does not fit the model ` +
          `(${c.numLayers} layers, ${c.numKvHeads} kv heads of ${c.headDim})`,
      );
    }
    this.model = model;
    this.cache = cache;
    this.deltas = options.deltas ?? [];
    this.decode = options.decode;
    this.limits = { vocabSize: c.vocabSize, maxPositions: c.maxPositions };
  }

  /**
   * Creates the request's sampler and stop checker, replaying `generated` through the stop checker (so stop
   * strings and text continue where an earlier placement left off). Throws InvalidArgumentError, keeping nothing,
   * for bad sampling parameters, stop strings without a `decode`, or generated tokens that already end the request.
   */
  open(request: RunnerRequest): void {
    if (this.requests.has(request.id)) throw new InvalidArgumentError(`StepRunner: request ${JSON.stringify(request.id)} is already open`);
    const stopStrings = request.stop ?? [];
    if (stopStrings.length > 0 && !this.decode) throw new InvalidArgumentError('stop strings need the runner to have a decode function');
    const logprobs = request.logprobs === undefined ? null : validateTopLogprobs(request.logprobs);
    const promptK = request.sampling?.promptLogprobs;
    let promptLogprobs = promptK === undefined ? null : validateTopLogprobs(promptK);
    const sampler = createSampler(request.sampling ?? {});
    const stop = new StopChecker({
      eosTokenIds: this.model.config.eosTokenIds,
      stopStrings,
      maxTokens: request.maxTokens,
      decode: this.decode ?? null,
      ignoreEos: request.ignoreEos ?? false,
    });
    const generated = request.generated ?? [];
    for (let i = 0; i < generated.length; i++) {
      if (stop.push(generated[i]!).finished !== null) {
        throw new InvalidArgumentError(`generated token ${i} already ends the request (EOS or a stop string); nothing is left to generate`);
      }
    }
    // A request that generated before (migrated, resumed) reported its prompt logprobs with its first token.
    if (generated.length > 0) promptLogprobs = null;
    this.requests.set(request.id, { sampler, stop, logprobs, promptLogprobs });
  }

  /** The request's text so far (stop string and what follows cut off); '' without a `decode`. */
  text(requestId: string): string {
    return this.requests.get(requestId)?.stop.fullText ?? '';
  }

  close(requestId: string): void {
    this.requests.delete(requestId);
  }

  /** Requests open (between open and close). */
  get openRequests(): number {
    return this.requests.size;
  }

  run(plan: StepPlan): StepOutcome {
    const results: RowResult[] = [];
    const excluded: string[] = [];
    let live: readonly PlannedSequence[] = plan.sequences;
    let segments: readonly StepSegment[] = plan.segments;
    if (live.length === 0) return { ran: false, rows: 0, segments: [], excluded, results };
    let layout = this.layout(segments);
    let problem = this.prepareDeltas(layout);
    while (problem?.key != null) {
      const key = problem.key;
      layout.dispose();
      const kept: PlannedSequence[] = [];
      for (const s of live) {
        if (s.adapter === key) {
          excluded.push(s.requestId);
          results.push({ kind: 'failed', requestId: s.requestId, error: problem.error });
        } else kept.push(s);
      }
      live = kept;
      if (live.length === 0) return { ran: false, rows: 0, segments: [], excluded, results };
      segments = segmentsOf(live);
      layout = this.layout(segments);
      problem = this.prepareDeltas(layout);
    }

    // Prefills whose prompt logprobs are due need the logits of every row ('all': rows picked by offsets).
    const wantsPrompt = (s: PlannedSequence) => s.kind === 'prefill' && (this.requests.get(s.requestId)?.promptLogprobs ?? null) !== null;
    const allRows = live.some(wantsPrompt);
    let logits: Float32Array | null = null;
    try {
      if (problem) throw problem.error;
      const sequences: DecoderSequence[] = live.map((s) => ({ id: s.seqId, tokens: s.tokens, key: s.adapter }));
      this.forwards++;
      const out = this.model.forward(sequences, { cache: this.cache, deltas: this.deltas, layout, logits: allRows ? 'all' : 'last' });
      try {
        logits = out.logits!.toArray() as Float32Array;
      } finally {
        out.logits?.dispose();
      }
    } catch (err) {
      const error = asError(err);
      for (const s of live) results.push({ kind: 'failed', requestId: s.requestId, error });
    } finally {
      layout.dispose();
    }

    if (logits) {
      const vocab = this.model.config.vocabSize;
      // First row of sequence b in the logits: b with 'last', its token offset with 'all'.
      let offset = 0;
      for (let b = 0; b < live.length; b++) {
        const s = live[b]!;
        const first = allRows ? offset : b;
        offset += s.tokens.length;
        if (s.kind === 'wasted') continue;
        const state = this.requests.get(s.requestId);
        try {
          if (!state) throw new Error(`StepRunner: internal error: request ${JSON.stringify(s.requestId)} is in the plan but was not opened`);
          const last = allRows ? first + s.tokens.length - 1 : b;
          const row = logits.subarray(last * vocab, (last + 1) * vocab);
          const token = state.sampler.sample(row);
          const pushed = state.stop.push(token);
          const result: RowResult = { kind: 'token', requestId: s.requestId, token, text: pushed.text, finish: pushed.finished };
          const k = state.logprobs ?? state.promptLogprobs;
          if (k !== null) result.logprobs = tokenLogprobs(row, token, k);
          if (state.promptLogprobs !== null && s.kind === 'prefill') {
            // Prompt token i under the logits of row i − 1; token 0 has none.
            const promptK = state.promptLogprobs;
            const prompt: (TokenLogprobs | null)[] = [null];
            for (let i = 1; i < s.tokens.length; i++) {
              prompt.push(tokenLogprobs(logits.subarray((first + i - 1) * vocab, (first + i) * vocab), s.tokens[i]!, promptK));
            }
            result.logprobs!.prompt = prompt;
            state.promptLogprobs = null;
          }
          results.push(result);
        } catch (err) {
          results.push({ kind: 'failed', requestId: s.requestId, error: asError(err) });
        }
      }
    }
    const rows = segments.reduce((n, g) => n + g.count, 0);
    return { ran: true, rows, segments, excluded, results };
  }

  private layout(segments: readonly StepSegment[]): SegmentLayout {
    this.layoutBuilds++;
    return SegmentLayout.fromCounts(segments);
  }

  /** Runs the deltas' optional prepare(layout); the first error, with the adapter key it names if any. */
  private prepareDeltas(layout: SegmentLayout): { key: string | null; error: Error } | null {
    for (const delta of this.deltas as readonly PreparableDelta[]) {
      if (typeof delta.prepare !== 'function') continue;
      try {
        delta.prepare(layout);
      } catch (err) {
        // An UnknownAdapterError names the one adapter at fault; any other error fails the whole step's batch.
        const key = err instanceof UnknownAdapterError ? err.adapter : null;
        const named = key !== null && layout.segments.some((g) => g.key === key);
        return { key: named ? key : null, error: asError(err) };
      }
    }
    return null;
  }
}
