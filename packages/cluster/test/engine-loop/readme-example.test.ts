/**
 * The README's "One accelerator" example, run. Its ```ts block is, character for character, the
 * `// #region readme-example` block below (the first test checks it), so the README shows exactly the code this
 * file runs.
 */
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  LoraDelta, PagedKvCache, StepRunner, TextTokenizer, generateLoraAdapter, generateModel, loadDecoder, loadLoraAdapter,
} from '@tessera/engine';
import type { FinishedRequest } from '@tessera/batcher';
import { EngineLoop } from '@tessera/cluster';

// A tiny seeded Llama-style decoder and two tenants' LoRA adapters (Hugging Face / PEFT layout), loaded back.
const root = mkdtempSync(join(tmpdir(), 'tessera-'));
const { config } = generateModel(join(root, 'decoder'), { family: 'decoder', size: 'tiny', seed: 0 });
const decoder = loadDecoder(join(root, 'decoder'));
const tokenizer = TextTokenizer.fromDir(join(root, 'decoder'));
const adapters = new Map(['alice', 'bob'].map((name, i) => {
  generateLoraAdapter(join(root, name), { base: config, rank: 8, seed: i + 1 });
  return [name, loadLoraAdapter(join(root, name), { base: config, name })] as const;
}));

// The KV tensor pool, the runner that executes plans on it, and the loop around the batcher's pure Scheduler
// (which plans on the pool's page allocator).
const cache = PagedKvCache.create({ ...decoder.kvShape, numPages: 64 });
const runner = new StepRunner({ model: decoder, cache, deltas: [new LoraDelta(adapters)], decode: (ids) => tokenizer.decode(ids) });
const batcher = new EngineLoop({ runner, pages: cache.allocator, policy: 'punica', maxBatch: 32 });

// Three tenants (the last on the base model) share every step; tokens stream through each request's listener.
const prompt = tokenizer.encode('The morning train to the coast');
const streamed = new Map<string, string>();
const done = ['alice', 'bob', null].map((adapter, i) => new Promise<FinishedRequest>((resolve, reject) => {
  const id = `req-${i}`;
  streamed.set(id, '');
  batcher.submit({ id, adapter, prompt, maxTokens: 12, stop: ['.'] }, {
    onToken: (token, text) => streamed.set(id, streamed.get(id) + text),
    onFinish: resolve,
    onError: reject,
  });
}));

const controller = new AbortController();
const loop = batcher.run(controller.signal); // steps while there is work, waits (no spinning) when there is none
for (const r of await Promise.all(done)) console.log(r.id, r.finishReason, r.completionTokens, JSON.stringify(r.text));
controller.abort();
await loop;
console.log(batcher.stats()); // steps, batch-size histogram, tokens, preemptions, layout builds, KV pages, ...
for (const owner of [cache, decoder, ...adapters.values()]) owner.dispose();
// #endregion readme-example

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const block = /## One accelerator[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(block).toBe(region);
  });

  it('ran three tenants together and printed their results and the stats', () => {
    const results = printed.slice(0, 3);
    expect(results.map((p) => p[0])).toEqual(['req-0', 'req-1', 'req-2']);
    for (const [id, reason, count, text] of results) {
      expect(['eos', 'stop', 'length']).toContain(reason);
      expect(count).toBeGreaterThan(0);
      expect(JSON.parse(text as string)).toBe(streamed.get(id as string));
    }
    const stats = printed[3]![0] as ReturnType<typeof batcher.stats>;
    expect(stats).toMatchObject({ finished: 3, running: 0, queued: 0, kvPagesUsed: 0 });
    expect(stats.batchSizeHistogram.get(3)).toBeGreaterThan(0);
    expect(stats.layoutBuilds).toBe(stats.steps);
  });
});
