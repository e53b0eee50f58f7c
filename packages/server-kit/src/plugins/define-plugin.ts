/**
 * A fastify plugin without encapsulation (its decorators and hooks belong to the parent instance), with a name
 * other plugins can list in `dependencies`: fastify-plugin, with the fastify major these servers are written for.
 */
import type { FastifyPluginAsync, FastifyPluginOptions } from 'fastify';
import fp from 'fastify-plugin';

export function definePlugin<Options extends FastifyPluginOptions>(
  fn: FastifyPluginAsync<Options>,
  meta: { name: string; dependencies?: string[] },
): FastifyPluginAsync<Options> {
  return fp(fn, { fastify: '5.x', name: meta.name, dependencies: meta.dependencies ?? [] });
}
