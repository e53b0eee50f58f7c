#!/usr/bin/env node
// The `tessera` command. Runs the built CLI (dist/cli.js) when the package has been built; otherwise runs the
// TypeScript source through tsx, resolving workspace packages to their src/ (the @tessera/source condition). That
// child gets its own process group and this process forwards SIGINT / SIGTERM / SIGHUP to it once, so `kill <pid>`
// stops a server gracefully and a Ctrl-C is not delivered twice (a second signal means "exit at once").
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/cli.js', import.meta.url);
if (existsSync(fileURLToPath(built))) {
  const { main } = await import(built.href);
  process.exitCode = await main(process.argv.slice(2));
} else {
  const source = fileURLToPath(new URL('../src/bin-entry.ts', import.meta.url));
  // Resolved from this package, not from the caller's working directory.
  const tsx = import.meta.resolve('tsx');
  const child = spawn(process.execPath, ['--conditions=@tessera/source', '--import', tsx, source, ...process.argv.slice(2)], {
    stdio: 'inherit',
    detached: true,
  });
  const forward = (signal) => child.kill(signal);
  for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(s, forward);
  child.once('error', (err) => {
    throw err;
  });
  child.once('exit', (code, signal) => {
    process.exitCode = code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0);
    for (const s of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.off(s, forward);
  });
}
