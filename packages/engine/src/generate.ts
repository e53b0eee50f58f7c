/**
 * generateBatch: run a set of requests to completion on one decoder, all in one batch. The first step prefills
 * every prompt; each later step decodes one token for every unfinished request; a request leaves (and frees its
 * KV pages) the moment it stops. A reference loop for tests, demos and benchmarks: admission control, adapter
 * residency and fairness belong to `@tessera/batcher`.
 */
import { InvalidArgumentError } from '@tessera/native';
import type { ModelDelta } from './hooks/sites.js';
import type { PagedKvCache } from './kv/paged-kv-cache.js';
import type { DecoderModel } from './models/decoder.js';
import { createSampler, type SamplingParams } from './sampling/sampler.js';
import { StopChecker } from './sampling/stop.js';

export interface GenerateRequest {
  /** Prompt token ids (bos included, as the tokenizer's template adds it). */
  prompt: readonly number[];
  /** Generated tokens at most (EOS included). */
  maxTokens: number;
  sampling?: SamplingParams;
  /** Stop strings (needs `decode`). */
  stop?: readonly string[];
  /** Keep going past EOS (benchmarks that want a fixed length). */
  ignoreEos?: boolean;
  /** Tenant/adapter key for the SegmentLayout. */
  key?: string | null;
}

export interface GenerateResult {
  tokens: number[];
  text: string;
  finishReason: 'eos' | 'stop' | 'length';
  promptTokens: number;
}

export interface GenerateOptions {
  cache: PagedKvCache;
  deltas?: readonly ModelDelta[];
  /** Detokenizer for stop strings and `text` (e.g. `(ids) => tokenizer.decode(ids)`); without it `text` is ''. */
  decode?: (ids: number[]) => string;
  /** Called after every step with the number of rows it ran (progress, metrics). */
  onStep?: (rows: number) => void;
}

let nextRun = 0;

export function generateBatch(model: DecoderModel, requests: readonly GenerateRequest[], options: GenerateOptions): GenerateResult[] {
  const { cache } = options;
  const decode = options.decode ?? (() => '');
  const run = nextRun++;
  const states = requests.map((r, i) => {
    if (r.prompt.length === 0) throw new InvalidArgumentError(`generateBatch: request ${i} has an empty prompt`);
    if (!Number.isInteger(r.maxTokens) || r.maxTokens < 1) throw new InvalidArgumentError(`generateBatch: request ${i} has maxTokens ${r.maxTokens}`);
    if (r.stop?.length && !options.decode) throw new InvalidArgumentError(`generateBatch: request ${i} has stop strings but no decode function was given`);
    return {
      id: `generate-${run}-${i}`,
      request: r,
      sampler: createSampler(r.sampling ?? {}),
      stop: new StopChecker({
        eosTokenIds: model.config.eosTokenIds,
        stopStrings: [...(r.stop ?? [])],
        maxTokens: r.maxTokens,
        decode,
        ignoreEos: r.ignoreEos ?? false,
      }),
      next: [...r.prompt] as number[],
      done: false,
    };
  });
  try {
    let active = states.filter((s) => !s.done);
    while (active.length > 0) {
      const out = model.forward(
        active.map((s) => ({ id: s.id, tokens: s.next, key: s.request.key ?? null })),
        { cache, deltas: options.deltas ?? [] },
      );
      options.onStep?.(out.offsets[active.length]!);
      const logits = out.logits!;
      const vocab = logits.shape[1]!;
      const all = logits.toArray() as Float32Array;
      logits.dispose();
      out.layout.dispose();
      active.forEach((s, b) => {
        const token = s.sampler.sample(all.subarray(b * vocab, (b + 1) * vocab));
        const step = s.stop.push(token);
        s.next = [token];
        if (step.finished) {
          s.done = true;
          cache.release(s.id);
        }
      });
      active = active.filter((s) => !s.done);
    }
  } finally {
    for (const s of states) if (cache.hasSequence(s.id)) cache.release(s.id);
  }
  return states.map((s) => ({
    tokens: [...s.stop.tokenIds],
    text: s.stop.fullText,
    finishReason: s.stop.finishReason ?? 'length',
    promptTokens: s.request.prompt.length,
  }));
}
