/** Finding the clone of the repository the CLI runs in (for `tessera bench`, whose benches are not published). */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/** The nearest directory at or above `from` holding pnpm-workspace.yaml, or null outside a checkout. */
export function repositoryRoot(from: string): string | null {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) return dir;
    if (dirname(dir) === dir) return null;
  }
}

/**
 * The bench package's directory (bench/, holding @tessera/bench and its src/cli.ts) in the first of `starts` that is
 * inside a clone of the repository having one; null when none is.
 */
export function findBenchDir(starts: readonly string[]): string | null {
  for (const start of starts) {
    const root = repositoryRoot(start);
    if (root === null) continue;
    const dir = join(root, 'bench');
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: unknown };
      if (manifest.name === '@tessera/bench' && existsSync(join(dir, 'src', 'cli.ts'))) return dir;
    } catch {
      // no bench/ here (or not ours): try the next start
    }
  }
  return null;
}
