/**
 * tessera-gpu-check (native/gpu-check): the Node-free executable the GPU hosts build with CMake alone. Here it is
 * built as `pnpm gpu:check` builds it (with its CUDA part wherever nvcc exists) into native/build-gpu-check, reused
 * between runs, and run: its CPU part checks every optimized CPU kernel at every ISA against the scalar references,
 * and its report must list every kernel family and say why the CUDA part was skipped (or, on a machine with a GPU,
 * pass it). The first build compiles the kernel sources once more (one to two minutes on two cores, of which the CUDA
 * part is about 40 s of compile); later runs only rebuild what changed.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

const nativeRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
const buildDir = process.env.TESSERA_GPU_CHECK_BUILD ?? join(nativeRoot, 'build-gpu-check');
const exe = join(buildDir, 'tessera-gpu-check');
const families = ['gemm', 'elementwise', 'norm', 'gather', 'rope', 'attention', 'sgmv', 'pet', 'train'];

interface ReportJson {
  result: string;
  failures: number;
  cuda: string;
  checks: { part: string; family: string; name: string; pass: boolean; ratio: number | null; detail: string }[];
  benchmarks: unknown[];
}

const run = (args: string[]): SpawnSyncReturns<string> => spawnSync(exe, args, { encoding: 'utf8', timeout: 120_000 });

describe('tessera-gpu-check', () => {
  let out = '';
  let build: SpawnSyncReturns<string>;
  let marker = '';

  beforeAll(() => {
    out = mkdtempSync(join(tmpdir(), 'tessera-gpu-check-'));
    // A `node` on PATH that records being called: the CMake path the GPU hosts use must not need Node.js.
    const fakeBin = mkdtempSync(join(tmpdir(), 'tessera-no-node-'));
    marker = join(fakeBin, 'node-was-called');
    writeFileSync(join(fakeBin, 'node'), `#!/bin/sh\ntouch '${marker}'\nexit 1\n`);
    chmodSync(join(fakeBin, 'node'), 0o755);
    // --no-bench: on a machine with a GPU the CUDA checks run here too, the benchmarks are for `pnpm gpu:check`.
    build = spawnSync('bash', [join(nativeRoot, 'gpu-check', 'run.sh'), out, '--no-bench'], {
      cwd: nativeRoot,
      encoding: 'utf8',
      env: { ...process.env, PATH: `${fakeBin}:${process.env.PATH ?? ''}` },
      timeout: 900_000,
    });
  }, 900_000);

  it('builds with CMake alone (no Node.js) and passes every check, listing every kernel family, CUDA skipped', () => {
    expect(build.status, `${build.stdout}\n${build.stderr}`).toBe(0);
    expect(existsSync(marker), 'CMake called node').toBe(false);
    const text = build.stdout;
    expect(text).toMatch(/tessera-gpu-check report/);
    const cpuSection = text.slice(text.indexOf('== CPU'), text.indexOf('== CUDA'));
    for (const family of families) expect(cpuSection, family).toMatch(new RegExp(`^  ${family}\\s+\\d+ checks\\s+pass\\s+worst`, 'm'));
    // Without a GPU (CI): skipped, with the reason (no device or driver, or no nvcc at build time).
    const ranOnGpu = /^== CUDA: ran on /m.test(text);
    if (!ranOnGpu) expect(text).toMatch(/^== CUDA: skipped \(.*(cudaGetDeviceCount|nvcc was not found|not compiled).*\)$/m);
    expect(text).toMatch(/^RESULT: PASS \(\d+ checks, 0 failed\)$/m);
    // The same report lands in OUT_DIR, with the JSON beside it.
    expect(readFileSync(join(out, 'report.txt'), 'utf8')).toBe(text.slice(text.indexOf('tessera-gpu-check report')));
    const json = JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as ReportJson;
    expect(json.result).toBe('pass');
    expect(json.failures).toBe(0);
    expect(json.cuda).toMatch(ranOnGpu ? /^CUDA: ran on .+$/ : /^CUDA: skipped \(.+\)$/);
    expect(json.benchmarks).toEqual([]);
    for (const family of families) {
      const mine = json.checks.filter((c) => c.family === family && c.part === 'cpu');
      expect(mine.length, family).toBeGreaterThan(0);
      expect(mine.every((c) => c.pass && c.ratio !== null && c.ratio <= 1), family).toBe(true);
      // the scalar path is checked on every machine, and empty shapes are among the cases
      expect(mine.some((c) => c.name.startsWith('scalar: ')), family).toBe(true);
      const onGpu = json.checks.filter((c) => c.family === family && c.part === 'cuda');
      if (ranOnGpu) expect(onGpu.length > 0 && onGpu.every((c) => c.pass), `${family} on CUDA`).toBe(true);
      else expect(onGpu, family).toEqual([]);
    }
    expect(json.checks.some((c) => /\bn=0\b|\[0x|rows 0\b/.test(c.name))).toBe(true);
  });

  it('exits 1 and names the failing checks when a kernel disagrees with its reference', () => {
    expect(build.status).toBe(0);
    // --inject-fault corrupts the outputs the CPU target hands back for one family: exactly that family must fail.
    const r = run(['--no-cuda', '--families', 'sgmv,norm', '--inject-fault', 'sgmv', '--json', join(out, 'fault.json')]);
    expect(r.status, r.stdout).toBe(1);
    expect(r.stdout).toMatch(/^ {2}sgmv\s+\d+ checks\s+FAIL/m);
    expect(r.stdout).toMatch(/^ {6}FAIL scalar: sgmv shrink fast/m);
    expect(r.stdout).toMatch(/^ {2}norm\s+\d+ checks\s+pass/m);
    expect(r.stdout).toMatch(/^RESULT: FAIL/m);
    const json = JSON.parse(readFileSync(join(out, 'fault.json'), 'utf8')) as ReportJson;
    expect(json.result).toBe('fail');
    expect(json.checks.filter((c) => c.family === 'norm').every((c) => c.pass)).toBe(true);
    expect(json.checks.filter((c) => c.family === 'sgmv' && !c.pass).length).toBeGreaterThan(0);
  });

  it('rejects unknown arguments with exit status 2', () => {
    expect(build.status).toBe(0);
    const r = run(['--families', 'gemm,warp-drive']);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/unknown family warp-drive/);
    expect(run(['--frobnicate']).status).toBe(2);
  });
});
