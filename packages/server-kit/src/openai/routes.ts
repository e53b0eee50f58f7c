/**
 * OpenAI's generation endpoints, for any server whose engine streams tokens over the host protocol:
 *
 *   POST /v1/completions        `prompt` is a string, token ids, or a list of either (a batch: one engine request
 *                               per prompt, choices in prompt order); without max_tokens, 16 tokens (OpenAI's
 *                               default for this API); `echo` puts the prompt before each choice's text (and, with
 *                               `logprobs`, its tokens first in the logprobs: the engine's prompt logprobs);
 *                               `echo` with `max_tokens: 0` returns the prompt alone (scoring, as vLLM)
 *   POST /v1/chat/completions   `messages` through the chat template (chat-template.ts); without max_tokens /
 *                               max_completion_tokens, whatever the context leaves after the prompt (as vLLM)
 *
 *   POST /tokenize              vLLM's: `{model, prompt[, add_special_tokens]}` or `{model, messages}` (the chat
 *                               template's prompt, as /v1/chat/completions sends it) → `{count, max_model_len, tokens}`
 *   POST /detokenize            vLLM's: `{model, tokens}` → `{prompt}` (special tokens kept)
 *
 * `model` picks the base model or an adapter (the server's `resolve`); both stream with `stream: true`; both take
 * `n` (n samples per prompt, choice index p·n + i; with `seed`, sample i uses seed + i).
 *
 *   await app.register(openaiGenerationRoutes, { backend: { resolve, tokenizer, contextLength, vocabSize, submit, cancel } });
 *
 * The server validates with TypeBoxValidatorCompiler (createTesseraServer's validatorCompiler): fastify's default
 * ajv would coerce types (a token id list into strings).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { MAX_TOP_LOGPROBS } from '@tessera/core';

import { renderChat } from './chat-template.js';
import {
  badRequest,
  completionBudget,
  completionId,
  DEFAULT_COMPLETION_MAX_TOKENS,
  type GenerationBackend,
  type ChoiceOutcome,
  type ChoicePlan,
  type DeliveredToken,
  type GenerationPlan,
  planChoices,
  type ResponseShape,
  rejectUnsupportedSampling,
  respond,
  samplingOf,
  stopStrings,
} from './generation.js';
import { chatLogprobsOf, completionLogprobsOf, type LoggedToken, promptLoggedTokens, textLength } from './logprobs.js';
import {
  ChatCompletionRequest,
  ChatCompletionResponse,
  type CompletionLogprobs,
  CompletionRequest,
  CompletionResponse,
  DetokenizeRequest,
  DetokenizeResponse,
  ErrorBody,
  TokenizeRequest,
  TokenizeResponse,
} from './schemas.js';

const finishOf = (o: ChoiceOutcome) => o.finishReason;

/**
 * The logged tokens of a choice's part: under `echo`, the prompt's (with the prompt logprobs that came on the first
 * generated token) before the first generated token; the generated ones unless the choice is prompt-only.
 */
function loggedTokens(choice: ChoicePlan, generated: readonly DeliveredToken[], withPrompt: boolean): LoggedToken[] {
  const prompt = withPrompt ? promptLoggedTokens(choice.prompt, generated[0]) : [];
  return choice.promptOnly ? prompt : [...prompt, ...generated];
}

function completionShape(backend: GenerationBackend): ResponseShape {
  // Streaming: where each choice's next token text starts (text_offset), and the choices whose prompt was echoed.
  const offsets = new WeakMap<ChoicePlan, number>();
  const echoed = new WeakSet<ChoicePlan>();
  return {
    body: (plan, created, choices, usage) => ({
      id: plan.id,
      object: 'text_completion',
      created,
      model: plan.model,
      choices: choices.map((o) => ({
        index: o.plan.index,
        text: (o.plan.promptText ?? '') + o.text,
        logprobs: plan.logprobs === null ? null : completionLogprobsOf(backend, loggedTokens(o.plan, o.tokens, o.plan.promptText !== undefined), 0),
        finish_reason: finishOf(o),
      })),
      usage,
    }),
    opening: () => [],
    chunk: (plan, created, choice, text, token, finishReason) => {
      // echo: the first token's chunk starts with the prompt (its text, and its tokens' logprobs), as vLLM's.
      const echo = token !== null && choice.promptText !== undefined && !echoed.has(choice);
      if (echo) echoed.add(choice);
      if (token && choice.promptOnly) text = '';
      if (echo) text = choice.promptText + text;
      let logprobs: CompletionLogprobs = null;
      if (plan.logprobs !== null && token) {
        const offset = offsets.get(choice) ?? 0;
        const logged = loggedTokens(choice, [token], echo);
        logprobs = completionLogprobsOf(backend, logged, offset);
        offsets.set(choice, offset + textLength(backend, logged));
      }
      return { id: plan.id, object: 'text_completion', created, model: plan.model, choices: [{ index: choice.index, text, logprobs, finish_reason: finishReason }] };
    },
    usageChunk: (plan, created, usage) => ({ id: plan.id, object: 'text_completion', created, model: plan.model, choices: [], usage }),
  };
}

