/**
 * Server-sent events as OpenAI streams them: one `data: <json>\n\n` frame per chunk and a final
 * `data: [DONE]\n\n`. An error after the stream has started is sent as one `data: {"error": …}` frame before
 * [DONE] (vLLM does the same), since the status line is already gone.
 */
import { Readable } from 'node:stream';

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  // Proxies (nginx) must not buffer a token stream.
  'x-accel-buffering': 'no',
};

export const SSE_DONE = 'data: [DONE]\n\n';

/** One SSE frame carrying `payload` as JSON. */
export function sseData(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

/** A byte stream of SSE frames from an async generator of frames (fastify pipes it with backpressure). */
export function sseStream(frames: AsyncIterable<string>): Readable {
  return Readable.from(frames, { objectMode: false, encoding: 'utf8' });
}
