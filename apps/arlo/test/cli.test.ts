/**
 * The command line: --help through the bin script (exit 0, every flag with its ARLO_* variable), flags over
 * ARLO_* variables, defaults, and usage errors that name the bad value.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

import { describe, expect, it } from 'vitest';

import { parseCli, USAGE, UsageError } from '../src/index.js';

const bin = fileURLToPath(new URL('../bin/tessera-arlo.mjs', import.meta.url));

describe('tessera-arlo --help', () => {
  it('prints the usage and exits 0 (through the bin script)', async () => {
    const child = spawn(process.execPath, [bin, '--help'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(0);
    expect(out).toContain('Usage: tessera-arlo');
    for (const flag of ['--lengths', '--runtime', '--workers', '--instances', '--slo-ms', '--service-ms', '--redis', '--role', '--instance-ids']) expect(out).toContain(flag);
    expect(out).toContain('ARLO_LENGTHS');
  });
});

describe('parseCli', () => {
  it('returns null for --help and has the defaults', () => {
    expect(parseCli(['--help'], {})).toBeNull();
    const c = parseCli([], {})!;
    expect(c).toMatchObject({ runtime: 'native', workers: 2, instances: 2, maxBatch: 1, sloMs: 100, periodMs: 120_000, profileReps: 20, policy: 'arlo', port: 8000, role: null });
    expect(c.lengths).toBeUndefined();
    expect(USAGE).toContain('ARLO_RUNTIME');
  });

  it('reads ARLO_* variables, and a flag wins over its variable', () => {
    const env = { ARLO_LENGTHS: '64,128', ARLO_RUNTIME: 'ort', ARLO_WORKERS: '1', ARLO_INSTANCES: '6', ARLO_SERVICE_MS: '1.5,3' };
    const c = parseCli(['--runtime', 'native', '--slo-ms', '50'], env)!;
    expect(c).toMatchObject({ lengths: [64, 128], runtime: 'native', workers: 1, instances: 6, serviceMs: [1.5, 3], sloMs: 50 });
  });

  it('rejects bad values with a message naming them', () => {
    expect(() => parseCli(['--lengths', '64,abc'], {})).toThrow(UsageError);
    expect(() => parseCli(['--lengths', '64,abc'], {})).toThrow(/--lengths.*"64,abc"/);
    expect(() => parseCli(['--runtime', 'tensorrt'], {})).toThrow(/--runtime/);
    expect(() => parseCli(['--workers', '3', '--instances', '2'], {})).toThrow(/--instances \(2\) must be at least --workers \(3\)/);
    expect(() => parseCli(['--slo-ms', '0'], {})).toThrow(/--slo-ms/);
    expect(() => parseCli(['--redis', 'redis://x'], {})).toThrow(/--redis and --role/);
    expect(() => parseCli(['--redis', 'redis://x', '--role', 'worker'], {})).toThrow(/--instance-ids/);
  });
});
