/**
 * A request's Redis stream: StreamEvents as JSON in one field per entry, read back with the same rules a client
 * applies (ClientStream), so the scheduler knows exactly which tokens a client has when it re-places a request.
 */
import type { Redis } from 'ioredis';

import { ClientStream } from '../client/client-stream.js';
import type { StreamEvent } from '../types.js';
import { EVENT_FIELD } from './keys.js';

/** One stream entry as ioredis returns it: [entry id, [field, value, …]]. */
export type StreamEntry = [id: string, fields: string[]];

export function encodeEvent(event: StreamEvent): string {
  return JSON.stringify(event);
}

/** The event of an entry; null for an entry this package did not write (ignored, like any foreign field). */
export function decodeEntry(entry: StreamEntry): StreamEvent | null {
  const fields = entry[1];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] !== EVENT_FIELD) continue;
    try {
      const event = JSON.parse(fields[i + 1]!) as StreamEvent;
      return event && typeof event === 'object' && typeof event.kind === 'string' ? event : null;
    } catch {
      return null;
    }
  }
  return null;
}

/** Appends an event; creates the stream (the scheduler's writes). Resolves with the entry id. */
export async function appendEvent(redis: Redis, key: string, event: StreamEvent): Promise<string> {
  return (await redis.xadd(key, '*', EVENT_FIELD, encodeEvent(event)))!;
}

/** The stream's entries from the start up to and including `end` (an entry id, or '+' for all). */
export async function readEntries(redis: Redis, key: string, end = '+'): Promise<StreamEntry[]> {
  return (await redis.xrange(key, '-', end)) as StreamEntry[];
}

/** Applies the entries to a fresh ClientStream: the state a client that read them all is in. */
export function reduceEntries(id: string, entries: readonly StreamEntry[]): ClientStream {
  const stream = new ClientStream(id);
  for (const entry of entries) {
    const event = decodeEntry(entry);
    if (event) stream.accept(event);
  }
  return stream;
}
