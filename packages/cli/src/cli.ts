/**
 * The `tessera` command line:
 *   tessera serve <server> [flags]     a reference server (punica, pets), exactly as its own bin runs it
 *   tessera gen model|adapter …        @tessera/engine's generator
 *   tessera train lora|adapter|full|classifier …
 *   tessera bench <name> [flags]       the benchmarks, from a clone of the repository
 *   tessera help [command] | tessera --help | tessera <command> --help | tessera --version
 * Results on stdout; progress, errors and usage errors on stderr. Exit codes: 0 ok, 1 the command failed, 2 a usage
 * error (unknown command, flag or value) or a command that cannot run here (a server or the benches not present).
 */
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import type { CliIo as EngineCliIo } from '@tessera/engine/cli';

import { runNode } from './child.js';
import { type Colors, colorEnabled, palette } from './color.js';
import { barsEnabled, createProgressBar } from './progress.js';
import { findBenchDir } from './repository.js';
import { loadServer, SERVERS, ServerUnavailableError, SHARED_SERVER_FLAGS } from './servers.js';
import { didYouMean } from './suggest.js';

/** Where the CLI reads and writes: the process's streams and environment, or a test's. */
export interface TesseraIo {
  /** One line (or block) of results; a newline is added when missing. */
  stdout(text: string): void;
  /** One line (or block) of progress or error; a newline is added when missing. */
  stderr(text: string): void;
  env: NodeJS.ProcessEnv;
  cwd: string;
  /** Colours for what goes to stdout and to stderr (identity functions where colours are off). */
  colors: { stdout: Colors; stderr: Colors };
  /** A progress bar on stderr for long work; absent where progress is plain lines (not a TTY, NO_COLOR). */
  progressBar?: EngineCliIo['progressBar'];
  /** Where `tessera bench` looks for a clone of the repository; default this CLI's own directory, then `cwd`. */
  repositorySearch?: readonly string[];
}

/** The process's io: colours and bars decided per stream from NO_COLOR, FORCE_COLOR, TERM and isTTY. */
export function processIo(env: NodeJS.ProcessEnv = process.env): TesseraIo {
  const stderrColors = palette(colorEnabled(process.stderr, env));
  return {
    stdout: (t) => process.stdout.write(t.endsWith('\n') ? t : `${t}\n`),
    stderr: (t) => process.stderr.write(t.endsWith('\n') ? t : `${t}\n`),
    env,
    cwd: process.cwd(),
    colors: { stdout: palette(colorEnabled(process.stdout, env)), stderr: stderrColors },
    ...(barsEnabled(process.stderr, env) ? { progressBar: createProgressBar(process.stderr, stderrColors) } : {}),
  };
}

