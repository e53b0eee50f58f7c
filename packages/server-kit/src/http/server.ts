/**
 * createTesseraServer: what every Tessera server is before its own routes. A fastify instance with
 *
 *   - the engine host: `engine(app)` starts it (a worker thread, a cluster client) inside a plugin with no plugin
 *     timeout, so a slow start (a big model, --profile on a slow machine) is never cut by fastify's 10 s; it is
 *     decorated as `app.engine` and closed by an onClose hook, i.e. after the server stopped accepting and drained
 *     its in-flight requests and streams (graceful close: idle keep-alive sockets do not hold the shutdown);
 *   - GET /health: 200 while `health(engine).healthy`, else 503, with the server's own body;
 *   - a prom-client registry (`app.metricsRegistry`) with the process's default metrics, HTTP request counts and
 *     durations by route and status, `tessera_engine_healthy`, and GET /metrics (after the server's `collect`);
 *   - one error handler: status by error kind, one body shape (see errors.ts), 404 for unknown routes.
 *
 * The server adds its routes, schemas and composition:
 *
 *   const app = await createTesseraServer({
 *     name: 'tessera-pets',
 *     engine: () => WorkerEngineClient.start<PetsProtocol>({ … }),
 *     health: (engine) => ({ healthy: engine.healthy, body: { … } }),
 *     routes: async (app) => { await app.register(taskRoutes); },
 *   });
 *   await listen(app, { host, port });     // listenWithGrace: SIGINT/SIGTERM drain, then close the engine
 */
import type { IncomingMessage } from 'node:http';

import { TypeBoxValidatorCompiler } from '@fastify/type-provider-typebox';
import Fastify, { type FastifyInstance, type FastifySchemaCompiler, type FastifyServerOptions } from 'fastify';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

import { gracefulClose } from '../plugins/graceful-close.js';
import { definePlugin } from '../plugins/define-plugin.js';
import { errorBody, type ErrorMappingOptions, errorReply } from './errors.js';

/**
 * The /health answer of a server over an engine host: `status` ok or unhealthy, the server's own `fields`,
 * `requests_in_flight`, and while unhealthy the `error` that says why (answered from the host's state, so it
 * stays fast while the engine computes).
 */
export function engineHealth(
  host: { healthy: boolean; failure: Error | null; inFlight: number },
  fields: Record<string, unknown>,
): { healthy: boolean; body: Record<string, unknown> } {
  const { healthy } = host;
  const error = healthy ? {} : { error: host.failure?.message ?? 'the engine is not running' };
  return { healthy, body: { status: healthy ? 'ok' : 'unhealthy', ...fields, requests_in_flight: host.inFlight, ...error } };
}

/** The options every server's buildServer takes besides its own (ServerOptions extends it). */
export interface ServerBaseOptions {
  /** fastify's logger option (default: off). */
  logger?: FastifyServerOptions['logger'];
  /** How long closing waits for the engine worker to stop before terminating it (default 10 s). */
  engineShutdownTimeoutMs?: number | undefined;
}

/** What a server's engine must offer the kit: a way to stop. */
export interface ClosableEngine {
  close(): Promise<void>;
}

export interface TesseraServerOptions<Engine extends ClosableEngine> {
  /** The server's name: its plugins are named `<name>-engine`, `<name>-errors`, … (default log and metric context). */
  name: string;
  logger?: FastifyServerOptions['logger'];
  /** Further fastify options (the kit sets forceCloseConnections 'idle' and pluginTimeout 0). */
  fastify?: Omit<FastifyServerOptions, 'logger'>;
  /**
   * The validator compiler for route schemas (default TypeBoxValidatorCompiler: fastify's default ajv would coerce
   * types, e.g. a token-id prompt into strings).
   */
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  validatorCompiler?: FastifySchemaCompiler<any>;
  /** Plugins registered before the engine starts (content parsers such as @fastify/multipart). */
  setup?: (app: FastifyInstance) => Promise<void>;
  /** Starts the engine. No plugin timeout applies; a rejection fails buildServer. */
  engine: (app: FastifyInstance) => Promise<Engine>;
  /** GET /health: `healthy` picks 200 or 503; `body` is sent as is. */
  health: (engine: Engine) => { healthy: boolean; body: Record<string, unknown> };
  /**
   * The server's metrics: register them on `registry`; `collect` runs before each /metrics render while the
   * engine is healthy. A `collect` that fails (the engine went down meanwhile) is logged and the scrape still
   * answers: the health gauge says the engine is down.
   */
  metrics?: (registry: Registry, engine: Engine, app: FastifyInstance) => { collect?: () => Promise<void> } | void;
  /** How errors are worded (the status always comes from the error's kind). */
  errors?: ErrorMappingOptions;
  /** The server's routes (and decorators they need), registered after the engine started. */
  routes: (app: FastifyInstance, engine: Engine) => Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** The server's prom-client registry (one per app instance: tests build several apps in one process). */
    metricsRegistry: Registry;
  }
}

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20, 40, 80];

