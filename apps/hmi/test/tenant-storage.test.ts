/**
 * Tenants on disk with a host LRU (hmi.md §1.7–1.8): a host budget smaller than the tenants forces disk reads, and
 * classification gives the same bits as with every tenant in memory; a server restarted on the same --tenants-dir
 * serves the persisted tenants (the root's at once, a domain's once the domain is rebuilt with the same table),
 * with the same bits.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { domainCorpus, tenantTask } from '../src/demo-data.js';
import { buildServer } from '../src/server.js';
import { type ModelFixture, runJob, tinyModel } from './support/fixture.js';

let fixture: ModelFixture;
let dir: string;
beforeAll(async () => {
  fixture = await tinyModel();
  dir = mkdtempSync(join(tmpdir(), 'tessera-hmi-tenants-'));
});
afterAll(() => {
  fixture?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

const settings = { fptSteps: 5, ftSteps: 10, minCorpusTokens: 50, maxBatch: 4, slots: 2 };
const TENANTS = ['r0', 'r1', 'r2', 'r3', 'r4', 'r5'];
const texts = tenantTask('bio', 6, 3).examples.map((e) => e.text);

async function classifyAll(app: FastifyInstance, ids: string[]): Promise<Record<string, number[][]>> {
  const out: Record<string, number[][]> = {};
  const answers = await Promise.all(ids.map((id) => app.inject({ method: 'POST', url: `/v1/tenants/${id}/classify`, payload: { texts } })));
  answers.forEach((a, i) => {
    expect(a.statusCode, a.body).toBe(200);
    out[ids[i]!] = a.json().data.map((r: { logits: number[] }) => r.logits);
  });
  return out;
}

const storeOp = (metrics: string, op: string) => Number(new RegExp(`^hmi_tenant_store_ops_total\\{op="${op}"\\} (\\d+)$`, 'm').exec(metrics)![1]);

describe('tenant storage', () => {
  let want: Record<string, number[][]>;

  it('a host budget smaller than the tenants reads them from disk and classifies with the same bits', async () => {
    const full = await buildServer({ modelDir: fixture.modelDir, ...settings, tenantsDir: dir });
    try {
      await runJob(full, 'POST', '/v1/domains', { name: 'bio', corpus: domainCorpus('bio', 40) });
      for (const [i, id] of TENANTS.entries()) {
        const task = tenantTask('bio', 12, 50 + i);
        await runJob(full, 'POST', '/v1/tenants', { id, domain: i < 4 ? 'root' : 'bio', labels: task.labels, examples: task.examples });
      }
      want = await classifyAll(full, TENANTS);
    } finally {
      await full.close();
    }
    // Room for two tenants' arrays: six tenants, asked for together, come from disk.
    const per = (await import('../src/manager/tenant-store.js')).expectedTenantBytes({ hidden: fixture.config.hiddenSize, bottleneck: Math.round(fixture.config.hiddenSize / 8), layers: 2 }, 3);
    const small = await buildServer({ modelDir: fixture.modelDir, ...settings, tenantsDir: dir, hostBudgetBytes: 2 * per });
    try {
      const health = (await small.inject({ method: 'GET', url: '/health' })).json();
      expect(health).toMatchObject({ tenants: 4, dormant_tenants: 2 }); // bio's two wait for bio's table
      await runJob(small, 'POST', '/v1/domains', { name: 'bio', corpus: domainCorpus('bio', 40) });
      expect((await small.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ tenants: 6, dormant_tenants: 0 });
      for (let round = 0; round < 2; round++) expect(await classifyAll(small, TENANTS)).toEqual(want);
      const metrics = (await small.inject({ method: 'GET', url: '/metrics' })).body;
      expect(storeOp(metrics, 'reads')).toBeGreaterThanOrEqual(TENANTS.length * 2 - 2);
      expect(storeOp(metrics, 'evictions')).toBeGreaterThan(0);
      const list = (await small.inject({ method: 'GET', url: '/v1/tenants' })).json();
      expect(list.bytes.host).toBeLessThanOrEqual(2 * per);
      expect(list.bytes.total).toBe(6 * per);
    } finally {
      await small.close();
    }
  });

  it('a restart on the same tenants dir serves the persisted tenants; a domain rebuilt differently does not adopt them', async () => {
    const app = await buildServer({ modelDir: fixture.modelDir, ...settings, tenantsDir: dir });
    try {
      expect((await app.inject({ method: 'GET', url: '/v1/tenants/r0' })).json()).toMatchObject({ id: 'r0', domain: 'root', version: 'root', steps: 10 });
      expect(await classifyAll(app, TENANTS.slice(0, 4))).toEqual(Object.fromEntries(TENANTS.slice(0, 4).map((id) => [id, want[id]])));
      // bio from another corpus: another table, so r4 and r5 stay on disk, unserved; their ids stay taken.
      await runJob(app, 'POST', '/v1/domains', { name: 'bio', corpus: domainCorpus('bio', 40, 99) });
      expect((await app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ tenants: 4, dormant_tenants: 2 });
      expect((await app.inject({ method: 'POST', url: '/v1/tenants/r4/classify', payload: { texts } })).statusCode).toBe(404);
      const taken = await app.inject({ method: 'POST', url: '/v1/tenants', payload: { id: 'r4', domain: 'bio', labels: ['a', 'b'], examples: [{ text: 'x', label: 'a' }] } });
      expect(taken.statusCode).toBe(409);
      // Deleting one removes its file.
      await runJob(app, 'DELETE', '/v1/tenants/r4');
      await runJob(app, 'DELETE', '/v1/tenants/r0');
      expect((await app.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ tenants: 3, dormant_tenants: 1 });
    } finally {
      await app.close();
    }
    const again = await buildServer({ modelDir: fixture.modelDir, ...settings, tenantsDir: dir });
    try {
      expect((await again.inject({ method: 'GET', url: '/health' })).json()).toMatchObject({ tenants: 3, dormant_tenants: 1 });
    } finally {
      await again.close();
    }
  });
});
