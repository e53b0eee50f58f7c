/**
 * Log-probabilities of a sampled token, as vLLM reports them by default (`logprobs_mode: raw_logprobs`): the
 * log-softmax of the raw logits row the token was sampled from (before temperature, top-k and top-p), in float64.
 *
 *   logprob(t) = x_t − (m + log Σ_j exp(x_j − m)),  m = max_j x_j
 *
 * plus the k most likely tokens (most likely first, ties by lower id), k ≤ MAX_TOP_LOGPROBS. One pass for the
 * normaliser and one for the top-k (a small sorted insertion list), so O(V·k) at worst and O(V) typically.
 */
import { MAX_TOP_LOGPROBS, type TokenLogprobs } from '@tessera/core';
import { InvalidArgumentError } from '@tessera/native';

export { MAX_TOP_LOGPROBS };

/** Checks a request's `logprobs` count: an integer in 0..MAX_TOP_LOGPROBS. */
export function validateTopLogprobs(k: unknown): number {
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 0 || k > MAX_TOP_LOGPROBS) {
    throw new InvalidArgumentError(`logprobs must be an integer from 0 to ${MAX_TOP_LOGPROBS}, got ${String(k)}`);
  }
  return k;
}

/** The log-normaliser of a logits row (log Σ exp x_j), in float64; +Infinity logits are not expected (finite model output). */
export function logSumExp(logits: Float32Array): number {
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) if (logits[i]! > max) max = logits[i]!;
  if (max === -Infinity) return -Infinity;
  let sum = 0;
  for (let i = 0; i < logits.length; i++) sum += Math.exp(logits[i]! - max);
  return max + Math.log(sum);
}

/** `token`'s log-probability under `logits` and the `k` most likely tokens' (see the file comment). */
export function tokenLogprobs(logits: Float32Array, token: number, k: number): TokenLogprobs {
  const lse = logSumExp(logits);
  // The k best as (id, logit), sorted by logit descending then id ascending; a later id never displaces an equal one.
  const ids: number[] = [];
  const vals: number[] = [];
  if (k > 0) {
    for (let i = 0; i < logits.length; i++) {
      const x = logits[i]!;
      if (ids.length === k && !(x > vals[k - 1]!)) continue;
      let at = ids.length === k ? k - 1 : ids.length;
      while (at > 0 && vals[at - 1]! < x) at--;
      if (ids.length === k) {
        ids.pop();
        vals.pop();
      }
      ids.splice(at, 0, i);
      vals.splice(at, 0, x);
    }
  }
  return { logprob: logits[token]! - lse, top: ids.map((id, j) => ({ token: id, logprob: vals[j]! - lse })) };
}
