/**
 * StopChecker: turns a stream of generated token ids into stream-safe text and decides when generation ends,
 * with OpenAI / vLLM semantics:
 *   - an EOS token ends generation ('eos') and contributes no text (its id is still in `tokenIds`);
 *   - a stop string ends generation ('stop') and is cut from the text together with everything after it,
 *     even when it spans several tokens; when several occur, the earliest wins;
 *   - `maxTokens` counts generated tokens, EOS included; reaching it ends generation ('length');
 *   - text that could be the start of a stop string is held back until it is disambiguated, and so is text
 *     ending in U+FFFD (a multi-byte character split across tokens); finishing by EOS or length flushes both.
 * Priority when one token triggers several: EOS, then a stop string, then length (vLLM's order).
 *
 * Detokenization is incremental as in vLLM: each step decodes a short window of recent ids and emits what it
 * adds beyond the window's already-emitted prefix, so a step costs O(window) rather than O(all tokens), and
 * tokenizers whose decoding depends on the previous token (SentencePiece's leading space) decode in context.
 */
import type { StopReason } from '@tessera/core';
import { InvalidArgumentError } from '@tessera/native';

/** Why a StopChecker ended a sequence: @tessera/core's StopReason (FinishReason less 'cancelled', which only a scheduler decides). */
export type { StopReason };

export interface StopCheckerOptions {
  /** Token ids that end generation (the model's EOS and any extra stop token ids). */
  eosTokenIds: readonly number[];
  /** Strings that end generation; the text is cut right before the earliest one. Empty strings are rejected. */
  stopStrings?: readonly string[] | undefined;
  /** Most tokens to generate (EOS included), at least 1. */
  maxTokens: number;
  /**
   * Token ids → text (e.g. a tokenizer's decode). Incomplete UTF-8 at the end must decode to U+FFFD. null: no
   * text is kept (every step's text is ''), which is cheaper when only token ids matter; stop strings then
   * cannot be used.
   */
  decode: ((ids: number[]) => string) | null;
  /** Treat EOS ids as ordinary tokens (decoded like any other); generation then ends by stop or length only. */
  ignoreEos?: boolean | undefined;
}

export interface StopStep {
  /** Text that became safe to emit with this token (may be empty). */
  text: string;
  /** Why generation ended with this token, or null to go on. */
  finished: StopReason | null;
}

const REPLACEMENT_CHARACTER = '\uFFFD';

export class StopChecker {
  private readonly eos: ReadonlySet<number>;
  private readonly stops: readonly string[];
  private readonly maxTokens: number;
  private readonly decode: ((ids: number[]) => string) | null;
  private readonly ignoreEos: boolean;

  private readonly ids: number[] = [];
  /** The ids that produce text (all but an ending EOS). */
  private readonly textIds: number[] = [];
  /** Detokenizer window: textIds[prefixOffset, readOffset) is decoded context whose text is already in `decoded`. */
  private prefixOffset = 0;
  private readOffset = 0;
  /** All text decoded so far that is not an incomplete character (cut at a stop string once one is found). */
  private decoded = '';
  /** How many characters of `decoded` have been emitted. */
  private emitted = 0;
  private reason: StopReason | null = null;
  private stopMatched: string | null = null;

  constructor(options: StopCheckerOptions) {
    const { eosTokenIds, stopStrings = [], maxTokens, decode } = options;
    if (!Array.isArray(eosTokenIds) || !eosTokenIds.every((id) => Number.isInteger(id) && id >= 0)) {
      throw new InvalidArgumentError(`StopChecker: eosTokenIds must be non-negative integer token ids, got ${JSON.stringify(eosTokenIds)}`);
    }
    if (!Number.isSafeInteger(maxTokens) || maxTokens < 1) {
      throw new InvalidArgumentError(`StopChecker: maxTokens must be a positive integer, got ${maxTokens}`);
    }
    stopStrings.forEach((s, i) => {
      if (typeof s !== 'string' || s.length === 0) {
        throw new InvalidArgumentError(`StopChecker: stopStrings[${i}] must be a non-empty string, got ${JSON.stringify(s)}`);
      }
    });
    if (decode !== null && typeof decode !== 'function') throw new InvalidArgumentError('StopChecker: decode must be a function from token ids to text, or null');
    if (decode === null && stopStrings.length > 0) throw new InvalidArgumentError('StopChecker: stop strings need a decode function');
    this.eos = new Set(eosTokenIds);
    this.stops = [...stopStrings];
    this.maxTokens = maxTokens;
    this.decode = decode;
    this.ignoreEos = options.ignoreEos ?? false;
  }

