/**
 * npm in this repository prints no warning (issue 20): .npmrc holds no key npm does not know, and onnxruntime-node's
 * CUDA download stays off another way: installs go through pnpm, which runs only the build scripts that
 * pnpm-workspace.yaml's onlyBuiltDependencies lists (see CONTRIBUTING.md, "npm and onnxruntime-node").
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

const root = resolve(fileURLToPath(new URL('../../..', import.meta.url)));

/** npm with the environment a user's shell has: no npm_config_* that a calling pnpm or npm exported. */
function npm(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_(config|package|lifecycle)_/i.test(k)));
  return new Promise((done) => {
    execFile('npm', args, { cwd: root, env, timeout: 60_000 }, (err, stdout, stderr) => done({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }));
  });
}

describe('npm in the repository', () => {
  it('`npm config list` and `npm run` print no warning', async () => {
    const [config, run] = await Promise.all([npm(['config', 'list']), npm(['run'])]);
    expect(config.code).toBe(0);
    expect(config.stderr).not.toMatch(/warn/i);
    expect(config.stdout).not.toContain('onnxruntime');
    expect(run.code).toBe(0);
    expect(run.stderr).not.toMatch(/warn/i);
    expect(run.stdout).toContain('test');
  }, 60_000);

  it('.npmrc sets nothing, and pnpm is not allowed to run onnxruntime-node\'s postinstall', () => {
    const npmrc = readFileSync(join(root, '.npmrc'), 'utf8');
    expect(npmrc.split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#'))).toEqual([]);
    const workspace = readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8');
    const allowed = /onlyBuiltDependencies:\n((?:\s+-\s+\S+\n?)*)/.exec(workspace)?.[1] ?? '';
    expect(allowed).toContain('esbuild');
    expect(allowed).not.toContain('onnxruntime');
  });
});
