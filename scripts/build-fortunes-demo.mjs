#!/usr/bin/env node
// The fortunes demo's one-command recipe: `node scripts/build-fortunes-demo.mjs [options]` rebuilds
// apps/fortunes-demo/model (the bf16 base model and its LoRA adapters) and apps/fortunes-demo/PERPLEXITY.md from
// Debian's fortunes (apt-get install fortunes fortunes-min), seeded, printing progress. It runs at nice 10 so it
// shares a busy machine politely. `--help` lists the options; `perplexity` / `corpus` run the other commands.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const command = ['build', 'perplexity', 'corpus'].includes(args[0]) || args.includes('--help') || args.includes('-h') ? args : ['build', ...args];
const node = [process.execPath, '--conditions=@tessera/source', '--import', 'tsx', join(root, 'apps', 'fortunes-demo', 'src', 'cli.ts'), ...command];
const useNice = process.platform !== 'win32' && spawnSync('nice', ['-n', '0', 'true']).status === 0;
const r = spawnSync(useNice ? 'nice' : node[0], useNice ? ['-n', '10', ...node] : node.slice(1), { cwd: join(root, 'apps', 'fortunes-demo'), stdio: 'inherit' });
if (r.error) throw r.error;
process.exit(r.status ?? 1);