const CHAT_CHUNK = 'chat.completion.chunk';

function chatShape(backend: GenerationBackend): ResponseShape {
  return {
    body: (plan, created, choices, usage) => ({
      id: plan.id,
      object: 'chat.completion',
      created,
      model: plan.model,
      choices: choices.map((o) => ({
        index: o.plan.index,
        message: { role: 'assistant', content: o.text },
        logprobs: plan.logprobs === null ? null : chatLogprobsOf(backend, o.tokens),
        finish_reason: finishOf(o),
      })),
      usage,
    }),
    opening: (plan, created, choice) => [
      { id: plan.id, object: CHAT_CHUNK, created, model: plan.model, choices: [{ index: choice.index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }] },
    ],
    chunk: (plan, created, choice, text, token, finishReason) => ({
      id: plan.id,
      object: CHAT_CHUNK,
      created,
      model: plan.model,
      choices: [
        {
          index: choice.index,
          delta: finishReason === null ? { content: text } : {},
          logprobs: plan.logprobs !== null && token ? chatLogprobsOf(backend, [token]) : null,
          finish_reason: finishReason,
        },
      ],
    }),
    usageChunk: (plan, created, usage) => ({ id: plan.id, object: CHAT_CHUNK, created, model: plan.model, choices: [], usage }),
  };
}

export const openaiGenerationRoutes: FastifyPluginAsyncTypebox<{ backend: GenerationBackend }> = async (app, { backend }) => {
  const completions = completionShape(backend);
  const chat = chatShape(backend);
  app.post(
    '/v1/completions',
    { schema: { body: CompletionRequest, response: { 200: CompletionResponse, '4xx': ErrorBody, '5xx': ErrorBody } } },
    async (request, reply) => {
      const body = request.body;
      rejectUnsupportedSampling(body);
      if (body.best_of !== undefined && body.best_of !== null && body.best_of > 1) throw badRequest('best_of > 1 is not supported', 'best_of');
      if (body.logprobs != null && body.logprobs > MAX_TOP_LOGPROBS) throw badRequest(`logprobs must be at most ${MAX_TOP_LOGPROBS}, got ${body.logprobs}`, 'logprobs');
      if (body.suffix) throw badRequest('suffix is not supported', 'suffix');
      const echo = body.echo === true;
      // max_tokens 0 scores the prompt (vLLM allows it with echo): one token is generated and dropped.
      const promptOnly = body.max_tokens === 0;
      if (promptOnly && !echo) throw badRequest('max_tokens must be >= 1 (0 only with echo)', 'max_tokens');

      const { adapter } = backend.resolve(body.model);
      const prompts = promptTokens(body.prompt, backend.tokenizer, backend.vocabSize);
      const id = completionId('cmpl-');
      const budget = (prompt: number[]) =>
        completionBudget(prompt.length, promptOnly ? 1 : body.max_tokens, DEFAULT_COMPLETION_MAX_TOKENS, backend.contextLength, 'prompt');
      const sampling = samplingOf(body);
      if (echo && body.logprobs != null) sampling.promptLogprobs = body.logprobs;
      const choices = planChoices(id, prompts, body.n ?? 1, sampling, body.seed != null, budget);
      if (echo) {
        const texts = promptTexts(body.prompt, prompts, backend.tokenizer);
        for (const c of choices) {
          c.promptText = texts[c.promptIndex]!;
          if (promptOnly) c.promptOnly = true;
        }
      }
      const plan: GenerationPlan = {
        id,
        model: body.model,
        adapter,
        choices,
        stop: stopStrings(body.stop),
        ignoreEos: body.ignore_eos ?? false,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        logprobs: body.logprobs ?? null,
      };
      return respond(backend, plan, completions, request, reply);
    },
  );

  app.post(
    '/v1/chat/completions',
    { schema: { body: ChatCompletionRequest, response: { 200: ChatCompletionResponse, '4xx': ErrorBody, '5xx': ErrorBody } } },
    async (request, reply) => {
      const body = request.body;
      rejectUnsupportedSampling(body);
      const topLogprobs = body.top_logprobs ?? 0;
      if (topLogprobs > MAX_TOP_LOGPROBS) throw badRequest(`top_logprobs must be at most ${MAX_TOP_LOGPROBS}, got ${topLogprobs}`, 'top_logprobs');
      if (topLogprobs > 0 && body.logprobs !== true) throw badRequest('top_logprobs needs logprobs: true', 'top_logprobs');
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
      const id = completionId('chatcmpl-');
      const budget = () => completionBudget(prompt.length, maxCompletionTokens ?? maxTokens, null, backend.contextLength, 'messages');
      const plan: GenerationPlan = {
        id,
        model: body.model,
        adapter,
        choices: planChoices(id, [prompt], body.n ?? 1, samplingOf(body), body.seed != null, budget),
        stop: stopStrings(body.stop),
        ignoreEos: body.ignore_eos ?? false,
        stream: body.stream ?? false,
        includeUsage: body.stream_options?.include_usage ?? false,
        logprobs: body.logprobs === true ? topLogprobs : null,
      };
      return respond(backend, plan, chat, request, reply);
    },
  );

  app.post('/tokenize', { schema: { body: TokenizeRequest, response: { 200: TokenizeResponse, '4xx': ErrorBody } } }, async (request) => {
    const body = request.body;
    backend.resolve(body.model);
    const tokens =
      'messages' in body && Array.isArray(body.messages)
        ? backend.tokenizer.encode(renderChat(body.messages))
        : backend.tokenizer.encode((body as { prompt: string }).prompt, { addSpecialTokens: (body as { add_special_tokens?: boolean | null }).add_special_tokens ?? true });
    return { count: tokens.length, max_model_len: backend.contextLength, tokens, token_strs: null };
  });

  app.post('/detokenize', { schema: { body: DetokenizeRequest, response: { 200: DetokenizeResponse, '4xx': ErrorBody } } }, async (request) => {
    const { model, tokens } = request.body;
    backend.resolve(model);
    const bad = tokens.findIndex((t) => t >= backend.vocabSize);
    if (bad >= 0) throw badRequest(`tokens[${bad}] = ${tokens[bad]} is not a token id of this model (vocabulary size ${backend.vocabSize})`, 'tokens');
    if (!backend.tokenizer.decode) throw badRequest('this server cannot detokenize', 'tokens');
    return { prompt: backend.tokenizer.decode(tokens, { skipSpecialTokens: false }) };
  });
};

