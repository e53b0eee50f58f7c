/**
 * SimulatedDecoder: a BatcherModel that does no math. Its forward makes exactly the KV-cache calls
 * DecoderModel.forward makes (engine models/decoder.ts): check the batch's new pages fit (else
 * KvCacheExhaustedError, nothing changed), addSequence on first use, reserve(start + new tokens), then
 * commit(start + new tokens); so page budgets, growth and frees are the real PagedKvCache's. The logits are a
 * one-hot row per sequence over a tiny vocabulary: the token after position p following token x is
 * {@link simulatedNextToken}(x, p), so greedy sampling is deterministic and a migrated request (prefilled again on
 * prompt + generated) continues with the very tokens it would have produced unmigrated.
 *
 * Use it with a PagedKvCache of {@link SIMULATED_KV_SHAPE} (1 layer, 1 KV head, head dim 1: 128 bytes a page),
 * and requests with ignoreEos (their length is maxTokens).
 */
import {
  type DecoderConfig,
  type DecoderForwardOptions,
  type DecoderOutput,
  type DecoderSequence,
  KvCacheExhaustedError,
  SegmentLayout,
} from '@tessera/engine';
import type { BatcherModel } from '@tessera/batcher';
import { InvalidArgumentError, PAGE_SIZE, type Tensor } from '@tessera/native';
import type { StepShape } from './latency.js';

/** Vocabulary of the simulated model: ids 0..13 are ordinary tokens, 14 is BOS, 15 is EOS. */
export const SIMULATED_VOCAB = 16;
const ORDINARY = SIMULATED_VOCAB - 2;

/** The smallest cache geometry: a page costs 1 layer × K and V × 16 rows × 1 head × 1 × 4 bytes = 128 bytes. */
export const SIMULATED_KV_SHAPE = { numLayers: 1, numKvHeads: 1, headDim: 1 } as const;

/** The token the simulated model emits after `token` at position `position` (0-based, of that token). */
export function simulatedNextToken(token: number, position: number): number {
  return (token * 5 + position + 1) % ORDINARY;
}

/** The tokens a request with this prompt generates (what every placement of it must add up to). */
export function simulatedGeneration(prompt: readonly number[], count: number): number[] {
  const out: number[] = [];
  let token = prompt[prompt.length - 1]!;
  let position = prompt.length - 1;
  for (let i = 0; i < count; i++) {
    token = simulatedNextToken(token, position++);
    out.push(token);
  }
  return out;
}

/** A prompt of ordinary tokens (deterministic in `salt`). */
export function simulatedPrompt(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (salt + i * 3) % ORDINARY);
}

/** One character per token (the batcher's `decode`): stop checking stays O(1) per token. */
export function simulatedDecode(ids: number[]): string {
  let s = '';
  for (const id of ids) s += String.fromCharCode(97 + (id % 26));
  return s;
}

export function simulatedDecoderConfig(maxPositions: number): DecoderConfig {
  return {
    family: 'decoder',
    architecture: 'LlamaForCausalLM',
    vocabSize: SIMULATED_VOCAB,
    hiddenSize: 1,
    numLayers: SIMULATED_KV_SHAPE.numLayers,
    numHeads: 1,
    numKvHeads: SIMULATED_KV_SHAPE.numKvHeads,
    headDim: SIMULATED_KV_SHAPE.headDim,
    intermediateSize: 1,
    maxPositions,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: false,
    bosTokenId: SIMULATED_VOCAB - 2,
    eosTokenIds: [SIMULATED_VOCAB - 1],
  };
}

/** Host-side logits standing in for the [batch, vocab] tensor: the batcher only calls toArray() and dispose(). */
class HostLogits {
  data = new Float32Array(0);
  toArray(): Float32Array {
    return this.data;
  }
  dispose(): void {}
}

