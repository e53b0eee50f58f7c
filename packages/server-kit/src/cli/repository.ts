import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/**
 * The repository root (the nearest directory at or above `from` holding pnpm-workspace.yaml), or null outside a
 * checkout. The servers keep their generated demos under it, in `.tessera/`.
 */
export function repositoryRoot(from: string): string | null {
  for (let dir = resolve(from); ; dir = dirname(dir)) {
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) return dir;
    if (dirname(dir) === dir) return null;
  }
}
