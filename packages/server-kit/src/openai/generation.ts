/**
 * The generation path shared by /v1/completions and /v1/chat/completions (routes.ts), after the body passed its schema:
 *
 *   rejectUnsupported  → 400 for fields this server cannot honour (n > 1, logprobs, penalties, …)
 *   backend.resolve    → which adapter (the server's 404 for an unknown model name)
 *   tokens + limits    → prompt token ids; max_tokens checked against the context (400 context_length_exceeded)
 *   engine.submit      → the host protocol (worker thread or Redis); the first event is awaited before the status
 *                        line is sent, so a failure at admission is still a proper 4xx/5xx and not a 200 stream with an error in it
 *   respond            → one JSON body, or SSE chunks (`data: {...}`, then `data: [DONE]`)
 *
 * A client that disconnects before the end cancels its request in the engine (its KV pages are freed at once).
 */
import { randomBytes } from 'node:crypto';

import type { FastifyReply, FastifyRequest } from 'fastify';

import type { EventStream, FinishedResult, GenerateRequest, StreamOutput, TokenEvent } from '@tessera/cluster';

import { type ErrorMappingOptions, EngineUnavailableError, errorBody, errorReply, HttpError } from '../http/errors.js';
import { openStream, sendSse, sseData } from '../http/streams.js';
import type { FinishReason, Usage } from './schemas.js';

/** The end of an OpenAI stream. */
const SSE_DONE = 'data: [DONE]\n\n';

/** What the generation routes need from the server: its model names, tokenizer and limits, and its engine. */
export interface GenerationBackend {
  /** The adapter a `model` value selects (null: the base model); throws the server's 404 for an unknown name. */
  resolve(model: string): { adapter: string | null };
  /** The model's tokenizer (BOS included by its template). */
  tokenizer: { encode(text: string): number[] };
  /** Most tokens a sequence may hold (prompt + completion): the model's max_position_embeddings. */
  contextLength: number;
  vocabSize: number;
  /** Submits a request (its id is the completion id); its items are the generated tokens with their text. */
  submit(request: GenerateRequest): EventStream<TokenEvent, FinishedResult>;
  /** Drops a request (a client that went away); its stream ends with a cancelled finish. */
  cancel(id: string): void;
  /** The API's error for an engine error about a request for `model` (e.g. an adapter gone: that model's 404). */
  requestError?(err: unknown, model: string): unknown;
  /** How errors are worded, for an error that arrives after an SSE stream started. */
  errors?: ErrorMappingOptions;
}

/** 400 with a parameter name: the request itself is wrong. */
export function badRequest(message: string, param: string | null = null, code: string | null = null): HttpError {
  return new HttpError(400, code, message, { param });
}

/** Fields both endpoints share (see schemas.ts). */
export interface SamplingBody {
  model: string;
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  n?: number | null;
  seed?: number | null;
  stop?: string | string[] | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  ignore_eos?: boolean | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
}

export interface GenerationPlan {
  id: string;
  /** The `model` the client sent, echoed in responses (as OpenAI and vLLM do). */
  model: string;
  adapter: string | null;
  prompt: number[];
  maxTokens: number;
  sampling: GenerateRequest['sampling'];
  stop: string[];
  ignoreEos: boolean;
  stream: boolean;
  includeUsage: boolean;
}

/** How one endpoint shapes its bodies and chunks. */
export interface ResponseShape {
  /** The non-streaming body. */
  body(plan: GenerationPlan, created: number, result: FinishedResult, usage: Usage): unknown;
  /** Chunks sent before any token (chat: the assistant role delta). */
  opening(plan: GenerationPlan, created: number): unknown[];
  /** A chunk carrying generated text, or the closing chunk with the finish reason. */
  chunk(plan: GenerationPlan, created: number, text: string, finishReason: FinishReason): unknown;
  /** The usage-only chunk of `stream_options.include_usage`. */
  usageChunk(plan: GenerationPlan, created: number, usage: Usage): unknown;
}

/** Default completion length when the request gives none, as OpenAI's completions API does. */
export const DEFAULT_COMPLETION_MAX_TOKENS = 16;

function nonZero(v: number | null | undefined): boolean {
  return v !== undefined && v !== null && v !== 0;
}

/** 400 for known fields the server cannot honour: they change results, so they are never silently ignored. */
export function rejectUnsupportedSampling(body: SamplingBody): void {
  if (body.n !== undefined && body.n !== null && body.n > 1) {
    throw badRequest(`n = ${body.n} is not supported: this server returns one choice per request; send ${body.n} requests (with different seeds) instead`, 'n');
  }
  if (nonZero(body.presence_penalty)) throw badRequest('presence_penalty is not supported (only 0)', 'presence_penalty');
  if (nonZero(body.frequency_penalty)) throw badRequest('frequency_penalty is not supported (only 0)', 'frequency_penalty');
  if (body.logit_bias && Object.keys(body.logit_bias).length > 0) throw badRequest('logit_bias is not supported', 'logit_bias');
  if (body.stream_options && body.stream !== true) throw badRequest('stream_options can only be given when stream is true', 'stream_options');
}

