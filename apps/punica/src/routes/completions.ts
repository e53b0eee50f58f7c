/**
 * POST /v1/completions: OpenAI's text completion. `prompt` is a string or token ids (or a one-element list of
 * either); `model` picks the base model or an adapter. Streams with `stream: true`.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { badRequest } from '../openai/errors.js';
import {
  completionBudget,
  completionId,
  DEFAULT_COMPLETION_MAX_TOKENS,
  type GenerationPlan,
  type ResponseShape,
  rejectUnsupportedSampling,
  respond,
  samplingOf,
  stopStrings,
} from '../openai/generation.js';
import { CompletionRequest, CompletionResponse, ErrorBody } from '../openai/schemas.js';

const completionShape: ResponseShape = {
  body: (plan, created, result, usage) => ({
    id: plan.id,
    object: 'text_completion',
    created,
    model: plan.model,
    choices: [{ index: 0, text: result.text, logprobs: null, finish_reason: result.finishReason === 'length' ? 'length' : 'stop' }],
    usage,
  }),
  opening: () => [],
  chunk: (plan, created, text, finishReason) => ({
    id: plan.id,
    object: 'text_completion',
    created,
    model: plan.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }],
  }),
  usageChunk: (plan, created, usage) => ({ id: plan.id, object: 'text_completion', created, model: plan.model, choices: [], usage }),
};

const completions: FastifyPluginAsyncTypebox = async (app) => {
  app.post(
    '/v1/completions',
    { schema: { body: CompletionRequest, response: { 200: CompletionResponse, '4xx': ErrorBody, '5xx': ErrorBody } } },
    async (request, reply) => {
      const body = request.body;
      rejectUnsupportedSampling(body);
      if (body.best_of !== undefined && body.best_of !== null && body.best_of > 1) throw badRequest('best_of > 1 is not supported', 'best_of');
      if (body.logprobs !== undefined && body.logprobs !== null) throw badRequest('logprobs are not supported', 'logprobs');
      if (body.echo === true) throw badRequest('echo is not supported', 'echo');
      if (body.suffix) throw badRequest('suffix is not supported', 'suffix');

      const { adapter } = app.models.resolve(body.model);
      const prompt = promptTokens(body.prompt, app.tokenizer, app.modelInfo.vocabSize);
      const maxTokens = completionBudget(prompt.length, body.max_tokens, DEFAULT_COMPLETION_MAX_TOKENS, app.modelInfo.contextLength, 'prompt');
      const plan: GenerationPlan = {
        id: completionId('cmpl-'),
        model: body.model,
        adapter,
        prompt,
        maxTokens,
        sampling: samplingOf(body),
        stop: stopStrings(body.stop),
        ignoreEos: body.ignore_eos ?? false,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
      };
      return respond(app.generationDeps, plan, completionShape, request, reply);
    },
  );
};

/** The prompt as token ids: text is encoded (BOS included, by the tokenizer's template); ids are checked. */
export function promptTokens(prompt: CompletionRequest['prompt'], tokenizer: { encode(text: string): number[] }, vocabSize: number): number[] {
  let single: string | number[];
  if (typeof prompt === 'string') single = prompt;
  else if (prompt.length > 0 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) {
    if (prompt.length > 1) throw badRequest(`batched prompts are not supported: got ${prompt.length} prompts, send one per request`, 'prompt');
    single = prompt[0] as string | number[];
  } else single = prompt as number[];

  if (typeof single === 'string') {
    if (single.length === 0) throw badRequest('prompt must not be empty', 'prompt');
    return tokenizer.encode(single);
  }
  if (single.length === 0) throw badRequest('prompt must not be empty', 'prompt');
  const bad = single.findIndex((t) => t >= vocabSize);
  if (bad >= 0) throw badRequest(`prompt[${bad}] = ${single[bad]} is not a token id of this model (vocabulary size ${vocabSize})`, 'prompt');
  return [...single];
}

export default completions;
