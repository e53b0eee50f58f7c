import { connect, type Socket } from 'node:net';

import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';

import { definePlugin, gracefulClose } from '../src/index.js';

/** Fails the test instead of hanging it when `promise` does not settle (the server would be waiting on a client). */
function settlesWithin<T>(promise: Promise<T>, what: string, ms = 5_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not settle`)), ms))),
  ]);
}

function openSocket(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => resolve(socket));
    socket.once('error', reject);
  });
}

const closed = (socket: Socket) => new Promise<void>((resolve) => socket.once('close', () => resolve()));

let app: FastifyInstance | undefined;
afterEach(async () => {
  await app?.close();
  app = undefined;
});

async function serve(routes: (app: FastifyInstance) => void): Promise<number> {
  // forceCloseConnections: false, so only the plugin ends connections.
  app = Fastify({ forceCloseConnections: false });
  await app.register(gracefulClose({ name: 'test-graceful-close' }));
  routes(app);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('no TCP address');
  return address.port;
}

describe('gracefulClose', () => {
  it('ends a connection that never sent a request, so close does not wait on it', async () => {
    const port = await serve(() => {});
    const socket = await openSocket(port);
    const socketClosed = closed(socket);
    // Let the server see the connection before closing.
    await new Promise((resolve) => setImmediate(resolve));
    await settlesWithin(app!.close(), 'app.close()');
    await settlesWithin(socketClosed, 'the idle socket');
  });

  it('lets an in-flight request finish, then ends its connection', async () => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let started!: () => void;
    const requestStarted = new Promise<void>((resolve) => (started = resolve));
    const port = await serve((a) =>
      a.get('/slow', async () => {
        started();
        await released;
        return { done: true };
      }),
    );
    const socket = await openSocket(port);
    let response = '';
    socket.on('data', (chunk: Buffer) => (response += chunk.toString()));
    const socketClosed = closed(socket);
    socket.write('GET /slow HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n');
    await requestStarted;
    const closing = app!.close();
    release();
    await settlesWithin(closing, 'app.close()');
    await settlesWithin(socketClosed, 'the keep-alive socket');
    expect(response).toMatch(/^HTTP\/1\.1 200/);
    expect(response).toContain('{"done":true}');
  });

  it("carries the caller's name, which other plugins can depend on", async () => {
    const dependent = definePlugin(async () => {}, { name: 'needs-close', dependencies: ['test-graceful-close'] });
    const withIt = Fastify();
    await withIt.register(gracefulClose({ name: 'test-graceful-close' }));
    await expect(withIt.register(dependent)).resolves.toBeDefined();
    await withIt.close();

    const without = Fastify();
    await expect(without.register(dependent)).rejects.toThrow(/test-graceful-close/);
    await without.close();
  });
});
