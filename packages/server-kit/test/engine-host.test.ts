/**
 * The front side of the host protocol: WorkerEngineClient over a real worker thread (fixtures/echo-host.ts on
 * @tessera/cluster's serveWorkerHost), StreamEngineHost over an in-memory transport, and answering HTTP with a
 * stream (openStream, sendSse): submit → ordered items then the result, admin calls with typed errors, a crash
 * failing open streams with 503.
 */
import { EventStream, type ItemEvent } from '@tessera/cluster';
import { InvalidArgumentError } from '@tessera/core';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import {
  EngineUnavailableError,
  type EngineHost,
  type RequestEnd,
  httpStatus,
  openStream,
  sendSse,
  sseData,
  StreamEngineHost,
  WorkerEngineClient,
  workerEntry,
} from '../src/index.js';

export interface EchoProtocol {
  placement: { request: { id: string; n: number; hang?: boolean }; attempt: number };
  item: ItemEvent<'item', { value: number }>;
  result: number;
  notice: string;
  admin: { add: { args: { a: number; b: number }; result: number }; boom: { args: null; result: never }; notice: { args: string; result: null } };
  ready: { echo: string };
}

describe('WorkerEngineClient', () => {
  let client: WorkerEngineClient<EchoProtocol>;
  const ends: RequestEnd<EchoProtocol>[] = [];

  beforeAll(async () => {
    client = await WorkerEngineClient.start<EchoProtocol>({
      entry: workerEntry(import.meta.url, { source: './fixtures/echo-host.ts', built: './fixtures/unused.js' }),
      workerData: { tag: 'hello' },
      name: 'server-kit-echo',
    });
    client.on('request-end', (end) => ends.push(end));
  }, 30_000);

  afterAll(() => client?.close());

  it('is an EngineHost, with what the worker reported when ready', () => {
    const host: EngineHost<EchoProtocol> = client;
    expect(host.ready).toEqual({ echo: 'hello' });
    expect(host.healthy).toBe(true);
  });

  it('turns a submit into one ordered stream: items by index once each, then the result', async () => {
    const stream = client.submit({ request: { id: 'r1', n: 6 }, attempt: 0 });
    expect(client.inFlight).toBe(1);
    const outputs = [];
    for await (const out of stream) outputs.push(out);
    expect(outputs).toEqual([...Array.from({ length: 6 }, (_, i) => ({ type: 'item', index: i, value: i })), { type: 'finish', result: 15 }]);
    expect(stream.dropped).toBe(1);
    expect(client.inFlight).toBe(0);
    expect(ends.at(-1)).toMatchObject({ placement: { request: { id: 'r1' } }, items: 6, result: 15, error: null });
    expect(ends.at(-1)!.firstItemAt).not.toBeNull();
  });

  it('ends a request the engine refuses with its typed error, and refuses an id in flight', async () => {
    const refused = client.submit({ request: { id: 'bad', n: -1 }, attempt: 0 });
    const err = await refused.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(httpStatus(err)).toBe(400);
    client.submit({ request: { id: 'twice', n: 2 }, attempt: 0 });
    expect(() => client.submit({ request: { id: 'twice', n: 2 }, attempt: 0 })).toThrow(/already in flight/);
  });

  it('answers admin calls, rebuilding their typed errors, and delivers notices', async () => {
    expect(await client.call('add', { a: 2, b: 3 })).toBe(5);
    const err = await client.call('boom', null).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toBe('boom');
    await expect(client.call('nope' as 'add', { a: 0, b: 0 })).rejects.toThrow(/no admin call named "nope"/);
    const notices: string[] = [];
    client.on('notice', (n) => notices.push(n));
    await client.call('notice', 'adapter loaded');
    expect(notices).toEqual(['adapter loaded']);
  });

  it('a crash fails open streams and pending calls with 503, and every later call', async () => {
    const crashes: Error[] = [];
    client.on('crash', (err) => crashes.push(err));
    const open = client.submit({ request: { id: 'hang', n: 1, hang: true }, attempt: 0 });
    await client.call('add', { a: 0, b: 0 }); // the submit reached the worker
    await client.terminate();
    const err = await open.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EngineUnavailableError);
    expect(httpStatus(err)).toBe(503);
    expect(client.healthy).toBe(false);
    expect(crashes).toHaveLength(1);
    expect(() => client.submit({ request: { id: 'late', n: 1 }, attempt: 0 })).toThrow(EngineUnavailableError);
    await expect(client.call('add', { a: 1, b: 1 })).rejects.toBeInstanceOf(EngineUnavailableError);
  });
});

