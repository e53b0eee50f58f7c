/**
 * Test fixtures: a tiny generated Llama-style model and LoRA adapters in a temporary directory (real HF and PEFT
 * files from the engine's generator), and helpers to run a server over them.
 *
 * One engine per test file: the native addon keeps process-wide JS state (its tensor constructor), so it may be
 * loaded by only one JS environment over a process's lifetime. The HTTP thread (the test) never loads it, and each
 * test file (a process of its own under vitest's forks pool) starts at most one engine worker.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type DecoderConfig, generateLoraAdapter, generateModel } from '@tessera/engine';
import type { FastifyInstance } from 'fastify';

import { buildServer, type ServerOptions } from '../../src/server.js';

export const MODEL_NAME = 'tiny-llama';

export interface AdapterSpec {
  name: string;
  rank?: number;
  targets?: readonly string[];
  seed?: number;
}

export interface Fixture {
  dir: string;
  modelDir: string;
  adaptersDir: string;
  /** Where extra (not registered at start-up) adapters are generated. */
  spareDir: string;
  adapterNames: string[];
  config: DecoderConfig;
  cleanup(): void;
}

export const ALL_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;

/** A tiny decoder and `adapters` (default: two) generated into a fresh temporary directory. */
export function makeFixture(adapters: readonly AdapterSpec[] = [{ name: 'alpha' }, { name: 'beta', rank: 4 }], seed = 7): Fixture {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-punica-'));
  const modelDir = join(dir, MODEL_NAME);
  const adaptersDir = join(dir, 'adapters');
  const spareDir = join(dir, 'spare');
  const { config } = generateModel(modelDir, { family: 'decoder', size: 'tiny', seed });
  adapters.forEach((a, i) => {
    generateLoraAdapter(join(adaptersDir, a.name), {
      base: config,
      rank: a.rank ?? 8,
      ...(a.targets ? { targets: a.targets } : {}),
      seed: a.seed ?? 100 + i,
    });
  });
  return { dir, modelDir, adaptersDir, spareDir, adapterNames: adapters.map((a) => a.name), config, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** Generates one more adapter for the fixture's model (not registered) and returns its directory. */
export function spareAdapter(fixture: Fixture, spec: AdapterSpec): string {
  const path = join(fixture.spareDir, spec.name);
  generateLoraAdapter(path, { base: fixture.config, rank: spec.rank ?? 8, ...(spec.targets ? { targets: spec.targets } : {}), seed: spec.seed ?? 999 });
  return path;
}

/** A server over the fixture (threads: 1, so two test files in parallel do not oversubscribe a 2-core CI box). */
export function serve(fixture: Fixture, options: Partial<ServerOptions> = {}): Promise<FastifyInstance> {
  return buildServer({ modelDir: fixture.modelDir, adaptersDir: fixture.adaptersDir, threads: 1, kvBudgetMiB: 8, ...options });
}

/** True when this thread has loaded a Tessera native addon (the HTTP thread never should). */
export function nativeAddonLoadedHere(): boolean {
  const cache = createRequire(import.meta.url).cache;
  return Object.keys(cache).some((path) => /tessera_(cpu|cuda)\.node$/.test(path));
}

/** Parses one SSE body into its JSON payloads; '[DONE]' is returned as the string. */
export function parseSse(body: string): unknown[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.startsWith('data: '))
    .map((frame) => frame.slice('data: '.length))
    .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
}

/** The value of one Prometheus series (first match of `name{labels}` or `name`), or undefined. */
export function metricValue(text: string, series: string): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    if (line.slice(0, space) === series) return Number(line.slice(space + 1));
  }
  return undefined;
}
