/**
 * The README's example, run. Its ```ts block is, character for character, the `// #region readme-example` block
 * below (the first test checks it), so the README shows exactly the code this file runs.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';

const printed: unknown[][] = [];
vi.spyOn(console, 'log').mockImplementation((...args: unknown[]) => void printed.push(args));
const written: string[] = [];
vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => (written.push(String(chunk)), true));

// #region readme-example
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { main } from '@tessera/cli';

// The whole command, in-process: it prints on the process's streams and resolves with the exit code.
const dir = join(mkdtempSync(join(tmpdir(), 'tessera-')), 'bert');
const code = await main(['gen', 'model', dir, '--family', 'encoder', '--seed', '1']);
console.log(code); // 0, after "wrote …/bert: encoder tiny BertForSequenceClassification, …" on stdout
// #endregion readme-example

vi.restoreAllMocks();
afterAll(() => rmSync(dirname(dir), { recursive: true, force: true }));

describe('README example', () => {
  it('is the code this file runs', () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    const block = /```ts\n([\s\S]*?)```/.exec(readme)?.[1];
    const source = readFileSync(new URL(import.meta.url), 'utf8');
    const region = /\/\/ #region readme-example\n([\s\S]*?)\/\/ #endregion readme-example\n/.exec(source)?.[1];
    expect(region).toBeDefined();
    expect(block).toBe(region);
  });

  it('generates the model directory and prints what it wrote', () => {
    expect(printed).toEqual([[0]]);
    expect(written.join('')).toMatch(/^wrote .*bert: encoder tiny BertForSequenceClassification, [\d,]+ parameters/);
    expect(existsSync(join(dir, 'config.json'))).toBe(true);
    expect(existsSync(join(dir, 'model.safetensors'))).toBe(true);
  });
});
