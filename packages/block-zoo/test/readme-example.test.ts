/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it). The example runs at module load, as a reader's script would; the tests then
 * check what it printed and what it left on disk.
 */
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateLoraAdapter, generateModel } from '@tessera/engine';
import { BlockZoo, formatBlock } from '@tessera/block-zoo';
import { ingestFoundation, ingestLora } from '@tessera/block-zoo/ingest';
import { DiskTensorStore } from '@tessera/block-zoo/store';

// A tiny seeded Llama and two PEFT LoRA fine-tunes of it: one on attention, one on attention and the FFN.
const root = mkdtempSync(join(tmpdir(), 'tessera-zoo-'));
const { config } = generateModel(join(root, 'llama'), { family: 'decoder', size: 'tiny', seed: 0 });
generateLoraAdapter(join(root, 'sql'), { base: config, seed: 1 });
generateLoraAdapter(join(root, 'chat'), { base: config, seed: 2, targets: ['q_proj', 'v_proj', 'up_proj'] });

// Ingest all three unchanged: tensors are content-addressed (stored once), blocks are cut only where needed.
const zoo = new BlockZoo();
const store = DiskTensorStore.open(join(root, 'zoo'));
ingestFoundation(zoo, store, join(root, 'llama'), { id: 'llama' });
ingestLora(zoo, store, join(root, 'sql'), { id: 'sql', base: 'llama' });
ingestLora(zoo, store, join(root, 'chat'), { id: 'chat', base: 'llama' });
store.saveZoo(zoo);

for (const chain of zoo.chains()) console.log(`${chain.app}:`, chain.blocks.map(formatBlock).join(' | '));
const { uniqueBytes, logicalBytes, uniqueBlocks } = zoo.storage();
console.log(`${uniqueBlocks} blocks, ${uniqueBytes} bytes stored for ${logicalBytes} bytes of models`);
// #endregion readme-example

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('README example', () => {
  it('is the README’s code block, character for character', () => {
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example/.exec(source)![1]!;
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /```ts\n([\s\S]*?)```/.exec(readme)![1]!;
    expect(block).toBe(region);
  });

  it('prints the three chains, sharing every block the fine-tunes leave alone', () => {
    expect(printed.slice(0, 3)).toEqual([
      ['llama:', 'embed | attn(0) | ffn(0) | attn(1) | ffn(1) | head'],
      ['sql:', 'embed | attn(0)+lora | ffn(0) | attn(1)+lora | ffn(1) | head'],
      ['chat:', 'embed | attn(0)+lora | ffn(0)+lora | attn(1)+lora | ffn(1)+lora | head'],
    ]);
    const [llama, sql] = [zoo.chain('llama').blocks, zoo.chain('sql').blocks];
    expect(sql.filter((b, i) => b.blockId === llama[i]!.blockId)).toHaveLength(4);
  });

  it('prints what the README says it prints', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const shown = /It prints\n\n```\n([\s\S]*?)```/.exec(readme)![1]!;
    expect(printed.map((args) => args.join(' ')).join('\n') + '\n').toBe(shown);
  });

  it('stores the foundation once and reports it', () => {
    const s = zoo.storage();
    expect(printed[3]).toEqual([`${s.uniqueBlocks} blocks, ${s.uniqueBytes} bytes stored for ${s.logicalBytes} bytes of models`]);
    // 6 foundation blocks, sql's 2 fused attentions, chat's 2 fused attentions and 2 fused FFNs.
    expect(s.uniqueBlocks).toBe(6 + 2 + 4);
    expect(s.uniqueBytes).toBe(store.stats().storedBytes);
    // Three models' worth of bytes, about one foundation stored.
    expect(s.uniqueBytes / s.logicalBytes).toBeLessThan(0.36);
    expect(DiskTensorStore.open(join(root, 'zoo')).loadZoo().chains().map((c) => c.app)).toEqual(['llama', 'sql', 'chat']);
  });
});
