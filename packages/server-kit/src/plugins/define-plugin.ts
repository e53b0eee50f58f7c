/**
 * What `fastify-plugin` does, in a few lines (it is not a dependency here): mark a plugin function so fastify does
 * not encapsulate it (`skip-override`), its decorators and hooks then belong to the parent instance, and give it
 * a name and the fastify version range it was written for (`plugin-meta`), which fastify checks and uses for
 * `dependencies`. These are fastify's documented symbols (lib/plugin-utils.js).
 */
import type { FastifyPluginAsync, FastifyPluginOptions } from 'fastify';

export function definePlugin<Options extends FastifyPluginOptions>(
  fn: FastifyPluginAsync<Options>,
  meta: { name: string; dependencies?: string[] },
): FastifyPluginAsync<Options> {
  const plugin = fn as FastifyPluginAsync<Options> & Record<symbol, unknown>;
  plugin[Symbol.for('skip-override')] = true;
  plugin[Symbol.for('fastify.display-name')] = meta.name;
  plugin[Symbol.for('plugin-meta')] = { name: meta.name, fastify: '5.x', dependencies: meta.dependencies ?? [] };
  return plugin;
}
