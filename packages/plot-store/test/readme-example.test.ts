/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-example
import { formatKey, HeapPlotValueStore, PlotVersionTree, rootKeys, selectByCoverage, TrigramCounts, TrigramKeyCodec } from '@tessera/plot-store';

// A tiny model: ids 0 … 99 (0 is PAD), hidden size 4, so each value is a [3, 4] fp16 row.
const codec = new TrigramKeyCodec({ vocabSize: 100 });
const tree = new PlotVersionTree({ codec, values: new HeapPlotValueStore({ hidden: 4 }) });
// Stands in for the lower layers run on each tri-gram alone (window mode): 3 × 4 values per key.
const lower = (keys: BigUint64Array, salt: number) => Float32Array.from({ length: keys.length * 12 }, (_, i) => Math.sin(i + salt));

// The root: every uni-gram plus the general corpus's bi-grams and tri-grams (A5).
const general = new TrigramCounts().addBatch(codec.keys([[5, 6, 7, 8], [9, 6, 7]]));
const root = rootKeys(codec, general);
tree.createRoot({ keys: root, values: lower(root, 0) });

// A domain branch: the domain corpus's most frequent tri-grams, covering α = 50 % of its occurrences (A6).
const bio = new TrigramCounts().addBatch(codec.keys([[40, 41, 42], [40, 41, 42, 43], [5, 40, 41, 42]]));
const selection = selectByCoverage(bio, 0.5);
const { id } = tree.createBranch({ domain: 'bio', selection, values: lower(selection.keys, 1) });

// Look a sentence up on bio@1: each key from bio, else the root, backing off tri → bi → uni → zero row (A2).
for (const key of codec.keys([[40, 41, 42, 6, 7]]).keys) {
  const { step, version } = tree.lookup(id, key);
  console.log(formatKey(key), step, version);
}
const { tables, entries, storedValueBytes } = tree.storage().totals;
console.log(tables, entries, storedValueBytes);
// #endregion readme-example

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const found = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(found).toBe(region);
  });

  it('keeps the three bio tri-grams that cover half the corpus and backs off to the root for the rest', () => {
    expect(selection.keys.length).toBe(3);
    expect(printed).toEqual([
      ['(0,40,41)', 'exact', 'bio@1'],
      ['(40,41,42)', 'exact', 'bio@1'],
      ['(41,42,6)', 'unigram', 'root'],
      ['(42,6,7)', 'bigram', 'root'],
      ['(6,7,0)', 'exact', 'root'],
      ['(0,0,0)', 'separator', null],
      [2, tree.info('root').entries + 3, (tree.info('root').entries + 3) * 24],
    ]);
  });
});