/** A fresh completion id with OpenAI's prefixes ('cmpl-', 'chatcmpl-'). */
export function completionId(prefix: string): string {
  return `${prefix}${randomBytes(12).toString('hex')}`;
}

/**
 * Sampling fields → the engine's parameters. Temperature defaults to 1 (OpenAI's default); top_k −1 or 0 is off.
 * Without a seed, a sampled request draws a random one (as OpenAI's), so repeated requests differ; greedy
 * requests (temperature 0) need none.
 */
export function samplingOf(body: SamplingBody): GenerateRequest['sampling'] {
  const temperature = body.temperature ?? 1;
  const sampling: GenerateRequest['sampling'] = { temperature };
  if (body.top_p !== undefined && body.top_p !== null) sampling.topP = body.top_p;
  if (body.top_k !== undefined && body.top_k !== null && body.top_k > 0) sampling.topK = body.top_k;
  if (body.seed !== undefined && body.seed !== null) sampling.seed = body.seed;
  else if (temperature > 0) sampling.seed = randomBytes(4).readUInt32LE(0);
  return sampling;
}

export function stopStrings(stop: string | string[] | null | undefined): string[] {
  if (stop === undefined || stop === null) return [];
  return typeof stop === 'string' ? [stop] : [...stop];
}

/**
 * The completion budget: `requested` when it fits the context, else a 400 `context_length_exceeded` in vLLM's
 * wording. Without `requested`, `fallback` (capped to what the context leaves), or everything the context leaves.
 */
export function completionBudget(promptTokens: number, requested: number | null | undefined, fallback: number | null, contextLength: number, param: string): number {
  const room = contextLength - promptTokens;
  if (requested !== undefined && requested !== null) {
    if (promptTokens + requested > contextLength) {
      throw badRequest(
        `This model's maximum context length is ${contextLength} tokens. However, you requested ${promptTokens + requested} tokens ` +
          `(${promptTokens} in the ${param}, ${requested} in the completion). Please reduce the length of the ${param} or completion.`,
        param,
        'context_length_exceeded',
      );
    }
    return requested;
  }
  if (room < 1) {
    throw badRequest(
      `This model's maximum context length is ${contextLength} tokens. However, your ${param} has ${promptTokens} tokens, which leaves no room for a completion. Please reduce the length of the ${param}.`,
      param,
      'context_length_exceeded',
    );
  }
  return fallback === null ? room : Math.min(fallback, room);
}

export function openAiFinishReason(reason: FinishedResult['finishReason']): FinishReason {
  return reason === 'length' ? 'length' : reason === 'cancelled' ? null : 'stop';
}

export function usageOf(result: Pick<FinishedResult, 'promptTokens' | 'completionTokens'>): Usage {
  return { prompt_tokens: result.promptTokens, completion_tokens: result.completionTokens, total_tokens: result.promptTokens + result.completionTokens };
}

/** Submits the plan and answers the HTTP request: a JSON body, or an SSE stream. */
export async function respond(backend: GenerationBackend, plan: GenerationPlan, shape: ResponseShape, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { id, adapter, prompt, maxTokens, sampling, stop, ignoreEos } = plan;
  const requestError = (err: unknown) => (backend.requestError ? backend.requestError(err, plan.model) : err);
  let outputs: AsyncGenerator<StreamOutput<TokenEvent, FinishedResult>>;
  try {
    const stream = backend.submit({ id, adapter, prompt, maxTokens, sampling, stop, ignoreEos });
    // The status line waits for the first event: an error at admission (adapter gone, adapter load failed) still
    // gets its own status code. A client that goes away cancels the request (its KV pages are freed at once).
    outputs = await openStream(request, reply, stream, () => backend.cancel(id));
  } catch (err) {
    throw requestError(err);
  }
  const created = Math.floor(Date.now() / 1000);

  if (!plan.stream) {
    let text = '';
    for await (const e of outputs) {
      if (e.type === 'error') throw requestError(e.error);
      if (e.type === 'token') text += e.text;
      else {
        const result = { ...e.result, text: e.result.text || text };
        return reply.send(shape.body(plan, created, result, usageOf(result)));
      }
    }
    throw new EngineUnavailableError(`request ${id} ended without a result`);
  }

  async function* frames(): AsyncGenerator<string> {
    try {
      for (const chunk of shape.opening(plan, created)) yield sseData(chunk);
      for await (const e of outputs) {
        if (e.type === 'token') {
          // Text held back (a possible stop string, a split UTF-8 character) arrives with a later token.
          if (e.text.length > 0) yield sseData(shape.chunk(plan, created, e.text, null));
          continue;
        }
        if (e.type === 'finish') {
          if (e.result.finishReason === 'cancelled') return;
          yield sseData(shape.chunk(plan, created, '', openAiFinishReason(e.result.finishReason)));
          if (plan.includeUsage) yield sseData(shape.usageChunk(plan, created, usageOf(e.result)));
        } else yield sseData(errorBody(errorReply(requestError(e.error), backend.errors)));
        yield SSE_DONE;
        return;
      }
    } finally {
      backend.cancel(id);
    }
  }
  return sendSse(reply, frames());
}
