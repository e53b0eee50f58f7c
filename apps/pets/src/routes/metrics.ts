/** GET /metrics: Prometheus text exposition (see src/plugins/metrics.ts for the list). */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { refreshEngineMetrics } from '../plugins/metrics.js';

const metrics: FastifyPluginAsyncTypebox = async (app) => {
  app.get('/metrics', async (_request, reply) => {
    await refreshEngineMetrics(app);
    return reply.type(app.metrics.registry.contentType).send(await app.metrics.registry.metrics());
  });
};

export default metrics;
