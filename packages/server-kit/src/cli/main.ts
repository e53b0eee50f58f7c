/**
 * The bootstrap of a server's `main.ts`: run main() only when the module is the process's entry script, turn its
 * result into the exit code, and print failures the way an operator needs them.
 */
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

import { UsageError } from './flags.js';

/** Whether the module at `moduleUrl` (its import.meta.url) is the script node was started with (symlinks resolved). */
export function isEntryPoint(moduleUrl: string): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return moduleUrl === pathToFileURL(realpathSync(script)).href;
  } catch {
    return false;
  }
}

/** For main()'s flag parsing: a UsageError is printed with a pointer to --help and gives exit code 2; anything else is rethrown. */
export function usageExitCode(err: unknown): number {
  if (!(err instanceof UsageError)) throw err;
  process.stderr.write(`${err.message}\n\nRun with --help for the options.\n`);
  return 2;
}

/**
 * main()'s command line: the parsed config, or the exit code to return at once: 0 once `usage` is printed for
 * --help (`parse` returned null), 2 for a UsageError (see {@link usageExitCode}). Anything else is rethrown.
 *
 *   const config = parseCommandLine(() => parseCli(argv, env), USAGE);
 *   if (typeof config === 'number') return config;
 */
export function parseCommandLine<T extends object>(parse: () => T | null, usage: string): T | number {
  let config: T | null;
  try {
    config = parse();
  } catch (err) {
    return usageExitCode(err);
  }
  if (config === null) process.stdout.write(usage);
  return config ?? 0;
}

/**
 * Runs `main` and sets the process's exit code from it. A failure is printed after `prefix` ('[pets]'): a typed
 * Tessera error (code `TESSERA_*`: a bad model directory, Redis down) by its message, which says what to do, as a
 * stack would only bury it; anything else with its stack.
 */
export function runMain(main: () => Promise<number>, options: { prefix: string }): Promise<void> {
  return main().then(
    (code) => {
      if (code !== 0) process.exitCode = code;
    },
    (err: unknown) => {
      const code: unknown = (err as { code?: unknown } | null)?.code;
      const typed = err instanceof Error && typeof code === 'string' && code.startsWith('TESSERA_');
      process.stderr.write(`${options.prefix} ${err instanceof Error ? (typed ? err.message : (err.stack ?? err.message)) : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}

/**
 * For a process without an HTTP server (a cluster scheduler or engine host): runs `stop` once on SIGINT or SIGTERM,
 * then exits (1 if it failed, printed after `prefix`); a second signal exits at once.
 */
export function stopOnSignal(stop: () => Promise<void>, options: { prefix: string }): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) process.exit(1);
    stopping = true;
    process.stdout.write(`${options.prefix} ${signal}: stopping\n`);
    stop().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`${options.prefix} ${err instanceof Error ? err.message : String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
}
