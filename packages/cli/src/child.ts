/**
 * A child Node process that stands in for this one (`tessera bench` runs the bench CLI from source through tsx):
 * stdio inherited, signals forwarded once, its exit status returned. The child gets its own process group
 * (detached), so a Ctrl-C on the terminal reaches it once, through this process, not twice: a second SIGINT means
 * "exit at once" to the servers' graceful close.
 */
import { spawn } from 'node:child_process';
import { constants } from 'node:os';

const FORWARDED = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

export interface ChildOptions {
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/** Runs `node <args>`; resolves with its exit code (128 + the signal's number when a signal ended it). */
export function runNode(args: readonly string[], options: ChildOptions): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: options.cwd, env: options.env, stdio: 'inherit', detached: true });
    const forward = (signal: NodeJS.Signals) => {
      child.kill(signal);
    };
    for (const s of FORWARDED) process.on(s, forward);
    const done = () => {
      for (const s of FORWARDED) process.off(s, forward);
    };
    child.once('error', (err) => {
      done();
      reject(err);
    });
    child.once('exit', (code, signal) => {
      done();
      resolve(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0));
    });
  });
}
