import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { addonDirectory, cpuAddonPath, deviceInfo, getBackend, loadBackend, NativeBuildMissingError, parseDeviceRequest, TesseraError } from '../src/index.js';

describe('addon loader', () => {
  const savedDir = process.env.TESSERA_NATIVE_DIR;
  afterEach(() => {
    if (savedDir === undefined) delete process.env.TESSERA_NATIVE_DIR;
    else process.env.TESSERA_NATIVE_DIR = savedDir;
  });

  it('parses TESSERA_DEVICE', () => {
    expect(parseDeviceRequest(undefined)).toBe('auto');
    expect(parseDeviceRequest('CPU')).toBe('cpu');
    expect(parseDeviceRequest('cuda')).toBe('cuda');
    expect(() => parseDeviceRequest('tpu')).toThrow(TesseraError);
  });

  it('loads the CPU addon when asked', () => {
    const b = loadBackend('cpu');
    expect(b.device).toBe('cpu');
    expect(b.fallbackReason).toBeNull();
    expect(b.path).toMatch(/tessera_cpu\.node$/);
    const info = deviceInfo(b);
    expect(['scalar', 'avx2', 'avx512']).toContain(info.isa);
    expect(info.threads).toBeGreaterThanOrEqual(1);
  });

  it('auto falls back to CPU with a reason when no GPU answers', () => {
    const b = getBackend('auto');
    if (b.device === 'cpu') expect(b.fallbackReason).toMatch(/\S/);
    else expect(b.fallbackReason).toBeNull();
  });

  it('a missing build is one clear error naming the build command', () => {
    process.env.TESSERA_NATIVE_DIR = mkdtempSync(join(tmpdir(), 'tessera-nobuild-'));
    expect(() => loadBackend('cpu')).toThrow(NativeBuildMissingError);
    expect(() => loadBackend('cpu')).toThrow(/pnpm build:native/);
  });

  it('a local build wins over a prebuilt binary; without one, the prebuilt one of this platform is used', () => {
    delete process.env.TESSERA_NATIVE_DIR;
    const empty = mkdtempSync(join(tmpdir(), 'tessera-nolocal-'));
    const local = join(addonDirectory(), 'tessera_cpu.node');
    expect(cpuAddonPath()).toBe(local); // the repository's own build
    // No local build here: the package's prebuilds/<platform>-<arch>/ (absent in a clone, so the local path stays).
    const prebuilt = join(addonDirectory(), '..', '..', 'prebuilds', `${process.platform}-${process.arch}`, 'tessera_cpu.node');
    expect(cpuAddonPath(empty)).toBe(existsSync(prebuilt) ? prebuilt : join(empty, 'tessera_cpu.node'));
  });
});
