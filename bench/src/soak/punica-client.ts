/**
 * One OpenAI-style request to a Punica server, checked as a client would check it: a completion or chat
 * completion, streamed or not, optionally cancelled by aborting the HTTP request (after some streamed tokens, or
 * after a delay). `ignore_eos` makes every completed request generate exactly `max_tokens` tokens, so a stream
 * that lost or repeated a token shows up as a count that is off.
 */
import { describe, isAbort, postJson, sseFrames } from './http.js';

export interface PunicaRequestSpec {
  endpoint: 'completions' | 'chat';
  model: string;
  /** Token ids or text (completions); the user message's text (chat). */
  prompt: number[] | string;
  maxTokens: number;
  temperature: number;
  seed?: number;
  stream: boolean;
  /** Streams: abort once this many token chunks arrived. */
  cancelAfterTokens?: number;
  /** Non-streaming: abort after this many milliseconds (if the answer has not come yet). */
  cancelAfterMs?: number;
  /** Streams: called with the count of token chunks so far, after each one (the fault cases time their faults by it). */
  onToken?: (tokens: number) => void;
  /** Give up (abort) after this many milliseconds: the outcome is an error that says so, with the tokens so far. */
  timeoutMs?: number;
}

export type PunicaOutcome =
  | { kind: 'ok'; tokens: number; text: string; ms: number; ttftMs: number | null }
  | { kind: 'cancelled'; tokens: number; ms: number }
  /** An error status with an OpenAI error body, before any token: a clear refusal. */
  | { kind: 'refused'; status: number; code: string | null; message: string }
  /** `tokens`: token chunks a stream delivered before it went wrong (absent when unknown). */
  | { kind: 'error'; message: string; tokens?: number; timedOut?: boolean };

interface ErrorBody {
  error?: { message?: string; code?: string | null };
}

function requestBody(spec: PunicaRequestSpec): Record<string, unknown> {
  const common = {
    model: spec.model,
    max_tokens: spec.maxTokens,
    temperature: spec.temperature,
    ignore_eos: true,
    stream: spec.stream,
    ...(spec.seed !== undefined ? { seed: spec.seed } : {}),
    ...(spec.stream ? { stream_options: { include_usage: true } } : {}),
  };
  if (spec.endpoint === 'chat') {
    const content = typeof spec.prompt === 'string' ? spec.prompt : spec.prompt.join(' ');
    return { ...common, messages: [{ role: 'user', content }] };
  }
  return { ...common, prompt: spec.prompt };
}

function label(spec: PunicaRequestSpec): string {
  return `${spec.endpoint}${spec.stream ? ' stream' : ''} model=${spec.model} max_tokens=${spec.maxTokens}`;
}

export async function runPunicaRequest(address: string, spec: PunicaRequestSpec): Promise<PunicaOutcome> {
  const url = `${address}/v1/${spec.endpoint === 'chat' ? 'chat/completions' : 'completions'}`;
  const controller = new AbortController();
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  let aborted = false;
  let timedOut = false;
  let streamedTokens = 0;
  const deadline =
    spec.timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          timedOut = true;
          controller.abort();
        }, spec.timeoutMs);
  const counted: PunicaRequestSpec = {
    ...spec,
    onToken: (n) => {
      streamedTokens = n;
      spec.onToken?.(n);
    },
  };
  if (spec.cancelAfterMs !== undefined) {
    timer = setTimeout(() => {
      aborted = true;
      controller.abort();
    }, spec.cancelAfterMs);
  }
  try {
    if (!spec.stream) {
      const { status, body } = await postJson(url, requestBody(spec), controller.signal);
      clearTimeout(timer);
      return checkComplete(spec, status, body, performance.now() - t0);
    }
    return await readStream(url, counted, controller, t0, () => {
      aborted = true;
    });
  } catch (err) {
    if (timedOut) return { kind: 'error', message: `${label(spec)}: no end after ${spec.timeoutMs} ms (${streamedTokens} token chunks)`, tokens: streamedTokens, timedOut };
    if (aborted && isAbort(err)) return { kind: 'cancelled', tokens: streamedTokens, ms: performance.now() - t0 };
    return { kind: 'error', message: `${label(spec)}: ${describe(err)}`, tokens: streamedTokens };
  } finally {
    clearTimeout(timer);
    clearTimeout(deadline);
  }
}

