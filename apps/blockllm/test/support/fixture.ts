/**
 * Test fixtures: the demo (a tiny generated foundation, two PEFT LoRAs, an adapter, BitFit, prefix-tuning and a full
 * fine-tune) generated into a fresh temporary directory, a listening server over it (its engine worker builds the
 * zoo on start), and helpers.
 *
 * One engine per test file: the native addon keeps process-wide JS state, so the test process (the HTTP thread)
 * never loads it and each file (a process of its own under vitest's forks pool) starts one engine worker. The
 * whole-model reference runs in a child process (whole-model.ts).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { FastifyInstance } from 'fastify';

import { DEMO_MODEL_NAME, generateDemoFiles } from '../../src/demo.js';
import { buildServer, type ServerOptions } from '../../src/server.js';

export const FOUNDATION = DEMO_MODEL_NAME;
/** Every application of the demo zoo. */
export const APPS = [FOUNDATION, 'sql-lora', 'chat-lora', 'summarizer', 'classifier', 'persona', 'vicuna'] as const;

export interface Fixture {
  root: string;
  modelDir: string;
  zooDir: string;
  /** A spare PEFT LoRA directory, not in the zoo. */
  spareLora: string;
  cleanup(): void;
}

export function makeFixture(): Fixture {
  const root = mkdtempSync(join(tmpdir(), 'tessera-blockllm-'));
  const { modelDir } = generateDemoFiles(root);
  return { root, modelDir, zooDir: join(root, 'zoo'), spareLora: join(root, 'spare', 'poetry-lora'), cleanup: () => rmSync(root, { recursive: true, force: true }) };
}

/** A listening server over the fixture (threads: 1, so parallel test files do not oversubscribe a small box). */
export async function serve(fixture: Fixture, options: Partial<ServerOptions> = {}): Promise<{ app: FastifyInstance; url: string }> {
  const app = await buildServer({ modelDir: fixture.modelDir, zooDir: fixture.zooDir, demoRoot: fixture.root, threads: 1, kvPages: 16, logger: false, ...options });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url };
}

/** The whole model's greedy tokens per job, from a child process (whole-model.ts). */
export function wholeModelTokens(jobs: { name: string; modelDir: string; loraDir?: string }[], prompt: number[], maxTokens: number): Record<string, number[]> {
  const script = fileURLToPath(new URL('./whole-model.ts', import.meta.url));
  const tsx = createRequire(import.meta.url).resolve('tsx');
  const out = execFileSync(process.execPath, ['--conditions=@tessera/source', '--import', tsx, script, JSON.stringify({ jobs, prompt, maxTokens })], { encoding: 'utf8', env: { ...process.env, TESSERA_THREADS: '1' } });
  return JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, number[]>;
}

export async function postJson(url: string, body: unknown): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // SSE or plain text
  }
  return { status: res.status, json, text };
}

/** Parses one SSE body into its JSON payloads; '[DONE]' is returned as the string. */
export function parseSse(body: string): unknown[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.startsWith('data: '))
    .map((frame) => frame.slice('data: '.length))
    .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
}

/** True when this thread has loaded a Tessera native addon (the HTTP thread never should). */
export function nativeAddonLoadedHere(): boolean {
  const cache = createRequire(import.meta.url).cache;
  return Object.keys(cache).some((path) => /tessera_(cpu|cuda)\.node$/.test(path));
}
