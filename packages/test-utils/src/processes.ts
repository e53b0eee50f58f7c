/**
 * Processes tests and benches start for themselves: a free port, and a private redis-server (never the system Redis
 * on 6379: tests and fault benches stop and restart it). Node only.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { createServer } from 'node:net';
import { resolve } from 'node:path';

/** A port nobody listens on right now (the OS picks it). */
export async function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? done(address.port) : fail(new Error('no free port'))));
    });
  });
}

export interface PrivateRedisOptions {
  /** Keep an append-only file in `dir`, so a restart on the same port and dir keeps the data (default: no persistence). */
  dir?: string;
}

/** A redis-server of one's own on `port`: no RDB snapshots; with `dir`, an append-only file there (restartable). */
export class PrivateRedis {
  readonly url: string;
  private process: ChildProcess | null = null;

  constructor(
    readonly port: number,
    private readonly options: PrivateRedisOptions = {},
  ) {
    this.url = `redis://127.0.0.1:${port}`;
  }

  /** Whether a redis-server is on PATH. */
  static available(): boolean {
    return (process.env.PATH ?? '').split(':').some((dir) => {
      try {
        accessSync(resolve(dir, 'redis-server'), constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
  }

  /** Starts it and resolves once it accepts connections (rejects with its output when it exits or takes 10 s). */
  async start(): Promise<void> {
    const dir = this.options.dir;
    const persistence = dir === undefined ? ['--appendonly', 'no'] : ['--appendonly', 'yes', '--dir', dir];
    const child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', ...persistence], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.process = child;
    let output = '';
    await new Promise<void>((done, fail) => {
      const timer = setTimeout(() => fail(new Error(`redis-server did not start on ${this.port}:\n${output}`)), 10_000);
      child.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (/Ready to accept connections/.test(output)) {
          clearTimeout(timer);
          done();
        }
      });
      child.once('error', (err) => {
        clearTimeout(timer);
        fail(new Error(`cannot run redis-server (${err.message}): install Debian's redis-server`));
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        fail(new Error(`redis-server exited (${code}):\n${output}`));
      });
    });
    child.stdout!.resume();
    child.stderr!.resume();
  }

  /** SIGTERM: Redis shuts down cleanly (the append-only file is flushed), as an operator's restart does. */
  async stop(): Promise<void> {
    const child = this.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await exited;
    this.process = null;
  }
}
