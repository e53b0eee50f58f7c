/** Running the `tessera` bin as a real process, and an in-process io that records what main() prints. */
import { execFile } from 'node:child_process';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';

import { palette, type TesseraIo } from '../src/index.js';

export const bin = fileURLToPath(new URL('../bin/tessera.mjs', import.meta.url));

/** process.env without the colour switches the test runner may set, plus `env`. */
export function cleanEnv(env: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { FORCE_COLOR: _f, NO_COLOR: _n, ...rest } = process.env;
  return { ...rest, ...env };
}

export interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** `node bin/tessera.mjs <args>` with piped (non-TTY) stdio, from `cwd` (default: the system's temp directory). */
export function tessera(args: readonly string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [bin, ...args], { cwd: options.cwd ?? tmpdir(), timeout: 60_000, env: cleanEnv(options.env) }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/** An io that records stdout and stderr, colours off unless `colors`. */
export function captureIo(overrides: Partial<TesseraIo> = {}, colors = false): TesseraIo & { out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    stdout: (t) => out.push(t),
    stderr: (t) => err.push(t),
    env: {},
    cwd: tmpdir(),
    colors: { stdout: palette(colors), stderr: palette(colors) },
    ...overrides,
  };
}

/**
 * main() in this process, with everything it prints captured: through the io, and what a server's own main writes
 * on process.stdout / process.stderr (its usage, its usage errors), as its bin would.
 */
export async function runInProcess(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<Result> {
  const { main } = await import('../src/index.js');
  const io = captureIo({ env });
  const out: string[] = [];
  const err: string[] = [];
  const writeOut = process.stdout.write.bind(process.stdout);
  const writeErr = process.stderr.write.bind(process.stderr);
  process.stdout.write = ((chunk: string | Uint8Array) => (out.push(String(chunk)), true)) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string | Uint8Array) => (err.push(String(chunk)), true)) as typeof process.stderr.write;
  let code: number;
  try {
    code = await main(args, io);
  } finally {
    process.stdout.write = writeOut;
    process.stderr.write = writeErr;
  }
  const lines = (parts: string[]) => parts.map((t) => (t.endsWith('\n') ? t : `${t}\n`)).join('');
  return { code, stdout: lines(io.out) + out.join(''), stderr: lines(io.err) + err.join('') };
}