  /** Every pushed token id, EOS included. */
  get tokenIds(): readonly number[] {
    return this.ids;
  }

  /** All text emitted so far (after a finish: the whole output). */
  get fullText(): string {
    return this.decoded.slice(0, this.emitted);
  }

  get finishReason(): StopReason | null {
    return this.reason;
  }

  /** The stop string that ended generation, when finishReason is 'stop'. */
  get matchedStop(): string | null {
    return this.stopMatched;
  }

  /** Feeds the next generated token. Pushing after generation finished is an error. */
  push(tokenId: number): StopStep {
    if (this.reason !== null) {
      throw new InvalidArgumentError(`StopChecker: generation already finished (${this.reason}); token ${tokenId} was pushed after it`);
    }
    if (!Number.isInteger(tokenId) || tokenId < 0) throw new InvalidArgumentError(`StopChecker: token id ${tokenId} is not a non-negative integer`);
    this.ids.push(tokenId);
    if (this.decode === null) {
      // Token ids only: EOS and length, no text.
      if (!this.ignoreEos && this.eos.has(tokenId)) this.reason = 'eos';
      else if (this.ids.length >= this.maxTokens) this.reason = 'length';
      return { text: '', finished: this.reason };
    }
    const start = this.emitted;
    if (!this.ignoreEos && this.eos.has(tokenId)) {
      this.detokenize(true);
      return this.finish('eos', start);
    }
    this.textIds.push(tokenId);
    const atLimit = this.ids.length >= this.maxTokens;
    this.detokenize(atLimit);
    if (this.cutAtStop()) return this.finish('stop', start);
    if (atLimit) return this.finish('length', start);
    this.emitted = this.decoded.length - this.heldBackLength();
    return { text: this.decoded.slice(start, this.emitted), finished: null };
  }

  /** Ends generation: a stop string found in the flushed text still wins; everything left is emitted. */
  private finish(reason: StopReason, start: number): StopStep {
    this.reason = reason !== 'stop' && this.cutAtStop() ? 'stop' : reason;
    this.emitted = this.decoded.length;
    return { text: this.decoded.slice(start), finished: this.reason };
  }

  /** Appends the text the new ids add, unless it ends in an incomplete character and this is not the end. */
  private detokenize(final: boolean): void {
    const decode = this.decode!;
    if (this.readOffset === this.textIds.length) return;
    const prefixText = decode(this.textIds.slice(this.prefixOffset, this.readOffset));
    const newText = decode(this.textIds.slice(this.prefixOffset));
    if (newText.length <= prefixText.length) return;
    if (!final && newText.endsWith(REPLACEMENT_CHARACTER)) return;
    this.decoded += newText.slice(prefixText.length);
    this.prefixOffset = this.readOffset;
    this.readOffset = this.textIds.length;
  }

  /** Finds the earliest stop string in the unemitted text; if any, cuts the text there and returns true. */
  private cutAtStop(): boolean {
    let at = -1;
    let which: string | null = null;
    for (const stop of this.stops) {
      const i = this.decoded.indexOf(stop, this.emitted);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = stop;
      }
    }
    if (which === null) return false;
    this.decoded = this.decoded.slice(0, at);
    this.stopMatched = which;
    return true;
  }

  /** Length of the longest unemitted suffix that is a proper prefix of some stop string. */
  private heldBackLength(): number {
    const pendingLength = this.decoded.length - this.emitted;
    let hold = 0;
    for (const stop of this.stops) {
      for (let len = Math.min(stop.length - 1, pendingLength); len > hold; len--) {
        if (this.decoded.endsWith(stop.slice(0, len))) {
          hold = len;
          break;
        }
      }
    }
    return hold;
  }
}
