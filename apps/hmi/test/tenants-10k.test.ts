/**
 * 10,000 tenants in one process (hmi.md §4.1 behaviour 8, §4.2 E3): memory is accounted exactly — each tenant's
 * bytes are the byteLength of its arrays, equal to L_up × (2dm + m + d) × 4 + (C·d + C) × 4; the store's total, the
 * /metrics gauges and GET /v1/tenants equal the sum over the tensors, through puts, replacements and deletes; no
 * tenant holds device memory at rest; and tenants picked at random among the 10,000 classify.
 */
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

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
  it('keeps metadata in memory and counts state, disk and host bytes exactly over 10,000 tenants, replacements and deletes', async () => {
    const shape = { hidden: 32, bottleneck: 4, layers: 2 };
    const dir = mkdtempSync(join(tmpdir(), 'tessera-hmi-store-'));
    try {
      // A host budget of 2,500 tenants: the rest live on disk only.
      const budget = 2500 * expectedTenantBytes(shape, 3);
      const store = new TenantStore(shape, { dir, hostBudgetBytes: budget, durable: false });
      const rand = mulberry32(1);
      for (let i = 0; i < N; i += 100) await Promise.all(Array.from({ length: 100 }, (_, k) => store.put(tenant(`t${i + k}`, shape, 2 + ((i + k) % 2), store.numel, rand))));
      const diskRecount = () => readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
      const hostRecount = () => store.files.hostIds().reduce((n, id) => n + tenantBytes(store.files.peek(id)!).total, 0);
      const check = () => {
        const tiers = store.tiers();
        expect(tiers.diskBytes).toBe(diskRecount());
        expect(tiers.hostBytes).toBe(hostRecount());
        expect(tiers.hostBytes).toBeLessThanOrEqual(budget);
        expect(store.bytes).toBe([...store.values()].reduce((n, t) => n + expectedTenantBytes(shape, t.labels.length), 0));
        expect(store.adapterBytes + store.headBytes).toBe(store.bytes);
      };
      expect(store.size).toBe(N);
      expect(store.bytes).toBe((N / 2) * (expectedTenantBytes(shape, 2) + expectedTenantBytes(shape, 3)));
      check();
      expect(store.tiers().evictions).toBeGreaterThan(0);
      // Each tenant's arrays, wherever they are, are exactly the formula's bytes.
      for (const id of ['t0', 't1', 't9999']) {
        const t = await store.load(id);
        expect(tenantBytes(t).total).toBe(expectedTenantBytes(shape, t.labels.length));
        expect(store.bytesOf(id).total).toBe(tenantBytes(t).total);
      }
      // Replace a tenant (an update) with a 3-label head, delete a thousand.
      await store.put(tenant('t0', shape, 3, store.numel, rand));
      for (let i = 1; i <= 1000; i++) store.delete(`t${i}`);
      expect(store.size).toBe(N - 1000);
      expect(readdirSync(dir)).toHaveLength(N - 1000);
      check();
      await expect(store.put({ ...tenant('bad', shape, 2, store.numel, rand), adapters: [new Float32Array(3)] })).rejects.toThrow(RangeError);
      // Metadata survives a restart with the files.
      const again = new TenantStore(shape, { dir });
      expect(again.dormantRecords()).toHaveLength(N - 1000);
      expect(again.unreadable).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
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
    for (let i = 0; i < N; i += 200) {
      await Promise.all(Array.from({ length: 200 }, (_, k) => store.put(tenant(`t${i + k}`, store.shape, 3, store.numel, rand), engine.plot.fingerprints.get('root'))));
      for (let k = 0; k < 200; k++) engine.plot.tree.pin('root');
    }
    const perTenant = expectedTenantBytes(store.shape, 3);
    const list = (await app.inject({ method: 'GET', url: '/v1/tenants' })).json();
    expect(list.tenants).toBe(N);
    const tiers = store.tiers();
    expect(list.bytes).toEqual({ adapters: store.adapterBytes, head: store.headBytes, total: N * perTenant, device_resident: 0, disk: tiers.diskBytes, host: tiers.hostBytes });
    expect(tiers.diskBytes).toBe(readdirSync(store.files.dir).reduce((n, f) => n + statSync(join(store.files.dir, f)).size, 0));
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
