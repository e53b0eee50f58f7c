/**
 * Logprobs in OpenAI's two shapes, from the engine's per-token TokenLogprobs (log-softmax of the raw logits the
 * token was sampled from, as vLLM's default):
 *
 *   /v1/completions  logprobs: k      → { tokens, token_logprobs, top_logprobs, text_offset }; top_logprobs[i] maps
 *                                       token text → logprob for the k most likely tokens and the chosen one (so up
 *                                       to k + 1 entries, as OpenAI documents); text_offset[i] is where token i's text
 *                                       starts: the sum of the earlier tokens' text lengths (vLLM's rule)
 *   /v1/chat/completions logprobs: true, top_logprobs: k
 *                                     → { content: [{ token, logprob, bytes, top_logprobs: [{ token, logprob, bytes }] }] }
 *
 * With `echo`, the prompt tokens come first (the first one's logprob and top_logprobs null, as vLLM's), then the
 * generated ones, text offsets running on across both.
 *
 * A token's text is its decoding alone, special tokens kept (an EOS shows as e.g. `</s>`); -Infinity is reported
 * as -9999 (JSON has no infinities; vLLM's floor).
 */
import type { TokenLogprobs } from '@tessera/core';

import type { GenerationBackend, DeliveredToken } from './generation.js';
import type { ChatLogprobs, CompletionLogprobs } from './schemas.js';

export const LOGPROB_FLOOR = -9999;

const floor = (x: number): number => (x > LOGPROB_FLOOR ? x : LOGPROB_FLOOR);

/** A token's text as logprobs name it. */
export function tokenText(backend: Pick<GenerationBackend, 'tokenizer'>, id: number): string {
  const { decode } = backend.tokenizer;
  return decode ? decode.call(backend.tokenizer, [id], { skipSpecialTokens: false }) : `token_id:${id}`;
}

/** A token with its log-probabilities (a generated token, or a prompt token under `echo`; none: null entries). */
export interface LoggedToken {
  token: number;
  logprobs?: TokenLogprobs | null | undefined;
}

/**
 * `echo`'s prompt part: the prompt tokens with the log-probabilities the engine reported on the first generated
 * token (`logprobs.prompt`, vLLM's prompt_logprobs; the first prompt token's are null). Without them, null entries.
 */
export function promptLoggedTokens(prompt: readonly number[], first: DeliveredToken | undefined): LoggedToken[] {
  const reported = first?.logprobs?.prompt;
  return prompt.map((token, i) => ({ token, logprobs: reported?.[i] ?? null }));
}

/** The tokens' completions logprobs entries, the first one's text starting at `startOffset` (the caller tracks it). */
export function completionLogprobsOf(backend: Pick<GenerationBackend, 'tokenizer'>, tokens: readonly LoggedToken[], startOffset: number): NonNullable<CompletionLogprobs> {
  const out: NonNullable<CompletionLogprobs> = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  let offset = startOffset;
  for (const t of tokens) {
    const text = tokenText(backend, t.token);
    out.tokens.push(text);
    out.text_offset.push(offset);
    offset += text.length;
    if (!t.logprobs) {
      out.token_logprobs.push(null);
      out.top_logprobs.push(null);
      continue;
    }
    out.token_logprobs.push(floor(t.logprobs.logprob));
    const top: Record<string, number> = {};
    for (const alt of t.logprobs.top) {
      const name = tokenText(backend, alt.token);
      if (!(name in top)) top[name] = floor(alt.logprob);
    }
    if (!(text in top)) top[text] = floor(t.logprobs.logprob);
    out.top_logprobs.push(top);
  }
  return out;
}

/** Total text length of the tokens' names (the next text offset after them). */
export function textLength(backend: Pick<GenerationBackend, 'tokenizer'>, tokens: readonly LoggedToken[]): number {
  return tokens.reduce((n, t) => n + tokenText(backend, t.token).length, 0);
}

const encoder = new TextEncoder();
const bytesOf = (text: string): number[] => [...encoder.encode(text)];

/** Chat's logprobs `content` entries for the tokens. */
export function chatLogprobsOf(backend: Pick<GenerationBackend, 'tokenizer'>, tokens: readonly DeliveredToken[]): NonNullable<ChatLogprobs> {
  return {
    content: tokens.map((t) => {
      const token = tokenText(backend, t.token);
      return {
        token,
        logprob: floor(t.logprobs?.logprob ?? LOGPROB_FLOOR),
        bytes: bytesOf(token),
        top_logprobs: (t.logprobs?.top ?? []).map((alt) => {
          const name = tokenText(backend, alt.token);
          return { token: name, logprob: floor(alt.logprob), bytes: bytesOf(name) };
        }),
      };
    }),
  };
}
