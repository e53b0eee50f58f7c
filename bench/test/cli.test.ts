import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { deviceInfo, getCpuBackend, setThreads } from '@tessera/native';
import { makeRooflineBench } from '../src/benches/roofline.js';
import { type CliIo, main, runBench } from '../src/cli.js';
import { benchNames } from '../src/registry.js';
import { validateResult } from '../src/results.js';
import type { BenchResult } from '../src/types.js';
import { parseXml } from './xml.js';

const benchDir = fileURLToPath(new URL('..', import.meta.url));

/** Runs the real CLI in a child process, the way `pnpm bench` does. */
function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--conditions=@tessera/source', '--import', 'tsx', 'src/cli.ts', ...args],
      { cwd: benchDir, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function capture(): CliIo & { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return { out, err, stdout: (t) => out.push(t), stderr: (t) => err.push(t) };
}

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tessera-bench-cli-'));
  dirs.push(d);
  return d;
}

describe('bench CLI as a process', () => {
  it('--help prints usage with every bench and exits 0', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^usage: pnpm bench <name>/);
    for (const name of benchNames()) expect(r.stdout).toContain(name);
    expect(r.stdout).toContain('--quick');
  });

  it('--list prints one line per bench and exits 0', async () => {
    const r = await cli(['--list']);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines.map((l) => l.trim().split(/\s+/)[0])).toEqual(benchNames());
  });

  it('an unknown bench exits non-zero and lists the names', async () => {
    const r = await cli(['no-such-bench']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('unknown bench "no-such-bench"');
    for (const name of benchNames()) expect(r.stderr).toContain(name);
    expect(r.stdout).toBe('');
  });
});

describe('bench CLI argument handling', () => {
  it('usage errors exit 2 with a reason', async () => {
    for (const [args, why] of [
      [[], /name a bench/],
      [['roofline', 'gemm'], /one bench at a time/],
      [['--bogus'], /bogus/],
      [['roofline', '--threads', '0'], /--threads must be a positive integer/],
      [['roofline', '--out'], /--out/],
    ] as const) {
      const io = capture();
      expect(await main([...args], io), args.join(' ')).toBe(2);
      expect(io.err.join('\n')).toMatch(why);
    }
  });

  it('the registry has no duplicate names', () => {
    expect(new Set(benchNames()).size).toBe(benchNames().length);
    expect(benchNames()).toEqual(expect.arrayContaining(['roofline', 'gemm']));
  });
});

describe('running a bench end to end (roofline at a tiny size)', () => {
  const out = tempDir();
  const tiny = makeRooflineBench({ arrayMiB: 2, budgetMs: 15, fmaIsas: 'best' });
  const threadsBefore = deviceInfo(getCpuBackend()).threads;

  it('--json prints the result, which matches the schema and the files written', async () => {
    const io = capture();
    const code = await runBench('roofline', async () => tiny, { quick: true, json: true, outDir: out, threads: undefined }, io);
    expect(code).toBe(0);
    const printed = JSON.parse(io.out.join('\n')) as BenchResult;
    expect(validateResult(printed)).toEqual([]);
    const saved: unknown = JSON.parse(readFileSync(join(out, 'roofline.json'), 'utf8'));
    expect(saved).toEqual(printed);
    expect(printed.name).toBe('roofline');
    expect(printed.params.quick).toBe(true);
    expect(printed.machine.roofline?.source).toBe('this run');
    expect(printed.machine.node).toBe(process.version);
    const r = printed.machine.roofline!;
    for (const v of [r.triadGBs, r.triadGBs1t, r.readGBs, r.readGBs1t, r.peakGflops, r.peakGflops1t]) expect(v).toBeGreaterThan(0);
    expect(printed.rows.filter((row) => row.probe === 'fma')).toHaveLength(r.threads > 1 ? 2 : 1);
    for (const row of printed.rows) expect(row.best as number).toBeGreaterThanOrEqual(row.value as number);
    expect(Object.keys(printed.ratios)).toEqual(expect.arrayContaining(['ridge_flop_per_byte', 'triad_thread_scaling']));
    expect(parseXml(readFileSync(join(out, 'roofline.svg'), 'utf8')).name).toBe('svg');
    // The bench restores the thread count it changed for its single-thread numbers.
    expect(deviceInfo(getCpuBackend()).threads).toBe(threadsBefore);
  });

  it('without --json prints an aligned table, and --threads sets the kernel threads', async () => {
    const io = capture();
    const code = await runBench('roofline', async () => tiny, { quick: true, json: false, outDir: out, threads: 1 }, io);
    expect(deviceInfo(getCpuBackend()).threads).toBe(1);
    expect(code).toBe(0);
    const text = io.out.join('\n');
    const lines = text.split('\n');
    const header = lines.findIndex((l) => l.startsWith('probe'));
    expect(header).toBeGreaterThan(0);
    const unitCol = lines[header]!.indexOf('unit');
    const body = lines.slice(header + 2).filter((l) => /^(triad|read|fma)\s/.test(l));
    expect(body.length).toBeGreaterThanOrEqual(3);
    for (const l of body) expect(l.slice(unitCol)).toMatch(/^(GB\/s|GFLOP\/s)/);
    expect(text).toMatch(/ridge_flop_per_byte: \d/);
    const saved = JSON.parse(readFileSync(join(out, 'roofline.json'), 'utf8')) as BenchResult;
    expect(saved.machine.threads).toBe(1);
  });

  it('other benches read the saved roofline.json through ctx.roofline()', async () => {
    const io = capture();
    let seen: string | undefined;
    const code = await runBench(
      'probe-reader',
      async () => ({
        name: 'probe-reader',
        async run(ctx) {
          seen = (await ctx.roofline()).source;
          return { params: {}, rows: [], ratios: {}, table: { columns: [], rows: [] }, svg: '<svg xmlns="http://www.w3.org/2000/svg"/>' };
        },
      }),
      { quick: true, json: true, outDir: out, threads: 1 },
      io,
    );
    expect(code).toBe(0);
    expect(seen).toBe('roofline.json');
    expect((JSON.parse(io.out.join('\n')) as BenchResult).machine.roofline?.source).toBe('roofline.json');
    expect(existsSync(join(out, 'probe-reader.json'))).toBe(true);
  });

  afterAll(() => {
    setThreads(threadsBefore ?? 1);
  });
});
