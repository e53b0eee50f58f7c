/**
 * A directory generated once and reused (a server's demo: a seeded model and its adapters or tasks). It is written
 * into a sibling temporary directory and renamed into place with a `demo.json` marker holding its recipe's version,
 * so an interrupted run never leaves a half-written directory that a later start would trust, and a new recipe
 * (a bumped version) is generated again.
 */
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { repositoryRoot } from './repository.js';

/** `.tessera/<name>` under the repository root of the module at `moduleUrl` (or the current directory outside a checkout). */
export function generatedDirectory(moduleUrl: string, name: string): string {
  return join(repositoryRoot(dirname(fileURLToPath(moduleUrl))) ?? process.cwd(), '.tessera', name);
}

function isCurrent(dir: string, version: number): boolean {
  try {
    return (JSON.parse(readFileSync(join(dir, 'demo.json'), 'utf8')) as { version?: unknown }).version === version;
  } catch {
    return false;
  }
}

/**
 * Returns `dir` (resolved), generating it first with `generate(staging)` when it is missing or of another version;
 * `generate` returns what the marker records besides the version. `generated` is false when it was reused.
 */
export function ensureGenerated(dir: string, version: number, generate: (staging: string) => Record<string, unknown>): { dir: string; generated: boolean } {
  const root = resolve(dir);
  if (isCurrent(root, version)) return { dir: root, generated: false };
  const staging = `${root}.tmp-${process.pid}`;
  rmSync(staging, { recursive: true, force: true });
  mkdirSync(staging, { recursive: true });
  const manifest = generate(staging);
  writeFileSync(join(staging, 'demo.json'), `${JSON.stringify({ version, ...manifest }, null, 2)}\n`);
  // Another process (a cluster worker and frontend started together) may have finished first: same seeds, same
  // files, so keep its copy rather than deleting a directory it may be reading.
  if (isCurrent(root, version)) {
    rmSync(staging, { recursive: true, force: true });
    return { dir: root, generated: false };
  }
  rmSync(root, { recursive: true, force: true });
  mkdirSync(dirname(root), { recursive: true });
  renameSync(staging, root);
  return { dir: root, generated: true };
}
