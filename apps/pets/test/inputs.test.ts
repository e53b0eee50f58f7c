/**
 * Preprocessing on the HTTP thread: texts and sentence pairs become token ids with the shared model's tokenizer,
 * and every limit is an ApiError naming the input and the limit.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { generateModel, TextTokenizer } from '@tessera/engine';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { ApiError } from '../src/api/errors.js';
import { encodeClassifyInputs, type InputLimits, softmax } from '../src/api/inputs.js';

let dir: string;
let tokenizer: TextTokenizer;
const limits: InputLimits = { maxPositions: 128, maxInputTokens: 40, maxBatchInputs: 3, typeVocabSize: 2 };

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'tessera-pets-inputs-'));
  generateModel(join(dir, 'bert'), { family: 'encoder', size: 'tiny', seed: 3 });
  tokenizer = TextTokenizer.fromDir(join(dir, 'bert'));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

function apiError(fn: () => unknown): ApiError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApiError);
    return err as ApiError;
  }
  throw new Error('expected an ApiError');
}

describe('encodeClassifyInputs', () => {
  it('encodes one text or a list with the tokenizer template ([CLS] … [SEP]), token types omitted', () => {
    const one = encodeClassifyInputs({ input: 'the movie was great' }, tokenizer, limits);
    expect(one).toEqual([{ ids: tokenizer.encode('the movie was great') }]);
    expect(one[0]!.ids[0]).toBe(tokenizer.specialTokenIds.cls);
    expect(one[0]!.ids.at(-1)).toBe(tokenizer.specialTokenIds.sep);
    const many = encodeClassifyInputs({ input: ['a', 'b c'] }, tokenizer, limits);
    expect(many.map((m) => m.ids)).toEqual([tokenizer.encode('a'), tokenizer.encode('b c')]);
  });

  it('encodes pairs as [CLS] a [SEP] b [SEP] with token types 0 then 1', () => {
    const [pair] = encodeClassifyInputs({ input: 'a man plays', input_pair: 'someone plays music' }, tokenizer, limits);
    const a = tokenizer.encode('a man plays');
    const b = tokenizer.encode('someone plays music', { addSpecialTokens: false });
    expect(pair!.ids).toEqual([...a, ...b, tokenizer.specialTokenIds.sep]);
    expect(pair!.tokenTypes).toEqual([...a.map(() => 0), ...b.map(() => 1), 1]);
  });

  it('refuses pairs whose shape differs from input, and pairs on a model without token type 1', () => {
    expect(apiError(() => encodeClassifyInputs({ input: ['a', 'b'], input_pair: ['c'] }, tokenizer, limits)).toBody().error).toMatchObject({ code: 'pair_shape_mismatch', param: 'input_pair' });
    expect(apiError(() => encodeClassifyInputs({ input: 'a', input_pair: ['c'] }, tokenizer, limits)).statusCode).toBe(400);
    expect(apiError(() => encodeClassifyInputs({ input: 'a', input_pair: 'b' }, tokenizer, { ...limits, typeVocabSize: 1 })).toBody().error.code).toBe('pairs_unsupported');
  });

  it('413 for more inputs than --max-batch-inputs', () => {
    const err = apiError(() => encodeClassifyInputs({ input: ['a', 'b', 'c', 'd'] }, tokenizer, limits));
    expect(err.statusCode).toBe(413);
    expect(err.toBody().error).toMatchObject({ code: 'too_many_inputs', inputs: 4, limit: 3 });
  });

  it('422 for an input beyond the model positions, 413 beyond --max-input-tokens, naming the input', () => {
    const long = Array.from({ length: 200 }, (_, i) => `w${i}`).join(' ');
    const tooLongForModel = apiError(() => encodeClassifyInputs({ input: ['ok', long] }, tokenizer, { ...limits, maxInputTokens: 1000 }));
    expect(tooLongForModel.statusCode).toBe(422);
    expect(tooLongForModel.toBody().error).toMatchObject({ code: 'input_exceeds_model_positions', param: 'input[1]', index: 1, limit: 128 });
    expect(tooLongForModel.toBody().error.tokens).toBeGreaterThan(128);

    const medium = 'the movie was great and '.repeat(10);
    const mediumTokens = tokenizer.encode(medium).length;
    expect(mediumTokens).toBeGreaterThan(40);
    expect(mediumTokens).toBeLessThanOrEqual(128);
    const overPolicy = apiError(() => encodeClassifyInputs({ input: medium }, tokenizer, limits));
    expect(overPolicy.statusCode).toBe(413);
    expect(overPolicy.toBody().error).toMatchObject({ code: 'input_too_long', param: 'input', index: 0, tokens: mediumTokens, limit: 40 });
  });
});

describe('softmax', () => {
  it('sums to 1, keeps the order, and does not overflow on large logits', () => {
    const p = softmax([1, 2, 3]);
    expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(p[2]).toBeGreaterThan(p[1]!);
    expect(p[0]).toBeCloseTo(Math.exp(1) / (Math.exp(1) + Math.exp(2) + Math.exp(3)), 12);
    expect(softmax([1000, 1000])).toEqual([0.5, 0.5]);
  });
});
