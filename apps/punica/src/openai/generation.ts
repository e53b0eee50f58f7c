/**
 * The generation path shared by /v1/completions and /v1/chat/completions, after the body passed its schema:
 *
 *   rejectUnsupported  → 400 for fields this server cannot honour (n > 1, logprobs, penalties, …)
 *   registry.resolve   → which adapter (404 model_not_found for an unknown one)
 *   tokens + limits    → prompt token ids; max_tokens checked against the context (400 context_length_exceeded)
 *   engine.submit      → the worker's batcher; the first event is awaited before the status line is sent, so
 *                        a failure at admission is still a proper 4xx/5xx and not a 200 stream with an error in it
 *   respond            → one JSON body, or SSE chunks (`data: {...}`, then `data: [DONE]`)
 *
 * A client that disconnects before the end cancels its request in the engine (its KV pages are freed at once).
 */
import { randomBytes } from 'node:crypto';

import type { FastifyReply, FastifyRequest } from 'fastify';

import type { EngineEvent, EngineRequest } from '../engine/client.js';
import type { GenerationEngine } from '../engine/generation-engine.js';
import { EngineError, EngineUnavailableError } from '../engine/errors.js';
import type { EngineFinishReason, FinishedResult, SubmitRequest } from '../engine/protocol.js';
import { ApiError, badRequest, engineUnavailable, modelNotFound } from './errors.js';
import type { ModelRegistry } from './model-registry.js';
import { SSE_DONE, SSE_HEADERS, sseData, sseStream } from './sse.js';
import type { FinishReason, Usage } from './schemas.js';

/** What a generation route needs from the app. */
export interface GenerationDeps {
  engine: GenerationEngine;
  registry: ModelRegistry;
  /** Most tokens a sequence may hold (prompt + completion): the model's max_position_embeddings. */
  contextLength: number;
  vocabSize: number;
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
  sampling: SubmitRequest['sampling'];
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
export function samplingOf(body: SamplingBody): SubmitRequest['sampling'] {
  const temperature = body.temperature ?? 1;
  const sampling: SubmitRequest['sampling'] = { temperature };
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
      throw new ApiError(
        400,
        `This model's maximum context length is ${contextLength} tokens. However, you requested ${promptTokens + requested} tokens ` +
          `(${promptTokens} in the ${param}, ${requested} in the completion). Please reduce the length of the ${param} or completion.`,
        { param, code: 'context_length_exceeded' },
      );
    }
    return requested;
  }
  if (room < 1) {
    throw new ApiError(
      400,
      `This model's maximum context length is ${contextLength} tokens. However, your ${param} has ${promptTokens} tokens, which leaves no room for a completion. Please reduce the length of the ${param}.`,
      { param, code: 'context_length_exceeded' },
    );
  }
  return fallback === null ? room : Math.min(fallback, room);
}

/** Maps engine failures to HTTP: unknown adapter → 404, bad input or adapter files → 400, engine down → 503. */
export function toApiError(err: unknown, model?: string): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof EngineUnavailableError) return engineUnavailable(err.message);
  if (err instanceof EngineError) {
    switch (err.code) {
      case 'TESSERA_UNKNOWN_ADAPTER':
        return model !== undefined ? modelNotFound(model) : new ApiError(404, err.message, { type: 'invalid_request_error', code: 'model_not_found', cause: err });
      // Bad input: the batcher's request validation, invalid names, malformed adapter or model files.
      case 'TESSERA_INVALID_ARGUMENT':
      case 'TESSERA_INVALID_REQUEST':
      case 'TESSERA_EMPTY_PROMPT':
      case 'TESSERA_TOKEN_OUT_OF_VOCAB':
      case 'TESSERA_INVALID_MAX_TOKENS':
      case 'TESSERA_DUPLICATE_REQUEST':
      case 'TESSERA_CONFIG':
      case 'TESSERA_TENSOR_SHAPE':
      case 'TESSERA_MISSING_TENSOR':
      case 'TESSERA_BAD_HEADER':
      case 'TESSERA_TRUNCATED_FILE':
      case 'TESSERA_UNKNOWN_DTYPE':
      case 'TESSERA_PATH_OUTSIDE_MODEL':
      case 'TESSERA_SHAPE_MISMATCH':
      case 'TESSERA_DTYPE_MISMATCH':
        return new ApiError(400, err.message, { cause: err });
      case 'TESSERA_CONTEXT_TOO_LONG':
        return new ApiError(400, err.message, { code: 'context_length_exceeded', cause: err });
      case 'TESSERA_KV_TOO_SMALL':
        return new ApiError(400, `${err.message} (the server's KV cache, --kv-budget-mib, cannot hold this request)`, { code: 'kv_cache_too_small', cause: err });
      case 'TESSERA_ADAPTER_EXISTS':
        return new ApiError(400, err.message, { param: 'lora_name', code: 'adapter_exists', cause: err });
      case 'TESSERA_ADAPTER_TOO_LARGE':
        return new ApiError(400, err.message, { code: 'adapter_too_large', cause: err });
      case 'TESSERA_ADAPTER_IN_USE':
        return new ApiError(409, err.message, { code: 'adapter_in_use', cause: err });
      // Capacity: retrying later may succeed.
      case 'TESSERA_ADAPTER_LOAD_FAILED':
        return new ApiError(503, err.message, { code: 'adapter_load_failed', cause: err });
      case 'TESSERA_BUDGET_EXCEEDED':
      case 'TESSERA_KV_EXHAUSTED':
        return new ApiError(503, err.message, { code: 'insufficient_capacity', cause: err });
      default:
        return new ApiError(500, `${err.remoteName}: ${err.message}`, { cause: err });
    }
  }
  return new ApiError(500, err instanceof Error ? err.message : String(err), { cause: err });
}

