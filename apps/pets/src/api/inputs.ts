/**
 * PetS's preprocessing stage (pets.md §3.5) on the HTTP thread: a classify request's texts become token ids (and
 * token types for sentence pairs), and every limit is checked here, before anything reaches the engine:
 *
 *   more texts than --max-batch-inputs        413 too_many_inputs
 *   an input longer than the model's positions 422 input_exceeds_model_positions (the model cannot encode it)
 *   an input longer than --max-input-tokens   413 input_too_long (this server's policy)
 *
 * The tokenizer is the shared model's tokenizer.json, read here as well as in the worker: it is pure JS, so the
 * HTTP thread never loads the native addon, and tokenizing here keeps the worker's loop for forward passes.
 */
import type { TextTokenizer } from '@tessera/engine';

import type { EncodedInput } from '../engine/protocol.js';
import { ApiError, badRequest } from './errors.js';
import type { ClassifyRequest } from './schemas.js';

export interface InputLimits {
  /** The shared model's max_position_embeddings. */
  maxPositions: number;
  /** The server's own limit (≤ maxPositions normally; a larger value leaves the model's limit in force). */
  maxInputTokens: number;
  maxBatchInputs: number;
  /** The model's type_vocab_size: pairs need token type 1. */
  typeVocabSize: number;
}

/** The texts of a request as a list, and the matching pair texts (or null). */
function texts(body: ClassifyRequest): { inputs: string[]; pairs: string[] | null } {
  const inputs = typeof body.input === 'string' ? [body.input] : body.input;
  if (body.input_pair === undefined) return { inputs, pairs: null };
  const pairs = typeof body.input_pair === 'string' ? [body.input_pair] : body.input_pair;
  if (typeof body.input !== typeof body.input_pair || pairs.length !== inputs.length) {
    throw badRequest(
      `input_pair must have the shape of input (${typeof body.input === 'string' ? 'a string' : `an array of ${inputs.length} strings`})`,
      'input_pair',
      'pair_shape_mismatch',
    );
  }
  return { inputs, pairs };
}

/** BERT's pair template: [CLS] a [SEP] b [SEP], token type 0 through the first [SEP], 1 after it. */
function encodePair(tokenizer: TextTokenizer, a: string, b: string): EncodedInput {
  const sep = tokenizer.specialTokenIds.sep;
  if (sep === undefined) throw badRequest('input_pair needs a tokenizer with a [SEP] token; this shared model has none', 'input_pair', 'pairs_unsupported');
  const first = tokenizer.encode(a);
  const second = tokenizer.encode(b, { addSpecialTokens: false });
  return { ids: [...first, ...second, sep], tokenTypes: [...first.map(() => 0), ...second.map(() => 1), 1] };
}

/** Tokenizes a classify request and checks its limits; throws an {@link ApiError} naming the input that broke one. */
export function encodeClassifyInputs(body: ClassifyRequest, tokenizer: TextTokenizer, limits: InputLimits): EncodedInput[] {
  const { inputs, pairs } = texts(body);
  if (inputs.length > limits.maxBatchInputs) {
    throw new ApiError(413, `${inputs.length} inputs in one request; the limit is ${limits.maxBatchInputs} (--max-batch-inputs): split the request`, {
      param: 'input',
      code: 'too_many_inputs',
      details: { inputs: inputs.length, limit: limits.maxBatchInputs },
    });
  }
  if (pairs !== null && limits.typeVocabSize < 2) {
    throw badRequest(`input_pair needs token type 1; this shared model has type_vocab_size ${limits.typeVocabSize}`, 'input_pair', 'pairs_unsupported');
  }
  return inputs.map((text, index) => {
    const encoded = pairs === null ? { ids: tokenizer.encode(text) } : encodePair(tokenizer, text, pairs[index]!);
    const tokens = encoded.ids.length;
    const param = typeof body.input === 'string' ? 'input' : `input[${index}]`;
    if (tokens > limits.maxPositions) {
      throw new ApiError(422, `${param} is ${tokens} tokens long; the shared model encodes at most ${limits.maxPositions} (max_position_embeddings)`, {
        param,
        code: 'input_exceeds_model_positions',
        details: { index, tokens, limit: limits.maxPositions },
      });
    }
    if (tokens > limits.maxInputTokens) {
      throw new ApiError(413, `${param} is ${tokens} tokens long; this server accepts at most ${limits.maxInputTokens} (--max-input-tokens)`, {
        param,
        code: 'input_too_long',
        details: { index, tokens, limit: limits.maxInputTokens },
      });
    }
    return encoded;
  });
}

/** softmax over a row of logits (max-subtracted, so large logits do not overflow). */
export function softmax(logits: readonly number[]): number[] {
  let max = -Infinity;
  for (const v of logits) if (v > max) max = v;
  const exps = logits.map((v) => Math.exp(v - max));
  const sum = exps.reduce((a, b) => a + b, 0);
  return exps.map((e) => e / sum);
}
