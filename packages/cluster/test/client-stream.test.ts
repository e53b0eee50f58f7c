/** ClientStream's exactly-once rules over at-least-once, multi-attempt host events. */
import { describe, expect, it } from 'vitest';
import { UnknownAdapterError } from '@tessera/core';
import { ClientStream, RemoteError, type StreamEvent } from '../src/index.js';

const tok = (attempt: number, index: number, token = 100 + index): StreamEvent => ({ kind: 'token', id: 'r', attempt, index, token, text: `t${token}` });

async function drain(s: ClientStream) {
  const out: string[] = [];
  for await (const ev of s) out.push(ev.type === 'token' ? `${ev.index}:${ev.token}` : ev.type === 'finish' ? `finish:${ev.result.finishReason}` : `error:${ev.error.message}`);
  return out;
}

describe('ClientStream', () => {
  it('drops duplicates and gaps, fences superseded attempts, and ends once', async () => {
    const s = new ClientStream('r');
    const events: StreamEvent[] = [
      { kind: 'placed', id: 'r', attempt: 0, hostId: 'h1', generated: 0 },
      tok(0, 0),
      tok(0, 1),
      tok(0, 1), // redelivered
      tok(0, 3), // a gap: never delivered out of order
      { kind: 'placed', id: 'r', attempt: 1, hostId: 'h2', generated: 2 },
      tok(0, 2, 999), // the old host is still running: fenced
      tok(1, 2),
      { kind: 'evicted', id: 'r', attempt: 1, generated: [100, 101, 102] },
      tok(2, 3), // attempt 2's first token arrives before its marker: it moves the stream forward
      { kind: 'placed', id: 'r', attempt: 2, hostId: 'h1', generated: 3 },
      tok(1, 3, 998),
      { kind: 'finish', id: 'r', attempt: 2, result: { id: 'r', tokens: [100, 101, 102, 103], text: '', finishReason: 'length', promptTokens: 1, completionTokens: 4 } },
      tok(2, 4),
      { kind: 'error', id: 'r', attempt: 2, error: { name: 'Error', message: 'late', kind: 'internal', code: null, fields: {} } },
      { ...tok(2, 0), id: 'other' },
    ];
    const delivered = events.map((e) => s.accept(e));
    expect(delivered.filter(Boolean)).toHaveLength(5);
    expect(s.delivered).toEqual([100, 101, 102, 103]);
    expect(s.dropped).toBe(7);
    expect(await drain(s)).toEqual(['0:100', '1:101', '2:102', '3:103', 'finish:length']);
  });

  it('a host error ends the stream as its own class (or a typed RemoteError); fail() ends it from this side', async () => {
    const s = new ClientStream('r');
    s.accept(tok(0, 0));
    s.accept({ kind: 'error', id: 'r', attempt: 0, error: { name: 'UnknownAdapterError', message: 'no adapter x', kind: 'not_found', code: 'TESSERA_UNKNOWN_ADAPTER', fields: { adapter: 'x' } } });
    // UnknownAdapterError is registered by @tessera/core, so it comes back as itself.
    const err = await s.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownAdapterError);
    expect(err).toMatchObject({ code: 'TESSERA_UNKNOWN_ADAPTER', adapter: 'x', kind: 'not_found' });
    const u = new ClientStream('u');
    u.accept({ kind: 'error', id: 'u', attempt: 0, error: { name: 'SomeHostOnlyError', message: 'boom', kind: 'unavailable', code: 'HOST_ONLY', fields: { adapter: 'y' } } });
    const remote = await u.result().catch((e: unknown) => e);
    expect(remote).toBeInstanceOf(RemoteError);
    expect(remote).toMatchObject({ code: 'HOST_ONLY', adapter: 'y', kind: 'unavailable', remoteName: 'SomeHostOnlyError' });
    const t = new ClientStream('t');
    t.fail(new Error('cluster closed'));
    expect(await drain(t)).toEqual(['error:cluster closed']);
  });
});
