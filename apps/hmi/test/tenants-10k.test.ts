/**
 * 10,000 tenants in one process (hmi.md §4.1 behaviour 8, §4.2 E3): memory is accounted exactly — each tenant's
 * bytes are the byteLength of its arrays, equal to L_up × (2dm + m + d) × 4 + (C·d + C) × 4; the store's total, the
 * /metrics gauges and GET /v1/tenants equal the sum over the tensors, through puts, replacements and deletes; no
 * tenant holds device memory at rest; and tenants picked at random among the 10,000 classify.
 */
import { mulberry32 } from '@tessera/core';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { expectedTenantBytes, tenantBytes, type TenantState, TenantStore } from '../src/manager/tenant-store.js';
import { buildServer } from '../src/server.js';
import { type ModelFixture, tinyModel } from './support/fixture.js';

const N = 10_000;

function tenant(id: string, shape: { hidden: number; bottleneck: number; layers: number }, labels: number, numel: number, rand: () => number): TenantState {
  const r = (n: number) => Float32Array.from({ length: n }, () => (rand() * 2 - 1) * 0.1);
  return {
    id, domain: 'root', version: 'root', labels: Array.from({ length: labels }, (_, i) => `l${i}`),
    adapters: Array.from({ length: shape.layers }, () => r(numel)), head: { weight: r(labels * shape.hidden), bias: r(labels) },
    examples: 0, steps: 0, createdAt: '', updatedAt: '',
  };
}

describe('TenantStore accounting', () => {
  it('equals the sum of the tensor bytes over 10,000 tenants, replacements and deletes', () => {
    const shape = { hidden: 32, bottleneck: 4, layers: 2 };
    const store = new TenantStore(shape);
    const rand = mulberry32(1);
    for (let i = 0; i < N; i++) store.put(tenant(`t${i}`, shape, 2 + (i % 2), store.numel, rand));
    const recount = () => [...store.values()].reduce((n, t) => n + t.adapters.reduce((a, x) => a + x.byteLength, 0) + t.head.weight.byteLength + t.head.bias.byteLength, 0);
    expect(store.size).toBe(N);
    expect(store.bytes).toBe(recount());
    expect(store.bytes).toBe((N / 2) * (expectedTenantBytes(shape, 2) + expectedTenantBytes(shape, 3)));
    expect(store.adapterBytes + store.headBytes).toBe(store.bytes);
    for (const t of store.values()) expect(tenantBytes(t).total).toBe(expectedTenantBytes(shape, t.labels.length));
    // Replace a tenant (an update) with a 3-label head, delete a thousand.
    store.put(tenant('t0', shape, 3, store.numel, rand));
    for (let i = 1; i <= 1000; i++) store.delete(`t${i}`);
    expect(store.size).toBe(N - 1000);
    expect(store.bytes).toBe(recount());
    expect(() => store.put({ ...tenant('bad', shape, 2, store.numel, rand), adapters: [new Float32Array(3)] })).toThrow(RangeError);
  });
});

describe('10,000 tenants in the server', () => {
  let fixture: ModelFixture;
  let app: FastifyInstance;
  beforeAll(async () => {
    fixture = await tinyModel();
    app = await buildServer({ modelDir: fixture.modelDir, maxBatch: 16 });
  });
  afterAll(async () => {
    await app?.close();
    fixture?.cleanup();
  });

  it('registers them with exact bytes in /v1/tenants, /v1/tenants/:id and /metrics, and serves any of them', async () => {
    const engine = app.engine;
    const store = engine.tenants;
    const rand = mulberry32(2);
    // Registered as a finished create job registers them (pinned to their version), without 10,000 training runs.
    for (let i = 0; i < N; i++) {
      engine.plot.tree.pin('root');
      store.put(tenant(`t${i}`, store.shape, 3, store.numel, rand));
    }
    const perTenant = expectedTenantBytes(store.shape, 3);
    const list = (await app.inject({ method: 'GET', url: '/v1/tenants' })).json();
    expect(list.tenants).toBe(N);
    expect(list.bytes).toEqual({ adapters: store.adapterBytes, head: store.headBytes, total: N * perTenant, device_resident: 0 });
    expect((await app.inject({ method: 'GET', url: '/v1/tenants/t4242' })).json().bytes.total).toBe(perTenant);
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const gauge = (part: string) => Number(new RegExp(`^hmi_tenant_bytes\\{part="${part}"\\} (\\d+)$`, 'm').exec(metrics)![1]);
    expect(gauge('adapters') + gauge('head')).toBe(N * perTenant);
    expect(metrics).toMatch(new RegExp(`^hmi_tenants ${N}$`, 'm'));
    expect(metrics).toMatch(/^hmi_pipeline_stage_seconds_total\{stage="retrieve"\} /m);

    // Any of them classifies; concurrent requests of many tenants share batches.
    const picks = Array.from({ length: 40 }, () => `t${Math.floor(rand() * N)}`);
    const answers = await Promise.all(picks.map((id) => app.inject({ method: 'POST', url: `/v1/tenants/${id}/classify`, payload: { texts: ['the market price of bread'] } })));
    for (const a of answers) expect(a.statusCode, a.body).toBe(200);
    const after = (await app.inject({ method: 'GET', url: '/metrics' })).body;
    const counter = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(after)![1]);
    expect(counter('hmi_classify_requests_total')).toBe(40);
    expect(counter('hmi_batches_total')).toBeLessThan(40);
    expect(counter('hmi_adapter_layer_copies_total')).toBe(40 * store.shape.layers);
  });
});
