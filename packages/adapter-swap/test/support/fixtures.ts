/**
 * Real inputs for the tests: a tiny seeded Llama-style decoder and PEFT LoRA adapters for it, written by the
 * engine's generator into a temporary directory, plus ways to break an adapter directory as users do.
 */
import { cpSync, mkdtempSync, rmSync, truncateSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { type DecoderConfig, type GenerateLoraAdapterOptions, generateLoraAdapter, generateModel } from '@tessera/engine';

import type { AdapterCache, AdapterCacheEvents, AdapterCacheEvent, AdapterCacheStats, AdapterInfo } from '../../src/index.js';

/** Rank-8 q/v adapters of the tiny decoder (2 layers, hidden 64, 2 KV heads of 16): 14,336 f32 bytes each. */
export const STANDARD = ['a', 'b', 'c', 'd', 'e'] as const;

export interface Fixture {
  root: string;
  base: DecoderConfig;
  /** Adapter directories by name: a–e (rank 8), small (rank 4), large (rank 16), wide (rank 8 on all 7 projections). */
  dirs: Record<string, string>;
  /** Device (= host) bytes of each adapter: the f32 bytes of its A and B matrices. */
  bytes: Record<string, number>;
  /** A fresh directory under the fixture root. */
  scratch(name: string): string;
  cleanup(): void;
}

export function makeFixture(): Fixture {
  const root = mkdtempSync(join(tmpdir(), 'tessera-adapter-swap-'));
  const { config } = generateModel(join(root, 'base'), { family: 'decoder', size: 'tiny', seed: 0 });
  const base = config as DecoderConfig;
  const dirs: Record<string, string> = {};
  const bytes: Record<string, number> = {};
  const add = (name: string, options: Omit<GenerateLoraAdapterOptions, 'base'>) => {
    const generated = generateLoraAdapter(join(root, 'adapters', name), { base, ...options });
    dirs[name] = generated.dir;
    bytes[name] = generated.modules.reduce((sum, m) => sum + 4 * m.rank * (m.inFeatures + m.outFeatures), 0);
  };
  STANDARD.forEach((name, i) => add(name, { rank: 8, seed: i + 1 }));
  add('small', { rank: 4, seed: 11 });
  add('large', { rank: 16, seed: 12 });
  add('wide', { rank: 8, seed: 13, targets: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] });
  let scratchCount = 0;
  return {
    root,
    base,
    dirs,
    bytes,
    scratch: (name) => join(root, 'scratch', `${scratchCount++}-${name}`),
    cleanup: () => rmSync(root, { recursive: true, force: true }),
  };
}

export type Breakage = 'truncated-weights' | 'bad-config-json' | 'missing-weights' | 'wrong-shapes' | 'missing-dir';

/** A broken copy of adapter `a` (or, for wrong-shapes, an adapter generated for a different base model). */
export function brokenAdapter(fixture: Fixture, kind: Breakage): string {
  const dir = fixture.scratch(kind);
  if (kind === 'missing-dir') return dir;
  if (kind === 'wrong-shapes') {
    // Same module names, but a base with a wider FFN: down_proj's A is [r, 256] where the tiny model has [r, 176].
    generateLoraAdapter(dir, { base: { ...fixture.base, intermediateSize: 256 }, rank: 8, seed: 21, targets: ['q_proj', 'down_proj'] });
    return dir;
  }
  cpSync(fixture.dirs.a!, dir, { recursive: true });
  const weights = join(dir, 'adapter_model.safetensors');
  if (kind === 'truncated-weights') truncateSync(weights, Math.floor(statSync(weights).size / 2));
  if (kind === 'bad-config-json') writeFileSync(join(dir, 'adapter_config.json'), '{"peft_type": "LORA", "r": 8,');
  if (kind === 'missing-weights') unlinkSync(weights);
  return dir;
}

/** Every event the cache emits, in order, as [event, payload]. */
export function recordEvents<H, D>(cache: AdapterCache<H, D>): Array<{ [E in AdapterCacheEvent]: [E, AdapterCacheEvents[E]] }[AdapterCacheEvent]> {
  const log: Array<{ [E in AdapterCacheEvent]: [E, AdapterCacheEvents[E]] }[AdapterCacheEvent]> = [];
  cache.on('load-start', (p) => log.push(['load-start', p]));
  cache.on('loaded', (p) => log.push(['loaded', p]));
  cache.on('evicted', (p) => log.push(['evicted', p]));
  cache.on('load-failed', (p) => log.push(['load-failed', p]));
  return log;
}

/** Everything observable about the cache's contents (not its counters): for "nothing changed" checks. */
export function contents<H, D>(cache: AdapterCache<H, D>): { infos: AdapterInfo[]; stats: Partial<AdapterCacheStats> } {
  const s = cache.stats();
  return {
    infos: cache.names().map((n) => cache.info(n)),
    stats: {
      registered: s.registered,
      residentBytes: s.residentBytes,
      residentCount: s.residentCount,
      hostBytes: s.hostBytes,
      hostCount: s.hostCount,
      pinnedCount: s.pinnedCount,
      loadsInFlight: s.loadsInFlight,
      queuedLoads: s.queuedLoads,
    },
  };
}

/** Lets pending promise reactions and microtasks run (a macrotask turn), without reading any clock. */
export function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** Waits, turn by turn, until `condition` holds (disk reads finish on the thread pool, so this may take a while). */
export async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 200_000; i++) {
    if (condition()) return;
    await turn();
  }
  throw new Error(`never happened: ${what}`);
}