/**
 * The prompts as token-id lists: a string, a list of token ids, a list of strings or a list of token-id lists (a
 * batch: one prompt each). Text is encoded (BOS included, by the tokenizer's template); ids are checked.
 */
export function promptTokens(prompt: CompletionRequest['prompt'], tokenizer: { encode(text: string): number[] }, vocabSize: number): number[][] {
  if (typeof prompt === 'string') return [onePrompt(prompt, tokenizer, vocabSize, 'prompt')];
  if (prompt.length > 0 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0]))) {
    const list = prompt as (string | number[])[];
    return list.map((p, i) => onePrompt(p, tokenizer, vocabSize, list.length === 1 ? 'prompt' : `prompt[${i}]`));
  }
  return [onePrompt(prompt as number[], tokenizer, vocabSize, 'prompt')];
}

/**
 * `echo`'s text of each prompt: a text prompt as sent; a token-id prompt decoded (special tokens skipped, as the
 * completion's own text is), or '' when the server cannot decode.
 */
function promptTexts(prompt: CompletionRequest['prompt'], ids: readonly number[][], tokenizer: GenerationBackend['tokenizer']): string[] {
  if (typeof prompt === 'string') return [prompt];
  const list = prompt.length > 0 && (typeof prompt[0] === 'string' || Array.isArray(prompt[0])) ? (prompt as (string | number[])[]) : null;
  return ids.map((p, i) => {
    const sent = list?.[i];
    if (typeof sent === 'string') return sent;
    return tokenizer.decode ? tokenizer.decode(p, { skipSpecialTokens: true }) : '';
  });
}

function onePrompt(single: string | number[], tokenizer: { encode(text: string): number[] }, vocabSize: number, name: string): number[] {
  if (typeof single === 'string') {
    if (single.length === 0) throw badRequest(`${name} must not be empty`, 'prompt');
    return tokenizer.encode(single);
  }
  if (single.length === 0) throw badRequest(`${name} must not be empty`, 'prompt');
  const bad = single.findIndex((t) => t >= vocabSize);
  if (bad >= 0) throw badRequest(`${name}[${bad}] = ${single[bad]} is not a token id of this model (vocabulary size ${vocabSize})`, 'prompt');
  return [...single];
}
