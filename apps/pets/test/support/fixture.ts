/**
 * Test fixtures: a tiny generated BERT-style encoder (the shared model) and PetS parameter files in a temporary
 * directory (real files from the engine's and pet-ops' generators), the broken files the 4xx tests need, and
 * helpers to run a server over them.
 *
 *   <dir>/bert-tiny/                 the shared model
 *   <dir>/params/<id>.safetensors    one task per TASKS entry (the server's --params-root)
 *   <dir>/params/broken/…            garbage bytes, an empty file, a file for another model's shape
 *   <dir>/params/escape.safetensors  a symbolic link to a file outside the root
 *   <dir>/outside/secret.safetensors a valid parameter file outside the root
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type EncoderConfig, generateModel } from '@tessera/engine';
import { generatePetParams, type PetType, writePetParams } from '@tessera/pet-ops';
import type { FastifyInstance } from 'fastify';

import { buildServer, type ServerOptions } from '../../src/server.js';

export const TAG = 'bert-tiny';

/** The fixture's tasks: id, PET type, labels. */
export const TASKS: readonly { id: string; type: PetType; labels: string[] }[] = [
  { id: 'sentiment', type: 'adapter', labels: ['negative', 'neutral', 'positive'] },
  { id: 'topic', type: 'maskbert', labels: ['world', 'sports', 'business', 'science'] },
  { id: 'spam', type: 'diff', labels: ['ham', 'spam'] },
  { id: 'toxicity', type: 'bitfit', labels: ['ok', 'toxic'] },
  { id: 'intent', type: 'lora', labels: ['billing', 'shipping', 'returns'] },
  { id: 'formality', type: 'prefix', labels: ['formal', 'informal'] },
];

export interface Fixture {
  dir: string;
  modelDir: string;
  paramsDir: string;
  config: EncoderConfig;
  /** Parameter file bytes by task id (what an upload sends). */
  bytes: Map<string, Uint8Array>;
  cleanup(): void;
}

export function makeFixture(seed = 11): Fixture {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-pets-'));
  const modelDir = join(dir, TAG);
  const paramsDir = join(dir, 'params');
  const { config } = generateModel(modelDir, { family: 'encoder', size: 'tiny', seed });
  mkdirSync(join(paramsDir, 'broken'), { recursive: true });
  const bytes = new Map<string, Uint8Array>();
  TASKS.forEach((t, i) => {
    const b = writePetParams(generatePetParams(t.type, config, { seed: 100 + i, labels: t.labels }));
    writeFileSync(join(paramsDir, `${t.id}.safetensors`), b);
    bytes.set(t.id, b);
  });
  // Not a safetensors file at all; an empty file; a valid adapter file for a model of another width.
  writeFileSync(join(paramsDir, 'broken', 'garbage.safetensors'), Buffer.from('this is not a safetensors file, just some text'));
  writeFileSync(join(paramsDir, 'broken', 'empty.safetensors'), new Uint8Array(0));
  const narrow: EncoderConfig = { ...config, hiddenSize: 32, numHeads: 2, intermediateSize: 64 };
  writeFileSync(join(paramsDir, 'broken', 'narrow-adapter.safetensors'), writePetParams(generatePetParams('adapter', narrow, { seed: 5, labels: ['a', 'b'] })));
  mkdirSync(join(dir, 'outside'));
  writeFileSync(join(dir, 'outside', 'secret.safetensors'), writePetParams(generatePetParams('bitfit', config, { seed: 6, labels: ['x', 'y'] })));
  symlinkSync(join(dir, 'outside', 'secret.safetensors'), join(paramsDir, 'escape.safetensors'));
  return { dir, modelDir, paramsDir, config, bytes, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A server over the fixture (threads: 1, so test files in parallel do not oversubscribe a 2-core box). */
export function serve(fixture: Fixture, options: Partial<ServerOptions> = {}): Promise<FastifyInstance> {
  return buildServer({ modelDir: fixture.modelDir, tag: TAG, paramsRoot: fixture.paramsDir, threads: 1, ...options });
}

/** A multipart/form-data body with a `metadata` field and a `params` file. */
export function multipartBody(metadata: unknown, params: Uint8Array | null, extra: { name: string; value: string }[] = []): { body: Buffer; headers: Record<string, string> } {
  const boundary = `----tessera-${Math.random().toString(16).slice(2)}`;
  const parts: Buffer[] = [];
  const field = (name: string, value: string) =>
    parts.push(Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`));
  if (metadata !== undefined) field('metadata', typeof metadata === 'string' ? metadata : JSON.stringify(metadata));
  for (const e of extra) field(e.name, e.value);
  if (params !== null) {
    parts.push(Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="params"; filename="params.safetensors"\r\ncontent-type: application/octet-stream\r\n\r\n`));
    parts.push(Buffer.from(params));
    parts.push(Buffer.from('\r\n'));
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { body: Buffer.concat(parts), headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
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

/** True when this thread has loaded a Tessera native addon (the HTTP thread never should). */
export function nativeAddonLoadedHere(): boolean {
  const cache = createRequire(import.meta.url).cache;
  return Object.keys(cache).some((path) => /tessera_(cpu|cuda)\.node$/.test(path));
}
