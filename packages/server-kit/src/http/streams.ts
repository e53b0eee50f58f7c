/**
 * Answering HTTP with a request's event stream: cancel it when the client goes away, hold the status line until
 * the first output (so an error at admission still gets its own status), and server-sent events.
 *
 *   const outputs = await openStream(request, reply, stream, () => engine.cancel(id));  // throws the first error
 *   return sendSse(reply, frames(outputs));                                              // `data: …\n\n` frames
 */
import { Readable } from 'node:stream';

import type { EventStream, ItemEvent, StreamOutput } from '@tessera/cluster';
import type { FastifyReply, FastifyRequest } from 'fastify';

export const SSE_HEADERS: Readonly<Record<string, string>> = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  connection: 'keep-alive',
  // Proxies (nginx) must not buffer a token stream.
  'x-accel-buffering': 'no',
};

/** One SSE frame carrying `payload` as JSON. */
export function sseData(payload: unknown): string {
  return `data: ${JSON.stringify(payload)}\n\n`;
}

/**
 * Sends SSE frames (strings) from an async iterable, piped with backpressure. Returns the reply: a handler must
 * return it (an async handler resolving undefined after send(stream) would end the response empty).
 */
export function sendSse(reply: FastifyReply, frames: AsyncIterable<string>): FastifyReply {
  return reply.headers(SSE_HEADERS).send(Readable.from(frames, { objectMode: false, encoding: 'utf8' }));
}

/**
 * Serves `stream` to one HTTP request. A client that goes away before the end (closed tab, aborted fetch, proxy
 * timeout) calls `cancel`, so the engine frees what the request holds at once. Resolves once the first output is
 * there, with every output from it on; rejects with the request's error if that is the first output.
 */
export async function openStream<Item extends ItemEvent, Result>(
  request: FastifyRequest,
  reply: FastifyReply,
  stream: EventStream<Item, Result>,
  cancel: () => void,
): Promise<AsyncGenerator<StreamOutput<Item, Result>>> {
  const onClose = () => {
    if (stream.done) return;
    request.log.info({ id: stream.id }, 'client disconnected; cancelling the request in the engine');
    cancel();
  };
  if (request.raw.socket?.destroyed) onClose();
  else reply.raw.once('close', onClose);
  const outputs = stream[Symbol.asyncIterator]();
  const first = await outputs.next();
  if (!first.done && first.value.type === 'error') throw (first.value as { error: Error }).error;
  return (async function* () {
    for (let next = first; !next.done; next = await outputs.next()) yield next.value;
  })();
}
