import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { cpuModel, lastLevelCacheMiB, loadRecentRoofline } from '../src/machine.js';
import { isBenchResult, validateResult, writeResult } from '../src/results.js';
import type { BenchResult, RooflineSummary } from '../src/types.js';

const roofline: RooflineSummary = {
  triadGBs: 26,
  triadGBs1t: 24,
  readGBs: 30,
  readGBs1t: 23,
  peakGflops: 230,
  peakGflops1t: 117,
  isa: 'avx512',
  threads: 2,
  arrayMiB: 128,
  measuredAt: new Date().toISOString(),
  source: 'this run',
};

function sample(over: Partial<BenchResult> = {}): BenchResult {
  return {
    name: 'roofline',
    machine: {
      cpuModel: cpuModel(),
      cores: 2,
      threads: 2,
      isa: 'avx512',
      bestIsa: 'avx512',
      features: { avx2: true },
      totalMemoryGiB: 24,
      lastLevelCacheMiB: 32,
      node: process.version,
      os: 'linux',
      date: new Date().toISOString(),
      roofline,
    },
    params: { quick: true },
    rows: [{ probe: 'triad', threads: 2, value: 26, unit: 'GB/s', note: null, ok: true }],
    ratios: { ridge_flop_per_byte: 8.8 },
    ...over,
  };
}

const dirs: string[] = [];
function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tessera-bench-'));
  dirs.push(d);
  return d;
}
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('result schema', () => {
  it('accepts a well-formed result', () => {
    expect(validateResult(sample())).toEqual([]);
    expect(isBenchResult(sample())).toBe(true);
    expect(validateResult(sample({ machine: { ...sample().machine, roofline: null } }))).toEqual([]);
  });

  it('names what is wrong', () => {
    expect(validateResult(null)).toEqual(['result is not an object']);
    expect(validateResult({ ...sample(), name: '' })).toContain('name must be a non-empty string');
    expect(validateResult({ ...sample(), rows: {} })).toContain('rows must be an array');
    expect(validateResult({ ...sample(), rows: [{ a: [1] }] })).toContain('rows[0].a must be a string, number, boolean or null');
    expect(validateResult({ ...sample(), ratios: { x: Number.NaN } })).toContain('ratios.x must be a finite number');
    expect(validateResult({ ...sample(), params: [] })).toContain('params must be an object');
    const noCpu = sample();
    delete (noCpu.machine as Partial<BenchResult['machine']>).cpuModel;
    expect(validateResult(noCpu)).toContain('machine.cpuModel must be a string');
    expect(validateResult(sample({ machine: { ...sample().machine, date: 'yesterday' } }))).toContain('machine.date must be an ISO date');
    expect(validateResult(sample({ machine: { ...sample().machine, lastLevelCacheMiB: -1 } }))).toContain(
      'machine.lastLevelCacheMiB must be a positive number or null',
    );
    expect(validateResult(sample({ machine: { ...sample().machine, lastLevelCacheMiB: null } }))).toEqual([]);
    expect(validateResult(sample({ machine: { ...sample().machine, roofline: { ...roofline, triadGBs: 0 } } }))).toContain(
      'machine.roofline.triadGBs must be a positive number',
    );
  });

  it('writeResult writes <name>.json (the result, round-tripping) and <name>.svg', () => {
    const dir = tempDir();
    const result = sample();
    const paths = writeResult(join(dir, 'nested'), result, '<svg xmlns="http://www.w3.org/2000/svg"/>\n');
    expect(paths.json.endsWith('roofline.json')).toBe(true);
    const back: unknown = JSON.parse(readFileSync(paths.json, 'utf8'));
    expect(back).toEqual(result);
    expect(validateResult(back)).toEqual([]);
    expect(readFileSync(paths.svg, 'utf8')).toContain('<svg');
  });
});

describe('loadRecentRoofline', () => {
  it('uses a fresh roofline.json measured here with the same threads and ISA', () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'roofline.json'), JSON.stringify(sample()));
    const got = loadRecentRoofline([dir], { threads: 2, isa: 'avx512' });
    expect(got.roofline).toEqual({ ...roofline, source: 'roofline.json' });
  });

  it('falls through the directories in order and explains each rejection', () => {
    const empty = tempDir();
    const stale = tempDir();
    const old = new Date(Date.now() - 8 * 24 * 3600 * 1000).toISOString();
    writeFileSync(join(stale, 'roofline.json'), JSON.stringify(sample({ machine: { ...sample().machine, roofline: { ...roofline, measuredAt: old } } })));
    const other = tempDir();
    writeFileSync(join(other, 'roofline.json'), JSON.stringify(sample({ machine: { ...sample().machine, cpuModel: 'Some Other CPU' } })));
    const broken = tempDir();
    writeFileSync(join(broken, 'roofline.json'), '{not json');
    const got = loadRecentRoofline([empty, stale, other, broken], { threads: 2, isa: 'avx512' });
    expect(got.roofline).toBeNull();
    expect(got.reason).toMatch(/does not exist/);
    expect(got.reason).toMatch(/older than 7 days/);
    expect(got.reason).toMatch(/Some Other CPU/);
    expect(got.reason).toMatch(/not JSON/);
    expect(loadRecentRoofline([stale, other], { threads: 1, isa: 'avx512' }).roofline).toBeNull();
    const good = tempDir();
    writeFileSync(join(good, 'roofline.json'), JSON.stringify(sample()));
    expect(loadRecentRoofline([empty, good], { threads: 2, isa: 'avx512' }).roofline?.triadGBs).toBe(26);
    expect(loadRecentRoofline([good], { threads: 1, isa: 'avx512' }).reason).toMatch(/2 threads, not 1/);
    expect(loadRecentRoofline([good], { threads: 2, isa: 'avx2' }).reason).toMatch(/ISA avx512, not avx2/);
  });
});

describe('machine info', () => {
  it('reads the last-level cache size where sysfs has it', () => {
    const llc = lastLevelCacheMiB();
    if (existsSync('/sys/devices/system/cpu/cpu0/cache/index0/size')) expect(llc).toBeGreaterThan(0);
    else expect(llc).toBeNull();
  });
});