/** Most bytes of an oversized body read (and dropped) before its 413 is sent; past it the 413 goes out and the connection closes. */
export const BODY_DRAIN_BYTES = 256 * 1024 * 1024;
/** Longest wait for an oversized body's end before its 413 is sent anyway. */
export const BODY_DRAIN_MS = 30_000;

/** Reads and drops the rest of a request body; true once it ended, false past `maxBytes` or `maxMs` (or on an error). */
export function drainBody(raw: IncomingMessage, maxBytes: number, maxMs: number): Promise<boolean> {
  // Already read to its end (a parsed JSON body, an injected request): nothing to wait for.
  if (raw.readableEnded) return Promise.resolve(true);
  if (raw.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    let read = 0;
    const finish = (ok: boolean) => {
      clearTimeout(timer);
      raw.removeListener('data', onData);
      raw.removeListener('end', onEnd);
      raw.removeListener('error', onError);
      raw.removeListener('close', onClose);
      resolve(ok);
    };
    const onData = (chunk: Buffer) => {
      read += chunk.length;
      if (read > maxBytes) finish(false);
    };
    const onEnd = () => finish(true);
    const onError = () => finish(false);
    const onClose = () => finish(raw.complete);
    const timer = setTimeout(() => finish(false), maxMs);
    timer.unref();
    raw.on('data', onData);
    raw.on('end', onEnd);
    raw.on('error', onError);
    raw.on('close', onClose);
    raw.resume();
  });
}

/** Builds the server and resolves once it is ready: the engine is up and every route registered. */
export async function createTesseraServer<Engine extends ClosableEngine>(options: TesseraServerOptions<Engine>): Promise<FastifyInstance> {
  const { name } = options;
  // pluginTimeout 0: the engine plugin resolves when the engine is up; that takes as long as the model and the
  // machine make it, and an engine that fails rejects the start on its own.
  const app = Fastify({ ...options.fastify, logger: options.logger ?? false, forceCloseConnections: 'idle', pluginTimeout: 0 });
  app.setValidatorCompiler(options.validatorCompiler ?? TypeBoxValidatorCompiler);

  await app.register(gracefulClose({ name: `${name}-graceful-close` }));
  await app.register(
    definePlugin(
      async (instance) => {
        instance.setErrorHandler(async (err, request, reply) => {
          const r = errorReply(err, options.errors);
          if (r.status >= 500) request.log.error({ err }, 'request failed');
          // A body over the limit is answered once the client has sent it (read and thrown away, up to a cap), so a
          // client still sending reads the 413 instead of an EPIPE from a connection closed under it.
          if (r.status === 413 && !request.raw.complete) {
            const drained = await drainBody(request.raw, BODY_DRAIN_BYTES, BODY_DRAIN_MS);
            if (!drained) void reply.header('connection', 'close');
          }
          return reply.code(r.status).send(errorBody(r));
        });
        instance.setNotFoundHandler((request, reply) => {
          void reply.code(404).send(
            errorBody({ status: 404, message: `Route ${request.method} ${request.url} not found`, type: 'not_found_error', code: 'route_not_found', param: null, details: {} }),
          );
        });
      },
      { name: `${name}-errors` },
    ),
  );
  if (options.setup) await options.setup(app);

  let engine!: Engine;
  await app.register(
    definePlugin(
      async (instance) => {
        instance.log.info('starting the engine');
        engine = await options.engine(instance);
        instance.decorate('engine' as never, engine as never);
        instance.addHook('onClose', async () => {
          instance.log.info('stopping the engine');
          await engine.close();
        });
      },
      { name: `${name}-engine` },
    ),
  );

  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const registers = [registry];
  const labelNames = ['method', 'route', 'status_code'] as const;
  const requests = new Counter({ name: 'tessera_http_requests_total', help: 'HTTP requests by route and status.', labelNames, registers });
  const durations = new Histogram({ name: 'tessera_http_request_duration_seconds', help: 'HTTP request duration by route and status.', labelNames, buckets: LATENCY_BUCKETS, registers });
  const healthy = new Gauge({ name: 'tessera_engine_healthy', help: '1 while the engine runs, 0 after it crashed or stopped.', registers });
  app.decorate('metricsRegistry', registry);
  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url;
    if (route === undefined) return;
    const labels = { method: request.method, route, status_code: String(reply.statusCode) };
    requests.inc(labels);
    durations.observe(labels, reply.elapsedTime / 1000);
  });
  const collect = options.metrics?.(registry, engine, app)?.collect;

  app.get('/health', async (_request, reply) => {
    const h = options.health(engine);
    return reply.code(h.healthy ? 200 : 503).send(h.body);
  });
  app.get('/metrics', async (_request, reply) => {
    const up = options.health(engine).healthy;
    healthy.set(up ? 1 : 0);
    if (up) await collect?.().catch((err: unknown) => app.log.warn({ err }, 'metrics: sampling the engine failed'));
    return reply.type(registry.contentType).send(await registry.metrics());
  });

  await options.routes(app, engine);
  await app.ready();
  return app;
}