/** A bad command line: printed with `usage` (the command's), exit code 2. */
class UsageError extends Error {
  constructor(
    message: string,
    readonly usage: (c: Colors) => string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

interface Command {
  name: string;
  /** What follows the name in the command list. */
  args: string;
  summary: string;
  run(args: string[], io: TesseraIo): Promise<number>;
}

const HELP_FLAGS = new Set(['--help', '-h']);

export const COMMANDS: readonly Command[] = [
  { name: 'serve', args: '<server> [flags]', summary: `run a reference server: ${SERVERS.map((s) => s.name).join(', ')}`, run: serve },
  { name: 'gen', args: 'model|adapter <dir>', summary: 'write a seeded model directory or PEFT LoRA adapter (tiny or mini)', run: (args, io) => engine('gen', args, io) },
  { name: 'train', args: 'lora|adapter|full|classifier', summary: 'train a LoRA, bottleneck adapters, every weight or a classifier', run: (args, io) => engine('train', args, io) },
  { name: 'bench', args: '<name> [flags]', summary: 'run a benchmark (from a clone of the repository, as `pnpm bench`)', run: bench },
  { name: 'help', args: '[command]', summary: 'this list, or a command\'s help', run: help },
];

export function version(): string {
  return (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;
}

export function usage(c: Colors = palette(false)): string {
  const width = Math.max(...COMMANDS.map((cmd) => `${cmd.name} ${cmd.args}`.length));
  return [
    `${c.bold('tessera')}: serve many tenants' fine-tuned variants of one base model, from Node`,
    '',
    `${c.bold('usage:')} tessera <command> [options]`,
    '',
    c.bold('commands:'),
    ...COMMANDS.map((cmd) => `  ${c.cyan(cmd.name)} ${cmd.args}${' '.repeat(width - `${cmd.name} ${cmd.args}`.length)}   ${cmd.summary}`),
    '',
    'Run `tessera <command> --help` for its options; `tessera --version` prints the version.',
    'Colours: off under NO_COLOR or when the output is not a terminal, on with FORCE_COLOR=1. Progress bars on a',
    'terminal (not under NO_COLOR or TERM=dumb), plain progress lines otherwise.',
  ].join('\n');
}

export function serveUsage(c: Colors = palette(false)): string {
  const width = Math.max(...SERVERS.map((s) => s.name.length));
  const flag = (f: (typeof SHARED_SERVER_FLAGS)[number]) => `--${f.flag}${f.arg ? ` ${f.arg}` : ''}`;
  const flagWidth = Math.max(...SHARED_SERVER_FLAGS.map((f) => flag(f).length));
  return [
    `${c.bold('usage:')} tessera serve <server> [flags]`,
    '',
    c.bold('servers:'),
    ...SERVERS.map((s) => `  ${c.cyan(s.name.padEnd(width))}   ${s.summary}`),
    '',
    'Each runs exactly as its own bin (tessera-<server>) does: same flags, same variables, same exit codes.',
    `Flags every server takes, each with a variable named by the server's prefix (${SERVERS.map((s) => `${s.envPrefix}_PORT`).join(', ')});`,
    'a flag wins over its variable:',
    ...SHARED_SERVER_FLAGS.map((f) => `  ${flag(f).padEnd(flagWidth)}   ${f.help}   (<PREFIX>_${f.env})`),
    ...SERVERS.flatMap((s) => Object.entries(s.without ?? {}).map(([f, why]) => `  (${s.name} has no --${f}: ${why})`)),
    '',
    'TESSERA_DEVICE=cpu|cuda|auto picks where the kernels run; TESSERA_THREADS is the default thread count.',
    'SIGINT or SIGTERM stops a server gracefully (in-flight requests finish); a second signal stops it at once.',
    `Run \`tessera serve <server> --help\` for the server's own flags.`,
  ].join('\n');
}

export function benchUsage(c: Colors = palette(false)): string {
  return [
    `${c.bold('usage:')} tessera bench <name> [--quick] [--json] [--out dir] [--threads n]`,
    '       tessera bench --list | --help',
    '',
    'The same as `pnpm bench <name>` in a clone of the repository: the benches are not published, so `tessera bench`',
    'runs the bench CLI of the clone it is in (or whose directory you are in). --out is taken from the current',
    'directory; results default to bench/results.',
  ].join('\n');
}

export async function main(argv: readonly string[], io: TesseraIo = processIo()): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined) throw new UsageError('name a command', usage);
    if (HELP_FLAGS.has(name)) {
      io.stdout(usage(io.colors.stdout));
      return 0;
    }
    if (name === '--version' || name === '-v') {
      io.stdout(version());
      return 0;
    }
    const command = COMMANDS.find((c) => c.name === name);
    if (command === undefined) {
      if (name.startsWith('-')) throw new UsageError(`unknown option "${name}" (options follow the command)`, usage);
      throw new UsageError(`unknown command "${name}"${hint(name, COMMANDS.map((c) => c.name), io.colors.stderr)}`, usage);
    }
    return await command.run(rest, io);
  } catch (err) {
    if (err instanceof UsageError) {
      const c = io.colors.stderr;
      io.stderr(`${c.red('tessera:')} ${err.message}\n\n${err.usage(c)}`);
      return 2;
    }
    if (err instanceof ServerUnavailableError) {
      io.stderr(`${io.colors.stderr.red('tessera:')} ${err.message}`);
      return 2;
    }
    throw err;
  }
}

