/** Writing results/<name>.json and .svg, and checking that a parsed JSON has the result schema. */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { BenchResult } from './types.js';

/** bench/results, next to src/ (the same from src/ and from a bundled dist/). */
export function defaultResultsDir(): string {
  return join(dirname(fileURLToPath(import.meta.url)), '..', 'results');
}

export function writeResult(dir: string, result: BenchResult, svg: string, moreSvgs: Record<string, string> = {}): { json: string; svg: string; more: string[] } {
  mkdirSync(dir, { recursive: true });
  const jsonPath = join(dir, `${result.name}.json`);
  const svgPath = join(dir, `${result.name}.svg`);
  writeFileSync(jsonPath, `${JSON.stringify(result, null, 2)}\n`);
  writeFileSync(svgPath, svg);
  const more = Object.entries(moreSvgs).map(([key, doc]) => {
    const path = join(dir, `${result.name}-${key}.svg`);
    writeFileSync(path, doc);
    return path;
  });
  return { json: jsonPath, svg: svgPath, more };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const ROOFLINE_NUMBERS = ['triadGBs', 'triadGBs1t', 'readGBs', 'readGBs1t', 'peakGflops', 'peakGflops1t', 'threads', 'arrayMiB'] as const;

/** Problems with `value` as a BenchResult (empty when it is one). */
export function validateResult(value: unknown): string[] {
  const problems: string[] = [];
  if (!isRecord(value)) return ['result is not an object'];
  if (typeof value.name !== 'string' || value.name === '') problems.push('name must be a non-empty string');
  const m = value.machine;
  if (!isRecord(m)) {
    problems.push('machine must be an object');
  } else {
    for (const key of ['cpuModel', 'node', 'os', 'date'] as const) {
      if (typeof m[key] !== 'string') problems.push(`machine.${key} must be a string`);
    }
    for (const key of ['cores', 'threads', 'totalMemoryGiB'] as const) {
      if (typeof m[key] !== 'number' || !(Number(m[key]) > 0)) problems.push(`machine.${key} must be a positive number`);
    }
    if (typeof m.date === 'string' && Number.isNaN(Date.parse(m.date))) problems.push('machine.date must be an ISO date');
    if (m.lastLevelCacheMiB !== null && !(typeof m.lastLevelCacheMiB === 'number' && m.lastLevelCacheMiB > 0)) {
      problems.push('machine.lastLevelCacheMiB must be a positive number or null');
    }
    if (m.roofline !== null) {
      if (!isRecord(m.roofline)) {
        problems.push('machine.roofline must be an object or null');
      } else {
        for (const key of ROOFLINE_NUMBERS) {
          const v = m.roofline[key];
          if (typeof v !== 'number' || !(v > 0)) problems.push(`machine.roofline.${key} must be a positive number`);
        }
      }
    }
  }
  if (!isRecord(value.params)) problems.push('params must be an object');
  if (!Array.isArray(value.rows)) {
    problems.push('rows must be an array');
  } else {
    value.rows.forEach((row, i) => {
      if (!isRecord(row)) {
        problems.push(`rows[${i}] must be an object`);
        return;
      }
      for (const [k, v] of Object.entries(row)) {
        const ok = v === null || ['string', 'number', 'boolean'].includes(typeof v);
        if (!ok) problems.push(`rows[${i}].${k} must be a string, number, boolean or null`);
      }
    });
  }
  if (!isRecord(value.ratios)) {
    problems.push('ratios must be an object');
  } else {
    for (const [k, v] of Object.entries(value.ratios)) {
      if (typeof v !== 'number' || !Number.isFinite(v)) problems.push(`ratios.${k} must be a finite number`);
    }
  }
  return problems;
}

export function isBenchResult(value: unknown): value is BenchResult {
  return validateResult(value).length === 0;
}
