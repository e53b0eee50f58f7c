// Build-time loader of the benchmark results page: every bench/results/<name>.json written by `pnpm bench <name>`
// on the machine that builds the site, with its charts (<name>.svg, <name>-<key>.svg) inlined. The results are
// measurements of that machine (never committed); a site built where no bench ran says so.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineLoader } from 'vitepress';

export interface BenchPage {
  name: string;
  date: string;
  machine: string;
  ratios: [string, string][];
  columns: string[];
  rows: string[][];
  /** The bench's SVG charts (our own generated documents), inlined. */
  charts: string[];
}

declare const data: BenchPage[];
export { data };

const resultsDir = fileURLToPath(new URL('../../bench/results/', import.meta.url));

function cell(v: unknown): string {
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : v.toPrecision(3);
  if (v === null || v === undefined) return '';
  return typeof v === 'object' ? JSON.stringify(v) : String(v);
}

export default defineLoader({
  watch: ['../../bench/results/*.json'],
  load(files: string[]): BenchPage[] {
    return files
      .filter((f) => existsSync(f))
      .sort()
      .flatMap((file) => {
        const r = JSON.parse(readFileSync(file, 'utf8'));
        if (!r || typeof r.name !== 'string' || !Array.isArray(r.rows)) return [];
        const m = r.machine ?? {};
        const roof = m.roofline ? `, triad ${cell(m.roofline.triadGBs)} GB/s, FMA peak ${cell(m.roofline.peakGflops)} GFLOP/s` : '';
        const columns = [...new Set<string>(r.rows.flatMap((row: Record<string, unknown>) => Object.keys(row)))];
        const name = basename(file, '.json');
        const charts = existsSync(resultsDir)
          ? readdirSync(resultsDir).filter((f) => f === `${name}.svg` || (f.startsWith(`${name}-`) && f.endsWith('.svg'))).sort().map((f) => readFileSync(join(resultsDir, f), 'utf8'))
          : [];
        return [{
          name: r.name,
          date: String(m.date ?? ''),
          machine: `${m.cpuModel ?? 'unknown CPU'}, ${m.threads ?? '?'} thread(s), ${m.isa ?? 'scalar'}${roof}`,
          ratios: Object.entries(r.ratios ?? {}).map(([k, v]) => [k, cell(v)] as [string, string]),
          columns,
          rows: r.rows.map((row: Record<string, unknown>) => columns.map((c) => cell(row[c]))),
          charts,
        }];
      });
  },
});
