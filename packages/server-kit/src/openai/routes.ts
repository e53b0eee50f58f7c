/**
 * OpenAI's generation endpoints, for any server whose engine streams tokens over the host protocol:
 *
 *   POST /v1/completions        `prompt` is a string or token ids (or a one-element list of either); without
 *                               max_tokens, 16 tokens (OpenAI's default for this API)
 *   POST /v1/chat/completions   `messages` through the chat template (chat-template.ts); without max_tokens /
 *                               max_completion_tokens, whatever the context leaves after the prompt (as vLLM)
 *
 * `model` picks the base model or an adapter (the server's `resolve`); both stream with `stream: true`.
 *
 *   await app.register(openaiGenerationRoutes, { backend: { resolve, tokenizer, contextLength, vocabSize, submit, cancel } });
 *
 * The server validates with TypeBoxValidatorCompiler (createTesseraServer's validatorCompiler): fastify's default
 * ajv would coerce types (a token id list into strings).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { renderChat } from './chat-template.js';
import {
  badRequest,
  completionBudget,
  completionId,
  DEFAULT_COMPLETION_MAX_TOKENS,
  type GenerationBackend,
  type GenerationPlan,
  type ResponseShape,
  rejectUnsupportedSampling,
  respond,
  samplingOf,
  stopStrings,
} from './generation.js';
import { ChatCompletionRequest, ChatCompletionResponse, CompletionRequest, CompletionResponse, ErrorBody } from './schemas.js';

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

const CHAT_CHUNK = 'chat.completion.chunk';

const chatShape: ResponseShape = {
  body: (plan, created, result, usage) => ({
    id: plan.id,
    object: 'chat.completion',
    created,
    model: plan.model,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: result.text },
        logprobs: null,
        finish_reason: result.finishReason === 'length' ? 'length' : 'stop',
      },
    ],
    usage,
  }),
  opening: (plan, created) => [
    { id: plan.id, object: CHAT_CHUNK, created, model: plan.model, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
  ],
  chunk: (plan, created, text, finishReason) => ({
    id: plan.id,
    object: CHAT_CHUNK,
    created,
    model: plan.model,
    choices: [{ index: 0, delta: finishReason === null ? { content: text } : {}, logprobs: null, finish_reason: finishReason }],
  }),
  usageChunk: (plan, created, usage) => ({ id: plan.id, object: CHAT_CHUNK, created, model: plan.model, choices: [], usage }),
};

export const openaiGenerationRoutes: FastifyPluginAsyncTypebox<{ backend: GenerationBackend }> = async (app, { backend }) => {
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

      const { adapter } = backend.resolve(body.model);
      const prompt = promptTokens(body.prompt, backend.tokenizer, backend.vocabSize);
      const maxTokens = completionBudget(prompt.length, body.max_tokens, DEFAULT_COMPLETION_MAX_TOKENS, backend.contextLength, 'prompt');
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
      return respond(backend, plan, completionShape, request, reply);
    },
  );

  app.post(
    '/v1/chat/completions',
    { schema: { body: ChatCompletionRequest, response: { 200: ChatCompletionResponse, '4xx': ErrorBody, '5xx': ErrorBody } } },
    async (request, reply) => {
      const body = request.body;
      rejectUnsupportedSampling(body);
      if (body.logprobs === true || (body.top_logprobs ?? 0) > 0) throw badRequest('logprobs are not supported', 'logprobs');
      if (body.tools && body.tools.length > 0) throw badRequest('tools (function calling) are not supported', 'tools');
      if (body.tool_choice !== undefined && body.tool_choice !== null && body.tool_choice !== 'none' && body.tool_choice !== 'auto') {
        throw badRequest('tool_choice is not supported', 'tool_choice');
      }
      if (body.response_format && body.response_format.type !== 'text') {
        throw badRequest(`response_format ${JSON.stringify(body.response_format.type)} is not supported (only "text")`, 'response_format');
      }
      const { max_tokens: maxTokens, max_completion_tokens: maxCompletionTokens } = body;
      if (maxTokens != null && maxCompletionTokens != null && maxTokens !== maxCompletionTokens) {
        throw badRequest(`max_tokens (${maxTokens}) and max_completion_tokens (${maxCompletionTokens}) disagree; give one of them`, 'max_completion_tokens');
      }

      const { adapter } = backend.resolve(body.model);
      const prompt = backend.tokenizer.encode(renderChat(body.messages));
      const plan: GenerationPlan = {
        id: completionId('chatcmpl-'),
        model: body.model,
        adapter,
        prompt,
        maxTokens: completionBudget(prompt.length, maxCompletionTokens ?? maxTokens, null, backend.contextLength, 'messages'),
        sampling: samplingOf(body),
        stop: stopStrings(body.stop),
        ignoreEos: body.ignore_eos ?? false,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
      };
      return respond(backend, plan, chatShape, request, reply);
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
