/**
 * The layering rule (ARCHITECTURE "Layers"): policy packages have no runtime dependency on @tessera/native or
 * @tessera/engine. Checked on each package's `dependencies` and on every import in its `src/` (type-only imports
 * are erased and allowed). A package that breaks the rule fails here, in CI.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const packagesDir = new URL('../../', import.meta.url).pathname;
const POLICY_PACKAGES = ['batcher', 'adapter-swap', 'sim', 'cluster'];
const FORBIDDEN = ['@tessera/native', '@tessera/engine'];

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? sources(path) : path.endsWith('.ts') ? [path] : [];
  });
}

describe('policy packages load neither the engine nor the native addon', () => {
  for (const pkg of POLICY_PACKAGES) {
    it(`@tessera/${pkg}`, () => {
      const manifest = JSON.parse(readFileSync(join(packagesDir, pkg, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
      expect(Object.keys(manifest.dependencies ?? {}).filter((d) => FORBIDDEN.includes(d))).toEqual([]);
      const offending: string[] = [];
      for (const file of sources(join(packagesDir, pkg, 'src'))) {
        const text = readFileSync(file, 'utf8');
        for (const m of text.matchAll(/^\s*(import|export)\s+(type\s+)?[^'"]*?from\s+['"]([^'"]+)['"]/gm)) {
          if (m[2] === undefined && FORBIDDEN.includes(m[3]!)) offending.push(`${file.slice(packagesDir.length)}: ${m[0].trim()}`);
        }
        for (const m of text.matchAll(/import\(\s*['"]([^'"]+)['"]\s*\)/g)) if (FORBIDDEN.includes(m[1]!)) offending.push(`${file}: dynamic import of ${m[1]}`);
      }
      expect(offending).toEqual([]);
    });
  }
});