export class SimulatedDecoder implements BatcherModel {
  readonly config: DecoderConfig;
  /** Shape of the last forward (for the latency model). */
  last: StepShape = { batchSize: 0, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
  /** Forwards run. */
  forwards = 0;
  // Scratch of forward(), reused: start position and pages held (-1: not in the cache) per sequence; the logits
  // buffer (the output of a forward is valid until the next forward, which is all a batcher needs).
  private readonly starts: number[] = [];
  private readonly pagesHeld: number[] = [];
  private readonly seen = new Set<DecoderSequence['id']>();
  private logitsBuffer = new Float32Array(64 * SIMULATED_VOCAB);
  private readonly logits = new HostLogits();

  constructor(options: { maxPositions?: number } = {}) {
    this.config = simulatedDecoderConfig(options.maxPositions ?? 1 << 20);
  }

  forward(sequences: readonly DecoderSequence[], options: DecoderForwardOptions): DecoderOutput {
    const { cache } = options;
    const c = this.config;
    const mode = options.logits ?? 'last';
    if (mode === 'all') throw new InvalidArgumentError("SimulatedDecoder: logits 'all' is not simulated (the batcher asks for 'last')");
    const n = sequences.length;
    const starts = this.starts;
    const pagesHeld = this.pagesHeld;
    const offsets = new Int32Array(n + 1);
    const seen = this.seen;
    seen.clear();
    let newPages = 0;
    // Positions and KV room, all checked before the cache changes (as DecoderModel.forward does).
    for (let b = 0; b < n; b++) {
      const s = sequences[b]!;
      if (seen.has(s.id)) throw new InvalidArgumentError(`SimulatedDecoder: sequence ${String(s.id)} appears twice in one forward`);
      seen.add(s.id);
      const len = s.tokens.length;
      if (len === 0) throw new InvalidArgumentError(`SimulatedDecoder: sequence ${String(s.id)} has no new tokens`);
      const has = cache.hasSequence(s.id);
      const start = has ? cache.length(s.id) : 0;
      const end = start + len;
      if (end > c.maxPositions) throw new InvalidArgumentError(`SimulatedDecoder: sequence ${String(s.id)} would reach ${end} tokens, more than ${c.maxPositions} positions`);
      const held = has ? cache.pages(s.id).length : -1;
      starts[b] = start;
      pagesHeld[b] = held;
      offsets[b + 1] = offsets[b]! + len;
      newPages += Math.max(0, Math.ceil(end / PAGE_SIZE) - Math.max(held, 0));
    }
    if (newPages > cache.freePages) {
      throw new KvCacheExhaustedError(`KV cache exhausted: this forward needs ${newPages} new pages of ${PAGE_SIZE} tokens but only ${cache.freePages} of ${cache.numPages} are free`);
    }
    const layout = options.layout ?? SegmentLayout.fromCounts(sequences.map((s) => ({ key: s.key ?? null, count: s.tokens.length })));
    if (layout.rows !== offsets[n]) throw new InvalidArgumentError(`SimulatedDecoder: layout covers ${layout.rows} rows but the batch has ${offsets[n]} tokens`);

    const shape: StepShape = { batchSize: n, prefillTokens: 0, decodeRows: 0, kvTokens: 0 };
    if (this.logitsBuffer.length < n * SIMULATED_VOCAB) this.logitsBuffer = new Float32Array(2 * n * SIMULATED_VOCAB);
    const logits = this.logitsBuffer.subarray(0, n * SIMULATED_VOCAB).fill(0);
    for (let b = 0; b < n; b++) {
      const s = sequences[b]!;
      const start = starts[b]!;
      const held = pagesHeld[b]!;
      const end = start + s.tokens.length;
      if (held < 0) cache.addSequence(s.id);
      // reserve() is a no-op when the held pages already hold `end` tokens; skipping it then changes nothing.
      if (held * PAGE_SIZE < end) cache.reserve(s.id, end);
      cache.commit(s.id, end);
      if (start === 0) shape.prefillTokens += s.tokens.length;
      else shape.decodeRows += s.tokens.length;
      shape.kvTokens += end;
      if (mode === 'last') logits[b * SIMULATED_VOCAB + simulatedNextToken(s.tokens[s.tokens.length - 1]!, end - 1)] = 1;
    }
    this.last = shape;
    this.forwards++;
    const out: DecoderOutput = { offsets, layout };
    if (mode === 'last') {
      this.logits.data = logits;
      out.logits = this.logits as unknown as Tensor;
    }
    return out;
  }
}
