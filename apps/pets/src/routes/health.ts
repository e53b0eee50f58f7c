/**
 * GET /health: 200 while the engine worker runs, 503 once it has crashed or stopped, with the shared model's tag and
 * the task counts. Answered on the HTTP thread from the client's state (the worker reports every change of its
 * tasks), so it stays fast while the worker computes a macro-batch.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';

const HealthBody = Type.Object({
  status: Type.Union([Type.Literal('ok'), Type.Literal('unhealthy')]),
  ready: Type.Boolean(),
  shared_model: Type.String(),
  device: Type.String(),
  tasks_registered: Type.Integer(),
  tasks_loaded: Type.Integer(),
  requests_in_flight: Type.Integer(),
  error: Type.Optional(Type.String()),
});

const health: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/health', { schema: { response: { 200: HealthBody, 503: HealthBody } } }, async (_request, reply) => {
    const { memory } = app.engine;
    const base = {
      shared_model: app.modelInfo.tag,
      device: app.modelInfo.device,
      tasks_registered: memory.registeredTasks,
      tasks_loaded: memory.loadedTasks,
      requests_in_flight: app.engine.inFlight,
    };
    if (app.engine.healthy) return { status: 'ok' as const, ready: true, ...base };
    return reply.code(503).send({ status: 'unhealthy' as const, ready: false, ...base, error: app.engine.failure?.message ?? 'the engine is not running' });
  });
};

export default health;