function hint(typed: string, candidates: readonly string[], c: Colors): string {
  const near = didYouMean(typed, candidates);
  return near === null ? '' : `; did you mean ${c.bold(`"${near}"`)}?`;
}

async function help(args: string[], io: TesseraIo): Promise<number> {
  const [topic, ...extra] = args;
  if (topic === undefined || HELP_FLAGS.has(topic)) {
    io.stdout(usage(io.colors.stdout));
    return 0;
  }
  if (extra.length > 0) throw new UsageError(`help: one command at a time, got ${args.join(' ')}`, usage);
  const command = COMMANDS.find((c) => c.name === topic);
  if (command === undefined) throw new UsageError(`help: unknown command "${topic}"${hint(topic, COMMANDS.map((c) => c.name), io.colors.stderr)}`, usage);
  return command.run(['--help'], io);
}

/** gen and train: @tessera/engine's CLI module, unchanged, with this CLI's streams and progress bar. */
async function engine(command: 'gen' | 'train', args: string[], io: TesseraIo): Promise<number> {
  // Loaded on demand: `tessera serve` and `tessera --help` need no engine module.
  const { main: engineMain } = await import('@tessera/engine/cli');
  const engineIo: EngineCliIo = { stdout: io.stdout, stderr: io.stderr, ...(io.progressBar ? { progressBar: io.progressBar } : {}) };
  return engineMain([command, ...args], engineIo);
}

async function serve(args: string[], io: TesseraIo): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined) throw new UsageError(`serve: name a server (${SERVERS.map((s) => s.name).join(', ')})`, serveUsage);
  if (HELP_FLAGS.has(name)) {
    io.stdout(serveUsage(io.colors.stdout));
    return 0;
  }
  const server = SERVERS.find((s) => s.name === name);
  if (server === undefined) {
    throw new UsageError(`serve: unknown server "${name}"${hint(name, SERVERS.map((s) => s.name), io.colors.stderr)}`, serveUsage);
  }
  const serverMain = await loadServer(server);
  if (rest.some((a) => HELP_FLAGS.has(a))) {
    io.stdout(`${io.colors.stdout.bold(`tessera serve ${server.name}`)} takes the flags and ${server.envPrefix}_* variables of tessera-${server.name}:\n`);
  }
  try {
    return await serverMain(rest, io.env);
  } catch (err) {
    // As the servers' own bins print failures (server-kit's runMain): a typed Tessera error (a bad model
    // directory, Redis down) by its message, which says what to do; anything else with its stack.
    const code: unknown = (err as { code?: unknown } | null)?.code;
    const typed = err instanceof Error && typeof code === 'string' && code.startsWith('TESSERA_');
    const text = err instanceof Error ? (typed ? err.message : (err.stack ?? err.message)) : String(err);
    io.stderr(`${io.colors.stderr.red(`[${server.name}]`)} ${text}`);
    return 1;
  }
}

async function bench(args: string[], io: TesseraIo): Promise<number> {
  const dir = findBenchDir(io.repositorySearch ?? [dirname(fileURLToPath(import.meta.url)), io.cwd]);
  if (args.some((a) => HELP_FLAGS.has(a))) {
    io.stdout(benchUsage(io.colors.stdout));
    if (dir === null) {
      io.stdout('\nNo clone of the repository here, so no benches to list: clone it and run `pnpm bench --list` there.');
      return 0;
    }
    io.stdout('');
  }
  if (dir === null) {
    io.stderr(
      `${io.colors.stderr.red('tessera bench:')} the benchmarks run from a clone of the Tessera repository, and none was found ` +
        `above ${io.cwd} or this CLI: clone it, then \`pnpm install\` and \`pnpm bench <name>\` (or \`tessera bench <name>\`) inside it.`,
    );
    return 2;
  }
  // The bench CLI runs from source (its package is private and never built): node + tsx with the source
  // condition, in bench/, where its tsx is installed; INIT_CWD keeps --out relative to where the user is.
  return runNode(['--conditions=@tessera/source', '--import', 'tsx', 'src/cli.ts', ...args], {
    cwd: dir,
    env: { ...io.env, INIT_CWD: io.env.INIT_CWD ?? io.cwd },
  });
}
