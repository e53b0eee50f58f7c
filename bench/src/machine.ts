/** What machine a result was measured on, and finding this machine's saved roofline. */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { arch, availableParallelism, cpus, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';

import { deviceInfo, getCpuBackend } from '@tessera/native';

import { validateResult } from './results.js';
import type { MachineInfo, RooflineSummary } from './types.js';

/** A saved roofline older than this is measured again (a kernel, BIOS or VM change may have moved it). */
export const ROOFLINE_MAX_AGE_MS = 7 * 24 * 3600 * 1000;

export function cpuModel(): string {
  return cpus()[0]?.model.trim() ?? 'unknown';
}

/** The largest cache of CPU 0 from Linux sysfs, in MiB; null elsewhere or when unreadable. */
export function lastLevelCacheMiB(): number | null {
  const base = '/sys/devices/system/cpu/cpu0/cache';
  let best: { level: number; mib: number } | null = null;
  try {
    for (const entry of readdirSync(base)) {
      if (!entry.startsWith('index')) continue;
      const level = Number(readFileSync(join(base, entry, 'level'), 'utf8').trim());
      const size = /^(\d+)([KMG]?)$/.exec(readFileSync(join(base, entry, 'size'), 'utf8').trim());
      if (!size || !Number.isFinite(level)) continue;
      const unit = size[2] === 'G' ? 1024 : size[2] === 'M' ? 1 : size[2] === 'K' ? 1 / 1024 : 1 / 2 ** 20;
      const mib = Number(size[1]) * unit;
      if (!best || level > best.level) best = { level, mib };
    }
  } catch {
    return null;
  }
  return best ? best.mib : null;
}

export function collectMachine(threads: number, roofline: RooflineSummary | null): MachineInfo {
  const info = deviceInfo(getCpuBackend());
  return {
    cpuModel: cpuModel(),
    cores: availableParallelism(),
    threads,
    isa: info.isa ?? null,
    bestIsa: info.bestIsa ?? null,
    features: info.features ?? {},
    totalMemoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    lastLevelCacheMiB: lastLevelCacheMiB(),
    node: process.version,
    os: `${platform()} ${release()} ${arch()}`,
    date: new Date().toISOString(),
    roofline,
  };
}

/**
 * The roofline saved by `bench roofline` in one of `dirs`, if it was measured on this CPU model with the same
 * thread count and ISA within {@link ROOFLINE_MAX_AGE_MS}; otherwise null (with the reason).
 */
export function loadRecentRoofline(
  dirs: readonly string[],
  want: { threads: number; isa: string | null },
  now = Date.now(),
): { roofline: RooflineSummary | null; reason: string } {
  const reasons: string[] = [];
  for (const dir of dirs) {
    const path = join(dir, 'roofline.json');
    if (!existsSync(path)) {
      reasons.push(`${path} does not exist`);
      continue;
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(path, 'utf8'));
    } catch (e) {
      reasons.push(`${path} is not JSON (${(e as Error).message})`);
      continue;
    }
    const problems = validateResult(parsed);
    if (problems.length) {
      reasons.push(`${path} is not a bench result (${problems[0]})`);
      continue;
    }
    const machine = (parsed as { machine: MachineInfo }).machine;
    const r = machine.roofline;
    if (!r) reasons.push(`${path} has no roofline numbers`);
    else if (machine.cpuModel !== cpuModel()) reasons.push(`${path} was measured on ${machine.cpuModel}`);
    else if (r.threads !== want.threads) reasons.push(`${path} was measured with ${r.threads} threads, not ${want.threads}`);
    else if (want.isa !== null && r.isa !== want.isa) reasons.push(`${path} was measured with ISA ${r.isa}, not ${want.isa}`);
    else if (!(now - Date.parse(r.measuredAt) <= ROOFLINE_MAX_AGE_MS)) reasons.push(`${path} is older than 7 days`);
    else return { roofline: { ...r, source: 'roofline.json' }, reason: `from ${path}` };
  }
  return { roofline: null, reason: reasons.join('; ') };
}
