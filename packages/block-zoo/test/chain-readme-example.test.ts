/**
 * The README's "Serving chains" example, run. Its ```ts block is, character for character, the
 * `// #region chain-readme-example` block below (the first test checks it). The example runs at module load, as a
 * reader's script would; the tests then check what it printed against the whole model and the README.
 */
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region chain-readme-example
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateLoraAdapter, generateModel } from '@tessera/engine';
import { BlockZoo, formatBlock } from '@tessera/block-zoo';
import { ChainExecutor } from '@tessera/block-zoo/chain';
import { ingestFoundation, ingestLora } from '@tessera/block-zoo/ingest';
import { DevicePool, DiskTensorStore } from '@tessera/block-zoo/store';

// A tiny Llama and two PEFT LoRA fine-tunes of it, ingested into the zoo (as in the example above).
const root = mkdtempSync(join(tmpdir(), 'tessera-chains-'));
const { config } = generateModel(join(root, 'llama'), { family: 'decoder', size: 'tiny', seed: 0 });
generateLoraAdapter(join(root, 'sql'), { base: config, seed: 1 });
generateLoraAdapter(join(root, 'chat'), { base: config, seed: 2, targets: ['q_proj', 'v_proj', 'up_proj'] });
const zoo = new BlockZoo();
const store = DiskTensorStore.open(join(root, 'zoo'));
ingestFoundation(zoo, store, join(root, 'llama'), { id: 'llama' });
ingestLora(zoo, store, join(root, 'sql'), { id: 'sql', base: 'llama' });
ingestLora(zoo, store, join(root, 'chat'), { id: 'chat', base: 'llama' });

// Serve both as chains: every block runs on the staged engine with its own KV pages; the blocks the two share
// are resident once and run the rows of both applications in one batch.
const pool = new DevicePool(store);
const chains = new ChainExecutor(zoo, pool, { kvPages: 8 });
const prompt = [1, 17, 42, 99, 7];
const [sql, chat] = chains.generate([{ app: 'sql', prompt, maxTokens: 6 }, { app: 'chat', prompt, maxTokens: 6 }]);
console.log('sql: ', sql!.tokens.join(' '));
console.log('chat:', chat!.tokens.join(' '));
const shared = chains.blocksOf('sql').filter((b) => chains.blocksOf('chat').includes(b));
console.log('shared blocks:', shared.map(formatBlock).join(' | '), `(${pool.stats().nativeBytes} bytes resident)`);
// #endregion chain-readme-example

import { argmax, loadDecoder, loadLoraAdapter, LoraDelta, PagedKvCache } from '@tessera/engine';
import type { BlockRun } from '@tessera/block-zoo/chain';

afterAll(() => {
  chains.dispose();
  pool.dispose();
  rmSync(root, { recursive: true, force: true });
});

const readme = () => readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const section = () => /## Serving chains\n([\s\S]*?)\n## /.exec(readme())![1]!;

/** Greedy tokens of the whole model (the engine's DecoderModel, the adapter as LoraDelta), one token at a time. */
function wholeModelGreedy(adapterDir: string, maxTokens: number): number[] {
  const model = loadDecoder(join(root, 'llama'));
  const adapter = loadLoraAdapter(adapterDir, { base: model.config });
  const delta = new LoraDelta(new Map([['app', adapter]]));
  const cache = PagedKvCache.create({ ...model.kvShape, numPages: 8 }, model.backend);
  const out: number[] = [];
  let next = prompt;
  while (out.length < maxTokens) {
    const step = model.forward([{ id: 'r', tokens: next, key: 'app' }], { cache, deltas: [delta] });
    const token = argmax(step.logits!.toArray() as Float32Array);
    step.logits!.dispose();
    step.layout.dispose();
    out.push(token);
    next = [token];
  }
  for (const d of [cache, delta, adapter, model]) d.dispose();
  return out;
}

describe('README: serving two fine-tunes as chains', () => {
  it('is the README’s code block, character for character', () => {
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region chain-readme-example\n([\s\S]*?)\/\/ #endregion chain-readme-example/.exec(source)![1]!;
    expect(/```ts\n([\s\S]*?)```/.exec(section())![1]!).toBe(region);
  });

  it('prints what the README says it prints', () => {
    const shown = /This prints\n\n```\n([\s\S]*?)```/.exec(section())![1]!;
    expect(printed.map((args) => args.join(' ')).join('\n') + '\n').toBe(shown);
  });

  it('generates exactly the whole model’s greedy tokens for each fine-tune', () => {
    expect(sql!.tokens).toEqual(wholeModelGreedy(join(root, 'sql'), 6));
    expect(chat!.tokens).toEqual(wholeModelGreedy(join(root, 'chat'), 6));
    expect(sql!.tokens).not.toEqual(chat!.tokens);
  });

  it('runs the shared blocks once per step over both applications', () => {
    const runs: BlockRun[] = [];
    const again = new ChainExecutor(zoo, pool, { kvPages: 8, onBlockRun: (r) => runs.push(r) });
    const twice = again.generate([{ app: 'sql', prompt, maxTokens: 6 }, { app: 'chat', prompt, maxTokens: 6 }]);
    again.dispose();
    expect(twice.map((r) => r.tokens)).toEqual([sql!.tokens, chat!.tokens]);
    const byBlock = (name: string) => runs.filter((r) => formatBlock(r.block) === name).map((r) => r.apps.join('+'));
    expect(byBlock('embed')).toEqual(Array(6).fill('sql+chat'));
    expect(byBlock('head')).toEqual(Array(6).fill('sql+chat'));
    expect(byBlock('ffn(0)')).toEqual(Array(6).fill('sql'));
    expect(runs.every((r) => r.copiedRows === 0)).toBe(true);
  });
});
