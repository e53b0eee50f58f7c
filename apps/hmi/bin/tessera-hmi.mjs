#!/usr/bin/env node
// The `tessera-hmi` command. Runs the built server (dist/main.js) when the package has been built; otherwise
// runs the TypeScript source through tsx, resolving workspace packages to their src/ (the @tessera/source condition).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/main.js', import.meta.url);
if (existsSync(fileURLToPath(built))) {
  const { main } = await import(built.href);
  process.exitCode = await main(process.argv.slice(2));
} else {
  const source = fileURLToPath(new URL('../src/main.ts', import.meta.url));
  // Resolved from this package, not from the caller's working directory.
  const tsx = import.meta.resolve('tsx');
  const child = spawnSync(process.execPath, ['--conditions=@tessera/source', '--import', tsx, source, ...process.argv.slice(2)], { stdio: 'inherit' });
  if (child.error) throw child.error;
  process.exitCode = child.status ?? 1;
}
