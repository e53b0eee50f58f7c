/**
 * POST /v1/chat/completions: OpenAI's chat API over the documented role-prefixed chat template
 * (src/openai/chat-template.ts). Without max_tokens / max_completion_tokens the completion may use whatever the
 * context leaves after the prompt (as vLLM does).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { renderChat } from '../openai/chat-template.js';
import { badRequest } from '../openai/errors.js';
import {
  completionBudget,
  completionId,
  type GenerationPlan,
  type ResponseShape,
  rejectUnsupportedSampling,
  respond,
  samplingOf,
  stopStrings,
} from '../openai/generation.js';
import { ChatCompletionRequest, ChatCompletionResponse, ErrorBody } from '../openai/schemas.js';

const OBJECT = 'chat.completion.chunk';

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
    { id: plan.id, object: OBJECT, created, model: plan.model, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
  ],
  chunk: (plan, created, text, finishReason) => ({
    id: plan.id,
    object: OBJECT,
    created,
    model: plan.model,
    choices: [{ index: 0, delta: finishReason === null ? { content: text } : {}, logprobs: null, finish_reason: finishReason }],
  }),
  usageChunk: (plan, created, usage) => ({ id: plan.id, object: OBJECT, created, model: plan.model, choices: [], usage }),
};

const chatCompletions: FastifyPluginAsyncTypebox = async (app) => {
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

      const { adapter } = app.models.resolve(body.model);
      const prompt = app.tokenizer.encode(renderChat(body.messages));
      const plan: GenerationPlan = {
        id: completionId('chatcmpl-'),
        model: body.model,
        adapter,
        prompt,
        maxTokens: completionBudget(prompt.length, maxCompletionTokens ?? maxTokens, null, app.modelInfo.contextLength, 'messages'),
        sampling: samplingOf(body),
        stop: stopStrings(body.stop),
        ignoreEos: body.ignore_eos ?? false,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
      };
      return respond(app.generationDeps, plan, chatShape, request, reply);
    },
  );
};

export default chatCompletions;