export function openAiFinishReason(reason: EngineFinishReason): FinishReason {
  return reason === 'length' ? 'length' : reason === 'cancelled' ? null : 'stop';
}

export function usageOf(result: Pick<FinishedResult, 'promptTokens' | 'completionTokens'>): Usage {
  return { prompt_tokens: result.promptTokens, completion_tokens: result.completionTokens, total_tokens: result.promptTokens + result.completionTokens };
}

/** Submits the plan and answers the HTTP request: a JSON body, or an SSE stream. */
export async function respond(deps: GenerationDeps, plan: GenerationPlan, shape: ResponseShape, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  let handle: EngineRequest;
  try {
    handle = deps.engine.submit({
      id: plan.id,
      adapter: plan.adapter,
      prompt: plan.prompt,
      maxTokens: plan.maxTokens,
      sampling: plan.sampling,
      stop: plan.stop,
      ignoreEos: plan.ignoreEos,
    });
  } catch (err) {
    throw toApiError(err, plan.model);
  }
  // A client that goes away before the end (closed tab, aborted fetch, proxy timeout) must not keep using the
  // engine: cancel frees its KV pages and its batch slot at once.
  const onClose = () => {
    if (!handle.done) {
      request.log.info({ id: plan.id }, 'client disconnected; cancelling the request in the engine');
      handle.cancel();
    }
  };
  if (request.raw.socket?.destroyed) onClose();
  else reply.raw.once('close', onClose);
  const created = Math.floor(Date.now() / 1000);
  const events = handle[Symbol.asyncIterator]();
  // The status line waits for the first event: an error at admission (adapter gone, adapter load failed) still
  // gets its own status code.
  const first = await events.next();
  if (!first.done && first.value.type === 'error') throw toApiError(first.value.error, plan.model);

  if (!plan.stream) {
    let text = '';
    let ev: IteratorResult<EngineEvent> = first;
    while (!ev.done) {
      const e = ev.value;
      if (e.type === 'error') throw toApiError(e.error, plan.model);
      if (e.type === 'finish') {
        const result = { ...e.result, text: e.result.text || text };
        return reply.send(shape.body(plan, created, result, usageOf(result)));
      }
      text += e.text;
      ev = await events.next();
    }
    throw toApiError(new EngineUnavailableError(`request ${plan.id} ended without a result`));
  }

  async function* frames(): AsyncGenerator<string> {
    try {
      for (const chunk of shape.opening(plan, created)) yield sseData(chunk);
      let ev: IteratorResult<EngineEvent> = first;
      while (!ev.done) {
        const e = ev.value;
        if (e.type === 'token') {
          // Text held back (a possible stop string, a split UTF-8 character) arrives with a later token.
          if (e.text.length > 0) yield sseData(shape.chunk(plan, created, e.text, null));
        } else if (e.type === 'finish') {
          if (e.result.finishReason === 'cancelled') return;
          yield sseData(shape.chunk(plan, created, '', openAiFinishReason(e.result.finishReason)));
          if (plan.includeUsage) yield sseData(shape.usageChunk(plan, created, usageOf(e.result)));
          yield SSE_DONE;
          return;
        } else {
          yield sseData(toApiError(e.error, plan.model).toBody());
          yield SSE_DONE;
          return;
        }
        ev = await events.next();
      }
    } finally {
      handle.cancel();
    }
  }
  // Returning the reply tells fastify the response is handled (an async handler resolving undefined after
  // send(stream) would end the response empty).
  return reply.headers(SSE_HEADERS).send(sseStream(frames()));
}
