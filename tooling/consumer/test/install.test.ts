/**
 * The packages as a user gets them (issue 20): every publishable package is packed with `pnpm pack` (which turns
 * `workspace:^` into real version ranges), the tarballs are installed with npm into an empty project (no workspace,
 * no `@tessera/source` condition: each package resolves to its built `dist/`), and
 *   - every package imports, and its public surface is there;
 *   - @tessera/native loads the addon prebuilt into the package (prebuilds/<platform>-<arch>/; no compiler at install);
 *   - each package's README example (the `// #region readme-…` code its own tests run from `src/`) runs again
 *     here, from the installed `dist/`, and exits 0;
 *   - the types resolve for consumers: "are the types wrong?" (`attw`, profile esm-only: these packages are ESM
 *     only) finds no problem in any tarball;
 *   - changesets can version the workspace: `changeset version` in a scratch copy of the repository's manifests.
 * Needs the packages built (`turbo run build`, as `npm test` does before the tests) and the npm registry for
 * third-party dependencies (npm's cache makes later runs offline).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const repo = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const work = mkdtempSync(join(tmpdir(), 'tessera-consumer-'));
const tarballs = join(work, 'tarballs');
const project = join(work, 'project');
afterAll(() => rmSync(work, { recursive: true, force: true }));

interface Publishable {
  name: string;
  dir: string;
}

/** native and every non-private packages/* package. */
function publishable(): Publishable[] {
  const dirs = [join(repo, 'native'), ...readdirSync(join(repo, 'packages')).map((d) => join(repo, 'packages', d))];
  return dirs
    .filter((d) => existsSync(join(d, 'package.json')))
    .map((dir) => ({ dir, manifest: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name: string; private?: boolean } }))
    .filter((p) => !p.manifest.private)
    .map((p) => ({ name: p.manifest.name, dir: p.dir }));
}

/** pnpm: the one running this workspace, else one on PATH, else npx's. */
function pnpm(args: string[], cwd: string): string {
  const execPath = process.env.npm_execpath;
  const [cmd, pre] = execPath && /pnpm/.test(execPath) ? [process.execPath, [execPath]] : spawnSync('pnpm', ['--version']).status === 0 ? ['pnpm', []] : ['npx', ['-y', 'pnpm@10']];
  return execFileSync(cmd as string, [...(pre as string[]), ...args], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** The README example regions of a package's tests that run on their own (the first region of each file). */
const EXAMPLES: Record<string, string> = {
  '@tessera/core': 'packages/core/test/readme-example.test.ts',
  '@tessera/engine': 'packages/engine/test/readme-example.test.ts',
  '@tessera/sgmv-kernel': 'packages/sgmv-kernel/test/readme-example.test.ts',
  '@tessera/pet-ops': 'packages/pet-ops/test/readme.test.ts',
  '@tessera/batcher': 'packages/batcher/test/readme-example.test.ts',
  '@tessera/length-scheduler': 'packages/length-scheduler/test/readme-example.test.ts',
  '@tessera/plot-store': 'packages/plot-store/test/readme-example.test.ts',
  '@tessera/block-zoo': 'packages/block-zoo/test/readme-example.test.ts',
  '@tessera/adapter-swap': 'packages/adapter-swap/test/readme-example.test.ts',
  '@tessera/cluster': 'packages/cluster/test/engine-loop/readme-example.test.ts',
  '@tessera/sim': 'packages/sim/test/readme-example.test.ts',
  '@tessera/cli': 'packages/cli/test/readme-example.test.ts',
};

function firstRegion(file: string): string {
  const source = readFileSync(join(repo, file), 'utf8');
  const m = /^\/\/ #region (readme-[\w-]+)\n([\s\S]*?)^\/\/ #endregion \1$/m.exec(source);
  if (!m) throw new Error(`${file} has no // #region readme-… block`);
  return m[2]!;
}

const packages = publishable();
const sizes = new Map<string, { tarball: number; files: number }>();

beforeAll(() => {
  for (const p of packages) {
    if (!existsSync(join(p.dir, 'dist', 'index.js'))) throw new Error(`${p.name} is not built (${p.dir}/dist): run \`pnpm exec turbo run build\` first (npm test does)`);
  }
  mkdirSync(tarballs, { recursive: true });
  for (const p of packages) {
    const out = pnpm(['pack', '--pack-destination', tarballs, '--json'], p.dir);
    // pnpm prints lifecycle banners (native's prepack / postpack) around the JSON on stdout.
    const info = JSON.parse(out.slice(out.indexOf('{'), out.lastIndexOf('}') + 1)) as { filename: string; files: unknown[] };
    sizes.set(p.name, { tarball: statSync(info.filename).size, files: info.files.length });
  }
  mkdirSync(project, { recursive: true });
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', private: true, type: 'module' }, null, 2));
  const files = readdirSync(tarballs).filter((f) => f.endsWith('.tgz')).map((f) => join(tarballs, f));
  // --ignore-scripts: nothing of ours needs an install script (the addon is prebuilt in the package); it keeps
  // onnxruntime-node from downloading CUDA libraries.
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--ignore-scripts', '--prefer-offline', '--loglevel=error', ...files], {
    cwd: project,
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, npm_config_workspaces: 'false' },
  });
  const table = [...sizes].map(([name, s]) => `${name}: ${(s.tarball / 1024).toFixed(0)} KiB packed, ${s.files} files`).join('\n');
  mkdirSync(join(repo, 'tooling', 'consumer', '.output'), { recursive: true });
  writeFileSync(join(repo, 'tooling', 'consumer', '.output', 'sizes.txt'), `${table}\n`);
}, 600_000);

