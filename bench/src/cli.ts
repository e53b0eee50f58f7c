/**
 * The bench CLI:
 *   pnpm bench <name> [--quick] [--json] [--out dir] [--threads n]
 *   pnpm bench --list
 *   pnpm bench --help
 * Runs one bench, prints its table (or, with --json, the result JSON) on stdout, progress on stderr, and writes
 * results/<name>.json and results/<name>.svg. Exit codes: 0 ok, 1 the bench failed, 2 a usage error.
 */
import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { BENCHES, benchNames, findBench } from './registry.js';
import { defaultResultsDir } from './results.js';
import type { Bench, BenchContext, BenchResult, RooflineSummary } from './types.js';

export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processIo: CliIo = {
  stdout: (t) => process.stdout.write(t.endsWith('\n') ? t : `${t}\n`),
  stderr: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`),
};

function listText(): string {
  const width = Math.max(...BENCHES.map((b) => b.name.length));
  return BENCHES.map((b) => `  ${b.name.padEnd(width)}  ${b.summary}`).join('\n');
}

export function usage(): string {
  return [
    'usage: pnpm bench <name> [--quick] [--json] [--out dir] [--threads n]',
    '       pnpm bench --list | --help',
    '',
    'benches:',
    listText(),
    '',
    'options:',
    '  --quick      smaller sizes and shorter timing budgets (each bench finishes in under a minute on 2 cores)',
    '  --json       print the result JSON on stdout instead of the table',
    '  --out dir    write <name>.json and <name>.svg there (default: bench/results)',
    '  --threads n  kernel threads (default: TESSERA_THREADS or all cores); comparisons use the same count',
    '  --list       list the benches',
    '  --help, -h   this text',
    '',
    'Every measurement warms up, repeats until a time budget is spent, and reports the median.',
  ].join('\n');
}

/** Where --out points: relative paths are taken from the directory `pnpm bench` was typed in. */
function resolveOut(out: string | undefined): string {
  if (!out) return defaultResultsDir();
  return isAbsolute(out) ? out : resolve(process.env.INIT_CWD ?? process.cwd(), out);
}

export async function main(argv: readonly string[], io: CliIo = processIo): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      strict: true,
      options: {
        quick: { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        out: { type: 'string' },
        threads: { type: 'string' },
        list: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (e) {
    io.stderr(`bench: ${(e as Error).message}\n\n${usage()}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    io.stdout(usage());
    return 0;
  }
  if (values.list) {
    io.stdout(listText());
    return 0;
  }
  if (positionals.length !== 1) {
    io.stderr(`bench: ${positionals.length === 0 ? 'name a bench to run' : `run one bench at a time, got ${positionals.join(', ')}`}\n\n${usage()}`);
    return 2;
  }
  const name = positionals[0]!;
  const entry = findBench(name);
  if (!entry) {
    io.stderr(`bench: unknown bench "${name}". Available: ${benchNames().join(', ')}\n\n${listText()}`);
    return 2;
  }
  let threadsWanted: number | undefined;
  if (values.threads !== undefined) {
    threadsWanted = Number(values.threads);
    if (!Number.isInteger(threadsWanted) || threadsWanted < 1) {
      io.stderr(`bench: --threads must be a positive integer, got "${values.threads}"`);
      return 2;
    }
  }
  const outDir = resolveOut(values.out);

  try {
    return await runBench(name, entry.load, { quick: values.quick, json: values.json, outDir, threads: threadsWanted }, io);
  } catch (e) {
    const err = e as Error;
    io.stderr(`bench ${name} failed: ${err.stack ?? err.message}`);
    return 1;
  }
}

/** Samples this spread out (interquartile range / median) mean something else was competing for the machine. */
const NOISY_SPREAD = 0.25;

export interface RunOptions {
  quick: boolean;
  json: boolean;
  outDir: string;
  threads: number | undefined;
}

/** Runs one bench (given how to load it), prints, and writes the result files. Throws if the bench fails. */
export async function runBench(name: string, load: () => Promise<Bench>, opts: RunOptions, io: CliIo = processIo): Promise<number> {
  const started = performance.now();
  // Loaded here, not at the top: --help and --list must work without the native addon.
  const native = await import('@tessera/native');
  const { collectMachine, loadRecentRoofline } = await import('./machine.js');
  const { writeResult } = await import('./results.js');
  const { formatTable, formatNumber } = await import('./table.js');

  if (opts.threads !== undefined) native.setThreads(opts.threads);
  const info = native.deviceInfo(native.getCpuBackend());
  const threads = info.threads ?? 1;
  const log = (m: string) => io.stderr(`[${((performance.now() - started) / 1000).toFixed(1)}s] ${m}`);

  let roofline: RooflineSummary | null = null;
  const ctx: BenchContext = {
    quick: opts.quick,
    threads,
    log,
    async roofline() {
      if (roofline) return roofline;
      const saved = loadRecentRoofline([opts.outDir, defaultResultsDir()], { threads, isa: info.bestIsa ?? null });
      if (saved.roofline) {
        log(`machine limits ${saved.reason}`);
        roofline = saved.roofline;
      } else {
        log(`no usable roofline.json (${saved.reason}); measuring the machine limits quickly`);
        const { measureRoofline, ROOFLINE_PROBE } = await import('./benches/roofline.js');
        roofline = { ...measureRoofline(ROOFLINE_PROBE, log).summary, source: 'quick probe' };
      }
      return roofline;
    },
  };

  const bench = await load();
  if (bench.name !== name) throw new Error(`registry entry "${name}" loaded bench "${bench.name}"`);
  log(`${name}${opts.quick ? ' (quick)' : ''}: ${threads} thread(s), ISA ${info.isa ?? '?'}`);
  const output = await bench.run(ctx);
  const result: BenchResult = {
    name,
    machine: collectMachine(threads, output.roofline ?? (await ctx.roofline())),
    params: { quick: opts.quick, ...output.params },
    rows: output.rows,
    ratios: output.ratios,
  };
  const noisy = result.rows.filter((r) => ['spread', 'max_spread'].some((k) => typeof r[k] === 'number' && (r[k] as number) > NOISY_SPREAD));
  if (noisy.length) {
    log(`warning: ${noisy.length} of ${result.rows.length} rows have an interquartile range above ${NOISY_SPREAD * 100}% of the median: the machine was busy, consider running again`);
  }
  const paths = writeResult(opts.outDir, result, output.svg, output.moreSvgs);
  const seconds = (performance.now() - started) / 1000;
  log(`done in ${seconds.toFixed(1)} s; wrote ${[paths.json, paths.svg, ...paths.more].join(', ')}`);

  if (opts.json) {
    io.stdout(JSON.stringify(result, null, 2));
  } else {
    const m = result.machine;
    io.stdout(`${name}${opts.quick ? ' (quick)' : ''}: ${m.cpuModel}, ${m.threads} thread(s), ${m.isa ?? '?'}, node ${m.node}, ${m.date}`);
    io.stdout('');
    io.stdout(formatTable(output.table));
    for (const table of output.moreTables ?? []) {
      io.stdout('');
      io.stdout(formatTable(table));
    }
    const ratios = Object.entries(result.ratios);
    if (ratios.length) {
      io.stdout('');
      for (const [k, v] of ratios) io.stdout(`${k}: ${formatNumber(v)}`);
    }
  }
  return 0;
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href;
if (invokedDirectly) {
  process.exitCode = await main(process.argv.slice(2));
}
