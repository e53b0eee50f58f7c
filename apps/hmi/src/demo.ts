/**
 * The demo: a tiny root encoder (the project's generator, 4 layers of hidden 32, pretrained briefly: see
 * engine/base-model.ts), generated once and cached under the repository root's .tessera/hmi-demo; then, at every
 * start, two domains (bio, eco: further-pretrained, their PLOT branches built) and a few hundred tenants
 * (fine-tuned on small synthetic tasks), all through the manager's jobs.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

import { generatedDirectory } from '@tessera/server-kit';

import { DEMO_DOMAINS, type DemoDomain, domainCorpus, generalCorpus, tenantTask } from './demo-data.js';
import { DEFAULT_BASE, prepareBaseModel } from './engine/base-model.js';
import type { HmiEngine } from './engine/hmi-engine.js';
import type { JobView } from './jobs/queue.js';

/** Bump when the recipe changes: a cached demo of another version is regenerated. */
export const DEMO_VERSION = 2;
export const DEMO_MODEL_NAME = 'hmi-bert-tiny';

export interface Demo {
  dir: string;
  modelDir: string;
  generalCorpus: string[];
  generated: boolean;
}

/** `.tessera/hmi-demo` under the repository root (or the current directory outside a checkout). */
export function defaultDemoDir(): string {
  return generatedDirectory(import.meta.url, 'hmi-demo');
}

/** The general corpus the demo model was pretrained on and its root table holds. */
export function demoGeneralCorpus(): string[] {
  return generalCorpus(200, 3);
}

function current(dir: string): boolean {
  try {
    return (JSON.parse(readFileSync(join(dir, 'demo.json'), 'utf8')) as { version?: unknown }).version === DEMO_VERSION;
  } catch {
    return false;
  }
}

/**
 * Returns the demo model under `dir`, generating and pretraining it first when missing (atomically: staging +
 * rename). `pretrainSteps` shortens the pretraining (the CLI test's demo; fewer steps, weaker tenants).
 */
export async function ensureDemo(dir: string = defaultDemoDir(), log: (line: string) => void = () => {}, pretrainSteps: number = DEFAULT_BASE.steps): Promise<Demo> {
  const root = resolve(dir);
  const modelDir = join(root, DEMO_MODEL_NAME);
  const corpus = demoGeneralCorpus();
  if (current(root)) return { dir: root, modelDir, generalCorpus: corpus, generated: false };
  log(`generating the demo model in ${root} (once)`);
  const staging = `${root}.tmp-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  const t0 = Date.now();
  const { loss } = await prepareBaseModel(join(staging, DEMO_MODEL_NAME), { ...DEFAULT_BASE, steps: pretrainSteps, corpus: [...corpus, ...domainCorpus('bio', 100), ...domainCorpus('eco', 100)] });
  writeFileSync(join(staging, 'demo.json'), `${JSON.stringify({ version: DEMO_VERSION, model: DEMO_MODEL_NAME, pretrain_steps: pretrainSteps, pretrain_loss: loss }, null, 2)}\n`);
  if (current(root)) rmSync(staging, { recursive: true, force: true });
  else {
    if (existsSync(root)) rmSync(root, { recursive: true, force: true });
    renameSync(staging, root);
  }
  log(`demo model ready in ${Date.now() - t0} ms (MLM loss ${loss.toFixed(2)})`);
  return { dir: root, modelDir, generalCorpus: corpus, generated: true };
}

async function settle(engine: HmiEngine, job: JobView): Promise<JobView> {
  for (;;) {
    const v = (await engine.queue.get(job.id))!;
    if (v.state !== 'queued' && v.state !== 'running') {
      if (v.state !== 'done') throw new Error(`demo job ${v.op} ${v.target} ${v.state}: ${v.error?.message ?? ''}`);
      return v;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The demo's domains and `tenants` tenants (half per domain), created through the manager's jobs. */
export async function bootstrapDemo(engine: HmiEngine, tenants: number, log: (line: string) => void = () => {}): Promise<{ domains: string[]; tenants: string[] }> {
  const t0 = Date.now();
  const domains = Object.keys(DEMO_DOMAINS) as DemoDomain[];
  for (const d of domains) {
    if (engine.manager.domains.has(d)) continue;
    await settle(engine, await engine.manager.createDomain({ name: d, corpus: domainCorpus(d, 120, 11) }));
  }
  log(`domains ${domains.join(', ')} ready (${Date.now() - t0} ms); training ${tenants} tenants`);
  const ids: string[] = [];
  const jobs: JobView[] = [];
  for (let i = 0; i < tenants; i++) {
    const domain = domains[i % domains.length]!;
    const id = `${domain}-${String(Math.floor(i / domains.length) + 1).padStart(3, '0')}`;
    ids.push(id);
    if (engine.tenants.has(id)) continue; // persisted by an earlier run on the same tables
    // Persisted, but its domain's table came out different this time: train it again.
    if (engine.tenants.isDormant(id)) await settle(engine, await engine.manager.deleteTenant(id));
    const task = tenantTask(domain, 24, 1000 + i);
    jobs.push(await engine.manager.createTenant({ id, domain, labels: task.labels, examples: task.examples }));
  }
  for (const [k, job] of jobs.entries()) {
    await settle(engine, job);
    if ((k + 1) % 50 === 0 || k + 1 === jobs.length) log(`  ${k + 1}/${jobs.length} tenants trained (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  }
  return { domains, tenants: ids };
}
