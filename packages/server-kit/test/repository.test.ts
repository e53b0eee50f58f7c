import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repositoryRoot } from '../src/index.js';

describe('repositoryRoot', () => {
  it('finds the nearest directory holding pnpm-workspace.yaml at or above the start, else null', () => {
    const root = mkdtempSync(join(tmpdir(), 'server-kit-repo-'));
    const deep = join(root, 'apps', 'x', 'src');
    mkdirSync(deep, { recursive: true });
    expect(repositoryRoot(deep)).toBeNull();
    writeFileSync(join(root, 'pnpm-workspace.yaml'), 'packages: []\n');
    expect(repositoryRoot(deep)).toBe(root);
    expect(repositoryRoot(root)).toBe(root);
  });
});
