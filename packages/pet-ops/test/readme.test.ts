/**
 * The README's example, run. Every ```ts block of README.md is, character for character, one of the
 * `// #region readme-…` blocks below (in order; the first test checks it), so the README cannot drift from the API.
 */
import { readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));

// #region readme-mixed-batch
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateModel } from '@tessera/engine';
import { PetEngine, TaskManager, generatePetParams } from '@tessera/pet-ops';

// The shared model: any Hugging Face BertForSequenceClassification directory (here a seeded tiny one).
const dir = join(mkdtempSync(join(tmpdir(), 'pets-')), 'bert-tiny');
generateModel(dir, { family: 'encoder', size: 'tiny', seed: 0 });

const tasks = new TaskManager();
tasks.addSharedModel('bert-tiny', { dir });
const shared = tasks.loadSharedModel('bert-tiny'); // loaded once, whatever the number of tasks

// Register two tasks of two PET types (parameters are validated against the shared model), then load them.
const sentiment = tasks.registerTask('adapter', 'bert-tiny', generatePetParams('adapter', shared.config, { seed: 1, labels: ['negative', 'positive'] }));
const topic = tasks.registerTask('maskbert', 'bert-tiny', generatePetParams('maskbert', shared.config, { seed: 2, labels: ['news', 'sport', 'tech'] }));
tasks.loadTasks([sentiment, topic]);

// One macro-batch: every shared GEMM runs once over both tasks' rows; each task's PET ops touch only its rows.
const engine = new PetEngine(tasks, 'bert-tiny');
const tokenizer = shared.tokenizer!;
const results = engine.classify([
  { taskId: sentiment, ids: tokenizer.encode('a great movie') },
  { taskId: topic, ids: tokenizer.encode('the match ended in a draw') },
  { taskId: sentiment, ids: tokenizer.encode('dull') },
]);
for (const r of results) console.log(r.taskId, r.label, r.logits);
console.log(tasks.memory()); // shared bytes once, plus each task's PET bytes
tasks.dispose();
// #endregion readme-mixed-batch

rmSync(dirname(dir), { recursive: true, force: true });

describe('README example', () => {
  it('every ```ts block of the README is a region of this file, in order', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    const regions = [...source.matchAll(/^\/\/ #region (readme-[\w-]+)\n([\s\S]*?)^\/\/ #endregion \1$/gm)].map((m) => m[2]);
    expect(regions).toHaveLength(1);
    expect(blocks).toEqual(regions);
  });

  it('classified the mixed batch: one result per query, in order, with its task’s labels', () => {
    const lines = printed.slice(0, 3) as [string, string, Float32Array][];
    expect(lines.map(([id]) => id)).toEqual([sentiment, topic, sentiment]);
    const labels = new Map([[sentiment, ['negative', 'positive']], [topic, ['news', 'sport', 'tech']]]);
    for (const [id, label, logits] of lines) {
      const own = labels.get(id)!;
      expect(logits).toBeInstanceOf(Float32Array);
      expect(logits.length).toBe(own.length);
      expect(label).toBe(own[logits.indexOf(Math.max(...logits))]);
    }
    expect(results).toHaveLength(3);
  });

  it('printed the memory split: the shared model once plus two tasks’ PET bytes', () => {
    const memory = printed[3]![0] as { sharedBytes: number; petBytes: number; loadedTasks: number; perType: Record<string, { tasks: number }> };
    expect(memory.loadedTasks).toBe(2);
    expect(memory.sharedBytes).toBeGreaterThan(0);
    expect(memory.petBytes).toBeGreaterThan(0);
    expect(memory.petBytes).toBeLessThan(memory.sharedBytes);
    expect(memory.perType.adapter!.tasks).toBe(1);
    expect(memory.perType.maskbert!.tasks).toBe(1);
  });
});
