/** Paths a server reads: the repository root (its demos), the subdirectories of a directory, containment. */
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';

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

/** The subdirectories of `dir` (symlinks to directories included, hidden ones skipped) as name and path, by name. */
export function subdirectories(dir: string): { name: string; path: string }[] {
  const root = resolve(dir);
  return readdirSync(root, { withFileTypes: true })
    .filter((d) => !d.name.startsWith('.') && (d.isDirectory() || (d.isSymbolicLink() && statSync(join(root, d.name)).isDirectory())))
    .map((d) => ({ name: d.name, path: join(root, d.name) }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * A root a server reads under (`--params-root`), resolved once at start: its real path (symlinks followed, as
 * {@link isInside} needs), or a start-up error naming `flag` when it is not a directory.
 */
export function realDirectory(dir: string, flag: string): string {
  const real = realpathSync(resolve(dir));
  if (!statSync(real).isDirectory()) throw new Error(`${flag} ${real} is not a directory`);
  return real;
}

/** Whether `path` is `root` or inside it (both already resolved; symlinks are the caller's to resolve first). */
export function isInside(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}
