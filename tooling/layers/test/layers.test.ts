import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { findForbidden, readWorkspace, runtimeSpecifiers } from '../src/import-graph.js';
import { COMPUTE_PACKAGES, LAYER_RANK, POLICIES, SIBLING_RANKS } from '../src/rules.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const workspace = readWorkspace(root);

describe('the layer rules of ARCHITECTURE.md, on this repository', () => {
  const present = POLICIES.filter((p) => workspace.has(p.package));

  it('knows the policy packages that exist', () => {
    expect(present.map((p) => p.package)).toEqual(expect.arrayContaining(['@tessera/core', '@tessera/batcher', '@tessera/adapter-swap', '@tessera/sim', '@tessera/cluster']));
  });

  for (const policy of present) {
    it(`${policy.package}: no run-time path from ${policy.entries.join(', ')} to the native addon or the engine`, () => {
      const pkg = workspace.get(policy.package)!;
      const reaches = findForbidden(root, policy.entries.map((e) => join(pkg.dir, e)), COMPUTE_PACKAGES, workspace);
      const report = reaches.map((r) => `${r.target} via ${r.chain.join(' → ')}`);
      expect(report).toEqual([]);
    });

    if (policy.wholePackage) {
      it(`${policy.package}: its manifest lists no compute package as a run-time dependency`, () => {
        const deps = Object.keys(workspace.get(policy.package)!.manifest.dependencies ?? {});
        expect(deps.filter((d) => COMPUTE_PACKAGES.has(d))).toEqual([]);
      });
    }
  }

  it('every run-time dependency between ranked packages points down (siblings among operators and among policies may use each other)', () => {
    const upward: string[] = [];
    for (const pkg of workspace.values()) {
      const own = LAYER_RANK[pkg.name];
      if (own === undefined) continue;
      for (const dep of Object.keys(pkg.manifest.dependencies ?? {})) {
        const theirs = LAYER_RANK[dep];
        if (theirs === undefined) {
          if (dep.startsWith('@tessera/')) upward.push(`${pkg.name} → ${dep} (a package outside the stack)`);
          continue;
        }
        if (theirs < own || (theirs === own && SIBLING_RANKS.has(own))) continue;
        upward.push(`${pkg.name} (rank ${own}) → ${dep} (rank ${theirs})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('workspace packages depend on each other with workspace:^ at run time', () => {
    const loose: string[] = [];
    for (const pkg of workspace.values()) {
      if (pkg.manifest.private) continue;
      for (const [dep, range] of Object.entries(pkg.manifest.dependencies ?? {})) {
        if (dep.startsWith('@tessera/') && range !== 'workspace:^') loose.push(`${pkg.name} → ${dep}@${range}`);
      }
    }
    expect(loose).toEqual([]);
  });
});

describe('the import walker', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tessera-layers-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const write = (path: string, text: string): string => {
    const file = join(dir, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, text);
    return file;
  };

  it('counts value imports, `import { type X }`, re-exports and dynamic imports; skips `import type` and `export type`', () => {
    const f = write(
      'a.ts',
      [
        "import type { A } from 'type-only';",
        "export type { B } from 'type-only-export';",
        "import { type C } from 'inline-type';",
        "import { d } from './d.js';",
        "export { e } from 'e';",
        "export * from 'star';",
        "const m = await import('dyn');",
      ].join('\n'),
    );
    expect(runtimeSpecifiers(f).sort()).toEqual(['./d.js', 'dyn', 'e', 'inline-type', 'star']);
  });

  it('follows relative imports and workspace packages, and names the chain to a forbidden package', () => {
    const ws = new Map([
      ['@tessera/mid', { name: '@tessera/mid', dir: join(dir, 'mid'), manifest: { exports: { '.': { '@tessera/source': './src/index.ts' } } } }],
    ]);
    write('mid/src/index.ts', "export { run } from './run.js';\n");
    write('mid/src/run.ts', "import { Tensor } from '@tessera/native';\nexport const run = () => Tensor;\n");
    const entry = write('policy/src/index.ts', "import type { Tensor } from '@tessera/native';\nexport * from './plan.js';\n");
    write('policy/src/plan.ts', "import { run } from '@tessera/mid';\nexport const plan = run;\n");
    const reaches = findForbidden(dir, [entry], COMPUTE_PACKAGES, ws);
    expect(reaches).toEqual([{ target: '@tessera/native', chain: ['policy/src/index.ts', 'policy/src/plan.ts', 'mid/src/index.ts', 'mid/src/run.ts', '@tessera/native'] }]);
    write('clean/src/index.ts', "import type { Tensor } from '@tessera/engine';\nexport const x = 1;\n");
    expect(findForbidden(dir, [join(dir, 'clean/src/index.ts')], COMPUTE_PACKAGES, ws)).toEqual([]);
  });
});
