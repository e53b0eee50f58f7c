#!/usr/bin/env node
// The root entry points: `npm start` / `pnpm start`, `npm test` / `pnpm test`, `pnpm bench <name>`.
// They work on a fresh machine with only Node 20 and a C++ toolchain: each step runs only when needed.
//   1. install   pnpm (an installed pnpm 10, else the version in package.json#packageManager through npx)
//                installs the workspace when node_modules is missing or older than the lockfile;
//   2. native    builds @tessera/native (cmake-js; incremental, seconds when nothing changed);
//   3. the task  start: the main job (the Punica server); test: typecheck + build + publint + every test + the docs
//                build; bench: pnpm bench <args>.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const [task = 'test', ...rest] = process.argv.slice(2);
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const pnpmVersion = String(pkg.packageManager).replace(/^pnpm@/, '');

function run(cmd, args, extraEnv = {}) {
  const r = spawnSync(cmd, args, { cwd: root, stdio: 'inherit', env: { ...process.env, ...extraEnv } });
  if (r.error) throw r.error;
  if (r.status !== 0) process.exit(r.status ?? 1);
}

function pnpmCommand() {
  // Inside `pnpm <script>`, npm_execpath is pnpm itself; otherwise look for a matching pnpm on PATH, else npx.
  const exec = process.env.npm_execpath ?? '';
  if (/pnpm/.test(exec)) return { cmd: process.execPath, pre: [exec] };
  // Any installed pnpm of the same major runs the workspace (pnpm-workspace.yaml turns off its switch to the exact
  // packageManager version); with none, or another major, npx fetches the pinned one.
  const probe = spawnSync('pnpm', ['--version'], { encoding: 'utf8' });
  const major = (v) => v.split('.')[0];
  if (probe.status === 0 && major(probe.stdout.trim()) === major(pnpmVersion)) return { cmd: 'pnpm', pre: [] };
  return { cmd: 'npx', pre: ['--yes', `pnpm@${pnpmVersion}`] };
}

const pnpm = pnpmCommand();
const p = (...args) => run(pnpm.cmd, [...pnpm.pre, ...args], { TURBO_TELEMETRY_DISABLED: '1' });

function needsInstall() {
  const marker = join(root, 'node_modules', '.modules.yaml');
  if (!existsSync(marker)) return true;
  return statSync(join(root, 'pnpm-lock.yaml')).mtimeMs > statSync(marker).mtimeMs;
}

if (needsInstall()) {
  console.log(`[tessera] installing the workspace with pnpm ${pnpmVersion}`);
  p('install', '--frozen-lockfile');
}
console.log('[tessera] building @tessera/native (incremental)');
p('--filter', '@tessera/native', 'build:native');

/**
 * Opens every page of the built docs site in Debian's chromium (docs/test/browser.mjs). CI (.ci/run) installs
 * chromium; elsewhere a missing chromium skips this step with a note instead of failing the whole run.
 */
function docsInBrowser() {
  const chromium = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  if (!existsSync(chromium) && !process.env.CI) {
    console.log(`[tessera] docs browser test skipped: no chromium at ${chromium} (apt-get install chromium, or set CHROMIUM_PATH)`);
    return;
  }
  console.log('[tessera] docs site in a browser');
  run(process.execPath, [join(root, 'docs', 'test', 'browser.mjs')]);
}

/**
 * The flags that point the Punica server at the committed fortunes demo, unless the command line or the
 * environment already chose a model (--model, --demo, PUNICA_MODEL, PUNICA_DEMO). Without the committed files
 * (a partial checkout) nothing is added and the server generates its random-weight demo as before.
 */
function fortunesDemoArgs(args) {
  const chosen = args.some((a) => /^--(model|demo|demo-dir|adapters)(=|$)/.test(a)) || process.env.PUNICA_MODEL || process.env.PUNICA_DEMO;
  const dir = join(root, 'apps', 'fortunes-demo', 'model');
  if (chosen || !existsSync(join(dir, 'fortunes-llama', 'model.safetensors'))) return [];
  console.log(`[tessera] serving the fortunes demo in ${dir} (see apps/fortunes-demo/README.md)`);
  return ['--model', join(dir, 'fortunes-llama'), '--adapters', join(dir, 'adapters')];
}

switch (task) {
  case 'test':
    console.log('[tessera] typecheck');
    p('exec', 'turbo', 'run', 'typecheck', '--concurrency=2', '--output-logs=errors-only');
    // Every publishable package built as it ships (tsup → dist/) and linted with publint (strict).
    console.log('[tessera] build the publishable packages + publint');
    p('exec', 'turbo', 'run', 'build', "--filter=./packages/*", '--filter=@tessera/native', '--concurrency=2', '--output-logs=errors-only');
    run(process.execPath, [join(root, 'scripts', 'publint.mjs')]);
    console.log('[tessera] tests');
    p('exec', 'vitest', 'run', ...rest);
    console.log('[tessera] docs site build');
    p('--filter', '@tessera/docs', 'build');
    docsInBrowser();
    break;
  case 'start':
    // The main job: the Punica reference server, OpenAI-compatible, on 127.0.0.1:8000. With no --model / --demo it
    // serves the fortunes demo (apps/fortunes-demo/model): a small Llama-style model pretrained with the engine's
    // trainer on Debian's fortunes, and one LoRA per category, each one a `model` name in the API.
    p('--filter', '@tessera/punica', 'start', ...fortunesDemoArgs(rest), ...rest);
    break;
  case 'bench':
    p('--filter', '@tessera/bench', 'bench', ...rest);
    break;
  default:
    console.error(`unknown task "${task}": expected start, test or bench`);
    process.exit(2);
}
