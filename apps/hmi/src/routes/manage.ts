/**
 * The manager's routes (hmi.md §1.11). Every operation answers 202 with its job; the job's progress and result are
 * at GET /v1/jobs/:id, and DELETE /v1/jobs/:id cancels it (a cancelled job registers nothing).
 *
 *   POST   /v1/domains              create a domain (a)         GET /v1/domains, /v1/domains/:id
 *   POST   /v1/domains/:id/update   update a domain (b)
 *   DELETE /v1/domains/:id          delete a domain without tenants (409 otherwise)
 *   POST   /v1/tenants              create a tenant (c)         GET /v1/tenants, /v1/tenants/:id (bytes)
 *   POST   /v1/tenants/:id/update   update a tenant (d)
 *   DELETE /v1/tenants/:id          delete a tenant (e)
 *   GET    /v1/jobs/:id             state, progress 0 … 1, result or error
 *   DELETE /v1/jobs/:id             cancel
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';

import { UnknownJobError } from '../errors.js';
import type { JobView } from '../jobs/queue.js';
import { CreateDomain, CreateTenant, IdParams, UpdateDomain, UpdateTenant } from '../schemas.js';

export function jobBody(job: JobView) {
  return {
    object: 'job' as const,
    id: job.id,
    op: job.op,
    target: job.target,
    state: job.state,
    progress: job.progress,
    result: job.result,
    error: job.error,
    created_at: job.createdAt,
    finished_at: job.finishedAt,
  };
}

const manage: FastifyPluginAsyncTypebox = async (app) => {
  const m = app.engine.manager;
  const accepted = (reply: { code: (n: number) => unknown }, job: JobView) => {
    reply.code(202);
    return jobBody(job);
  };

  app.post('/v1/domains', { schema: { body: CreateDomain } }, async (req, reply) => accepted(reply, await m.createDomain(req.body)));
  app.post('/v1/domains/:id/update', { schema: { params: IdParams, body: UpdateDomain } }, async (req, reply) => accepted(reply, await m.updateDomain(req.params.id, req.body)));
  app.delete('/v1/domains/:id', { schema: { params: IdParams } }, async (req, reply) => accepted(reply, await m.deleteDomain(req.params.id)));
  app.get('/v1/domains', async () => ({ object: 'list' as const, data: [...m.domains.values()].map((d) => m.domainView(d)) }));
  app.get('/v1/domains/:id', { schema: { params: IdParams } }, async (req) => m.domainView(m.domain(req.params.id)));

  app.post('/v1/tenants', { schema: { body: CreateTenant } }, async (req, reply) => accepted(reply, await m.createTenant(req.body)));
  app.post('/v1/tenants/:id/update', { schema: { params: IdParams, body: UpdateTenant } }, async (req, reply) => accepted(reply, await m.updateTenant(req.params.id, req.body)));
  app.delete('/v1/tenants/:id', { schema: { params: IdParams } }, async (req, reply) => accepted(reply, await m.deleteTenant(req.params.id)));
  app.get('/v1/tenants', async () => {
    const store = app.engine.tenants;
    return {
      object: 'list' as const,
      tenants: store.size,
      bytes: { adapters: store.adapterBytes, head: store.headBytes, total: store.bytes, device_resident: 0, disk: store.tiers().diskBytes, host: store.tiers().hostBytes },
      data: [...store.values()].slice(0, 1000).map((t) => m.tenantView(t)),
    };
  });
  app.get('/v1/tenants/:id', { schema: { params: IdParams } }, async (req) => m.tenantView(m.tenant(req.params.id)));

  app.get('/v1/jobs/:id', { schema: { params: IdParams } }, async (req) => {
    const job = await app.engine.queue.get(req.params.id);
    if (!job) throw new UnknownJobError(req.params.id);
    return jobBody(job);
  });
  app.delete('/v1/jobs/:id', { schema: { params: IdParams } }, async (req) => jobBody(await m.cancel(req.params.id)));
};

export default manage;
