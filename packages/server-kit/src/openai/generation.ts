/**
 * The generation path shared by /v1/completions and /v1/chat/completions (routes.ts), after the body passed its schema:
 *
 *   rejectUnsupported  → 400 for fields this server cannot honour (penalties, logit_bias, …)
 *   backend.resolve    → which adapter (the server's 404 for an unknown model name)
 *   tokens + limits    → prompt token ids; max_tokens checked against the context (400 context_length_exceeded)
 *   planChoices        → one engine request per choice: each prompt × n samples (index p·n + i), seeds derived
 *   engine.submit      → the host protocol (worker thread or Redis); the first event of every choice is awaited
 *                        before the status line is sent, so a failure at admission is still a proper 4xx/5xx and
 *                        not a 200 stream with an error in it
 *   respond            → one JSON body, or SSE chunks (`data: {...}`, then `data: [DONE]`), choices interleaved
 *
 * A client that disconnects before the end cancels its request in the engine (its KV pages are freed at once).
 */
import { randomBytes } from 'node:crypto';

import type { FastifyReply, FastifyRequest } from 'fastify';

import type { DeliveredItem, EventStream, FinishedResult, GenerateRequest, StreamOutput, TokenEvent } from '@tessera/cluster';

import { type ErrorMappingOptions, EngineUnavailableError, errorBody, errorReply, HttpError } from '../http/errors.js';
import { openStream, sendSse, sseData } from '../http/streams.js';
import type { FinishReason, Usage } from './schemas.js';

/** The end of an OpenAI stream. */
const SSE_DONE = 'data: [DONE]\n\n';