/** Runs `code` as an ES module inside the consumer project (tsx strips the types; no source condition). */
function runInProject(name: string, code: string): { status: number | null; stdout: string; stderr: string } {
  const file = join(project, 'examples', `${name.replace(/[@/]/g, '_')}.mts`);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, code);
  const tsx = createRequire(import.meta.url).resolve('tsx/cli');
  const r = spawnSync(process.execPath, [tsx, file], { cwd: project, encoding: 'utf8', timeout: 180_000, env: { ...process.env, NODE_OPTIONS: '' } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('installed from packed tarballs', () => {
  it('every publishable package is installed from its tarball, not linked from the workspace', () => {
    for (const p of packages) {
      const installed = join(project, 'node_modules', ...p.name.split('/'));
      expect(existsSync(join(installed, 'package.json')), p.name).toBe(true);
      expect(statSync(installed).isSymbolicLink?.() ?? false).toBe(false);
      expect(existsSync(join(installed, 'dist', 'index.js')), `${p.name} dist`).toBe(true);
      const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
      for (const [dep, range] of Object.entries(manifest.dependencies ?? {})) expect(range, `${p.name} → ${dep}`).not.toMatch(/^workspace:/);
    }
  });

  it('each package imports from dist, and @tessera/native loads the addon shipped inside it', () => {
    const code = [
      ...packages.map((p, i) => `import * as m${i} from '${p.name}';`),
      `const counts = { ${packages.map((p, i) => `'${p.name}': Object.keys(m${i}).length`).join(', ')} };`,
      `const native = await import('@tessera/native');`,
      `const t = native.Tensor.from(new Float32Array([1, 2, 3, 4]), [2, 2]);`,
      `console.log(JSON.stringify({ counts, device: native.getBackend().device, path: native.getBackend().path, sum: Array.from(t.toArray()).reduce((a, b) => a + b, 0) }));`,
    ].join('\n');
    const r = runInProject('imports', code);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').at(-1)!) as { counts: Record<string, number>; device: string; path: string; sum: number };
    for (const p of packages) expect(out.counts[p.name], p.name).toBeGreaterThan(0);
    expect(out.device).toBe('cpu');
    expect(out.sum).toBe(10);
    // The addon is the one prebuilt into the package (prebuildify's layout); no local build, no CUDA addon shipped.
    const installed = join(project, 'node_modules', '@tessera', 'native');
    expect(out.path).toBe(join(installed, 'prebuilds', `${process.platform}-${process.arch}`, 'tessera_cpu.node'));
    expect(existsSync(join(installed, 'build'))).toBe(false);
  }, 240_000);

  it('attw finds no type-resolution problem in any tarball (node16 from ESM, bundler)', () => {
    const attw = createRequire(import.meta.url).resolve('@arethetypeswrong/cli/package.json').replace(/package\.json$/, 'dist/index.js');
    const failures: string[] = [];
    for (const file of readdirSync(tarballs).filter((f) => f.endsWith('.tgz'))) {
      const r = spawnSync(process.execPath, [attw, join(tarballs, file), '--profile', 'esm-only', '--format', 'ascii'], { encoding: 'utf8', env: { ...process.env, NO_COLOR: '1' } });
      if (r.status !== 0) failures.push(`${file}:\n${r.stdout}${r.stderr}`);
    }
    expect(failures).toEqual([]);
  }, 300_000);

  it('changesets can version the workspace (a dry run on a scratch copy of the manifests and changesets)', () => {
    const scratch = join(work, 'changeset-dry-run');
    mkdirSync(scratch, { recursive: true });
    // The workspace's manifests (every package.json git knows, outside node_modules) and its changesets.
    const files = execFileSync('git', ['-C', repo, 'ls-files', '--cached', '--others', '--exclude-standard', 'package.json', '*/package.json', 'pnpm-workspace.yaml', '.changeset'], { encoding: 'utf8' })
      .split('\n')
      .filter((f) => f && !f.includes('node_modules/'));
    for (const f of files) {
      mkdirSync(dirname(join(scratch, f)), { recursive: true });
      writeFileSync(join(scratch, f), readFileSync(join(repo, f)));
    }
    execFileSync('git', ['init', '-q'], { cwd: scratch });
    const changeset = createRequire(join(repo, 'package.json')).resolve('@changesets/cli/bin.js');
    const r = spawnSync(process.execPath, [changeset, 'version'], { cwd: scratch, encoding: 'utf8' });
    expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    const core = JSON.parse(readFileSync(join(scratch, 'packages', 'core', 'package.json'), 'utf8')) as { version: string };
    expect(core.version).not.toBe('0.0.0');
    expect(existsSync(join(scratch, 'packages', 'core', 'CHANGELOG.md'))).toBe(true);
  }, 120_000);

  for (const [name, file] of Object.entries(EXAMPLES)) {
    it(`${name}: the README example runs from the installed package`, () => {
      if (!packages.some((p) => p.name === name)) throw new Error(`${name} is listed in EXAMPLES but not publishable`);
      const r = runInProject(name, firstRegion(file));
      expect(r.status, `${r.stdout}\n${r.stderr}`).toBe(0);
    }, 240_000);
  }
});
