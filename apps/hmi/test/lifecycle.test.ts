/**
 * The manager lifecycle over HTTP (hmi.md §4.1 behaviour 14), with jobs in-process and on a real Redis (BullMQ,
 * 127.0.0.1:6379, a fresh key prefix per run): create a domain (progress, then done) → create a tenant → classify →
 * update it (the output changes) → update the domain (a new version; the tenant stays on the old one until it is
 * updated, then the old version is collected) → cancel a running and a queued job (nothing registered) → a domain
 * with tenants cannot be deleted (409) → delete the tenant (classify is then 404) and the domain. Bad input gets a
 * 4xx with a useful JSON body, and the server keeps serving.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';

import { Redis } from 'ioredis';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { domainCorpus, tenantTask } from '../src/demo-data.js';
import { buildServer } from '../src/server.js';
import { type ModelFixture, runJob, tinyModel, waitJob } from './support/fixture.js';

let fixture: ModelFixture;
beforeAll(async () => {
  fixture = await tinyModel();
});
afterAll(() => fixture?.cleanup());

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

describe.each([
  { mode: 'in-process', redis: false },
  { mode: 'bullmq', redis: true },
])('manager lifecycle, jobs $mode', ({ redis }) => {
  let app: FastifyInstance;
  const prefix = `hmi-test-${process.pid}-${Date.now()}`;

  beforeAll(async () => {
    app = await buildServer({
      modelDir: fixture.modelDir, fptSteps: 10, ftSteps: 40, minCorpusTokens: 50, maxBatch: 4, slots: 2,
      ...(redis ? { redis: { url: REDIS_URL, prefix } } : {}),
    });
  });
  afterAll(async () => {
    await app?.close();
    if (redis) {
      const r = new Redis(REDIS_URL);
      const keys = await r.keys(`${prefix}:*`);
      if (keys.length > 0) await r.del(...keys);
      r.disconnect();
    }
  });

  const task = tenantTask('bio', 24, 5);
  const classify = async (tenant: string, texts: string[]) => app.inject({ method: 'POST', url: `/v1/tenants/${tenant}/classify`, payload: { texts } });

  it('runs create → classify → update → cancel → delete, and answers bad input with 4xx', async () => {
    expect((await app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ status: 'ok', jobs: redis ? 'bullmq' : 'in-process', domains: 1, tenants: 0 });

    // (a) create a domain: a job with progress, then the branch exists.
    const created = await app.inject({ method: 'POST', url: '/v1/domains', payload: { name: 'bio', corpus: domainCorpus('bio', 60), alpha: 0.5 } });
    expect(created.statusCode).toBe(202);
    expect(created.json()).toMatchObject({ object: 'job', op: 'create_domain', target: 'bio' });
    const { job: domainJob, seen } = await waitJob(app, created.json().id);
    expect(domainJob.state).toBe('done');
    expect(domainJob.progress).toBe(1);
    expect(seen.every((p, i) => p >= 0 && p <= 1 && (i === 0 || p >= seen[i - 1]!))).toBe(true);
    expect(seen.some((p) => p > 0 && p < 1), `progress seen: ${seen.join(' ')}`).toBe(true);
    expect(domainJob.result).toMatchObject({ domain: 'bio', version: 'bio@1' });
    const bio = (await app.inject({ method: 'GET', url: '/v1/domains/bio' })).json();
    expect(bio).toMatchObject({ name: 'bio', version: 'bio@1', parent: 'root', alpha: 0.5, tenants: 0 });
    expect(bio.coverage.covered_fraction).toBeGreaterThanOrEqual(0.5);
    expect(bio.entries).toBeGreaterThan(0);
    expect(bio.coverage.kept).toBeLessThan(bio.coverage.distinct);

    // The same name again, while it exists: 409.
    const dup = await app.inject({ method: 'POST', url: '/v1/domains', payload: { name: 'bio', corpus: domainCorpus('bio', 60) } });
    expect(dup.statusCode).toBe(409);
    expect(dup.json().error).toMatchObject({ code: 'domain_exists' });

    // (c) create a tenant, then classify.
    await runJob(app, 'POST', '/v1/tenants', { id: 't1', domain: 'bio', labels: task.labels, examples: task.examples });
    const tenant = (await app.inject({ method: 'GET', url: '/v1/tenants/t1' })).json();
    expect(tenant).toMatchObject({ id: 't1', domain: 'bio', version: 'bio@1', labels: task.labels, steps: 40 });
    const { hiddenSize: d } = fixture.config;
    const m = Math.round(d / 8);
    const expected = 4 * (2 * (2 * d * m + m + d) + 3 * d + 3);
    const tenantsDir = (await app.inject({ method: 'GET', url: '/health' })).json().tenants_dir as string;
    expect(tenant.bytes).toEqual({ adapters: 4 * 2 * (2 * d * m + m + d), head: 4 * (3 * d + 3), total: expected, device_resident: 0, file: statSync(join(tenantsDir, 't1.tsadapt')).size, host_cached: true });
    expect(tenant.bytes.file).toBeGreaterThan(48 + expected);
    const texts = task.examples.slice(0, 6).map((e) => e.text);
    const first = await classify('t1', texts);
    expect(first.statusCode, first.body).toBe(200);
    const body = first.json();
    expect(body.data).toHaveLength(6);
    for (const r of body.data) {
      expect(task.labels).toContain(r.label);
      expect(r.probabilities.reduce((a: number, b: number) => a + b, 0)).toBeCloseTo(1, 5);
    }

    // (d) update: the output changes.
    await runJob(app, 'POST', '/v1/tenants/t1/update', { examples: tenantTask('bio', 12, 9).examples, steps: 20 });
    const second = (await classify('t1', texts)).json();
    expect(second.data.map((r: { logits: number[] }) => r.logits)).not.toEqual(body.data.map((r: { logits: number[] }) => r.logits));
    expect((await app.inject({ method: 'GET', url: '/v1/tenants/t1' })).json()).toMatchObject({ steps: 60, examples: 36 });

    // (b) update the domain: a new version beside the old one; t1 stays on bio@1 (same logits) until it is updated,
    // and then bio@1, superseded and unpinned, is collected.
    const before = (await classify('t1', texts)).json();
    const upd = await runJob(app, 'POST', '/v1/domains/bio/update', { corpus: domainCorpus('bio', 40, 7) });
    expect(upd.result).toMatchObject({ domain: 'bio', version: 'bio@2' });
    expect((await app.inject({ method: 'GET', url: '/v1/domains/bio' })).json()).toMatchObject({
      version: 'bio@2', tenants: 1, versions: [{ id: 'bio@1', state: 'superseded', pins: 1 }, { id: 'bio@2', state: 'live', pins: 0 }],
    });
    expect((await classify('t1', texts)).json().data).toEqual(before.data);
    await runJob(app, 'POST', '/v1/tenants/t1/update', { examples: task.examples.slice(0, 6), steps: 2 });
    expect((await app.inject({ method: 'GET', url: '/v1/tenants/t1' })).json().version).toBe('bio@2');
    expect((await app.inject({ method: 'GET', url: '/v1/domains/bio' })).json().versions).toEqual([{ id: 'bio@2', state: 'live', pins: 1, entries: expect.any(Number) }]);
    expect((await classify('t1', texts)).statusCode).toBe(200);

    // Cancel a running job (a long fine-tune, once it made progress) and a queued one behind it: neither leaves a
    // tenant, and both ids are free again.
    const submit = (id: string, steps: number) => app.inject({ method: 'POST', url: '/v1/tenants', payload: { id, domain: 'bio', labels: task.labels, examples: task.examples, steps } });
    const long = await submit('t2', 100_000);
    const queued = await submit('t3', 10);
    expect([long.statusCode, queued.statusCode]).toEqual([202, 202]);
    const longId = long.json().id as string;
    const queuedId = queued.json().id as string;
    for (;;) {
      const j = (await app.inject({ method: 'GET', url: `/v1/jobs/${longId}` })).json();
      if (j.state === 'running' && j.progress > 0) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    expect((await app.inject({ method: 'GET', url: `/v1/jobs/${queuedId}` })).json().state).toBe('queued');
    const cancelledQueued = await app.inject({ method: 'DELETE', url: `/v1/jobs/${queuedId}` });
    expect(cancelledQueued.statusCode).toBe(200);
    expect(cancelledQueued.json()).toMatchObject({ state: 'cancelled', progress: 0, error: { code: 'job_cancelled' } });
    const cancelled = await app.inject({ method: 'DELETE', url: `/v1/jobs/${longId}` });
    expect(cancelled.statusCode).toBe(200);
    expect(cancelled.json()).toMatchObject({ state: 'cancelled', error: { code: 'job_cancelled' } });
    for (const id of [longId, queuedId]) {
      expect((await app.inject({ method: 'GET', url: `/v1/jobs/${id}` })).json().state).toBe('cancelled');
      const again = await app.inject({ method: 'DELETE', url: `/v1/jobs/${id}` });
      expect(again.statusCode).toBe(409);
      expect(again.json().error.code).toBe('job_finished');
    }
    for (const id of ['t2', 't3']) expect((await app.inject({ method: 'GET', url: `/v1/tenants/${id}` })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/v1/tenants' })).json().tenants).toBe(1);
    // The reservations went with the jobs: t3 can be created now (and is deleted again).
    const t3 = await submit('t3', 2);
    expect(t3.statusCode).toBe(202);
    expect((await waitJob(app, t3.json().id)).job.state).toBe('done');
    await runJob(app, 'DELETE', '/v1/tenants/t3');

    // (e) a domain with tenants cannot be deleted.
    const inUse = await app.inject({ method: 'DELETE', url: '/v1/domains/bio' });
    expect(inUse.statusCode).toBe(409);
    expect(inUse.json().error).toMatchObject({ code: 'domain_in_use', domain: 'bio', tenants: 1 });

    // Delete the tenant (classify is then 404), then the domain.
    const deleted = await runJob(app, 'DELETE', '/v1/tenants/t1');
    expect(deleted.result).toMatchObject({ tenant: 't1', deleted: true, freed_bytes: expected });
    const gone = await classify('t1', ['anything']);
    expect(gone.statusCode).toBe(404);
    expect(gone.json().error).toMatchObject({ code: 'tenant_not_found', tenant: 't1' });
    await runJob(app, 'DELETE', '/v1/domains/bio');
    expect((await app.inject({ method: 'GET', url: '/v1/domains/bio' })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/v1/tenants' })).json().bytes.total).toBe(0);
  });

  it('answers bad input with a 4xx and a JSON body naming the problem, and keeps serving', async () => {
    const cases: { method: 'POST' | 'DELETE' | 'GET'; url: string; payload?: unknown; status: number; code: string | null; param?: string }[] = [
      { method: 'POST', url: '/v1/domains', payload: { name: 'x' }, status: 400, code: 'invalid_request', param: 'corpus' },
      { method: 'POST', url: '/v1/domains', payload: { name: 'no spaces', corpus: domainCorpus('eco', 40) }, status: 400, code: 'invalid_name', param: 'name' },
      { method: 'POST', url: '/v1/domains', payload: { name: 'tiny', corpus: ['a b'] }, status: 400, code: 'corpus_too_small', param: 'corpus' },
      { method: 'POST', url: '/v1/domains/root/update', payload: { corpus: ['the market'] }, status: 409, code: 'root_domain' },
      { method: 'POST', url: '/v1/domains/nope/update', payload: { corpus: domainCorpus('eco', 40) }, status: 404, code: 'domain_not_found' },
      { method: 'POST', url: '/v1/tenants', payload: { domain: 'nope', labels: ['a', 'b'], examples: [{ text: 'x', label: 'a' }] }, status: 404, code: 'domain_not_found', param: 'domain' },
      { method: 'POST', url: '/v1/tenants', payload: { domain: 'root', labels: ['a', 'a'], examples: [{ text: 'x', label: 'a' }] }, status: 400, code: 'invalid_labels', param: 'labels' },
      { method: 'POST', url: '/v1/tenants', payload: { domain: 'root', labels: ['a', 'b'], examples: [{ text: 'x', label: 'c' }] }, status: 400, code: 'invalid_label', param: 'examples[0].label' },
      { method: 'POST', url: '/v1/tenants/nobody/classify', payload: { texts: ['x'] }, status: 404, code: 'tenant_not_found' },
      { method: 'POST', url: '/v1/tenants/nobody/classify', payload: { texts: ['x'], token_ids: [[5]] }, status: 400, code: 'invalid_input', param: 'texts' },
      { method: 'POST', url: '/v1/tenants/nobody/classify', payload: { texts: 'x' }, status: 400, code: 'invalid_request', param: 'texts' },
      { method: 'DELETE', url: '/v1/domains/root', status: 409, code: 'root_domain' },
      { method: 'DELETE', url: '/v1/tenants/nobody', status: 404, code: 'tenant_not_found' },
      { method: 'GET', url: '/v1/jobs/999999', status: 404, code: 'job_not_found' },
      { method: 'DELETE', url: '/v1/jobs/999999', status: 404, code: 'job_not_found' },
    ];
    for (const c of cases) {
      const res = await app.inject({ method: c.method, url: c.url, ...(c.payload === undefined ? {} : { payload: c.payload as Record<string, unknown> }) });
      expect(res.statusCode, `${c.method} ${c.url}: ${res.body}`).toBe(c.status);
      const err = res.json().error;
      expect(typeof err.message).toBe('string');
      expect(err.code, `${c.method} ${c.url}`).toBe(c.code);
      if (c.param !== undefined) expect(err.param, `${c.method} ${c.url}`).toBe(c.param);
    }
    // A tenant on the root with token ids out of range: 400 naming the input.
    await runJob(app, 'POST', '/v1/tenants', { id: 'r1', domain: 'root', labels: ['botany', 'medicine'], examples: task.examples.slice(0, 8).map((e) => ({ ...e, label: e.label === 'medicine' ? 'medicine' : 'botany' })), steps: 5 });
    const oob = await app.inject({ method: 'POST', url: '/v1/tenants/r1/classify', payload: { token_ids: [[2, 5, 3], [2, 99_999, 3]] } });
    expect(oob.statusCode).toBe(400);
    expect(oob.json().error).toMatchObject({ code: 'invalid_input', param: 'token_ids[1]' });
    const ok = await app.inject({ method: 'POST', url: '/v1/tenants/r1/classify', payload: { token_ids: [[2, 5, 3]] } });
    expect(ok.statusCode).toBe(200);
    expect(['botany', 'medicine']).toContain(ok.json().data[0].label);
    expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    await runJob(app, 'DELETE', '/v1/tenants/r1');
  });
});
