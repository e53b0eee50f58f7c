/**
 * The processes the soak bench runs: a server started by its real CLI as a child process (so its RSS is its own,
 * read from /proc/<pid>/status), and a private redis-server on a free port (never the system Redis: the fault
 * cases stop and restart it).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, PrivateRedis } from '@tessera/test-utils';

export const REPO_ROOT = resolve(fileURLToPath(new URL('../../../', import.meta.url)));
export const PUNICA_APP = resolve(REPO_ROOT, 'apps/punica');
export const PETS_APP = resolve(REPO_ROOT, 'apps/pets');

export function sleep(ms: number): Promise<void> {
  return new Promise((done) => setTimeout(done, ms));
}


/** Resident set size of a process in bytes (VmRSS of /proc/<pid>/status), or null where there is no such file. */
export function rssBytes(pid: number): number | null {
  try {
    const match = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** Polls `check` every 50 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`soak: timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

export interface NodeProcessOptions {
  /** The app directory (its src/main.ts runs from source through tsx, as `pnpm start` does). */
  app: string;
  args: string[];
  /** A line on stdout that says it is ready; its first capture group is returned by ready(). */
  readyLine?: RegExp;
  label: string;
  log: (line: string) => void;
  env?: NodeJS.ProcessEnv;
}

/** A Tessera app's CLI as a child process: `node --conditions=@tessera/source --import tsx src/main.ts …`. */
export class NodeProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<number | string | null>;
  private output = '';
  private readyMatch: Promise<string>;

  constructor(readonly options: NodeProcessOptions) {
    this.child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', 'tsx', 'src/main.ts', ...options.args], {
      cwd: options.app,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...options.env },
    });
    this.exited = new Promise((done) => this.child.once('exit', (code, signal) => done(code ?? signal)));
    this.readyMatch = new Promise((done, fail) => {
      const onData = (d: Buffer) => {
        this.output += d.toString();
        if (this.output.length > 64_000) this.output = this.output.slice(-32_000);
        const m = options.readyLine?.exec(this.output);
        if (m) done(m[1] ?? m[0]);
      };
      this.child.stdout!.on('data', onData);
      this.child.stderr!.on('data', (d: Buffer) => {
        onData(d);
        for (const line of d.toString().trimEnd().split('\n')) if (line.trim()) options.log(`[${options.label}] ${line}`);
      });
      void this.exited.then((code) => fail(new Error(`soak: ${options.label} exited (${code}) before it was ready:\n${this.output.slice(-4000)}`)));
    });
    this.readyMatch.catch(() => {});
  }

  get pid(): number {
    return this.child.pid!;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Resolves with the ready line's capture (a server's address) once it appears; rejects if the process exits first. */
  async ready(timeoutMs = 120_000): Promise<string> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, fail) => {
      timer = setTimeout(() => fail(new Error(`soak: ${this.options.label} not ready within ${timeoutMs} ms:\n${this.output.slice(-4000)}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.readyMatch, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  rss(): number | null {
    return this.running ? rssBytes(this.pid) : null;
  }

  /** SIGKILL: no goodbye (the fault case). */
  async kill(): Promise<void> {
    if (this.running) this.child.kill('SIGKILL');
    await this.exited;
  }

  /** SIGTERM, then SIGKILL after `graceMs`. Returns the exit code (or signal). */
  async stop(graceMs = 15_000): Promise<number | string | null> {
    if (this.running) this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.running && this.child.kill('SIGKILL'), graceMs);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }
}

/** Starts a server app on a free port and waits for its "serving … on http://…" line; returns it and its address. */
export async function startServer(options: Omit<NodeProcessOptions, 'readyLine'> & { name: 'punica' | 'pets' }): Promise<{ server: NodeProcess; address: string }> {
  const port = await freePort();
  const server = new NodeProcess({
    ...options,
    args: [...options.args, '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn'],
    readyLine: new RegExp(`\\[${options.name}\\] serving .* on (http://\\S+)`),
  });
  try {
    return { server, address: await server.ready() };
  } catch (err) {
    await server.stop(1000);
    throw err;
  }
}

// The private redis-server and free ports are the tests' too (@tessera/test-utils).
export { freePort, PrivateRedis };
