/**
 * `tessera bench`: the bench CLI of the clone the command runs in (a real process through tsx), and, outside any
 * clone, a clear message and exit 2.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterAll, describe, expect, it } from 'vitest';

import { findBenchDir, main, repositoryRoot } from '../src/index.js';
import { captureIo, tessera } from './support.js';

const outside = mkdtempSync(join(tmpdir(), 'tessera-cli-bench-'));
afterAll(() => rmSync(outside, { recursive: true, force: true }));
const repo = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

describe('tessera bench in a clone of the repository', () => {
  it('--help and --list show the benches; an unknown bench is the bench CLI\'s usage error (exit 2)', async () => {
    const [help, list, unknown] = await Promise.all([
      tessera(['bench', '--help'], { cwd: outside }),
      tessera(['bench', '--list'], { cwd: outside }),
      tessera(['bench', 'no-such-bench'], { cwd: outside }),
    ]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('usage: tessera bench <name>');
    expect(help.stdout).toContain('usage: pnpm bench <name>');
    expect(help.stdout).toMatch(/^ {2}roofline +\S/m);
    expect(list.code).toBe(0);
    for (const name of ['roofline', 'gemm', 'punica']) expect(list.stdout).toMatch(new RegExp(`^ {2}${name} `, 'm'));
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('bench: unknown bench "no-such-bench"');
  }, 30_000);

  it('finds bench/ from this package or from the working directory, and nothing outside a clone', () => {
    expect(repositoryRoot(fileURLToPath(new URL('.', import.meta.url)))).toBe(repo);
    expect(findBenchDir([outside, fileURLToPath(new URL('.', import.meta.url))])).toBe(join(repo, 'bench'));
    expect(repositoryRoot(outside)).toBeNull();
    expect(findBenchDir([outside])).toBeNull();
    expect(findBenchDir([])).toBeNull();
  });
});

describe('tessera bench outside a clone', () => {
  it('says the benchmarks run from a clone (pnpm bench) and exits 2; --help still answers', async () => {
    const io = captureIo({ cwd: outside, repositorySearch: [outside] });
    expect(await main(['bench', 'roofline', '--quick'], io)).toBe(2);
    expect(io.out).toEqual([]);
    expect(io.err.join('\n')).toMatch(/tessera bench: the benchmarks run from a clone of the Tessera repository, and none was found above .*tessera-cli-bench-.*pnpm bench <name>/);
    const helpIo = captureIo({ cwd: outside, repositorySearch: [outside] });
    expect(await main(['bench', '--help'], helpIo)).toBe(0);
    expect(helpIo.out.join('\n')).toContain('No clone of the repository here');
  });
});