/** What the generation routes need from the server: its model names, tokenizer and limits, and its engine. */
export interface GenerationBackend {
  /** The adapter a `model` value selects (null: the base model); throws the server's 404 for an unknown name. */
  resolve(model: string): { adapter: string | null };
  /**
   * The model's tokenizer (BOS included by its template). `decode` (special tokens kept) names tokens in logprobs
   * and serves /detokenize; without it a token is shown as `token_id:<id>`.
   */
  tokenizer: { encode(text: string, options?: { addSpecialTokens?: boolean }): number[]; decode?(ids: number[], options?: { skipSpecialTokens?: boolean }): string };
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

/** One choice of a response: one engine request. */
export interface ChoicePlan {
  /** The choice's `index`: sample i of prompt p is p·n + i (vLLM's order). */
  index: number;
  /** The engine request id: the completion id, with `-<index>` appended when the response has several choices. */
  requestId: string;
  /** Which prompt of the request it continues (0 unless the completion's prompt was a list). */
  promptIndex: number;
  prompt: number[];
  maxTokens: number;
  sampling: GenerateRequest['sampling'];
  /** `echo`: the prompt's text, shown before the completion (completions only). */
  promptText?: string;
  /**
   * `echo` with `max_tokens: 0` (scoring a prompt, as vLLM allows): the engine generates one token (maxTokens 1)
   * that the response drops; the choice reports the prompt alone and 0 completion tokens.
   */
  promptOnly?: boolean;
}

export interface GenerationPlan {
  id: string;
  /** The `model` the client sent, echoed in responses (as OpenAI and vLLM do). */
  model: string;
  adapter: string | null;
  /** In `index` order: prompts × n. */
  choices: ChoicePlan[];
  stop: string[];
  ignoreEos: boolean;
  stream: boolean;
  includeUsage: boolean;
  /** Alternatives per token to report with each token's log-probability (0..20); null: no logprobs. */
  logprobs: number | null;
}

/** A generated token as the routes see it (the host protocol's token event, delivered). */
export type DeliveredToken = DeliveredItem<TokenEvent>;

/** What one choice produced, for the non-streaming body. */
export interface ChoiceOutcome {
  plan: ChoicePlan;
  text: string;
  finishReason: FinishReason;
  /** Every generated token (an ending EOS included), in order. */
  tokens: DeliveredToken[];
}

/** How one endpoint shapes its bodies and chunks. */
export interface ResponseShape {
  /** The non-streaming body (choices in index order). */
  body(plan: GenerationPlan, created: number, choices: ChoiceOutcome[], usage: Usage): unknown;
  /** Chunks sent for a choice before any of its tokens (chat: the assistant role delta). */
  opening(plan: GenerationPlan, created: number, choice: ChoicePlan): unknown[];
  /**
   * A chunk carrying one generated token of a choice (`token`; its text may be empty: held back for a possible stop
   * string or a split character, or an EOS), or the choice's closing chunk (`token` null) with its finish reason.
   */
  chunk(plan: GenerationPlan, created: number, choice: ChoicePlan, text: string, token: DeliveredToken | null, finishReason: FinishReason): unknown;
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

/** Most choices one request may ask for (prompts × n). */
export const MAX_CHOICES = 128;

/**
 * The seed of sample `i` of a prompt when the request gives `seed`: `seed + i` (vLLM's derivation for n > 1), or
 * `seed − i` where `seed + i` would pass Number.MAX_SAFE_INTEGER. Sample 0 uses the request's seed itself, so n = 1
 * gives what it gave before; distinct samples get distinct streams.
 */
export function sampleSeed(seed: number, i: number): number {
  return Number.isSafeInteger(seed + i) ? seed + i : seed - i;
}

/**
 * The choices of a request: for each prompt, `n` samples (index p·n + i), each its own engine request. Sample i
 * of a seeded request uses sampleSeed(seed, i); an unseeded sampled request draws a random seed per sample.
 * `budget(prompt, p)` is each prompt's completion length (its context check).
 */
export function planChoices(
  id: string,
  prompts: readonly number[][],
  n: number,
  sampling: GenerateRequest['sampling'],
  seeded: boolean,
  budget: (prompt: number[], p: number) => number,
): ChoicePlan[] {
  const total = prompts.length * n;
  if (total > MAX_CHOICES) {
    throw badRequest(`${prompts.length} prompt(s) × n = ${n} asks for ${total} choices; at most ${MAX_CHOICES} per request`, prompts.length > 1 ? 'prompt' : 'n');
  }
  const choices: ChoicePlan[] = [];
  prompts.forEach((prompt, p) => {
    const maxTokens = budget(prompt, p);
    for (let i = 0; i < n; i++) {
      const index = p * n + i;
      let s = sampling;
      if (i > 0 && sampling.seed !== undefined) {
        s = { ...sampling, seed: seeded ? sampleSeed(sampling.seed, i) : randomBytes(4).readUInt32LE(0) };
      }
      choices.push({ index, requestId: total === 1 ? id : `${id}-${index}`, promptIndex: p, prompt, maxTokens, sampling: s });
    }
  });
  return choices;
}

type Outputs = AsyncGenerator<StreamOutput<TokenEvent, FinishedResult>>;

/**
 * Submits every choice of the plan and answers the HTTP request: one JSON body with the choices in index order, or
 * one SSE stream where the choices' chunks interleave as their tokens come (each chunk names its choice's index).
 * Every generated token is one chunk (its text may be empty: held back for a stop string or a split character,
 * or an EOS); each choice then gets a closing chunk with its finish reason, so a choice's token chunks number
 * exactly its completion tokens. `usage` sums the choices' completion tokens and counts each prompt once.
 */
export async function respond(backend: GenerationBackend, plan: GenerationPlan, shape: ResponseShape, request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const { adapter, stop, ignoreEos } = plan;
  const requestError = (err: unknown) => (backend.requestError ? backend.requestError(err, plan.model) : err);
  const cancelAll = () => {
    for (const c of plan.choices) backend.cancel(c.requestId);
  };
  let outputs: Outputs[];
  try {
    const streams = plan.choices.map((c) =>
      backend.submit({
        id: c.requestId,
        adapter,
        prompt: c.prompt,
        maxTokens: c.maxTokens,
        sampling: c.sampling,
        stop,
        ignoreEos,
        ...(plan.logprobs !== null ? { logprobs: plan.logprobs } : {}),
      }),
    );
    // The status line waits for the first event of every choice: an error at admission (adapter gone, adapter
    // load failed) still gets its own status code. A client that goes away cancels the requests (their KV pages
    // are freed at once).
    const opened = await Promise.allSettled(streams.map((stream, i) => openStream(request, reply, stream, () => backend.cancel(plan.choices[i]!.requestId))));
    const failed = opened.find((o) => o.status === 'rejected');
    if (failed) {
      cancelAll();
      throw (failed as PromiseRejectedResult).reason;
    }
    outputs = opened.map((o) => (o as PromiseFulfilledResult<Outputs>).value);
  } catch (err) {
    throw requestError(err);
  }
  const created = Math.floor(Date.now() / 1000);
  const promptTokens = distinctPromptTokens(plan.choices);
  const usage = (completionTokens: number): Usage => ({ prompt_tokens: promptTokens, completion_tokens: completionTokens, total_tokens: promptTokens + completionTokens });

  if (!plan.stream) {
    try {
      const outcomes = await Promise.all(
        outputs.map(async (out, i): Promise<ChoiceOutcome & { completionTokens: number }> => {
          const choice = plan.choices[i]!;
          let text = '';
          const tokens: DeliveredToken[] = [];
          for await (const e of out) {
            if (e.type === 'error') throw e.error;
            if (e.type === 'token') {
              tokens.push(e);
              text += e.text;
            } else {
              if (choice.promptOnly) return { plan: choice, text: '', finishReason: 'length', tokens, completionTokens: 0 };
              return { plan: choice, text: e.result.text || text, finishReason: e.result.finishReason === 'length' ? 'length' : 'stop', tokens, completionTokens: e.result.completionTokens };
            }
          }
          throw new EngineUnavailableError(`request ${choice.requestId} ended without a result`);
        }),
      );
      return reply.send(shape.body(plan, created, outcomes, usage(outcomes.reduce((n, o) => n + o.completionTokens, 0))));
    } catch (err) {
      cancelAll();
      throw requestError(err);
    }
  }

  async function* frames(): AsyncGenerator<string> {
    try {
      for (const choice of plan.choices) for (const chunk of shape.opening(plan, created, choice)) yield sseData(chunk);
      let completionTokens = 0;
      for await (const { i, output: e } of merge(outputs)) {
        const choice = plan.choices[i]!;
        if (e.type === 'token') {
          yield sseData(shape.chunk(plan, created, choice, e.text, e, null));
          continue;
        }
        if (e.type === 'finish') {
          // A cancelled request (the client went away) ends the response without its closing chunk.
          if (e.result.finishReason === 'cancelled') return;
          completionTokens += choice.promptOnly ? 0 : e.result.completionTokens;
          yield sseData(shape.chunk(plan, created, choice, '', null, choice.promptOnly ? 'length' : openAiFinishReason(e.result.finishReason)));
          continue;
        }
        yield sseData(errorBody(errorReply(requestError(e.error), backend.errors)));
        yield SSE_DONE;
        return;
      }
      if (plan.includeUsage) yield sseData(shape.usageChunk(plan, created, usage(completionTokens)));
      yield SSE_DONE;
    } finally {
      cancelAll();
    }
  }
  return sendSse(reply, frames());
}

/** Prompt tokens of a request: each prompt once, however many samples it has (as vLLM counts them). */
function distinctPromptTokens(choices: readonly ChoicePlan[]): number {
  const seen = new Set<number>();
  let total = 0;
  for (const c of choices) {
    if (seen.has(c.promptIndex)) continue;
    seen.add(c.promptIndex);
    total += c.prompt.length;
  }
  return total;
}

/** The outputs of several streams as they come, each with its stream's position; ends when all have ended. */
async function* merge(outputs: readonly Outputs[]): AsyncGenerator<{ i: number; output: StreamOutput<TokenEvent, FinishedResult> }> {
  const pending = new Map<number, Promise<{ i: number; next: IteratorResult<StreamOutput<TokenEvent, FinishedResult>> }>>();
  const pull = (i: number) => pending.set(i, outputs[i]!.next().then((next) => ({ i, next })));
  outputs.forEach((_, i) => pull(i));
  try {
    while (pending.size > 0) {
      const { i, next } = await Promise.race(pending.values());
      if (next.done) {
        pending.delete(i);
        continue;
      }
      pull(i);
      yield { i, output: next.value };
    }
  } finally {
    for (const out of outputs) void out.return(undefined);
  }
}