function checkComplete(spec: PunicaRequestSpec, status: number, body: unknown, ms: number): PunicaOutcome {
  if (status !== 200) {
    const err = (body as ErrorBody).error;
    if (err && typeof err.message === 'string') return { kind: 'refused', status, code: err.code ?? null, message: err.message };
    return { kind: 'error', message: `${label(spec)}: status ${status} without an error body: ${JSON.stringify(body).slice(0, 200)}` };
  }
  const b = body as { choices?: { text?: string; message?: { content?: string }; finish_reason?: string }[]; usage?: { completion_tokens?: number } };
  const choice = b.choices?.[0];
  const text = spec.endpoint === 'chat' ? choice?.message?.content : choice?.text;
  if (b.choices?.length !== 1 || typeof text !== 'string') return { kind: 'error', message: `${label(spec)}: no single choice with text: ${JSON.stringify(body).slice(0, 200)}` };
  if (choice!.finish_reason !== 'length') return { kind: 'error', message: `${label(spec)}: finish_reason ${choice!.finish_reason} (ignore_eos: expected length)` };
  const tokens = b.usage?.completion_tokens;
  if (tokens !== spec.maxTokens) return { kind: 'error', message: `${label(spec)}: usage.completion_tokens ${tokens}, asked for ${spec.maxTokens}` };
  return { kind: 'ok', tokens, text, ms, ttftMs: null };
}

async function readStream(url: string, spec: PunicaRequestSpec, controller: AbortController, t0: number, onAbort: () => void): Promise<PunicaOutcome> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(requestBody(spec)), signal: controller.signal });
  if (res.status !== 200 || !res.body) {
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // kept as text
    }
    return checkComplete(spec, res.status, body, performance.now() - t0);
  }
  let tokens = 0;
  let text = '';
  let ttftMs: number | null = null;
  let finishes = 0;
  let usageTokens: number | null = null;
  let done = false;
  let id: string | null = null;
  const problems: string[] = [];
  try {
    for await (const frame of sseFrames(res.body)) {
      if (done) problems.push('a frame after [DONE]');
      if (frame === '[DONE]') {
        done = true;
        continue;
      }
      const f = frame as {
        id?: string;
        error?: { message?: string };
        unparsable?: string;
        usage?: { completion_tokens?: number };
        choices?: { index?: number; text?: string; delta?: { role?: string; content?: string }; finish_reason?: string | null }[];
      };
      if (f.unparsable !== undefined) problems.push(`an unparsable frame ${f.unparsable.slice(0, 80)}`);
      if (f.error) problems.push(`an error frame: ${f.error.message}`);
      if (f.id !== undefined) {
        if (id !== null && f.id !== id) problems.push(`frame id ${f.id} after ${id}`);
        id = f.id;
      }
      if (f.usage) usageTokens = f.usage.completion_tokens ?? null;
      for (const c of f.choices ?? []) {
        if (c.finish_reason) {
          finishes++;
          if (c.finish_reason !== 'length') problems.push(`finish_reason ${c.finish_reason}`);
          continue;
        }
        // Chat's first chunk carries the role (no token); every other chunk before the finish is one token.
        if (spec.endpoint === 'chat' && c.delta?.role !== undefined) continue;
        tokens++;
        text += (spec.endpoint === 'chat' ? c.delta?.content : c.text) ?? '';
        ttftMs ??= performance.now() - t0;
        spec.onToken?.(tokens);
        if (spec.cancelAfterTokens !== undefined && tokens >= spec.cancelAfterTokens) {
          onAbort();
          controller.abort();
          return { kind: 'cancelled', tokens, ms: performance.now() - t0 };
        }
      }
    }
  } catch (err) {
    if (isAbort(err)) throw err;
    problems.push(`the stream broke after ${tokens} token(s): ${describe(err)}`);
  }
  if (!done) problems.push('no [DONE]');
  if (finishes !== 1) problems.push(`${finishes} finish chunks`);
  if (tokens !== spec.maxTokens) problems.push(`${tokens} token chunks, asked for ${spec.maxTokens}`);
  if (usageTokens !== spec.maxTokens) problems.push(`usage.completion_tokens ${usageTokens}`);
  if (problems.length > 0) return { kind: 'error', message: `${label(spec)}: ${problems.join('; ')}`, tokens };
  return { kind: 'ok', tokens, text, ms: performance.now() - t0, ttftMs };
}
