/**
 * Test fixtures: the tiny root model the demo uses (the engine's generator, 4 layers of hidden 32: 2 lower,
 * materialised as PLOT, 2 upper with adapters), pretrained briefly (base-model.ts says why) into a temporary
 * directory, and helpers to drive a server's jobs.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type EncoderConfig, readHfConfig } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';
import { expect } from 'vitest';

import { domainCorpus, generalCorpus } from '../../src/demo-data.js';
import { DEFAULT_BASE, prepareBaseModel } from '../../src/engine/base-model.js';

export interface ModelFixture {
  dir: string;
  modelDir: string;
  config: EncoderConfig;
  cleanup(): void;
}

export async function tinyModel(): Promise<ModelFixture> {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-hmi-'));
  const modelDir = join(dir, 'bert-tiny');
  await prepareBaseModel(modelDir, { ...DEFAULT_BASE, steps: 150, corpus: [...generalCorpus(200, 3), ...domainCorpus('bio', 100), ...domainCorpus('eco', 100)] });
  return { dir, modelDir, config: readHfConfig(modelDir) as EncoderConfig, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface JobBody {
  id: string;
  op: string;
  target: string;
  state: string;
  progress: number;
  result: Record<string, unknown> | null;
  error: { message: string; code: string | null } | null;
}

/** Polls GET /v1/jobs/:id until the job leaves queued/running; returns the final body and every progress seen. */
export async function waitJob(app: FastifyInstance, id: string, timeoutMs = 30_000): Promise<{ job: JobBody; seen: number[] }> {
  const seen: number[] = [];
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await app.inject({ method: 'GET', url: `/v1/jobs/${id}` });
    expect(res.statusCode).toBe(200);
    const job = res.json() as JobBody;
    seen.push(job.progress);
    if (job.state !== 'queued' && job.state !== 'running') return { job, seen };
    if (Date.now() > deadline) throw new Error(`job ${id} still ${job.state} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Submits and waits; fails the test unless the job ends `done`. */
export async function runJob(app: FastifyInstance, method: 'POST' | 'DELETE', url: string, payload?: unknown): Promise<JobBody> {
  const res = await app.inject({ method, url, ...(payload === undefined ? {} : { payload: payload as Record<string, unknown> }) });
  expect(res.statusCode, res.body).toBe(202);
  const { job } = await waitJob(app, (res.json() as JobBody).id);
  expect(job.state, JSON.stringify(job.error)).toBe('done');
  return job;
}
