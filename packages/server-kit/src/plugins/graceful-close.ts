/**
 * Closing without waiting on idle clients. `app.close()` stops listening and waits for every connection to end;
 * Node closes keep-alive connections that are idle at that moment, but not connections a client opened and has
 * not used yet, nor connections whose last response (a stream) ends after the close began. Both would hold the
 * shutdown until the client's own keep-alive timeout. This plugin counts requests per connection and, once the
 * server is closing, ends each connection as soon as it carries no request: in-flight requests and streams
 * still finish, nothing waits on an idle socket.
 */
import type { Socket } from 'node:net';

import type { FastifyPluginAsync } from 'fastify';

import { definePlugin } from './define-plugin.js';

/**
 * A graceful-close plugin under the caller's name (fastify's plugin-meta name, which other plugins list in
 * `dependencies`). A factory, not one shared plugin object, because the name lives on the function itself.
 */
export function gracefulClose(options: { name: string }): FastifyPluginAsync {
  return definePlugin(
    async (app) => {
      const requests = new Map<Socket, number>();
      let closing = false;
      app.server.on('connection', (socket: Socket) => {
        requests.set(socket, 0);
        socket.once('close', () => requests.delete(socket));
      });
      app.addHook('onRequest', async (request) => {
        const socket = request.raw.socket;
        if (requests.has(socket)) requests.set(socket, requests.get(socket)! + 1);
      });
      app.addHook('onResponse', async (request) => {
        const socket = request.raw.socket;
        const n = requests.get(socket);
        if (n === undefined) return;
        requests.set(socket, n - 1);
        if (closing && n - 1 === 0) socket.end();
      });
      app.addHook('preClose', async () => {
        closing = true;
        for (const [socket, n] of requests) if (n === 0) socket.end();
      });
    },
    { name: options.name },
  );
}