describe('StreamEngineHost', () => {
  function transport() {
    const streams = new Map<string, EventStream<EchoProtocol['item'], number>>();
    const cancelled: string[] = [];
    let closed = false;
    const host = new StreamEngineHost<EchoProtocol>({
      ready: { echo: 'redis' },
      open: ({ request }) => {
        const stream = new EventStream<EchoProtocol['item'], number>(request.id);
        streams.set(request.id, stream);
        return stream;
      },
      cancel: (id) => cancelled.push(id),
      admin: { add: ({ a, b }) => a + b, boom: () => Promise.reject(new InvalidArgumentError('boom')), notice: () => null },
      close: async () => void (closed = true),
    });
    return { host, streams, cancelled, isClosed: () => closed };
  }

  it('tracks the streams a transport feeds: in flight, request ends, cancels, admin calls, close', async () => {
    const { host, streams, cancelled, isClosed } = transport();
    const ends: RequestEnd<EchoProtocol>[] = [];
    host.on('request-end', (end) => ends.push(end));
    const stream = host.submit({ request: { id: 'a', n: 1 }, attempt: 0 });
    expect(host.inFlight).toBe(1);
    expect(() => host.submit({ request: { id: 'a', n: 1 }, attempt: 0 })).toThrow(/already in flight/);
    host.cancel('a');
    host.cancel('unknown');
    expect(cancelled).toEqual(['a']);
    streams.get('a')!.accept({ kind: 'item', id: 'a', attempt: 0, index: 0, value: 7 });
    streams.get('a')!.accept({ kind: 'finish', id: 'a', attempt: 0, result: 7 });
    expect(await stream.result()).toBe(7);
    expect(host.inFlight).toBe(0);
    expect(ends).toMatchObject([{ items: 1, result: 7, error: null }]);
    expect(await host.call('add', { a: 1, b: 2 })).toBe(3);
    await expect(host.call('boom', null)).rejects.toBeInstanceOf(InvalidArgumentError);
    await host.close();
    expect(isClosed()).toBe(true);
    expect(host.healthy).toBe(false);
    expect(() => host.submit({ request: { id: 'b', n: 1 }, attempt: 0 })).toThrow(/shut down/);
  });
});

describe('openStream and sendSse', () => {
  it('answers with the status of an error that comes first, else streams; a client gone cancels', async () => {
    const app = Fastify();
    const cancels: string[] = [];
    app.get('/:id', async (request, reply) => {
      const { id } = request.params as { id: string };
      const stream = new EventStream<EchoProtocol['item'], number>(id);
      setImmediate(() => {
        if (id === 'refused') stream.fail(new InvalidArgumentError('no such thing'));
        else {
          stream.accept({ kind: 'item', id, attempt: 0, index: 0, value: 1 });
          stream.accept({ kind: 'finish', id, attempt: 0, result: 1 });
        }
      });
      const outputs = await openStream(request, reply, stream, () => cancels.push(id));
      return sendSse(
        reply,
        (async function* () {
          for await (const out of outputs) yield sseData(out);
        })(),
      );
    });
    app.setErrorHandler((err, _request, reply) => void reply.code(httpStatus(err)).send({ message: (err as Error).message }));
    const refused = await app.inject({ method: 'GET', url: '/refused' });
    expect(refused.statusCode).toBe(400);
    const ok = await app.inject({ method: 'GET', url: '/ok' });
    expect(ok.statusCode).toBe(200);
    expect(ok.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(ok.body).toBe('data: {"type":"item","index":0,"value":1}\n\ndata: {"type":"finish","result":1}\n\n');
    expect(cancels).toEqual([]);
    await app.close();
  });
});
