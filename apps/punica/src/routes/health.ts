/**
 * GET /health: 200 while the engine worker runs, 503 once it has crashed or stopped. Answered on the HTTP thread
 * from the client's state, so it stays fast while the worker computes (the engine never blocks this loop).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';

const HealthBody = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('unhealthy')]),
  model: Type.String(),
  device: Type.String(),
  requests_in_flight: Type.Integer(),
  error: Type.Optional(Type.String()),
});

const health: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/health', { schema: { response: { 200: HealthBody, 503: HealthBody } } }, async (_request, reply) => {
    const base = { model: app.modelInfo.name, device: app.modelInfo.device, requests_in_flight: app.engine.inFlight };
    if (app.engine.healthy) return { status: 'ok' as const, ...base };
    return reply.code(503).send({ status: 'unhealthy' as const, ...base, error: app.engine.failure?.message ?? 'the engine is not running' });
  });
};

export default health;
